"""The simulated world: disks that group-commit and lose unsynced data in a crash, bookies
that restart from their disk, registrations that outlive a crash until the session
expires, partitions that hold for hosts that join later, stalled hosts whose bytes are held
both ways until they resume, and traces that compare."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import ByteStream

from bookie.client.config import ClientConfig
from bookie.meta.bookies import list_bookies
from bookie.testing.nemesis import FaultKind, Nemesis
from bookie.testing.simcluster import SimCluster, Trace, WorldConfig, trace_difference
from bookie.testing.simloop import run_simulation
from bookie.testing.simnet import SimNetwork

WORLD = WorldConfig(bookie_count=3, bookie_session_timeout_ms=1_000)
CONFIG = ClientConfig(add_timeout_ms=500, read_timeout_ms=500, speculative_read_timeout_ms=100)
WAIT_S = 30.0
"""Bound on any wait here, in virtual seconds: far above what a passing run needs."""


def simulate(body: Callable[[SimCluster], Awaitable[None]], seed: int = 1) -> Trace:
    """Run `body` in a fresh world on the virtual-time loop; return the world's trace."""
    trace = Trace()

    async def main() -> None:
        with anyio.fail_after(WAIT_S):
            async with SimCluster.start(random.Random(seed), WORLD, trace) as cluster:
                await body(cluster)

    run_simulation(main)
    return trace


async def wait_until(condition: Callable[[], bool]) -> None:
    """Wait (in virtual time) for `condition`; the caller's `fail_after` bounds it."""
    while not condition():
        await anyio.sleep(0.001)


def test_a_crash_keeps_what_was_synced_and_loses_the_rest() -> None:
    async def body(cluster: SimCluster) -> None:
        bookie = cluster.bookies["bookie-1"]
        storage = bookie.disk.storage
        bookie.disk.set_master_key(1, b"key")
        bookie.disk.add_entry(1, 0, b"synced")
        await wait_until(lambda: bookie.disk.unsynced_mutations == 0)
        bookie.disk.add_entry(1, 1, b"first unsynced")
        bookie.disk.add_entry(1, 2, b"second unsynced")
        report = cluster.crash("bookie-1", survivors=1)
        assert (report.unsynced, report.lost) == (2, 1)
        assert bookie.disk.storage is not storage
        assert bookie.disk.read_entry(1, 0) == b"synced"
        assert bookie.disk.read_entry(1, 1) == b"first unsynced"
        assert bookie.disk.read_entry(1, 2) is None
        assert not bookie.up

    trace = simulate(body)
    assert any("crash: lost 1 of 2 unsynced mutations" in line for line in trace.lines)


def test_mutations_made_while_a_sync_is_under_way_share_the_next_sync() -> None:
    async def body(cluster: SimCluster) -> None:
        disk = cluster.bookies["bookie-2"].disk
        syncs: list[int] = []
        disk.add_sync_listener(syncs.append)
        disk.set_master_key(1, b"key")
        for entry_id in range(50):
            disk.add_entry(1, entry_id, b"entry")
        await wait_until(lambda: disk.unsynced_mutations == 0)
        assert syncs == [51], "one sync made all 51 mutations durable"

    simulate(body)


def test_a_bookie_restarted_at_once_is_reachable_at_its_address() -> None:
    async def body(cluster: SimCluster) -> None:
        cluster.crash("bookie-3")
        # The crashed incarnation is still unwinding when the new one starts
        # listening: its listener must not take the new one's address away.
        cluster.restart("bookie-3")
        await wait_until(lambda: cluster.bookies["bookie-3"].up)
        await anyio.sleep(0.1)
        stream = await cluster.network.connect("probe", cluster.bookies["bookie-3"].address)
        await stream.aclose()

    simulate(body)


def test_a_crashed_bookie_stays_registered_until_its_session_expires() -> None:
    async def body(cluster: SimCluster) -> None:
        async with cluster.metadata.client() as store:
            cluster.crash("bookie-1")
            await anyio.sleep(0.5)
            assert "bookie-1" in (await list_bookies(store, WORLD.root)).writable
            await anyio.sleep(0.6)
            assert "bookie-1" not in (await list_bookies(store, WORLD.root)).writable
            cluster.restart("bookie-1")
            await wait_until(lambda: cluster.bookies["bookie-1"].store is not None)
            while "bookie-1" not in (await list_bookies(store, WORLD.root)).writable:
                await anyio.sleep(0.01)

    trace = simulate(body)
    expired = [line for line in trace.lines if "session of the crashed incarnation expired" in line]
    assert len(expired) == 1


def test_a_client_opened_during_a_partition_joins_a_side_of_it() -> None:
    async def body(cluster: SimCluster) -> None:
        for seed in range(100):
            nemesis = Nemesis(
                cluster,
                random.Random(seed),
                kinds={FaultKind.PARTITION: 1},
                crashed_max=0,
                pause_ms_max=1.0,
            )
            nemesis.step()
            if cluster.network.is_partitioned("bookie-1", "bookie-2"):
                break
            nemesis.quiesce()
        else:
            raise AssertionError("no seed split the bookies")
        async with cluster.client("newcomer", CONFIG):
            network = cluster.network
            assert any(network.is_partitioned("newcomer", bookie) for bookie in cluster.bookies)
        nemesis.quiesce()
        assert not cluster.network.is_partitioned("newcomer", "bookie-1")

    simulate(body)


def test_a_stalled_host_holds_its_bytes_both_ways_until_it_resumes() -> None:
    """SIGSTOP: a connect to the stalled host still succeeds (its kernel accepts), what is
    sent to it and what it sends are held, a heal of partitions leaves the stall as it is,
    and resuming delivers everything, in order."""

    async def main() -> tuple[list[bytes], bytes]:
        network = SimNetwork(random.Random(1))
        received: list[bytes] = []

        async def serve(stream: ByteStream) -> None:
            await stream.send(b"hello")
            while True:
                received.append(await stream.receive())

        listener = network.listen("server:1")
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(listener.serve, serve)
            with anyio.fail_after(10):
                await wait_until(lambda: listener.serving)
            network.stall("server")
            client = await network.connect("client", "server:1")
            await client.send(b"one")
            await client.send(b"two")
            network.heal()
            with anyio.move_on_after(10):
                await client.receive()
                raise AssertionError("a stalled host's bytes left it")
            assert received == []
            network.resume("server")
            greeting = await client.receive()
            await wait_until(lambda: b"".join(received) == b"onetwo")
            task_group.cancel_scope.cancel()
        return received, greeting

    received, greeting = run_simulation(main)
    assert (b"".join(received), greeting) == (b"onetwo", b"hello")


def test_the_same_seed_gives_the_same_world() -> None:
    async def body(cluster: SimCluster) -> None:
        async with cluster.client("writer", CONFIG) as client:
            handle = await client.create_ledger(3, 2, 2)
            for _ in range(20):
                handle.append_nowait(b"entry")
            await handle.wait_confirmed(19)
        cluster.trace.record("test", f"fingerprint {cluster.fingerprint()}")

    first, second, other = simulate(body, seed=5), simulate(body, seed=5), simulate(body, seed=6)
    assert trace_difference(first.lines, second.lines) is None
    assert trace_difference(first.lines, other.lines) is not None


def test_trace_difference_says_where_traces_part() -> None:
    assert trace_difference(["a", "b"], ["a", "b"]) is None
    assert "line 2" in (trace_difference(["a", "b"], ["a", "c"]) or "")
    assert "length" in (trace_difference(["a"], ["a", "b"]) or "")
