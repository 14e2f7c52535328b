"""The runtime on the virtual-time loop over the simulated network: it must use no thread,
no real socket and no wall clock of its own, so the same seed gives the same run."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.meta.bookies import init_cluster
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore
from bookie.testing.simloop import run_simulation
from bookie.testing.simnet import SimNetwork
from rsm.client import connect
from rsm.runtime.replica import Replica
from tests.unit.bookie.client.test_simulated import BOOKIES, simulated_bookie
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import ledger_config, replica_config, wait_until

EPOCH_MS = 1_700_000_000_000
"""The simulated wall clock starts at a plausible Unix time."""


def wall_clock_ms() -> int:
    return EPOCH_MS + int(anyio.current_time() * 1000)


@asynccontextmanager
async def simulated_replica(
    network: SimNetwork, metadata: MemoryMetadataServer, name: str, seed: int
) -> AsyncIterator[tuple[Replica, MemoryMetadataStore]]:
    address = f"{name}:7000"
    async with (
        metadata.client() as store,
        LedgerClient.open(
            store,
            connector=network.connector(name),
            rng=random.Random(seed),
            config=ledger_config(),
            wall_clock_ms=wall_clock_ms,
        ) as ledgers,
        Replica(
            Counter,
            app="counter",
            store=store,
            ledgers=ledgers,
            replica_id=name,
            listener=network.listen(address),
            advertise=address,
            config=replica_config(),
            rng=random.Random(seed),
            wall_clock_ms=wall_clock_ms,
        ) as replica,
    ):
        yield replica, store


def run(seed: int) -> list[object]:
    """Three replicas, a client, a leader crash; returns the run's trace."""

    async def main() -> list[object]:
        rng = random.Random(seed)
        network = SimNetwork(random.Random(rng.random()))
        metadata = MemoryMetadataServer()
        trace: list[object] = []
        async with metadata.client() as store:
            await init_cluster(store, instance_id="sim")
        async with AsyncExitStack() as bookies:
            for bookie_id in BOOKIES:
                await bookies.enter_async_context(simulated_bookie(network, metadata, bookie_id))
            async with AsyncExitStack() as stack:
                running = [
                    await stack.enter_async_context(
                        simulated_replica(network, metadata, name, rng.randrange(1 << 30))
                    )
                    for name in ("a", "b", "c")
                ]
                replicas = [replica for replica, _store in running]
                async with (
                    metadata.client() as client_store,
                    connect(
                        "counter",
                        store=client_store,
                        connector=network.connector("client"),
                        rng=random.Random(rng.random()),
                    ) as client,
                ):
                    for _ in range(5):
                        trace.append(await client.call("roll", 6))
                    leader, leader_store = next(pair for pair in running if pair[0].is_leader)
                    trace.append(leader.replica_id)
                    # The leader's host dies: its connections reset, and ZooKeeper
                    # expires its session.
                    network.crash(leader.replica_id)
                    leader_store.expire_session()
                    for _ in range(5):
                        trace.append(await client.call("roll", 6))
                    trace.append(await client.query("get"))
                    trace.append(next(r.replica_id for r in replicas if r.is_leader))
                    trace.append(round(anyio.current_time(), 6))
        return trace

    return run_simulation(main)


def test_a_seed_replays_exactly() -> None:
    first = run(11)
    assert first == run(11)
    rolls = first[:5] + first[6:11]
    assert all(isinstance(roll, int) and 1 <= roll <= 6 for roll in rolls)
    assert first[11] == sum(rolls)  # type: ignore[arg-type]
    assert first[12] != first[5], "another replica leads after the crash"


def test_a_leader_cut_off_from_one_bookie_goes_on_and_from_two_steps_down() -> None:
    """Three bookies, E = Qw = 3, Qa = 2.  Cut off from one bookie, the leader's adds
    are confirmed by the two others; with no bookie to replace the third, its ledger
    defers the ensemble change and the leader goes on leading.  Cut off from a second
    one, no write set keeps Qa: the ledger breaks and the leader steps down by itself;
    a successor recovers the ledger, and the write that was in flight is applied
    once."""

    async def main() -> None:
        rng = random.Random(5)
        network = SimNetwork(random.Random(rng.random()))
        metadata = MemoryMetadataServer()
        async with metadata.client() as store:
            await init_cluster(store, instance_id="sim")
        async with AsyncExitStack() as stack:
            for bookie_id in BOOKIES[:3]:
                await stack.enter_async_context(simulated_bookie(network, metadata, bookie_id))
            replicas = [
                (
                    await stack.enter_async_context(
                        simulated_replica(network, metadata, name, rng.randrange(1 << 30))
                    )
                )[0]
                for name in ("a", "b", "c")
            ]
            client_store = await stack.enter_async_context(metadata.client())
            client = await stack.enter_async_context(
                connect(
                    "counter",
                    store=client_store,
                    connector=network.connector("client"),
                    rng=random.Random(rng.random()),
                )
            )
            assert await client.call("add", 1) == 1
            leader = next(replica for replica in replicas if replica.is_leader)
            network.partition([leader.replica_id], [BOOKIES[2]])
            assert await client.call("add", 1) == 2, "confirmed by the two other bookies"
            # The cut-off bookie's add times out: no bookie can replace it.
            await wait_until(
                lambda: leader.status()["term"]["ensemble_change_deferred"], timeout_s=30
            )
            for expected in range(3, 12):
                assert await client.call("add", 1) == expected, "confirmed by two bookies"
            assert leader.is_leader
            network.partition([leader.replica_id], [BOOKIES[1]])
            assert await client.call("add", 1) == 12, "applied once, by a successor"
            assert not leader.is_leader
            network.heal()
            assert await client.call("add", 1) == 13
            await wait_until(
                lambda: {replica.machine.value for replica in replicas} == {13},  # type: ignore[attr-defined]
                timeout_s=30,
            )

    run_simulation(main)
