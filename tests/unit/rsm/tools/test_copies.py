"""Judging the copies of one entry: which bookie disagrees, and whether enough are intact."""

from __future__ import annotations

from bookie.core.copies import Copy, CopyState
from rsm.tools.copies import judge

INTACT, MISSING, CORRUPT, UNREACHABLE = (
    CopyState.OK, CopyState.MISSING, CopyState.CORRUPT, CopyState.UNREACHABLE
)  # fmt: skip


def test_all_intact_and_equal_copies_are_no_problem() -> None:
    copies = [Copy(name, INTACT, b"x") for name in ("a", "b", "c")]
    assert judge(7, 3, copies, 2) == []


def test_a_missing_and_a_corrupt_copy_are_named_by_bookie() -> None:
    copies = [Copy("a", INTACT, b"x"), Copy("b", MISSING), Copy("c", CORRUPT, detail="digest")]
    problems = judge(7, 3, copies, 1)
    assert [(p.kind, p.message) for p in problems] == [
        ("copy", "ledger 7 entry 3: bookie b holds a missing copy"),
        ("copy", "ledger 7 entry 3: bookie c holds a corrupt copy (digest)"),
    ]


def test_intact_copies_that_differ_name_both_sides_majority_first() -> None:
    copies = [Copy("a", INTACT, b"x"), Copy("b", INTACT, b"y"), Copy("c", INTACT, b"x")]
    [problem] = judge(7, 3, copies, 2)
    assert problem.kind == "copies"
    assert problem.message == "ledger 7 entry 3: intact copies differ: [a, c] vs [b]"


def test_fewer_intact_copies_than_the_ack_quorum_is_under_replication() -> None:
    copies = [Copy("a", INTACT, b"x"), Copy("b", UNREACHABLE, detail="refused")]
    [problem] = judge(7, 3, copies, 2)
    assert (problem.kind, problem.entry_id) == ("under-replicated", 3)
    assert problem.message.endswith("fewer than the ack quorum 2 (b did not answer)")
