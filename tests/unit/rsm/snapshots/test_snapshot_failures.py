"""A snapshot that fails never takes its replica down: an application whose `snapshot()` raises
(with either capture strategy, by the policy or on request), a request whose client gives up
(the snapshot completes anyway), and the failure answered to the client that asked."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import anyio
import pytest

from bookie.logs import record_fields
from rsm.core.state_machine import command
from rsm.errors import BadSnapshotState, CommandFailed, RsmError
from rsm.snapshots.capture import FORK, INLINE, capture
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import replica_cluster, wait_until
from tests.unit.rsm.snapshots.support import app_view, snapshot_config
from tests.unit.rsm.snapshots.test_capture import CHUNK_BYTES, HEADER, collect, sessions

pytestmark = pytest.mark.anyio


class Refusing(Counter):
    """A counter whose own `snapshot()` raises once `refuse` was applied."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = False

    @command
    def refuse(self) -> None:
        self.refusing = True

    def snapshot(self) -> Iterator[bytes]:
        if self.refusing:
            raise RuntimeError("the application cannot snapshot now")
        yield from super().snapshot()

    def state_hash(self) -> bytes:
        return self.value.to_bytes(8, "big")


@pytest.mark.parametrize("strategy", [FORK, INLINE])
async def test_an_exception_of_snapshot_fails_the_capture_as_bad_state(strategy: str) -> None:
    machine = Refusing()
    machine.refusing = True
    with pytest.raises(BadSnapshotState, match="RuntimeError: the application cannot snapshot"):
        async with capture(strategy, machine, HEADER, sessions(), CHUNK_BYTES) as captured:
            await collect(captured.payloads())


async def test_a_scheduled_inline_snapshot_that_raises_leaves_the_replica_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = snapshot_config(snapshot_capture="inline", snapshot_every_commands=5, truncation=False)
    caplog.set_level(logging.WARNING, logger="rsm.runtime.snapshot_service")
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", machine=Refusing, config=config)
        leader = await replicas.wait_leader()
        snapshotter = await replicas.start("b", machine=Refusing, config=config)
        await leader.call("refuse")
        for _ in range(10):
            await leader.call("add", 1)

        def failed() -> bool:
            error = snapshotter.snapshots.last_error
            return error is not None and "RuntimeError" in error

        await wait_until(failed)
        assert any(record_fields(r)[0] == "rsm.snapshot_failed" for r in caplog.records)
        assert "b" in replicas.running
        assert (await view.snapshots()).newest is None
        assert await leader.call("add", 1) == 11
        await wait_until(lambda: snapshotter.applied_index == leader.applied_index)
        assert snapshotter.machine.value == 11  # type: ignore[attr-defined]


@pytest.mark.parametrize("strategy", [FORK, INLINE])
async def test_a_requested_snapshot_that_raises_is_answered_as_an_error(strategy: str) -> None:
    config = snapshot_config(snapshot_capture=strategy, truncation=False)
    async with replica_cluster() as replicas:
        await replicas.start("a", machine=Refusing, config=config)
        leader = await replicas.wait_leader()
        follower = await replicas.start("b", machine=Refusing, config=config)
        await leader.call("refuse")
        await leader.call("add", 1)
        await wait_until(lambda: follower.applied_index == leader.applied_index)
        async with replicas.client() as client:
            with pytest.raises(CommandFailed, match="RuntimeError") as raised:
                await client.snapshot(follower.address)
            assert raised.value.type_name == "BadSnapshotState"
            # The replica asked goes on: it still answers, applies and snapshots.
            status = await client.status(follower.address)
            assert status["snapshots"]["last_error"] is not None
        assert "b" in replicas.running
        assert await leader.call("add", 1) == 2
        await wait_until(lambda: follower.applied_index == leader.applied_index)


async def test_a_requested_snapshot_completes_after_its_client_stopped_waiting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = snapshot_config(truncation=False)
    caplog.set_level(logging.INFO, logger="rsm.runtime.snapshot_service")
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        follower = await replicas.start("b", config=config)
        for _ in range(10):
            await leader.call("add", 1)
        await wait_until(lambda: follower.applied_index == leader.applied_index)
        applied_index = follower.applied_index
        # The snapshot's ledger write waits until the test lets it go on.
        writing = anyio.Event()
        go_on = anyio.Event()
        store = follower.snapshots.store
        write_ledger = store.write_ledger

        async def held_write(handle, payloads):  # type: ignore[no-untyped-def]
            writing.set()
            await go_on.wait()
            return await write_ledger(handle, payloads)

        store.write_ledger = held_write  # type: ignore[method-assign]
        async with replicas.client(deadline_ms=300) as client:
            with pytest.raises(RsmError):
                await client.snapshot(follower.address)
            assert writing.is_set()
        # The client gave up and closed its connection; the snapshot goes on.
        go_on.set()
        await wait_until(lambda: follower.snapshots.taken == 1)
        newest = (await view.snapshots()).newest
        assert newest is not None
        assert newest.index == applied_index
        assert newest.replica_id == "b"
        assert (await view.snapshots()).pending == ()
        assert any(record_fields(r)[0] == "rsm.snapshot_request_left" for r in caplog.records)
        assert "b" in replicas.running
