"""The ledger client on the virtual-time loop over the simulated network: it must use no
thread, no real socket and no wall clock, and the same seed must give the same run."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.meta.bookies import BookieInfo, init_cluster, register
from bookie.meta.memory import MemoryMetadataServer
from bookie.server.server import BookieServer
from bookie.storage.memory import MemoryLedgerStorage
from bookie.testing.simloop import run_simulation
from bookie.testing.simnet import SimNetwork
from tests.unit.bookie.client.cluster import SYNC_INTERVAL_S, fast_config

BOOKIES = ("bookie-1", "bookie-2", "bookie-3", "bookie-4")


@asynccontextmanager
async def simulated_bookie(
    network: SimNetwork, metadata: MemoryMetadataServer, bookie_id: str
) -> AsyncIterator[None]:
    address = f"{bookie_id}:3181"
    storage = MemoryLedgerStorage()
    server = BookieServer(
        storage, lambda: (1 << 30, 1 << 31), port=3181, listener=network.listen(address)
    )
    async with (
        metadata.client() as store,
        server,
        anyio.create_task_group() as syncing,
        register(store, bookie_id, BookieInfo(address)),
    ):

        async def sync_forever() -> None:
            while True:
                await anyio.sleep(SYNC_INTERVAL_S)
                storage.sync()

        syncing.start_soon(sync_forever)
        yield
        syncing.cancel_scope.cancel()


def run(seed: int) -> list[object]:
    """One simulated run; returns its trace."""

    async def main() -> list[object]:
        rng = random.Random(seed)
        network = SimNetwork(random.Random(rng.random()))
        metadata = MemoryMetadataServer()
        trace: list[object] = []
        async with metadata.client() as store:
            await init_cluster(store, instance_id="sim")
        async with (
            simulated_bookie(network, metadata, BOOKIES[0]),
            simulated_bookie(network, metadata, BOOKIES[1]),
            simulated_bookie(network, metadata, BOOKIES[2]),
            simulated_bookie(network, metadata, BOOKIES[3]),
            metadata.client() as writer_store,
            metadata.client() as reader_store,
            LedgerClient.open(
                writer_store,
                connector=network.connector("writer"),
                rng=random.Random(rng.random()),
                config=fast_config(),
                wall_clock_ms=lambda: 1_000,
            ) as writer_client,
            LedgerClient.open(
                reader_store,
                connector=network.connector("reader"),
                rng=random.Random(rng.random()),
                config=fast_config(),
                wall_clock_ms=lambda: 1_000,
            ) as reader_client,
        ):
            writer = await writer_client.create_ledger(3, 3, 2)
            trace.append(writer.metadata.current_ensemble)
            for index in range(10):
                writer.append_nowait(f"entry {index}".encode())
            await writer.wait_confirmed(4)
            # A bookie of the ensemble crashes with adds in flight.
            network.crash(writer.metadata.current_ensemble[0])
            for index in range(10, 20):
                writer.append_nowait(f"entry {index}".encode())
            await writer.wait_confirmed(19)
            await writer.close()
            trace.append(writer.metadata.ensembles)
            reader = await reader_client.open_ledger(writer.ledger_id)
            trace.append((reader.metadata.last_entry_id, reader.metadata.length))
            trace.append(await reader.read(0, reader.last_add_confirmed))
            trace.append(round(anyio.current_time(), 6))
        return trace

    return run_simulation(main)


def test_a_seed_replays_exactly_and_nothing_acknowledged_is_lost() -> None:
    first = run(7)
    assert first == run(7)
    ensemble, segments, (last_entry_id, _length), payloads, _time = first
    assert len(segments) == 2, "the crashed bookie was replaced"  # type: ignore[arg-type]
    assert segments[0][1] == ensemble  # type: ignore[index]
    assert last_entry_id == 19
    assert payloads == [f"entry {index}".encode() for index in range(20)]
