"""The bookie server's request path: frame bodies in, storage calls and response frames out.

`RequestProcessor` sits between the connections (`bookie/server/connection.py`)
and the pure request logic (`bookie/core/bookie_handler.py`).  For each frame
body it decodes the request, applies back-pressure, asks the handler for
effects and carries them out: storage mutations, storage reads, responses.  It
makes no protocol decision of its own; every response is built by the handler
(or is the codec's answer to an undecodable request, or ETOOMANYREQUESTS).

Acknowledgement after sync.  An answer that must wait for durability
(`ReplyWhenSynced`, or a `ReadEntry` with `wait_for_sync`) is queued on its
connection as `(ticket, answer, request_bytes)`, where `ticket` is the ticket of
the last mutation applied so far.  Tickets only grow, so each connection's
queue is in ticket order.  ONE storage sync listener releases, on every
connection, the queued answers whose ticket is now synced: no task, event or
future per add.  When storage fails, every queued answer is answered EIO and
the handler refuses every later mutation.

Reads woken by a write wait for it too.  An ADD or WRITE_LAC that raises a
ledger's LAC also answers the long polls it wakes (`ReadEntry` effects after
the mutation).  Nothing requires those reads to wait (the entry they read is
older, and durable already), but they are queued behind the write's sync like
its own answer: the write path's sync and acknowledgement go first, and the
work the reads start (reading the entry, sending it, the tailing reader's
apply, on a machine they share) comes after, instead of delaying the sync a
writer waits for (docs/protocol.md, section 8).

Back-pressure.  A request is *pending* while its answer waits for a sync.  A
request that arrives while its connection has
`pending_requests_per_connection_max` pending, or the bookie has
`pending_requests_total_max` pending or `pending_bytes_total_max` bytes of
pending requests, is answered ETOOMANYREQUESTS at once and does nothing.  When
storage refuses a mutation because its own buffer is full (`StorageBusy`) the
request is answered ETOOMANYREQUESTS too, and the handler undoes what it
recorded.  Long polls are bounded separately by the handler.

Invariants:

* Every decoded request is answered exactly once, unless its connection closes
  first (then its answer is dropped).
* A `ReplyWhenSynced` is never sent before `synced_ticket` reaches the ticket of
  every mutation applied before it.
* The pending counters equal the sums over the connections' sync queues.

Metrics (exported by bookie/server/metrics.py): the latency of every add
answered after its sync, from its request's decoding to its release, by result
(`add_seconds`); of every read answered at once, by result (`read_seconds`;
long polls wait by design and are left out); and the requests refused by
back-pressure (`rejected_requests`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

import anyio

from bookie import limits
from bookie.core.bookie_handler import (
    BookieHandler,
    Deferred,
    Effect,
    Fence,
    ListEntries,
    Parked,
    ReadEntry,
    ReadLastEntry,
    Reply,
    ReplyWhenSynced,
    ReportBookieInfo,
    SetMasterKey,
    StoreEntry,
    StoreExplicitLac,
)
from bookie.errors import Status, StorageBusy, StorageError
from bookie.metrics import Histogram
from bookie.storage.api import LedgerStorage
from bookie.wire.codec import (
    UndecodableRequest,
    decode_request,
    encode_error_response,
    encode_response,
)
from bookie.wire.messages import ENTRY_ID_LAST, OP_OF_REQUEST, AddResponse, Response

_ETOOMANYREQUESTS: Final = Status.ETOOMANYREQUESTS
_EOK: Final = Status.EOK

DiskSpace = Callable[[], tuple[int, int]]
"""Returns (free_bytes, total_bytes) of the bookie's data disks; may raise OSError."""

PendingItem = tuple[int, Deferred, int, float]
"""(ticket to wait for, the answer, bytes of the request, its arrival on the monotonic clock
in seconds) queued on a connection."""


