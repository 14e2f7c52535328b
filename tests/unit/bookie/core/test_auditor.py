"""The auditor's decisions: lost bookies after a grace period, when an audit is due, what a
ledger is marked with."""

from __future__ import annotations

from bookie.core.auditor import Auditor, missing_bookies
from bookie.core.metadata import new_ledger, replace_bookies
from bookie.wire.packet import DigestType

KNOWN = ("b1", "b2", "b3")


def test_a_bookie_is_lost_only_after_the_grace_period() -> None:
    auditor = Auditor(grace_ms=1_000, audit_interval_ms=60_000)
    auditor.observe(KNOWN, KNOWN, 0)
    assert auditor.lost(0) == set()
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
    assert auditor.next_change_ms(5_000) == 10_000
    assert auditor.audit_due(10_000)
    auditor.observe(KNOWN, ("b3",), 6_000)
    assert auditor.audit_due(6_000), "b1 is lost too"
    auditor.audited(auditor.lost(6_000), 6_000)
    auditor.observe(KNOWN, KNOWN, 7_000)
    assert not auditor.audit_due(7_000), "nothing lost"
    auditor.observe(KNOWN, ("b1", "b3"), 8_000)
    assert auditor.audit_due(8_000), "b2 came back and was lost again"


def test_a_ledger_is_marked_with_the_lost_bookies_any_segment_names() -> None:
    metadata = new_ledger(
        1,
        ("b1", "b2", "b3"),
        write_quorum=2,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ctime_ms=0,
    )
    changed = replace_bookies(metadata, 10, {1: "b4"})
    assert missing_bookies(changed, {"b2", "b5"}) == {"b2"}
    assert missing_bookies(changed, {"b4", "b1"}) == {"b1", "b4"}
    assert missing_bookies(changed, {"b5"}) == set()
