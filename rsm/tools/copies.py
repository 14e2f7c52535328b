"""`rsm log check --all-bookies`: every copy of every entry, and which bookie disagrees.

A normal read takes each entry from the first bookie of its write set that
returns it intact, so a damaged or missing copy elsewhere goes unseen until
that bookie is the one asked.  Here each entry of a segment's ledger is read
from every bookie of its write set (under the ensemble in force at that
entry) by the bookie shell's reader (`bookie.client.copies.CopyReader`, one
connection per bookie), which classifies each copy
(`bookie.core.copies.CopyState`): ok (the digest verifies for this ledger and
entry), missing, corrupt or unreachable.  `judge` (pure) turns one entry's
copies into this tool's problems: intact copies whose payloads differ are a
`copies` problem naming the bookies on each side; a missing or corrupt copy
is a `copy` problem naming its bookie; an entry with fewer intact copies than
the ledger's ack quorum is `under-replicated`.  Nothing is written and
nothing is fenced (plain reads, no master key).
"""

from __future__ import annotations

from collections.abc import Sequence

from bookie.client.copies import CopyReader
from bookie.core.copies import Copy, CopyState
from rsm.core.log_state import Segment
from rsm.tools.check import Problem
from rsm.tools.source import ClusterSource


def judge(ledger_id: int, entry_id: int, copies: Sequence[Copy], ack_quorum: int) -> list[Problem]:
    """The problems the copies of one entry show (see the module docstring)."""
    where = f"ledger {ledger_id} entry {entry_id}"
    problems: list[Problem] = []
    for copy in copies:
        if copy.state in (CopyState.MISSING, CopyState.CORRUPT):
            detail = copy.detail if copy.state is CopyState.CORRUPT else ""
            problems.append(
                Problem(
                    "copy",
                    f"{where}: bookie {copy.bookie_id} holds a {copy.state.value} copy"
                    + (f" ({detail})" if detail else ""),
                    ledger_id,
                    entry_id,
                )
            )
    intact = [copy for copy in copies if copy.state is CopyState.OK]
    groups: dict[bytes, list[str]] = {}
    for copy in intact:
        assert copy.payload is not None
        groups.setdefault(copy.payload, []).append(copy.bookie_id)
    if len(groups) > 1:
        sides = sorted(groups.values(), key=len, reverse=True)
        message = f"{where}: intact copies differ: " + " vs ".join(
            "[" + ", ".join(sorted(side)) + "]" for side in sides
        )
        problems.append(Problem("copies", message, ledger_id, entry_id))
    if len(intact) < ack_quorum:
        unreachable = [c.bookie_id for c in copies if c.state is CopyState.UNREACHABLE]
        message = f"{where}: {len(intact)} intact copies, fewer than the ack quorum {ack_quorum}"
        if unreachable:
            message += f" ({', '.join(unreachable)} did not answer)"
        problems.append(Problem("under-replicated", message, ledger_id, entry_id))
    return problems


async def compare_segment(
    source: ClusterSource, segment: Segment, password: bytes
) -> list[Problem]:
    """The problems of every entry of one segment's ledger, up to its readable end."""
    handle = await source.handle(segment)
    metadata = handle.metadata
    problems: list[Problem] = []
    async with CopyReader.open(
        metadata, password, source.ledgers.bookie_address, tls=source.ledgers.tls
    ) as reader:
        for entry_id in range(handle.last_add_confirmed + 1):
            copies = await reader.read(entry_id)
            problems += judge(segment.ledger_id, entry_id, copies, metadata.ack_quorum)
    return problems