class Connection(Protocol):
    """What the processor needs of a client connection."""

    @property
    def connection_id(self) -> int: ...

    @property
    def pending(self) -> deque[PendingItem]:
        """Answers waiting for a sync, in ticket order; the processor owns its contents."""
        ...

    def send(self, frame: bytes) -> None:
        """Queue one response frame for sending."""
        ...


class RequestProcessor:
    """Carries out the handler's effects against storage for every connection."""

    def __init__(
        self,
        handler: BookieHandler,
        storage: LedgerStorage,
        disk_space: DiskSpace,
        *,
        on_parked: Callable[[int], None],
        pending_requests_per_connection_max: int = limits.pending_requests_per_connection_max,
        pending_requests_total_max: int = limits.pending_requests_total_max,
        pending_bytes_total_max: int = limits.pending_bytes_total_max,
    ) -> None:
        self._handler = handler
        self._storage = storage
        self._disk_space = disk_space
        self._on_parked = on_parked
        self._per_connection_max = pending_requests_per_connection_max
        self._total_max = pending_requests_total_max
        self._bytes_max = pending_bytes_total_max
        self._connections: dict[int, Connection] = {}
        self._waiting: dict[int, Connection] = {}
        """Connections with answers waiting for a sync."""
        self.pending_total = 0
        self.pending_bytes = 0
        self._idle: anyio.Event | None = None
        self._last_ticket = storage.synced_ticket
        self._failed = False
        self._unsubscribe: Callable[[], None] | None = None
        self._arrival_s = 0.0
        """When the request being handled was decoded (monotonic clock, seconds)."""
        self._timing = False
        """Whether reads answered now are timed: only while a request is handled (not
        long polls answered at their deadline or woken by a write)."""
        self.add_seconds = {"ok": Histogram(), "error": Histogram()}
        self.read_seconds = {"ok": Histogram(), "error": Histogram()}
        self.rejected_requests = 0

    def start(self) -> None:
        """Start listening to storage syncs (the server starts serving)."""
        assert self._unsubscribe is None
        self._last_ticket = max(self._last_ticket, self._storage.synced_ticket)
        self._unsubscribe = self._storage.add_sync_listener(self._on_synced)

    def close(self) -> None:
        """Stop listening to storage syncs (the server is done with it)."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    # --- connections --------------------------------------------------------------------------

    def connection_opened(self, connection: Connection) -> None:
        assert connection.connection_id not in self._connections
        self._connections[connection.connection_id] = connection

    def connection_closed(self, connection: Connection) -> None:
        """Forget the connection; answers still waiting for it are dropped."""
        connection_id = connection.connection_id
        del self._connections[connection_id]
        self._waiting.pop(connection_id, None)
        self._handler.drop_connection(connection_id)
        self._forget_pending(connection.pending)
        self._check_idle()

    # --- requests -----------------------------------------------------------------------------

    def process(self, connection: Connection, body: bytes, now: int) -> None:
        """Handle one frame body.  Raises `RemoteProtocolError` for junk: close the connection."""
        self._arrival_s = time.monotonic()
        try:
            request = decode_request(body)
        except UndecodableRequest as error:
            connection.send(
                encode_error_response(error.request_id, error.op, error.status, str(error))
            )
            return
        if (
            len(connection.pending) >= self._per_connection_max
            or self.pending_total >= self._total_max
            or self.pending_bytes >= self._bytes_max
        ):
            message = (
                f"{len(connection.pending)} requests pending on this connection, "
                f"{self.pending_total} ({self.pending_bytes} bytes) on this bookie"
            )
            self.rejected_requests += 1
            op = OP_OF_REQUEST[type(request)]
            connection.send(encode_error_response(request[0], op, _ETOOMANYREQUESTS, message))
            return
        self._timing = True
        try:
            effects = self._handler.handle(request, now, connection.connection_id)
            self.carry_out(effects, len(body))
        finally:
            self._timing = False

    def carry_out(self, effects: list[Effect], request_bytes: int) -> None:
        """Carry out effects in order (`request_bytes` is charged to a deferred answer)."""
        storage = self._storage
        index = 0
        mutated = False  # a mutation of these effects is applied: reads after it wait for it
        while index < len(effects):
            effect = effects[index]
            try:
                # Most frequent first: every add is a StoreEntry and a ReplyWhenSynced.
                if isinstance(effect, StoreEntry):
                    self._last_ticket = storage.add_entry(
                        effect.ledger_id, effect.entry_id, effect.packet
                    )
                    mutated = True
                elif isinstance(effect, ReplyWhenSynced):
                    self._defer(effect, request_bytes)
                elif isinstance(effect, Reply):
                    self._send(effect.connection_id, effect.response)
                elif isinstance(effect, ReadEntry):
                    if effect.wait_for_sync:
                        self._defer(effect, request_bytes)
                    elif mutated:
                        self._defer(effect, 0)  # a woken long poll (see the module docstring)
                    else:
                        self._answer(effect)
                elif isinstance(effect, SetMasterKey):
                    self._last_ticket = storage.set_master_key(effect.ledger_id, effect.master_key)
                    mutated = True
                elif isinstance(effect, Fence):
                    self._last_ticket = storage.fence(effect.ledger_id)
                    mutated = True
                elif isinstance(effect, StoreExplicitLac):
                    self._last_ticket = storage.set_explicit_lac(
                        effect.ledger_id, effect.lac, effect.packet
                    )
                    mutated = True
                elif isinstance(effect, Parked):
                    self._on_parked(effect.deadline_ms)
                else:
                    self._answer(effect)
            except (StorageBusy, StorageError) as error:
                effects = self._not_applied(effects, index, error)
                index = 0
                continue
            index += 1

    def _not_applied(
        self, effects: list[Effect], index: int, error: StorageBusy | StorageError
    ) -> list[Effect]:
        """Storage raised instead of applying `effects[index]`: what to carry out instead."""
        if isinstance(error, StorageBusy):
            status = Status.ETOOMANYREQUESTS
        else:
            status = Status.EIO
            self._storage_failed()
        return self._handler.not_applied(effects, index, status, str(error))

    def _defer(self, answer: ReplyWhenSynced | ReadEntry, request_bytes: int) -> None:
        connection = self._connections.get(answer.connection_id)
        if connection is None:
            return
        ticket = self._last_ticket
        storage = self._storage
        if ticket <= storage.synced_ticket:
            self._release(connection, answer)
            return
        if self._failed or storage.failure is not None:
            # The sync listener may already have had its last call: queued, this
            # answer could wait forever.
            self._storage_failed()
            error = self._handler.error_reply(answer, Status.EIO, "storage failed")
            connection.send(encode_response(error))
            return
        connection.pending.append((ticket, answer, request_bytes, self._arrival_s))
        self._waiting[answer.connection_id] = connection
        self.pending_total += 1
        self.pending_bytes += request_bytes

    def _send(self, connection_id: int, response: Response) -> None:
        connection = self._connections.get(connection_id)
        if connection is not None:
            connection.send(encode_response(response))

    def _release(self, connection: Connection, answer: Deferred) -> None:
        if type(answer) is ReplyWhenSynced:
            connection.send(encode_response(answer.response))
        else:
            connection.send(encode_response(self._query(answer)))

    def _answer(self, query: Deferred) -> None:
        connection = self._connections.get(query.connection_id)
        if connection is None:
            return
        if type(query) is ReadEntry and self._timing:
            response = self._query(query)
            result = "ok" if response.status == _EOK else "error"
            self.read_seconds[result].observe(time.monotonic() - self._arrival_s)
            connection.send(encode_response(response))
        else:
            self._release(connection, query)

    def _query(self, query: Deferred) -> Response:
        """Run a query against storage (or the disks) and let the handler build the answer."""
        assert not isinstance(query, ReplyWhenSynced)
        storage = self._storage
        handler = self._handler
        try:
            if isinstance(query, ReadEntry):
                entry_id = query.entry_id
                if entry_id == ENTRY_ID_LAST:
                    entry_id = storage.last_entry_id(query.ledger_id)
                packet = storage.read_entry(query.ledger_id, entry_id) if entry_id >= 0 else None
                return handler.entry_reply(query, entry_id, packet)
            if isinstance(query, ReadLastEntry):
                last_entry_id = storage.last_entry_id(query.ledger_id)
                packet = (
                    storage.read_entry(query.ledger_id, last_entry_id)
                    if last_entry_id >= 0
                    else None
                )
                return handler.read_lac_reply(query, packet)
            if isinstance(query, ListEntries):
                return handler.list_entries_reply(query, storage.entry_ranges(query.ledger_id))
            assert isinstance(query, ReportBookieInfo)
            free_bytes, total_bytes = self._disk_space()
            return handler.bookie_info_reply(query, free_bytes, total_bytes)
        except (StorageError, OSError) as error:
            # A record that cannot be read back is EIO, never ENOENTRY: a
            # recovery must not count a lost entry as absent.
            return handler.error_reply(query, Status.EIO, f"{type(error).__name__}: {error}")

    # --- syncs --------------------------------------------------------------------------------

    def _on_synced(self, synced_ticket: int) -> None:
        """The one sync listener: release every queued answer whose ticket is durable."""
        if self._storage.failure is not None:
            self._storage_failed()
            return
        for connection_id, connection in list(self._waiting.items()):
            queue = connection.pending
            now_s = time.monotonic()
            while queue and queue[0][0] <= synced_ticket:
                _, answer, request_bytes, arrival_s = queue.popleft()
                self.pending_total -= 1
                self.pending_bytes -= request_bytes
                if type(answer) is ReplyWhenSynced and type(answer.response) is AddResponse:
                    result = "ok" if answer.response.status == _EOK else "error"
                    self.add_seconds[result].observe(now_s - arrival_s)
                self._release(connection, answer)
            if not queue:
                del self._waiting[connection_id]
        self._check_idle()

    def _storage_failed(self) -> None:
        """Storage stopped: answer every queued answer EIO; refuse mutations from now on."""
        if self._failed:
            return
        self._failed = True
        self._handler.storage_failed()
        failure = self._storage.failure
        message = f"storage failed: {failure}" if failure is not None else "storage failed"
        self.fail_pending(Status.EIO, message)

    def fail_pending(self, status: Status, message: str) -> None:
        """Answer every answer still waiting for a sync with an error (failure, shutdown)."""
        now_s = time.monotonic()
        errors = self.add_seconds["error"]
        for connection in self._waiting.values():
            for _, answer, _, arrival_s in connection.pending:
                if type(answer) is ReplyWhenSynced and type(answer.response) is AddResponse:
                    errors.observe(now_s - arrival_s)
                connection.send(encode_response(self._handler.error_reply(answer, status, message)))
            self._forget_pending(connection.pending)
        self._waiting.clear()
        self._check_idle()

    def _forget_pending(self, queue: deque[PendingItem]) -> None:
        self.pending_total -= len(queue)
        self.pending_bytes -= sum(item[2] for item in queue)
        queue.clear()
        assert self.pending_total >= 0
        assert self.pending_bytes >= 0

    def _check_idle(self) -> None:
        if self.pending_total == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None

    async def wait_idle(self) -> None:
        """Return once no answer waits for a sync."""
        while self.pending_total:
            idle = self._idle = anyio.Event()
            await idle.wait()

    # --- administration -----------------------------------------------------------------------

    def expire(self, now: int) -> None:
        """Answer the long polls whose deadline has passed."""
        self._arrival_s = time.monotonic()
        self.carry_out(self._handler.expire(now), 0)

    def delete_ledger(self, ledger_id: int) -> None:
        """Delete a ledger (garbage collection); raises what `LedgerStorage.delete_ledger` does."""
        self._last_ticket = self._storage.delete_ledger(ledger_id)
        self.carry_out(self._handler.ledger_deleted(ledger_id), 0)
