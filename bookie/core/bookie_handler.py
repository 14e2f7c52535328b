"""The protocol decisions of one bookie: what each request does and what it answers.

Pure: no I/O, no clock, no randomness.  `BookieHandler.handle(request, now_ms,
connection_id)` returns *effects*, and the server shell (`bookie/server/`)
carries them out in list order: it applies the storage mutations, sends the
replies, waits for syncs, performs the storage reads and hands their results
back through the `*_reply` methods so that every response is still built here.

The handler owns the bookie's in-memory view of each ledger: master key,
fenced flag, highest last-add-confirmed (LAC) seen (from entry headers and
explicit LACs) and the last explicit-LAC packet.  It starts from what storage
recovered (`LedgerStorage.recovered_ledgers()` and `fenced_tombstones()`) and
changes it only together with the storage mutation that makes the change
durable, so a restarted bookie rebuilds the same view; when storage refuses a
mutation the shell reports it (`not_applied`) and the change is undone.

Invariants:

* A known ledger always has a master key; a request with another key for it is
  answered EUA and changes nothing.
* Once fenced, a ledger stays fenced: normal adds get EFENCED, recovery adds
  are accepted.  A ledger deleted while fenced becomes a *tombstone*: it is
  never re-created, every later add or explicit LAC for it gets EFENCED.
* Acknowledgements wait for durability: a reply that confirms a mutation
  (ADD, WRITE_LAC, a fencing READ) is a `ReplyWhenSynced` or a
  `ReadEntry(wait_for_sync=True)`, which the shell releases only once every
  mutation it has applied so far is synced.  Negative answers (EFENCED, EUA,
  ...) need no durability and go out at once.
* A ledger's LAC never decreases; when it rises, every parked long-poll READ
  whose `previous_lac` it passed is answered in the same batch of effects.
* At most `long_poll_waiters_max` READs are parked at a time; past that a
  long poll is answered ETOOMANYREQUESTS.  Every parked READ is answered
  exactly once: when the LAC passes, when its deadline passes (`expire`), when
  its ledger is deleted, or never if its connection went away first
  (`drop_connection`).
* After `storage_failed()` nothing is promised durable any more: every request
  that would mutate storage is answered EIO; reads that need no mutation are
  still served from what storage holds.
* With a token table (`bookie.core.tokens`), a connection is served only once
  an AUTH request on it presented a known token: every other request before
  that is answered EUNAUTHENTICATED and changes nothing, and so is every
  request after an AUTH with an unknown token.  A token of the `read` role
  gets EFORBIDDEN for adds, explicit LACs and fencing reads.  Without a table,
  AUTH is answered EOK with no principal.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from bookie import limits
from bookie.core.tokens import Grant, Role, TokenTable
from bookie.errors import Status
from bookie.storage.api import LedgerRecord
from bookie.wire.messages import (
    ADD_FLAG_RECOVERY,
    ENTRY_ID_LAST,
    LAC_NONE,
    OP_OF_REQUEST,
    READ_FLAG_FENCE,
    RESPONSE_TYPES,
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    IdentifyRequest,
    IdentifyResponse,
    LedgerStateRequest,
    LedgerStateResponse,
    ListEntriesRequest,
    ListEntriesResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from bookie.wire.packet import packet_lac

# Plain ints, not the enum: they go straight into every response tuple and the
# CBOR encoder handles an int without looking at its class.
_EOK = int(Status.EOK)
_ENOLEDGER = int(Status.ENOLEDGER)
_ENOENTRY = int(Status.ENOENTRY)
_EBADREQ = int(Status.EBADREQ)
_EIO = int(Status.EIO)
_EUA = int(Status.EUA)
_EFENCED = int(Status.EFENCED)
_EREADONLY = int(Status.EREADONLY)
_ETOOMANYREQUESTS = int(Status.ETOOMANYREQUESTS)
_EUNAUTHENTICATED = int(Status.EUNAUTHENTICATED)
_EFORBIDDEN = int(Status.EFORBIDDEN)

_STORAGE_FAILED = "storage failed; nothing more can be made durable"


# --- effects ----------------------------------------------------------------------------------
#
# Storage mutations carry no connection: the shell applies them in order and
# remembers the ticket of the last one.  Every other effect answers one request
# of one connection, named by the shell's `connection_id`.


@dataclass(frozen=True, slots=True)
class SetMasterKey:
    """Create the ledger in storage with its master key."""

    ledger_id: int
    master_key: bytes


@dataclass(frozen=True, slots=True)
class StoreEntry:
    """Store one entry packet."""

    ledger_id: int
    entry_id: int
    packet: bytes


@dataclass(frozen=True, slots=True)
class Fence:
    """Mark the ledger fenced in storage."""

    ledger_id: int


@dataclass(frozen=True, slots=True)
class StoreExplicitLac:
    """Record an explicit-LAC packet in storage."""

    ledger_id: int
    lac: int
    packet: bytes


@dataclass(frozen=True, slots=True)
class Reply:
    """Send `response` now."""

    connection_id: int
    response: Response


@dataclass(frozen=True, slots=True)
class ReplyWhenSynced:
    """Send `response` once every mutation applied so far is synced (EIO if storage fails)."""

    connection_id: int
    response: Response


@dataclass(frozen=True, slots=True)
class ReadEntry:
    """Read an entry (`ENTRY_ID_LAST`: the highest one stored) and answer with `entry_reply`.

    With `wait_for_sync`, first wait until every mutation applied so far is
    synced, as for `ReplyWhenSynced` (a fencing read answers only once the
    fence is durable).
    """

    connection_id: int
    request_id: int
    ledger_id: int
    entry_id: int
    wait_for_sync: bool


@dataclass(frozen=True, slots=True)
class ReadLastEntry:
    """Read the highest stored entry of the ledger and answer with `read_lac_reply`."""

    connection_id: int
    request_id: int
    ledger_id: int


@dataclass(frozen=True, slots=True)
class ListEntries:
    """Ask storage for the ledger's entry ranges and answer with `list_entries_reply`."""

    connection_id: int
    request_id: int
    ledger_id: int


