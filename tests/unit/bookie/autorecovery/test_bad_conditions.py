"""Autorecovery under bad conditions, against in-process bookies and the in-memory metadata
store (which models a ZooKeeper cut off and a session expired): an auditor killed in the
middle of an audit, ZooKeeper unreachable for longer than a session, the lost bookie
coming back while its data is being copied, two bookies lost at once, and no spare
bookie."""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, cast

import anyio
import pytest

from bookie.autorecovery.auditor import AuditorService
from bookie.autorecovery.service import run_autorecovery
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.stats import AutoRecoveryStats
from bookie.autorecovery.worker import ReplicationWorker
from bookie.client.ledger_client import LedgerClient
from bookie.core.auditor import PresenceCheck
from bookie.core.metadata import LedgerMetadata
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import list_bookies
from bookie.meta.layout import MetadataLayout
from bookie.meta.memory import MemoryMetadataStore
from bookie.meta.underreplication import UnderReplication
from tests.unit.bookie.client.cluster import ROOT, WAIT_S, LocalCluster, memory_cluster
from tests.unit.bookie.server.support import eventually as wait_eventually

pytestmark = pytest.mark.anyio

PASSWORD = b"pw"
ENTRIES = 12
POLL_S = 0.01


def settings(owner: str, **overrides: object) -> AutoRecoverySettings:
    values: dict[str, object] = {
        "owner": owner,
        "root": ROOT,
        "grace_ms": 100,
        "poll_interval_ms": 20,
        "passwords": (PASSWORD,),
        "timeout_ms": 2_000,
        "retry_delay_ms_min": 1,
        "retry_delay_ms_max": 8,
    }
    values.update(overrides)
    return AutoRecoverySettings(**values)  # type: ignore[arg-type]


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    await wait_eventually(check, poll_s=POLL_S, timeout_s=WAIT_S)


async def closed_ledger(
    client: LedgerClient, ensemble_size: int = 3, write_quorum: int = 2
) -> LedgerMetadata:
    async with await client.create_ledger(
        ensemble_size, write_quorum, 2, password=PASSWORD
    ) as ledger:
        for index in range(ENTRIES):
            await ledger.append(f"entry {index}".encode())
    return await client.ledger_metadata(ledger.ledger_id)


async def write_cookies(cluster: LocalCluster) -> None:
    """A cookie znode per bookie, as bookie processes write at their first start: an
    auditor elected after a bookie went down knows of it from its cookie."""
    layout = MetadataLayout(ROOT)
    async with cluster.store_factory() as store:
        for bookie_id in cluster.bookie_ids:
            await store.create(layout.cookie(bookie_id), b"", make_parents=True)


def fully_replicated(cluster: LocalCluster, metadata: LedgerMetadata) -> bool:
    """Every entry is on every bookie its write set names in the metadata."""
    return all(
        {ensemble[i] for i in metadata.quorum.write_set(entry_id)}
        <= set(cluster.holders(metadata.ledger_id, entry_id))
        for first, ensemble in metadata.ensembles
        for entry_id in range(first, metadata.last_entry_id + 1)
    )


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[dict[str, Any]]:
    return [
        dict(getattr(record, "bookie_fields", {}))
        for record in caplog.records
        if record.getMessage() == name
    ]


class _HaltAfterMarks:
    """A metadata store whose creation of marks stops for good after the first `allowed`:
    the process using it hangs in the middle of an audit until it is killed."""

    def __init__(self, store: MetadataStore, allowed: int) -> None:
        self._store = store
        self._allowed = allowed
        self._marks_prefix = MetadataLayout(ROOT).underreplicated_directory(())
        self.halted = anyio.Event()

    async def create(self, path: str, *args: Any, **kwargs: Any) -> str:
        if path.startswith(self._marks_prefix + "/"):
            if self._allowed == 0:
                self.halted.set()
                await anyio.sleep_forever()
            self._allowed -= 1
        return cast(str, await self._store.create(path, *args, **kwargs))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


