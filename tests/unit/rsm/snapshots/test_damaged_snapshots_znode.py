"""A snapshots znode that does not decode stops a starting replica with an error that names
the znode and the operator's steps (docs/snapshots.md, "A damaged snapshots znode"), and the
replica leaves the znode as it found it: only it says which ledgers hold the state."""

from __future__ import annotations

import pytest

from rsm.errors import MalformedValue
from tests.unit.rsm.runtime.harness import replica_cluster
from tests.unit.rsm.snapshots.support import app_view, snapshot_config

pytestmark = pytest.mark.anyio


async def test_a_damaged_snapshots_znode_stops_a_replica_and_is_left_alone() -> None:
    config = snapshot_config(truncation=False)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        for _ in range(10):
            await leader.call("add", 1)
        await leader.take_snapshot()
        await replicas.stop("a")
        path = view.layout.snapshots
        good = await view.store.get(path)
        damaged = good.value[: len(good.value) // 2]
        version = await view.store.set(path, damaged, good.version)

        with pytest.raises(MalformedValue) as raised:
            await replicas.start("b", config=config)
        message = str(raised.value)
        assert path in message
        assert "A damaged snapshots znode" in message
        after = await view.store.get(path)
        assert (after.value, after.version) == (damaged, version)
