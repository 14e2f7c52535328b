"""A replica that starts while the snapshot it loads is superseded (a newer one registered,
the log truncated past the one it reads, and with `snapshots_kept=1` its ledger deleted)
reads the snapshots znode again and loads the newer snapshot, instead of refusing to start."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import anyio
import pytest

from rsm.core.snapshot_manifest import Manifest
from rsm.snapshots.store import SnapshotStore
from tests.unit.rsm.runtime.harness import replica_cluster, wait_until
from tests.unit.rsm.snapshots.support import app_view, snapshot_config

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("kept", [1, 2])
async def test_a_replica_loading_a_superseded_snapshot_loads_the_newer_one(
    kept: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = snapshot_config(snapshots_kept=kept)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        for _ in range(30):
            await leader.call("add", 1)
        older = await leader.take_snapshot()

        # The first snapshot read (the starting replica's) waits until the test lets it go on.
        reading = anyio.Event()
        go_on = anyio.Event()
        chunks = SnapshotStore.chunks

        async def held_chunks(store: SnapshotStore, manifest: Manifest) -> AsyncIterator[bytes]:
            if not reading.is_set():
                reading.set()
                await go_on.wait()
            async for chunk in chunks(store, manifest):
                yield chunk

        monkeypatch.setattr(SnapshotStore, "chunks", held_chunks)
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(functools.partial(replicas.start, "b", config=config))
            with anyio.fail_after(10):
                await reading.wait()
            for _ in range(30):
                await leader.call("add", 1)
            newer = await leader.take_snapshot()

            await view.wait_truncated_past(older["index"] + 1)
            if kept == 1:
                await wait_until(lambda: not leader.snapshots.value.garbage)
                assert older["ledger_id"] not in await view.ledger_ids()
            go_on.set()
        late = replicas.replica("b")
        assert late.snapshots.last_loaded is not None
        assert late.snapshots.last_loaded["index"] == newer["index"]
        await wait_until(lambda: late.applied_index == leader.applied_index)
        assert late.machine.value == 60  # type: ignore[attr-defined]
        assert late.machine.state_hash() == leader.machine.state_hash()