@dataclass(frozen=True, slots=True)
class ReportBookieInfo:
    """Measure the disks and answer with `bookie_info_reply`."""

    connection_id: int
    request_id: int


@dataclass(frozen=True, slots=True)
class Parked:
    """A long-poll READ now waits; the shell's timer must call `expire` by `deadline_ms`."""

    deadline_ms: int


Mutation = SetMasterKey | StoreEntry | Fence | StoreExplicitLac
Query = ReadEntry | ReadLastEntry | ListEntries | ReportBookieInfo
Deferred = ReplyWhenSynced | Query
"""An answer the shell produces later or from storage; `error_reply` turns it into an error."""
Effect = Mutation | Reply | Deferred | Parked


@dataclass(frozen=True, slots=True)
class BookieIdentity:
    """Who a bookie is: its bookie id and its cluster's instance id (INSTANCEID), as its
    cookies record them.  IDENTIFY answers them."""

    bookie_id: str
    instance_id: str


# --- per-ledger state -------------------------------------------------------------------------


class _Ledger:
    """What the bookie knows of one ledger, mirrored by storage."""

    __slots__ = ("master_key", "fenced", "lac", "explicit_lac_packet", "waiters")

    def __init__(
        self, master_key: bytes, fenced: bool, lac: int, explicit_lac_packet: bytes | None
    ) -> None:
        self.master_key = master_key
        self.fenced = fenced
        self.lac = lac
        self.explicit_lac_packet = explicit_lac_packet
        self.waiters: dict[int, _ParkedRead] = {}
        """Parked long-poll READs of this ledger, by park sequence number."""


class _ParkedRead:
    """A long-poll READ waiting for the LAC to pass `previous_lac`."""

    __slots__ = ("sequence", "connection_id", "request", "previous_lac", "done")

    def __init__(
        self, sequence: int, connection_id: int, request: ReadRequest, previous_lac: int
    ) -> None:
        self.sequence = sequence
        self.connection_id = connection_id
        self.request = request
        self.previous_lac = previous_lac
        self.done = False
        """Answered or dropped; its deadline-heap item is then stale."""


