"""What `rsm status` and `kvstore status` say about autorecovery: under-replicated ledgers
in the bookie cluster, the application's own among them, those being repaired, the
missing bookies, a pause, and marks that cannot be read."""

from __future__ import annotations

import pytest

from bookie.meta.layout import MetadataLayout
from bookie.meta.underreplication import UnderReplication
from rsm.host import under_replication_lines, under_replication_status
from tests.unit.bookie.client.cluster import ROOT, memory_cluster

pytestmark = pytest.mark.anyio


async def test_the_status_counts_marks_the_apps_own_and_those_being_repaired() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        ours = await client.create_ledger(custom_metadata={"rsm.app": b"kv"})
        theirs = await client.create_ledger(custom_metadata={"rsm.app": b"other"})
        plain = await client.create_ledger()
        async with cluster.store_factory() as store:
            marks = UnderReplication(store, ROOT)
            status = await under_replication_status(store, "kv", ROOT)
            assert status == {
                "enabled": True,
                "ledgers": 0,
                "app_ledgers": [],
                "being_repaired": 0,
                "missing_bookies": [],
            }
            assert under_replication_lines({"app": "kv", "under_replication": status}) == [
                "under-replicated ledgers: none"
            ]
            await marks.mark(ours.ledger_id, ["b2"])
            await marks.mark(theirs.ledger_id, ["b1"])
            await marks.mark(plain.ledger_id, ["b1"])
            assert await marks.try_lock(theirs.ledger_id, "worker-1")
            await marks.set_enabled(False)
            status = await under_replication_status(store, "kv", ROOT)
            assert status == {
                "enabled": False,
                "ledgers": 3,
                "app_ledgers": [ours.ledger_id],
                "being_repaired": 1,
                "missing_bookies": ["b1", "b2"],
            }
            assert under_replication_lines({"app": "kv", "under_replication": status}) == [
                "under-replicated ledgers: 3 (1 of kv's), 1 being repaired; missing bookies: "
                "b1, b2",
                "autorecovery is paused: nothing is repaired (bookie shell autorecovery enable)",
            ]


async def test_a_mark_that_cannot_be_read_is_reported_not_raised() -> None:
    async with memory_cluster(3) as cluster, cluster.store_factory() as store:
        path = MetadataLayout(ROOT).underreplicated_ledger(5)
        await store.create(path, b"junk", make_parents=True)
        status = await under_replication_status(store, "kv", ROOT)
        assert set(status) == {"error"}
        assert under_replication_lines({"app": "kv", "under_replication": status}) == [
            f"under-replicated ledgers: unknown ({status['error']})"
        ]
    assert under_replication_lines({"app": "kv"}) == []


async def test_a_root_that_is_no_bookie_cluster_is_reported_not_healthy() -> None:
    """A wrong --ledger-root holds no marks: that is no news, not "none"."""
    async with memory_cluster(3) as cluster, cluster.store_factory() as store:
        status = await under_replication_status(store, "kv", "/wrong")
        assert status == {"error": "no bookie cluster at /wrong (no INSTANCEID there)"}
        assert under_replication_lines({"app": "kv", "under_replication": status}) == [
            "under-replicated ledgers: unknown (no bookie cluster at /wrong (no INSTANCEID there))"
        ]