async def test_an_auditor_killed_mid_audit_is_replaced_and_no_mark_is_lost_or_doubled() -> None:
    async with memory_cluster(4) as cluster, cluster.client() as client:
        lost = cluster.bookie_ids[0]
        ledgers = [await closed_ledger(client) for _ in range(6)]
        await write_cookies(cluster)
        on_lost = sorted(m.ledger_id for m in ledgers if lost in m.ensembles[0][1])
        assert len(on_lost) >= 2
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            async with (
                cluster.store_factory() as first_store,
                anyio.create_task_group() as first_group,
            ):
                halting = _HaltAfterMarks(first_store, allowed=1)
                first = AuditorService(cast(MetadataStore, halting), settings("a1"))
                first_group.start_soon(first.run)
                await eventually(lambda: _is_auditor(marks, "a1"))
                group.start_soon(AuditorService(store, settings("a2")).run)
                await cluster.stop_bookie(lost)
                with anyio.fail_after(WAIT_S):
                    await halting.halted.wait()
                assert len(await marks.list_marks()) == 1, "killed in the middle of its audit"
                first_group.cancel_scope.cancel()  # killed: its session ends with the block
            await eventually(lambda: _is_auditor(marks, "a2"))

            async def all_marked() -> bool:
                return await marks.list_marks() == on_lost

            await eventually(all_marked)
            group.cancel_scope.cancel()
            for ledger_id in on_lost:
                mark = await marks.read_mark(ledger_id)
                assert mark is not None
                assert mark.missing == {lost}
                assert mark.version == 0, "marked once: the successor left the first as it was"


async def test_workers_and_auditor_resume_after_zookeeper_was_unreachable_past_a_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="bookie.autorecovery")
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        await cluster.add_bookie()
        lost = metadata.ensembles[0][1][0]
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            async with cluster.store_factory() as process_store:
                group.start_soon(run_autorecovery, process_store, settings("p1"))
                await eventually(lambda: _is_auditor(marks, "p1"))
                memory = cast(MemoryMetadataStore, process_store)
                memory.suspend()
                await cluster.stop_bookie(lost)

                async def both_failed() -> bool:
                    return bool(
                        events(caplog, "autorecovery.auditor_failed")
                        and events(caplog, "autorecovery.worker_round_failed")
                    )

                await eventually(both_failed)
                memory.expire_session()  # the outage outlasts the session
                assert await marks.auditor() is None, "its candidacy went with its session"
                memory.resume()

                async def repaired() -> bool:
                    current = await client.ledger_metadata(metadata.ledger_id)
                    return lost not in current.ensembles[0][1] and not await marks.list_marks()

                await eventually(repaired)
                assert await marks.auditor() == "p1", "it stood again"
                group.cancel_scope.cancel()
        assert fully_replicated(cluster, await client.ledger_metadata(metadata.ledger_id))


