"""The auditor's decisions: lost bookies after a grace period, when an audit is due, what a
ledger is marked with, which entries a bookie that is up lacks, all of them or a sample."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from bookie.core.auditor import Auditor, PresenceCheck, lacking_entries, missing_bookies
from bookie.core.metadata import LedgerMetadata, LedgerState, close, new_ledger, replace_bookies
from bookie.core.rereplication import segment_ranges
from bookie.wire.packet import DigestType
from tests.unit.bookie.core.test_rereplication import POOL, ledgers

KNOWN = ("b1", "b2", "b3")


def test_a_bookie_is_lost_only_after_the_grace_period() -> None:
    auditor = Auditor(grace_ms=1_000, audit_interval_ms=60_000)
    auditor.observe(KNOWN, KNOWN, 0)
    assert auditor.lost(0) == set()
    assert not auditor.audit_due(0, triggered=True), "nothing lost, nothing to audit"
    auditor.observe(KNOWN, ("b1", "b3"), 100)
    assert auditor.lost(1_099) == set()
    assert auditor.next_change_ms(500) == 1_100
    assert not auditor.audit_due(1_099)
    auditor.observe(KNOWN, ("b1", "b3"), 900)
    assert auditor.lost(1_100) == {"b2"}, "gone since its first absence"
    assert auditor.audit_due(1_100)


def test_a_restart_within_the_grace_is_not_a_loss() -> None:
    auditor = Auditor(grace_ms=1_000, audit_interval_ms=60_000)
    auditor.observe(KNOWN, ("b1", "b3"), 0)
    auditor.observe(KNOWN, KNOWN, 900)
    auditor.observe(KNOWN, ("b1", "b3"), 950)
    assert auditor.lost(1_500) == set()
    assert auditor.lost(1_950) == {"b2"}


def test_audits_are_due_for_new_losses_and_then_periodically() -> None:
    auditor = Auditor(grace_ms=0, audit_interval_ms=10_000)
    auditor.observe(KNOWN, ("b1", "b3"), 0)
    assert auditor.audit_due(0)
    auditor.audited(auditor.lost(0), 0)
    assert not auditor.audit_due(5_000)
    assert auditor.audit_due(5_000, triggered=True), "an operator asked"
    assert auditor.next_change_ms(5_000) == 10_000
    assert auditor.audit_due(10_000)
    auditor.observe(KNOWN, ("b3",), 6_000)
    assert auditor.audit_due(6_000), "b1 is lost too"
    auditor.audited(auditor.lost(6_000), 6_000)
    auditor.observe(KNOWN, KNOWN, 7_000)
    assert not auditor.audit_due(7_000), "nothing lost"
    auditor.observe(KNOWN, ("b1", "b3"), 8_000)
    assert auditor.audit_due(8_000), "b2 came back and was lost again"


def two_segments(first_entry_id: int, replacements: dict[int, str]) -> LedgerMetadata:
    """An OPEN ledger on b1, b2, b3 (Qw 2) with `replacements` from `first_entry_id` on."""
    metadata = new_ledger(
        1,
        ("b1", "b2", "b3"),
        write_quorum=2,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ctime_ms=0,
    )
    return replace_bookies(metadata, first_entry_id, replacements)


def test_a_ledger_is_marked_with_the_lost_bookies_any_segment_names() -> None:
    changed = two_segments(10, {1: "b4"})
    assert missing_bookies(changed, {"b2", "b5"}) == {"b2"}
    assert missing_bookies(changed, {"b4", "b1"}) == {"b1", "b4"}
    assert missing_bookies(changed, {"b5"}) == set()


def test_lacking_entries_counts_what_a_bookie_should_hold_and_does_not_list() -> None:
    metadata = close(two_segments(6, {0: "b4"}), 9, 100)
    # b1 is position 0 of entries 0-5: it holds 0, 2, 3, 5.
    assert lacking_entries(metadata, "b1", [[0, 5]]) == 0
    assert lacking_entries(metadata, "b1", [[0, 0], [3, 3]]) == 2
    assert lacking_entries(metadata, "b1", []) == 4
    # b2 is position 1 of both segments: entries 0, 1, 3, 4, 6, 7, 9.
    assert lacking_entries(metadata, "b2", [[0, 9]]) == 0
    assert lacking_entries(metadata, "b2", [[0, 4]]) == 3
    assert lacking_entries(metadata, "b9", []) == 0
    unclosed = replace(metadata, state=LedgerState.OPEN, last_entry_id=-1, length=0)
    assert lacking_entries(unclosed, "b2", [[0, 4]]) == 0, "the last segment is the writer's"


def test_a_lack_is_confirmed_by_the_next_check() -> None:
    check = PresenceCheck(interval_ms=100, now_ms=0)
    assert not check.due(99)
    assert check.due(99, triggered=True)
    assert check.due(100)
    check.begin()
    assert not check.lacking(1, "b1")
    assert not check.lacking(2, "b1")
    check.finished(100)
    assert check.next_due_ms() == 200
    check.begin()
    assert check.lacking(1, "b1"), "lacking twice in a row"
    check.finished(200)
    check.begin()
    assert not check.lacking(2, "b1"), "ledger 2 was complete in between"
    check.begin()  # a check cut short
    check.lacking(3, "b1")
    check.begin()
    check.finished(300)
    check.begin()
    assert not check.lacking(3, "b1")


def _expected(metadata: LedgerMetadata, bookie_id: str) -> list[int]:
    """Brute force: every entry of a sealed segment whose write set names `bookie_id`."""
    return [
        entry_id
        for first, last, ensemble in segment_ranges(metadata)
        for entry_id in range(first, last + 1)
        if bookie_id in {ensemble[i] for i in metadata.quorum.write_set(entry_id)}
    ]


@given(ledgers(), st.sampled_from(POOL), st.lists(st.integers(0, 70), max_size=20))
def test_without_sampling_every_entry_is_compared(
    metadata: LedgerMetadata, bookie_id: str, held_ids: list[int]
) -> None:
    held = [[entry_id, entry_id] for entry_id in sorted(set(held_ids))]
    expected = _expected(metadata, bookie_id)
    assert lacking_entries(metadata, bookie_id, held) == len(set(expected) - set(held_ids))


@given(ledgers(), st.sampled_from(POOL), st.integers(1, 10), st.integers(0, 2**32))
def test_a_sample_is_bounded_and_finds_a_lost_disk_and_a_lost_tail(
    metadata: LedgerMetadata, bookie_id: str, sample_max: int, seed: int
) -> None:
    expected = _expected(metadata, bookie_id)
    shares = sum(
        member == bookie_id for _, _, ensemble in segment_ranges(metadata) for member in ensemble
    )
    rng = random.Random(seed)

    def lacking(held: list[list[int]]) -> int:
        return lacking_entries(metadata, bookie_id, held, sample_entries_max=sample_max, rng=rng)

    everything = [[0, 10_000]]
    assert lacking(everything) == 0
    if not expected:
        assert lacking([]) == 0
        return
    on_empty_disk = lacking([])
    assert 1 <= on_empty_disk <= min(len(expected), sample_max + 2 * shares)
    assert lacking([[0, expected[-1] - 1]]) >= 1, "the last entry is always compared"


def test_a_large_ledger_is_sampled() -> None:
    big = close(two_segments(500_000, {0: "b4"}), 999_999, 0)
    rng = random.Random(1)
    # b1 holds two thirds of the first segment: 100 drawn, and its first and last entry.
    assert lacking_entries(big, "b1", [], sample_entries_max=100, rng=rng) == 102
    assert lacking_entries(big, "b1", [[0, 999_999]], sample_entries_max=100, rng=rng) == 0
    assert lacking_entries(big, "b1", [[0, 400_000]], sample_entries_max=100, rng=rng) >= 1
    assert lacking_entries(big, "b2", [], sample_entries_max=100, rng=rng) == 104, (
        "two shares: the ends of both"
    )
