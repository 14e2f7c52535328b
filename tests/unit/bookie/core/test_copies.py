"""Which copy of an entry is the odd one out (bookie/core/copies.py)."""

from __future__ import annotations

from bookie.core.copies import Copy, CopyState, OddCopy, odd_copies

GOOD = b"written"
BAD = b"tampered"


def ok(bookie_id: str, payload: bytes = GOOD) -> Copy:
    return Copy(bookie_id, CopyState.OK, payload)


def test_identical_copies_are_no_problem() -> None:
    assert odd_copies([ok("a"), ok("b"), ok("c")]) == []


def test_the_minority_payload_is_named() -> None:
    assert odd_copies([ok("a"), ok("b", BAD), ok("c")]) == [
        OddCopy("b", "differs from the majority (8 bytes, majority 7 bytes)")
    ]


def test_a_tie_agrees_on_nothing() -> None:
    assert odd_copies([ok("a"), ok("b", BAD)]) == [
        OddCopy("a", "differs: 2 different payloads, no majority"),
        OddCopy("b", "differs: 2 different payloads, no majority"),
    ]


def test_missing_corrupt_and_unreachable_copies_are_always_named() -> None:
    copies = [
        Copy("a", CopyState.MISSING, detail="ENOENTRY"),
        ok("b"),
        Copy("c", CopyState.CORRUPT, detail="digest mismatch in entry 1:0"),
        Copy("d", CopyState.UNREACHABLE, detail="not registered (down?)"),
    ]
    assert odd_copies(copies) == [
        OddCopy("a", "lacks it"),
        OddCopy("c", "corrupt: digest mismatch in entry 1:0"),
        OddCopy("d", "unreachable: not registered (down?)"),
    ]


def test_one_valid_copy_is_the_agreed_one() -> None:
    assert odd_copies([Copy("a", CopyState.MISSING), ok("b", BAD)]) == [OddCopy("a", "lacks it")]
