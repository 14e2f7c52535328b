"""Which bookie's copy of an entry is the odd one out.

Pure.  A reader that asks every bookie of an entry's write set for its copy
(`bookie shell readledger --all-bookies`) gets one `Copy` per bookie: the
verified payload, or why there is none.  `odd_copies` names every bookie whose
copy is not the agreed one:

* the agreed payload is the one the most bookies hold with a valid digest; a
  tie between different payloads agrees on nothing, so every valid copy is
  then named as differing;
* a bookie that holds no copy, a corrupt copy or could not be asked is always
  named, whatever the others hold.

An entry every bookie holds identically yields no problem.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


class CopyState(enum.Enum):
    OK = "ok"
    """A copy whose digest checked."""
    MISSING = "missing"
    """The bookie answered that it holds no such entry (or ledger)."""
    CORRUPT = "corrupt"
    """The bookie's copy fails its digest check or is for another entry."""
    UNREACHABLE = "unreachable"
    """The bookie could not be asked (not registered, down, timed out, an error status)."""


@dataclass(frozen=True, slots=True)
class Copy:
    """One bookie's copy of one entry, as read."""

    bookie_id: str
    state: CopyState
    payload: bytes | None = None
    """The verified payload when `state` is OK, else None."""
    detail: str = ""
    """Why there is no valid copy (the bookie's answer or the error), else empty."""

    def __post_init__(self) -> None:
        assert (self.state is CopyState.OK) == (self.payload is not None), self


@dataclass(frozen=True, slots=True)
class OddCopy:
    """A bookie whose copy of an entry is not the agreed one, and in what way."""

    bookie_id: str
    problem: str


def odd_copies(copies: Sequence[Copy]) -> list[OddCopy]:
    """The bookies of `copies` (in their order) whose copy is not the agreed one."""
    valid = Counter(copy.payload for copy in copies if copy.payload is not None)
    ranked = valid.most_common(2)
    agreed = ranked[0][0] if ranked and (len(ranked) == 1 or ranked[0][1] > ranked[1][1]) else None
    odd: list[OddCopy] = []
    for copy in copies:
        if copy.state is CopyState.OK:
            if copy.payload != agreed:
                odd.append(OddCopy(copy.bookie_id, _differs(copy, agreed, len(valid))))
        elif copy.state is CopyState.MISSING:
            odd.append(OddCopy(copy.bookie_id, "lacks it"))
        else:
            odd.append(OddCopy(copy.bookie_id, f"{copy.state.value}: {copy.detail}"))
    return odd


def _differs(copy: Copy, agreed: bytes | None, distinct: int) -> str:
    assert copy.payload is not None
    if agreed is None:
        return f"differs: {distinct} different payloads, no majority"
    return f"differs from the majority ({len(copy.payload)} bytes, majority {len(agreed)} bytes)"
