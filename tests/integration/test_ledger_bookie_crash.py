"""kill -9 of a bookie process in the middle of a pipelined write stream (BookKeeper's
`BookieFailureTest#testAsyncBK*`, with E=3 Qw=3 Qa=2 and a fourth bookie to spare).

The writer keeps hundreds of adds in flight; after a seeded number of
confirmations one bookie of its ensemble is SIGKILLed.  Its connection drops,
the writer replaces it with the spare (one new segment, starting right after
the LAC) and re-sends the pending adds there, without failing any append.
Afterwards every confirmed entry reads back byte for byte, with the killed
bookie still down, and again after it restarted from its directories (G1:
an acknowledgement means durable and readable, with up to Qa - 1 bookies lost).
"""

from __future__ import annotations

import random
import signal
from pathlib import Path

import anyio
import pytest

from bookie.client.write_handle import WriteHandle
from bookie.local.zookeeper import LocalZooKeeper

from .support.ledgers import (
    PASSWORD,
    entry_payload,
    ledger_client,
    running_bookies,
    scenario_config,
)
from .support.processes import WAIT_S, BookieProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

WINDOW = 500
ENTRY_BYTES = 256


async def stream(writer: WriteHandle, count: int, mark: int, marked: anyio.Event) -> None:
    """Append entries 0..count-1 pipelined; set `marked` once entry `mark` is sent."""
    for number in range(count):
        await writer.wait_for_capacity()
        assert writer.append_nowait(entry_payload(number, ENTRY_BYTES)) == number
        if number == mark:
            marked.set()


async def kill_mid_stream(
    zookeeper: LocalZooKeeper, zk_root: str, directory: Path, *, count: int, seed: int
) -> None:
    rng = random.Random(seed)
    kill_after = rng.randrange(count // 5, count // 2)
    victim_index = rng.randrange(3)
    expected = [entry_payload(number, ENTRY_BYTES) for number in range(count)]
    config = scenario_config(outstanding_adds_max=WINDOW)
    async with (
        running_bookies(zookeeper, zk_root, directory, 4) as (cluster, bookies),
        ledger_client(cluster, seed=seed, config=config) as client,
    ):
        writer = await client.create_ledger(3, 3, 2, password=PASSWORD)
        ensemble = writer.metadata.current_ensemble
        victim = next(b for b in bookies if b.setup.bookie_id == ensemble[victim_index])
        spare = next(b for b in bookies if b.setup.bookie_id not in ensemble)
        kill_after_sent = anyio.Event()
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(stream, writer, count, kill_after, kill_after_sent)
                await kill_after_sent.wait()
                await writer.wait_confirmed(kill_after)
                # Adds are in flight to the victim as it dies.
                assert writer.last_add_pushed > writer.last_add_confirmed
                await kill(victim)
            await writer.wait_confirmed(count - 1)
            await writer.close()

        metadata = await client.ledger_metadata(writer.ledger_id)
        assert metadata.last_entry_id == count - 1
        assert metadata.length == sum(map(len, expected))
        assert len(metadata.ensembles) == 2
        (first_start, first_ensemble), (second_start, second_ensemble) = metadata.ensembles
        assert (first_start, first_ensemble) == (0, ensemble)
        assert kill_after < second_start <= count
        replaced = list(ensemble)
        replaced[victim_index] = spare.setup.bookie_id
        assert second_ensemble == tuple(replaced)

        async with ledger_client(cluster, seed=seed + 1) as reader_client:
            reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD)
            assert await reader.read(0, count - 1) == expected
        await cluster.start(victim.setup, wait_for="bookie.ready")
        async with ledger_client(cluster, seed=seed + 2) as reader_client:
            reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD)
            assert await reader.read(0, count - 1) == expected


async def kill(bookie: BookieProcess) -> None:
    bookie.kill()
    assert await bookie.wait_exit() == -signal.SIGKILL


async def test_kill_9_of_a_bookie_mid_stream_loses_no_acknowledged_entry(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    await kill_mid_stream(zookeeper, zk_root, tmp_path, count=4_000, seed=20260514)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
async def test_kill_9_mid_longer_streams(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path, seed: int
) -> None:
    await kill_mid_stream(zookeeper, zk_root, tmp_path, count=15_000, seed=seed)
