"""Which ledgers are an application's orphans: tagged with its name, named by nothing,
and old enough."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rsm.core.orphans import LedgerTag, orphans

SAFE_AGE_MS = 1_000


def test_only_the_apps_old_unnamed_ledgers_are_orphans() -> None:
    ledgers = [
        LedgerTag(1, b"kv", 0),  # named by the log
        LedgerTag(2, b"kv", 0),  # an orphan
        LedgerTag(3, b"kv", 9_500),  # too young: its creator may be about to record it
        LedgerTag(4, b"other", 0),  # another application's
        LedgerTag(5, None, 0),  # not the framework's
        LedgerTag(6, b"kv", 9_000),  # exactly the safe age
    ]
    assert orphans(ledgers, app="kv", named={1}, now_ms=10_000, safe_age_ms=SAFE_AGE_MS) == [
        2,
        6,
    ]


tags = st.builds(
    LedgerTag,
    ledger_id=st.integers(0, 50),
    app=st.sampled_from([b"kv", b"kv2", b"", None]),
    ctime_ms=st.integers(0, 3_000),
)


@given(st.lists(tags, max_size=30), st.sets(st.integers(0, 50)), st.integers(0, 3_000))
def test_never_a_named_young_or_foreign_ledger(
    ledgers: list[LedgerTag], named: set[int], now_ms: int
) -> None:
    found = orphans(ledgers, app="kv", named=named, now_ms=now_ms, safe_age_ms=SAFE_AGE_MS)
    assert found == sorted(found)
    by_id: dict[int, list[LedgerTag]] = {}
    for ledger in ledgers:
        by_id.setdefault(ledger.ledger_id, []).append(ledger)
    for ledger_id in found:
        assert ledger_id not in named
        assert any(
            ledger.app == b"kv" and now_ms - ledger.ctime_ms >= SAFE_AGE_MS
            for ledger in by_id[ledger_id]
        )
    for ledger in ledgers:
        old = now_ms - ledger.ctime_ms >= SAFE_AGE_MS
        if ledger.app == b"kv" and ledger.ledger_id not in named and old:
            assert ledger.ledger_id in found, "every orphan is found"
