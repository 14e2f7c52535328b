"""`rsm log check --all-bookies`: every copy of every entry, and which bookie disagrees.

A normal read takes each entry from the first bookie of its write set that
returns it intact, so a damaged or missing copy elsewhere goes unseen until
that bookie is the one asked.  Here each entry of a segment's ledger is read
from every bookie of its write set (the ensemble in force at that entry,
write set by `bookie.core.quorum.Quorum`), directly over one connection per
bookie, and each copy is classified (`judge`, pure):

* intact: the packet's digest verifies for this ledger and entry;
* missing: the bookie answers that it has no such entry or ledger;
* corrupt: the packet fails its digest (or names another entry);
* unreachable: no answer (connection refused, timeout, other errors).

Intact copies whose payloads differ are a `copies` problem naming the
bookies on each side; a missing or corrupt copy is a `copy` problem naming
its bookie; an entry with fewer intact copies than the ledger's ack quorum
is `under-replicated`.  Nothing is written and nothing is fenced (plain
reads, no master key).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import anyio

from bookie.address import parse_address
from bookie.client.bookie_conn import BookieConnection
from bookie.client.read_handle import ReadHandle
from bookie.core.quorum import Quorum
from bookie.errors import BookieError, DigestMismatch, NoSuchEntry, NoSuchLedger
from bookie.wire.packet import Digest
from rsm.core.log_state import Segment
from rsm.tools.check import Problem
from rsm.tools.source import ClusterSource

INTACT = "intact"
MISSING = "missing"
CORRUPT = "corrupt"
UNREACHABLE = "unreachable"


@dataclass(frozen=True, slots=True)
class Copy:
    """One bookie's copy of one entry."""

    bookie_id: str
    verdict: str
    payload: bytes | None = None
    error: str = ""


def judge(ledger_id: int, entry_id: int, copies: Sequence[Copy], ack_quorum: int) -> list[Problem]:
    """The problems the copies of one entry show (see the module docstring)."""
    where = f"ledger {ledger_id} entry {entry_id}"
    problems: list[Problem] = []
    for copy in copies:
        if copy.verdict in (MISSING, CORRUPT):
            problems.append(
                Problem(
                    "copy",
                    f"{where}: bookie {copy.bookie_id} holds a {copy.verdict} copy"
                    + (f" ({copy.error})" if copy.error else ""),
                    ledger_id,
                    entry_id,
                )
            )
    intact = [copy for copy in copies if copy.verdict == INTACT]
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
        unreachable = [copy.bookie_id for copy in copies if copy.verdict == UNREACHABLE]
        message = f"{where}: {len(intact)} intact copies, fewer than the ack quorum {ack_quorum}"
        if unreachable:
            message += f" ({', '.join(unreachable)} did not answer)"
        problems.append(Problem("under-replicated", message, ledger_id, entry_id))
    return problems


class _Bookies:
    """One connection per bookie, opened when first needed, closed with the block."""

    def __init__(self, source: ClusterSource, stack: contextlib.AsyncExitStack) -> None:
        self._source = source
        self._stack = stack
        self._connections: dict[str, BookieConnection | BookieError] = {}

    async def connection(self, bookie_id: str) -> BookieConnection | BookieError:
        known = self._connections.get(bookie_id)
        if known is not None:
            return known
        address = self._source.ledgers.bookie_address(bookie_id) or bookie_id
        try:
            parsed = parse_address(address)
            opened: BookieConnection | BookieError = await self._stack.enter_async_context(
                BookieConnection.connect(parsed.host, parsed.port)
            )
        except BookieError as error:
            opened = error
        self._connections[bookie_id] = opened
        return opened


@contextlib.asynccontextmanager
async def bookies(source: ClusterSource) -> AsyncIterator[_Bookies]:
    async with contextlib.AsyncExitStack() as stack:
        yield _Bookies(source, stack)


async def read_copies(
    pool: _Bookies, handle: ReadHandle, password: bytes, entry_id: int
) -> list[Copy]:
    """Every copy of one entry, from every bookie of its write set, read concurrently."""
    metadata = handle.metadata
    quorum = Quorum(metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum)
    ensemble = metadata.ensemble_at(entry_id)
    members = [ensemble[position] for position in quorum.write_set(entry_id)]
    digest = Digest(metadata.digest_type, password)
    copies: dict[str, Copy] = {}
    # Connections are opened here, in the caller's task, which owns their lifetime.
    connections = {bookie_id: await pool.connection(bookie_id) for bookie_id in members}

    async def read_one(bookie_id: str) -> None:
        connection = connections[bookie_id]
        if isinstance(connection, BookieError):
            copies[bookie_id] = Copy(bookie_id, UNREACHABLE, error=str(connection))
            return
        try:
            response = await connection.read(metadata.ledger_id, entry_id)
            assert response.packet is not None
            _lac, _length, payload = digest.verify_entry(
                response.packet, metadata.ledger_id, entry_id
            )
        except (NoSuchEntry, NoSuchLedger):
            copies[bookie_id] = Copy(bookie_id, MISSING)
        except DigestMismatch as error:
            copies[bookie_id] = Copy(bookie_id, CORRUPT, error=str(error))
        except BookieError as error:
            copies[bookie_id] = Copy(bookie_id, UNREACHABLE, error=str(error))
        else:
            copies[bookie_id] = Copy(bookie_id, INTACT, payload)

    async with anyio.create_task_group() as task_group:
        for bookie_id in members:
            task_group.start_soon(read_one, bookie_id)
    return [copies[bookie_id] for bookie_id in members]


async def compare_segment(
    source: ClusterSource, pool: _Bookies, segment: Segment, password: bytes
) -> list[Problem]:
    """The problems of every entry of one segment's ledger, up to its readable end."""
    handle = await source.handle(segment)
    problems: list[Problem] = []
    for entry_id in range(handle.last_add_confirmed + 1):
        copies = await read_copies(pool, handle, password, entry_id)
        problems += judge(segment.ledger_id, entry_id, copies, handle.metadata.ack_quorum)
    return problems