async def test_a_lost_bookie_back_during_the_copy_is_neither_marked_again_nor_emptied() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        ledger_id = metadata.ledger_id
        spare = await cluster.add_bookie()
        lost = metadata.ensembles[0][1][0]
        await cluster.stop_bookie(lost)
        held_by_lost = [e for e in range(ENTRIES) if lost in cluster.holders(ledger_id, e)]
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            await marks.mark(ledger_id, [lost])
            # Slow copies, so that the bookie is back while they go on.
            worker = ReplicationWorker(
                store, settings("w1", rate_entries_per_s=20), random.Random(1)
            )
            done = anyio.Event()
            repaired: list[int] = []

            async def repair() -> None:
                repaired.append(await worker.run_once())
                done.set()

            group.start_soon(repair)

            async def copying() -> bool:
                return any(spare in cluster.holders(ledger_id, e) for e in range(ENTRIES))

            await eventually(copying)
            await cluster.restart_bookie(lost)
            assert not done.is_set(), "the bookie came back before the copy ended"
            with anyio.fail_after(WAIT_S):
                await done.wait()
            assert repaired == [1]
            after = await client.ledger_metadata(ledger_id)
            assert after.ensembles[0][1] == tuple(
                spare if b == lost else b for b in metadata.ensembles[0][1]
            )
            assert fully_replicated(cluster, after)
            assert [e for e in held_by_lost if lost in cluster.holders(ledger_id, e)] == (
                held_by_lost
            ), "nothing deleted on the bookie that came back"
            # Presence checks, which mark a bookie lacking entries at two checks in a row,
            # find nothing: the bookie that came back is no longer named, the spare holds all.
            auditor = AuditorService(store, settings("a1"))
            presence = PresenceCheck(interval_ms=1, now_ms=0)
            bookies = await list_bookies(store, ROOT)
            addresses = {b: info.address for b, info in bookies.writable.items()}
            for now_ms in (1, 2):
                assert await auditor.check_presence(presence, addresses) == 0
                presence.finished(now_ms)
            assert await marks.list_marks() == []
            assert await worker.run_once() == 0, "nothing left to repair"


async def test_two_bookies_lost_at_once_are_both_replaced_everywhere() -> None:
    async with memory_cluster(5) as cluster, cluster.client() as client:
        ledgers = [await closed_ledger(client, write_quorum=3) for _ in range(4)]
        await write_cookies(cluster)
        lost = set(cluster.bookie_ids[:2])
        for bookie_id in lost:
            await cluster.stop_bookie(bookie_id)
        await cluster.add_bookie()
        await cluster.add_bookie()
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            group.start_soon(run_autorecovery, store, settings("p1"))

            async def repaired() -> bool:
                for before in ledgers:
                    after = await client.ledger_metadata(before.ledger_id)
                    if lost & set(after.ensembles[0][1]) or not fully_replicated(cluster, after):
                        return False
                return not await marks.list_marks()

            await eventually(repaired)
            group.cancel_scope.cancel()
        for before in ledgers:
            after = await client.ledger_metadata(before.ledger_id)
            ensemble = after.ensembles[0][1]
            assert len(set(ensemble)) == len(ensemble), "never two copies on one bookie"
            reader = await client.open_ledger(before.ledger_id, PASSWORD, recovery=False)
            assert await reader.read(0, ENTRIES - 1) == [
                f"entry {index}".encode() for index in range(ENTRIES)
            ]


async def test_without_a_spare_the_mark_stays_and_retries_back_off_with_a_clear_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="bookie.autorecovery")
    async with memory_cluster(3) as cluster, cluster.client() as client:
        metadata = await closed_ledger(client)
        lost = metadata.ensembles[0][1][0]
        await cluster.stop_bookie(lost)
        async with cluster.store_factory() as store:
            marks = UnderReplication(store, ROOT)
            await marks.mark(metadata.ledger_id, [lost])
            stats = AutoRecoveryStats()
            worker = ReplicationWorker(store, settings("w1"), random.Random(1), stats=stats)

            async def failed_five_times() -> bool:
                assert await worker.run_once() == 0
                return len(events(caplog, "autorecovery.repair_failed")) >= 5

            await eventually(failed_five_times)
            failures = events(caplog, "autorecovery.repair_failed")
            assert [f["retry_in_ms"] for f in failures[:5]] == [1, 2, 4, 8, 8]
            assert all("no spare bookie" in f["reason"] for f in failures)
            assert all(f["ledger_id"] == metadata.ledger_id for f in failures)
            assert await marks.list_marks() == [metadata.ledger_id]
            assert await client.ledger_metadata(metadata.ledger_id) == metadata
            assert stats.repairs_failed == len(failures)
            assert (stats.marked_ledgers, stats.ledgers_repaired) == (1, 0)


async def _is_auditor(marks: UnderReplication, owner: str) -> bool:
    return await marks.auditor() == owner
