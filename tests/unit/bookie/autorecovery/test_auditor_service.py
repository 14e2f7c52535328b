"""The auditor against in-process bookies: elected among candidates, it marks the ledgers
of a bookie gone for longer than the grace period, and a successor takes over; entries
missing on a bookie that is up are found and copied elsewhere, comparing every entry or a
sample."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import anyio
import pytest

from bookie.autorecovery.auditor import AuditorService
from bookie.autorecovery.service import run_autorecovery
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.stats import AutoRecoveryStats
from bookie.core.quorum import Quorum
from bookie.core.rereplication import repaired_segment_transform
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from tests.unit.bookie.client.cluster import ROOT, WAIT_S, memory_cluster
from tests.unit.bookie.server.support import eventually as wait_eventually

pytestmark = pytest.mark.anyio

POLL_S = 0.01


def settings(owner: str, **overrides: object) -> AutoRecoverySettings:
    values: dict[str, object] = {
        "owner": owner,
        "root": ROOT,
        "grace_ms": 300,
        "poll_interval_ms": 20,
        "passwords": (b"pw",),
        "timeout_ms": 2_000,
    }
    values.update(overrides)
    return AutoRecoverySettings(**values)  # type: ignore[arg-type]


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    await wait_eventually(check, poll_s=POLL_S, timeout_s=WAIT_S)


async def test_the_auditor_marks_the_ledgers_of_a_lost_bookie_only_after_the_grace() -> None:
    async with memory_cluster(4) as cluster, cluster.client() as client:
        on_lost: list[int] = []
        elsewhere: list[int] = []
        lost = cluster.bookie_ids[0]
        for _ in range(6):
            ledger = await client.create_ledger(2, 2, 2, password=b"pw")
            await ledger.append(b"x")
            await ledger.close()
            metadata = await client.ledger_metadata(ledger.ledger_id)
            (on_lost if lost in metadata.ensembles[0][1] else elsewhere).append(ledger.ledger_id)
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            group.start_soon(AuditorService(store, settings("a1")).run)
            await eventually(lambda: _is_auditor(marks, "a1"))
            await marks.trigger_audit()
            await eventually(lambda: _untriggered(marks))
            assert await marks.list_marks() == [], "nothing lost: a triggered audit marks nothing"
            await cluster.stop_bookie(lost)
            started = anyio.current_time()
            await eventually(lambda: _marked(marks, on_lost))
            assert anyio.current_time() - started >= 0.3, "not before the grace period"
            assert not set(await marks.list_marks()) & set(elsewhere)
            for ledger_id in on_lost:
                mark = await marks.read_mark(ledger_id)
                assert mark is not None
                assert mark.missing == {lost}
            group.cancel_scope.cancel()


async def test_a_successor_audits_and_workers_repair_when_the_auditor_leaves() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        ledger = await client.create_ledger(3, 2, 2, password=b"pw")
        for index in range(10):
            await ledger.append(f"{index}".encode())
        await ledger.close()
        await cluster.add_bookie()
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            first, second = AutoRecoveryStats(), AutoRecoveryStats()
            async with (
                cluster.store_factory() as first_store,
                anyio.create_task_group() as first_group,
            ):
                first_group.start_soon(
                    functools.partial(run_autorecovery, first_store, settings("p1"), stats=first)
                )
                await eventually(lambda: _is_auditor(marks, "p1"))
                group.start_soon(
                    functools.partial(run_autorecovery, store, settings("p2"), stats=second)
                )
                await eventually(lambda: _candidates(marks, 2))
                assert (first.auditor, second.auditor) == (True, False)
                first_group.cancel_scope.cancel()
            assert not first.auditor
            # The first process's session ended with its block: its candidacy is gone.
            await eventually(lambda: _is_auditor(marks, "p2"))
            lost = (await client.ledger_metadata(ledger.ledger_id)).ensembles[0][1][0]
            quorum = Quorum(3, 2, 2)
            held = sum(0 in quorum.write_set(entry_id) for entry_id in range(10))
            await cluster.stop_bookie(lost)

            async def repaired() -> bool:
                metadata = await client.ledger_metadata(ledger.ledger_id)
                return lost not in metadata.ensembles[0][1] and not await marks.list_marks()

            await eventually(repaired)
            await wait_eventually(
                lambda: _true(second.marked_ledgers == 0), poll_s=POLL_S, timeout_s=WAIT_S
            )
            assert (second.auditor, second.lost_bookies) == (True, 1)
            group.cancel_scope.cancel()
        assert (second.auditor, second.lost_bookies) == (False, 0), "no longer elected"
        assert second.ledgers_marked == 1
        assert second.audits >= 1
        assert (second.ledgers_repaired, second.repairs_failed) == (1, 0)
        assert second.entries_copied == held
        assert second.enabled


async def _true(value: bool) -> bool:
    return value


async def _is_auditor(marks: UnderReplication, owner: str) -> bool:
    return await marks.auditor() == owner


async def _candidates(marks: UnderReplication, count: int) -> bool:
    return len((await marks.candidates()).ordered) == count


async def _marked(marks: UnderReplication, ledger_ids: list[int]) -> bool:
    return set(ledger_ids) <= set(await marks.list_marks())


@pytest.mark.parametrize("sample_entries", [0, 2])
async def test_entries_lost_on_a_bookie_that_is_up_are_found_and_copied_elsewhere(
    sample_entries: int,
) -> None:
    async with memory_cluster(4) as cluster, cluster.client() as client:
        ledger = await client.create_ledger(3, 2, 2, password=b"pw")
        for index in range(12):
            await ledger.append(f"{index}".encode())
        await ledger.close()
        metadata = await client.ledger_metadata(ledger.ledger_id)
        ensemble = metadata.ensembles[0][1]
        (empty,) = set(cluster.bookie_ids) - set(ensemble)
        # The metadata names a bookie that holds nothing of the ledger: silent loss.
        async with cluster.store_factory() as store:
            await LedgerManager(store, ROOT).update(
                ledger.ledger_id,
                lambda current: repaired_segment_transform(current, 0, ensemble, {2: empty}),
            )
        async with cluster.store_factory() as store, anyio.create_task_group() as group:
            marks = UnderReplication(store, ROOT)
            group.start_soon(
                run_autorecovery,
                store,
                settings(
                    "a1",
                    grace_ms=60_000,
                    presence_interval_ms=50,
                    presence_sample_entries=sample_entries,
                ),
            )

            async def repaired() -> bool:
                current = await client.ledger_metadata(ledger.ledger_id)
                return empty not in current.ensembles[0][1] and not await marks.list_marks()

            await eventually(repaired)
            group.cancel_scope.cancel()
        after = await client.ledger_metadata(ledger.ledger_id)
        assert after.ensembles[0][1] == ensemble, "the only bookie outside it holds the copies"
        for entry_id in range(12):
            holders = set(cluster.holders(ledger.ledger_id, entry_id))
            assert {ensemble[i] for i in after.quorum.write_set(entry_id)} <= holders


async def _untriggered(marks: UnderReplication) -> bool:
    return await marks.audit_trigger() is None