# --- the handler ------------------------------------------------------------------------------


class BookieHandler:
    """Request logic of one bookie.  See the module docstring for the rules."""

    __slots__ = (
        "read_only",
        "_identity",
        "_ledgers",
        "_tombstones",
        "_tombstones_max",
        "_waiters_max",
        "_waiter_count",
        "_deadlines",
        "_sequence",
        "_storage_failed",
        "_tokens",
        "_principals",
        "auth_failures",
        "unauthenticated_requests",
        "forbidden_requests",
    )

    def __init__(
        self,
        ledgers: Iterable[LedgerRecord],
        fenced_tombstones: Iterable[int],
        *,
        read_only: bool = False,
        identity: BookieIdentity | None = None,
        long_poll_waiters_max: int = limits.long_poll_waiters_max,
        tombstones_max: int = limits.fenced_deleted_ledgers_remembered_max,
        tokens: TokenTable | None = None,
    ) -> None:
        assert long_poll_waiters_max >= 0
        assert tombstones_max >= 0
        self.read_only = read_only
        """Set by the shell (disk full): normal adds and explicit LACs get EREADONLY."""
        self._identity = identity
        self._ledgers: dict[int, _Ledger] = {
            record.ledger_id: _Ledger(
                record.master_key, record.fenced, record.lac, record.explicit_lac_packet
            )
            for record in ledgers
        }
        # A dict used as an insertion-ordered set: the oldest tombstone is
        # forgotten first when the bound is reached.
        self._tombstones: dict[int, None] = {}
        self._tombstones_max = tombstones_max
        for ledger_id in fenced_tombstones:
            if ledger_id not in self._ledgers:
                self._remember_tombstone(ledger_id)
        self._waiters_max = long_poll_waiters_max
        self._waiter_count = 0
        # (deadline_ms, sequence, parked) with lazy deletion: answered reads stay
        # until popped or until `_compact_deadlines` rebuilds the heap.
        self._deadlines: list[tuple[int, int, _ParkedRead]] = []
        self._sequence = itertools.count()
        self._storage_failed = False
        self._tokens = tokens
        self._principals: dict[int, Grant] = {}
        """What each authenticated connection's token grants."""
        self.auth_failures = 0
        """AUTH requests with a token the table does not hold."""
        self.unauthenticated_requests = 0
        """Other requests refused because their connection was not authenticated."""
        self.forbidden_requests = 0
        """Requests refused because their connection's role does not allow them."""

    # --- inspection (tests, admin) ------------------------------------------------------------

    def is_known(self, ledger_id: int) -> bool:
        return ledger_id in self._ledgers

    def is_fenced(self, ledger_id: int) -> bool:
        """True for a fenced ledger and for a tombstone of one."""
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            return ledger_id in self._tombstones
        return ledger.fenced

    def lac(self, ledger_id: int) -> int:
        """The highest LAC seen for the ledger (`LAC_NONE` if unknown)."""
        ledger = self._ledgers.get(ledger_id)
        return LAC_NONE if ledger is None else ledger.lac

    @property
    def parked_reads(self) -> int:
        return self._waiter_count

    # --- requests -----------------------------------------------------------------------------

    def handle(self, request: Request, now_ms: int, connection_id: int) -> list[Effect]:
        """The effects of one request, in the order the shell must carry them out."""
        if self._tokens is not None:
            refusal = self._refusal(request, connection_id)
            if refusal is not None:
                return [Reply(connection_id, refusal)]
        # Adds first: they are the hot path.
        if isinstance(request, AddRequest):
            return self._add(request, connection_id)
        if isinstance(request, ReadRequest):
            return self._read(request, now_ms, connection_id)
        if isinstance(request, ReadLacRequest):
            return self._read_lac(request, connection_id)
        if isinstance(request, WriteLacRequest):
            return self._write_lac(request, connection_id)
        if isinstance(request, GetBookieInfoRequest):
            return [ReportBookieInfo(connection_id, request.request_id)]
        if isinstance(request, LedgerStateRequest):
            return [Reply(connection_id, self._ledger_state(request))]
        if isinstance(request, IdentifyRequest):
            return [Reply(connection_id, self._identify(request))]
        if isinstance(request, AuthRequest):
            return [Reply(connection_id, self._auth(request, connection_id))]
        return self._list_entries(request, connection_id)

    def grant(self, connection_id: int) -> Grant | None:
        """What connection `connection_id` authenticated as, if anything."""
        return self._principals.get(connection_id)

    def _refusal(self, request: Request, connection_id: int) -> Response | None:
        """With tokens: the answer to an AUTH, or to a request its connection may not make
        (not authenticated, or beyond its role); None to serve it."""
        if isinstance(request, AuthRequest):
            return self._auth(request, connection_id)
        grant = self._principals.get(connection_id)
        if grant is None:
            self.unauthenticated_requests += 1
            status = _EUNAUTHENTICATED
            message = "this bookie requires a client token: send AUTH first"
        elif grant.role < Role.WRITE and _writes(request):
            self.forbidden_requests += 1
            status = _EFORBIDDEN
            message = f"{grant.principal} may read, not write, fence or add"
        else:
            return None
        response_type = RESPONSE_TYPES[OP_OF_REQUEST[type(request)]]
        return response_type(request.request_id, status, message)

    def _auth(self, request: AuthRequest, connection_id: int) -> AuthResponse:
        if self._tokens is None:
            return AuthResponse(request.request_id, _EOK, None, None)
        grant = self._tokens.grant_of(request.token)
        if grant is None:
            self.auth_failures += 1
            self._principals.pop(connection_id, None)
            message = "unknown client token"
            return AuthResponse(request.request_id, _EUNAUTHENTICATED, message, None)
        self._principals[connection_id] = grant
        return AuthResponse(request.request_id, _EOK, None, grant.principal)

    def _add(self, request: AddRequest, connection_id: int) -> list[Effect]:
        request_id, ledger_id, entry_id, master_key, flags, packet = request
        if flags & ~ADD_FLAG_RECOVERY:
            return [_add_error(connection_id, request, _EBADREQ, f"unknown ADD flags {flags:#x}")]
        recovery = bool(flags & ADD_FLAG_RECOVERY)
        ledger = self._ledgers.get(ledger_id)
        effects: list[Effect] = []
        if ledger is None:
            if ledger_id in self._tombstones:
                return [_add_error(connection_id, request, _EFENCED, "ledger fenced and deleted")]
            if self.read_only and not recovery:
                return [_add_error(connection_id, request, _EREADONLY, "bookie is read-only")]
            if self._storage_failed:
                return [_add_error(connection_id, request, _EIO, _STORAGE_FAILED)]
            ledger = _Ledger(master_key, False, LAC_NONE, None)
            self._ledgers[ledger_id] = ledger
            effects.append(SetMasterKey(ledger_id, master_key))
        else:
            if master_key != ledger.master_key:
                return [_add_error(connection_id, request, _EUA, "master key does not match")]
            if ledger.fenced and not recovery:
                return [_add_error(connection_id, request, _EFENCED, "ledger is fenced")]
            if self.read_only and not recovery:
                return [_add_error(connection_id, request, _EREADONLY, "bookie is read-only")]
            if self._storage_failed:
                return [_add_error(connection_id, request, _EIO, _STORAGE_FAILED)]
        effects.append(StoreEntry(ledger_id, entry_id, packet))
        response = AddResponse(request_id, _EOK, None, ledger_id, entry_id)
        effects.append(ReplyWhenSynced(connection_id, response))
        lac = packet_lac(packet)
        if lac > ledger.lac:
            ledger.lac = lac
            if ledger.waiters:
                self._wake(ledger, ledger_id, effects)
        return effects

    def _read(self, request: ReadRequest, now_ms: int, connection_id: int) -> list[Effect]:
        request_id, ledger_id, entry_id, flags, master_key, previous_lac, timeout_ms = request
        if flags & ~READ_FLAG_FENCE:
            return [_read_error(connection_id, request, _EBADREQ, f"unknown READ flags {flags:#x}")]
        fence = bool(flags & READ_FLAG_FENCE)
        if (previous_lac is None) != (timeout_ms is None):
            message = "a long poll needs both previous_lac and timeout_ms"
            return [_read_error(connection_id, request, _EBADREQ, message)]
        if fence and previous_lac is not None:
            message = "a fencing read cannot be a long poll"
            return [_read_error(connection_id, request, _EBADREQ, message)]
        if fence and master_key is None:
            message = "a fencing read needs the master key"
            return [_read_error(connection_id, request, _EBADREQ, message)]
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if not fence or ledger_id in self._tombstones:
                return [_read_error(connection_id, request, _ENOLEDGER, "no such ledger")]
            assert master_key is not None
            if self._storage_failed:
                return [_read_error(connection_id, request, _EIO, _STORAGE_FAILED)]
            # As in BookKeeper, fencing a ledger this bookie never saw creates
            # it fenced: an old writer's first add arriving later must be
            # refused, or it could reach the ack quorum behind the recovery.
            self._ledgers[ledger_id] = _Ledger(master_key, True, LAC_NONE, None)
            return [
                SetMasterKey(ledger_id, master_key),
                Fence(ledger_id),
                ReadEntry(connection_id, request_id, ledger_id, entry_id, True),
            ]
        if fence:
            if master_key != ledger.master_key:
                return [_read_error(connection_id, request, _EUA, "master key does not match")]
            if self._storage_failed:
                return [_read_error(connection_id, request, _EIO, _STORAGE_FAILED)]
            # Already fenced: the fence may still be waiting for its sync, so
            # this read waits for the sync too rather than answer early.
            effects: list[Effect] = []
            if not ledger.fenced:
                ledger.fenced = True
                effects.append(Fence(ledger_id))
            effects.append(ReadEntry(connection_id, request_id, ledger_id, entry_id, True))
            return effects
        if previous_lac is None or ledger.lac > previous_lac:
            return [ReadEntry(connection_id, request_id, ledger_id, entry_id, False)]
        assert timeout_ms is not None
        if timeout_ms == 0:
            return [Reply(connection_id, _poll_timeout_response(request, ledger.lac))]
        if self._waiter_count >= self._waiters_max:
            message = f"{self._waiter_count} long polls already parked"
            return [_read_error(connection_id, request, _ETOOMANYREQUESTS, message)]
        return [self._park(ledger, connection_id, request, previous_lac, now_ms + timeout_ms)]

    def _read_lac(self, request: ReadLacRequest, connection_id: int) -> list[Effect]:
        request_id, ledger_id = request
        if ledger_id not in self._ledgers:
            response = ReadLacResponse(request_id, _ENOLEDGER, "no such ledger", ledger_id)
            return [Reply(connection_id, response)]
        return [ReadLastEntry(connection_id, request_id, ledger_id)]

    def _write_lac(self, request: WriteLacRequest, connection_id: int) -> list[Effect]:
        request_id, ledger_id, master_key, lac, packet = request
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._tombstones:
                return [
                    _write_lac_error(connection_id, request, _EFENCED, "ledger fenced and deleted")
                ]
            return [_write_lac_error(connection_id, request, _ENOLEDGER, "no such ledger")]
        if master_key != ledger.master_key:
            return [_write_lac_error(connection_id, request, _EUA, "master key does not match")]
        if self.read_only:
            return [_write_lac_error(connection_id, request, _EREADONLY, "bookie is read-only")]
        if self._storage_failed:
            return [_write_lac_error(connection_id, request, _EIO, _STORAGE_FAILED)]
        ledger.explicit_lac_packet = packet
        effects: list[Effect] = [
            StoreExplicitLac(ledger_id, lac, packet),
            ReplyWhenSynced(connection_id, WriteLacResponse(request_id, _EOK, None, ledger_id)),
        ]
        if lac > ledger.lac:
            ledger.lac = lac
            if ledger.waiters:
                self._wake(ledger, ledger_id, effects)
        return effects

    def _ledger_state(self, request: LedgerStateRequest) -> LedgerStateResponse:
        # From memory, answered at once: the fenced flag is set in memory when a
        # fence is processed, before it is journaled, so a fence that a
        # recoverer has been told about is always visible here.
        request_id, ledger_id = request
        ledger = self._ledgers.get(ledger_id)
        if ledger is None:
            if ledger_id in self._tombstones:
                return LedgerStateResponse(request_id, _EOK, None, ledger_id, True, LAC_NONE)
            return LedgerStateResponse(request_id, _ENOLEDGER, "no such ledger", ledger_id)
        return LedgerStateResponse(request_id, _EOK, None, ledger_id, ledger.fenced, ledger.lac)

    def _identify(self, request: IdentifyRequest) -> IdentifyResponse:
        identity = self._identity
        if identity is None:
            return IdentifyResponse(request.request_id, _EOK, None)
        return IdentifyResponse(
            request.request_id, _EOK, None, identity.bookie_id, identity.instance_id
        )

    def _list_entries(self, request: ListEntriesRequest, connection_id: int) -> list[Effect]:
        request_id, ledger_id = request
        if ledger_id not in self._ledgers:
            response = ListEntriesResponse(request_id, _ENOLEDGER, "no such ledger", ledger_id)
            return [Reply(connection_id, response)]
        return [ListEntries(connection_id, request_id, ledger_id)]

    # --- long polls ---------------------------------------------------------------------------

    def _park(
        self,
        ledger: _Ledger,
        connection_id: int,
        request: ReadRequest,
        previous_lac: int,
        deadline_ms: int,
    ) -> Parked:
        sequence = next(self._sequence)
        parked = _ParkedRead(sequence, connection_id, request, previous_lac)
        ledger.waiters[sequence] = parked
        self._waiter_count += 1
        heapq.heappush(self._deadlines, (deadline_ms, sequence, parked))
        return Parked(deadline_ms)

    def _wake(self, ledger: _Ledger, ledger_id: int, effects: list[Effect]) -> None:
        """Answer every parked READ of the ledger whose `previous_lac` the LAC passed."""
        lac = ledger.lac
        woken = [p for p in ledger.waiters.values() if lac > p.previous_lac]
        for parked in woken:
            self._unpark(ledger, parked)
            request = parked.request
            effects.append(
                ReadEntry(
                    parked.connection_id, request.request_id, ledger_id, request.entry_id, False
                )
            )
        self._compact_deadlines()

    def _unpark(self, ledger: _Ledger, parked: _ParkedRead) -> None:
        assert not parked.done
        parked.done = True
        del ledger.waiters[parked.sequence]
        self._waiter_count -= 1
        assert self._waiter_count >= 0

    def expire(self, now_ms: int) -> list[Effect]:
        """Answer every parked READ whose deadline has come: EOK, no packet, the current LAC."""
        effects: list[Effect] = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_ms:
            _, _, parked = heapq.heappop(deadlines)
            if parked.done:
                continue
            ledger = self._ledgers[parked.request.ledger_id]
            self._unpark(ledger, parked)
            response = _poll_timeout_response(parked.request, ledger.lac)
            effects.append(Reply(parked.connection_id, response))
        self._compact_deadlines()
        return effects

    def next_deadline_ms(self) -> int | None:
        """When `expire` next has something to do, or None while nothing is parked."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][2].done:
            heapq.heappop(deadlines)
        return deadlines[0][0] if deadlines else None

    def _compact_deadlines(self) -> None:
        # Answered reads leave stale heap items behind; rebuilding once they
        # outnumber the live ones keeps the heap within twice the waiter bound.
        if len(self._deadlines) > 2 * self._waiter_count + 64:
            self._deadlines = [item for item in self._deadlines if not item[2].done]
            heapq.heapify(self._deadlines)

    def drop_connection(self, connection_id: int) -> None:
        """Forget the parked READs and the principal of a closed connection."""
        self._principals.pop(connection_id, None)
        # The deadline heap holds every parked READ, so scanning it is bounded
        # by the waiter count rather than by the number of ledgers.
        for _, _, parked in self._deadlines:
            if not parked.done and parked.connection_id == connection_id:
                self._unpark(self._ledgers[parked.request.ledger_id], parked)
        self._compact_deadlines()

    # --- administration -----------------------------------------------------------------------

    def ledger_deleted(self, ledger_id: int) -> list[Effect]:
        """Storage deleted the ledger (garbage collection): forget it, keep a tombstone if
        it was fenced, and answer its parked READs ENOLEDGER."""
        ledger = self._ledgers.pop(ledger_id, None)
        if ledger is None:
            return []
        effects: list[Effect] = []
        for parked in list(ledger.waiters.values()):
            self._unpark(ledger, parked)
            effects.append(
                _read_error(parked.connection_id, parked.request, _ENOLEDGER, "ledger deleted")
            )
        if ledger.fenced:
            self._remember_tombstone(ledger_id)
        self._compact_deadlines()
        return effects

    def _remember_tombstone(self, ledger_id: int) -> None:
        tombstones = self._tombstones
        tombstones[ledger_id] = None
        if len(tombstones) > self._tombstones_max:
            del tombstones[next(iter(tombstones))]

    def storage_failed(self) -> None:
        """Storage stopped (see `LedgerStorage.failure`): refuse every mutation from now on."""
        self._storage_failed = True

    def not_applied(
        self, effects: list[Effect], index: int, status: Status, message: str
    ) -> list[Effect]:
        """Storage raised on `effects[index]`, a mutation, instead of applying it.

        Undoes what the handler recorded for that mutation and every later one
        of the list (none of them will be applied), and returns what the shell
        carries out in place of `effects[index:]`: the request's own answer as
        an error with `status` (ETOOMANYREQUESTS when storage was busy, EIO when
        it failed), and any woken long polls as they were.  The LAC a refused
        packet or explicit LAC carried is kept, and so is the explicit-LAC
        packet: they are the writer's statements about entries already
        acknowledged elsewhere, true whether or not this bookie stored them.
        """
        assert status != Status.EOK
        assert isinstance(effects[index], (SetMasterKey, StoreEntry, Fence, StoreExplicitLac))
        replacement: list[Effect] = []
        for effect in effects[index:]:
            if isinstance(effect, SetMasterKey):
                # The ledger was created by this request: nothing else refers to it yet.
                created = self._ledgers.pop(effect.ledger_id)
                assert not created.waiters
            elif isinstance(effect, Fence):
                fenced = self._ledgers.get(effect.ledger_id)
                if fenced is not None:
                    fenced.fenced = False
            elif isinstance(effect, ReplyWhenSynced) or (
                isinstance(effect, ReadEntry) and effect.wait_for_sync
            ):
                error = self.error_reply(effect, status, message)
                replacement.append(Reply(effect.connection_id, error))
            elif not isinstance(effect, (StoreEntry, StoreExplicitLac)):
                replacement.append(effect)
        return replacement

    # --- replies to queries -------------------------------------------------------------------

    def entry_reply(self, query: ReadEntry, entry_id: int, packet: bytes | None) -> ReadResponse:
        """The answer to a `ReadEntry`: the packet of `entry_id`, or ENOENTRY when None.

        `entry_id` is the id actually read (for `ENTRY_ID_LAST`, the highest
        stored one, or -1 when there is none).  Carries the ledger's LAC now.
        """
        assert query.entry_id in (entry_id, ENTRY_ID_LAST)
        ledger = self._ledgers.get(query.ledger_id)
        if ledger is None:
            # Deleted while the read waited for its sync.
            return ReadResponse(
                query.request_id,
                _ENOLEDGER,
                "no such ledger",
                query.ledger_id,
                query.entry_id,
                None,
                LAC_NONE,
            )
        if packet is None:
            return ReadResponse(
                query.request_id,
                _ENOENTRY,
                "no such entry",
                query.ledger_id,
                query.entry_id,
                None,
                ledger.lac,
            )
        return ReadResponse(
            query.request_id, _EOK, None, query.ledger_id, entry_id, packet, ledger.lac
        )

    def read_lac_reply(self, query: ReadLastEntry, last_entry_packet: bytes | None) -> Response:
        """The answer to a `ReadLastEntry`: explicit-LAC packet and last entry packet."""
        ledger = self._ledgers.get(query.ledger_id)
        if ledger is None:
            return ReadLacResponse(query.request_id, _ENOLEDGER, "no such ledger", query.ledger_id)
        return ReadLacResponse(
            query.request_id,
            _EOK,
            None,
            query.ledger_id,
            ledger.explicit_lac_packet,
            last_entry_packet,
        )

    def list_entries_reply(
        self, query: ListEntries, ranges: Iterable[tuple[int, int]]
    ) -> ListEntriesResponse:
        """The answer to a `ListEntries`: the stored entry ids as inclusive ranges."""
        return ListEntriesResponse(
            query.request_id,
            _EOK,
            None,
            query.ledger_id,
            [[first, last] for first, last in ranges],
        )

    def bookie_info_reply(
        self, query: ReportBookieInfo, free_bytes: int, total_bytes: int
    ) -> GetBookieInfoResponse:
        """The answer to a `ReportBookieInfo`, with the read-only flag as it is now."""
        assert 0 <= free_bytes <= total_bytes
        return GetBookieInfoResponse(
            query.request_id, _EOK, None, free_bytes, total_bytes, self.read_only
        )

    def error_reply(self, answer: Deferred, status: Status, message: str) -> Response:
        """The error response for a request whose answer could not be produced.

        The shell uses it when storage fails (EIO) before a `ReplyWhenSynced`
        was released or while it carried out a query, and when it shuts down
        before a sync came.
        """
        assert status != Status.EOK
        code = int(status)
        if isinstance(answer, ReplyWhenSynced):
            response = answer.response
            if isinstance(response, AddResponse):
                return AddResponse(
                    response.request_id, code, message, response.ledger_id, response.entry_id
                )
            assert isinstance(response, WriteLacResponse), response
            return WriteLacResponse(response.request_id, code, message, response.ledger_id)
        if isinstance(answer, ReadEntry):
            return ReadResponse(answer.request_id, code, message, answer.ledger_id, answer.entry_id)
        if isinstance(answer, ReadLastEntry):
            return ReadLacResponse(answer.request_id, code, message, answer.ledger_id)
        if isinstance(answer, ListEntries):
            return ListEntriesResponse(answer.request_id, code, message, answer.ledger_id)
        assert isinstance(answer, ReportBookieInfo), answer
        return GetBookieInfoResponse(answer.request_id, code, message)


# --- response helpers -------------------------------------------------------------------------


def _writes(request: Request) -> bool:
    """Whether `request` needs the write role: an add, an explicit LAC, a fencing read."""
    if isinstance(request, AddRequest | WriteLacRequest):
        return True
    return isinstance(request, ReadRequest) and bool(request.flags & READ_FLAG_FENCE)


def _add_error(connection_id: int, request: AddRequest, status: int, message: str) -> Reply:
    response = AddResponse(request.request_id, status, message, request.ledger_id, request.entry_id)
    return Reply(connection_id, response)


def _read_error(connection_id: int, request: ReadRequest, status: int, message: str) -> Reply:
    lac = LAC_NONE if status == _ENOLEDGER else None
    response = ReadResponse(
        request.request_id, status, message, request.ledger_id, request.entry_id, None, lac
    )
    return Reply(connection_id, response)


def _write_lac_error(
    connection_id: int, request: WriteLacRequest, status: int, message: str
) -> Reply:
    return Reply(
        connection_id, WriteLacResponse(request.request_id, status, message, request.ledger_id)
    )


def _poll_timeout_response(request: ReadRequest, lac: int) -> ReadResponse:
    """A long poll that timed out: EOK, no packet, the LAC as it is (not past `previous_lac`)."""
    return ReadResponse(
        request.request_id, _EOK, None, request.ledger_id, request.entry_id, None, lac
    )
