"""The replica's client-facing server: frames in, requests to the replica, answers out.

A `ReplicaServer` accepts connections on an injected `Listener` (TCP by
default; the simulation passes its simulated network's) and serves each with
a `ClientConnection`, which runs two loops on its stream:

* the reader receives up to `limits.socket_receive_bytes` at a time, splits
  frames (`FrameDecoder`), decodes each request (`rsm/core/protocol.py`) and hands
  it to the replica (`Endpoint`), synchronously; after each chunk it calls
  `flush` once, so the leader cuts one batch for everything that chunk
  carried instead of one per command;
* the writer sends every answer queued meanwhile in one `send` (up to
  `limits.socket_send_coalesce_bytes_max`): answers are encoded as they
  arrive (one `answer` call each) and leave together.

What a request gets is the replica's business (`Endpoint`): a non-leader
answers CALL and linearizable QUERY with NotLeader and the leader's address
when it knows it (on a TLS listener beside a plain one, the leader's TLS port);
read_your_writes waits on any replica; stale answers at once.
STATUS is answered here from `Endpoint.status`; TRANSFER_LEADERSHIP runs in a
task of its connection (it waits for the handover).  SNAPSHOT waits in a task of
its connection for the snapshot, which runs in the replica's own task group (it
completes even if the connection closes); a failed snapshot is answered as an
error (`Unavailable` when transient, else `CommandFailed` naming the error's
type), never raised into the replica.

Bad input never crashes anything: a request with a known id but a wrong op,
version or field is answered BAD_REQUEST; bytes that cannot be framed or a
body without a request id close that connection only (`ProtocolViolation`).

Client tokens: a server given a `TokenTable` serves a connection only after an
AUTH request on it presented one of its tokens (docs/security.md, "Client
tokens"); every other request before that, or after an AUTH with an unknown
token, is answered UNAUTHENTICATED and reaches nothing, and a request beyond
the token's role (queries and status: read; commands: write; snapshots and
leadership transfers: admin) is answered FORBIDDEN.  `ClientAuth` counts the
refusals.  Without a table AUTH is answered OK with no principal.

Connections: at most `limits.server_connections_max`, and
`limits.server_connections_per_address_max` from one host; later ones are
closed at once.

Invariants: every request read gets exactly one answer while its connection
lives (a read_your_writes wait is cancelled when its connection closes); at
most `connection_pending_requests_max` requests per connection are being
worked on (more are answered Overloaded); a connection stops reading while
more than `socket_send_coalesce_bytes_max` bytes of answers wait, so a client
that does not read is slowed by TCP instead of growing the replica's memory;
a send that stalls for `socket_send_timeout_ms` closes the connection.
"""

from __future__ import annotations

import logging
from typing import Any, Final, Protocol

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from bookie.core.tokens import Grant, Role, TokenTable
from bookie.errors import BookieError, RemoteProtocolError
from bookie.logs import emit
from bookie.net.accepting import serve_listener
from bookie.net.admission import ConnectionAdmission, peer_host
from bookie.net.connection_errors import CONNECTION_ERRORS
from bookie.net.outbox import Outbox
from bookie.wire.codec import FrameDecoder
from rsm import limits
from rsm.core.protocol import (
    AuthRequest,
    CallRequest,
    Op,
    QueryRequest,
    Request,
    SnapshotRequest,
    StatusRequest,
    TransferRequest,
    UndecodableRequest,
    decode_request,
    encode_error,
    encode_response,
)
from rsm.core.sessions import Outcome
from rsm.errors import (
    CommandFailed,
    Forbidden,
    NotAuthenticated,
    Overloaded,
    ProtocolViolation,
    RsmError,
    RsmStatus,
    StatusError,
    Timeout,
    Unavailable,
)
from rsm.runtime.applier import Answerer

logger = logging.getLogger(__name__)


class Endpoint(Protocol):
    """What the server needs of a replica."""

    def handle_call(self, request: CallRequest, answerer: Answerer) -> None:
        """Answer (now or later) a CALL; never raises."""
        ...

    def handle_query(self, request: QueryRequest, answerer: Answerer) -> int | None:
        """Answer (now or later) a QUERY; a ticket for `cancel_read` when it waits for an index."""
        ...

    def cancel_read(self, ticket: int) -> None: ...

    def flush(self) -> None:
        """A run of requests was handed over: send what they made ready."""
        ...

    def status(self) -> dict[str, Any]: ...

    async def transfer_leadership(self, to: str | None) -> dict[str, Any]: ...

    async def take_snapshot(self) -> dict[str, Any]: ...

    def leader_address(self, *, tls: bool) -> str | None:
        """The address of the leader's TLS or plain port, when known and it has one."""
        ...


class ClientAuth:
    """Whom a server serves (its token table, if any) and how often it refused."""

    def __init__(self, tokens: TokenTable | None) -> None:
        self.tokens = tokens
        self.auth_failures = 0
        """AUTH requests with a token the table does not hold."""
        self.unauthenticated_requests = 0
        """Other requests refused because their connection was not authenticated."""
        self.forbidden_requests = 0
        """Requests refused because their connection's role does not allow them."""


class ReplicaServer:
    """Serves client connections for one replica until its task is cancelled; with `auth`
    holding tokens, only clients that presented one.  `hints_tls`: the TLS listener beside a
    plain one, whose NotLeader answers name the leader's TLS port."""

    def __init__(
        self,
        endpoint: Endpoint,
        listener: anyio.abc.Listener[anyio.abc.ByteStream],
        auth: ClientAuth | None = None,
        *,
        hints_tls: bool = False,
    ):
        self._endpoint = endpoint
        self._listener = listener
        self._auth = ClientAuth(None) if auth is None else auth
        self._hints_tls = hints_tls
        self._admission = ConnectionAdmission(
            total_max=limits.server_connections_max,
            per_address_max=limits.server_connections_per_address_max,
        )
        self._admitted_s: dict[ClientConnection, float] = {}
        """Each open connection and when it was admitted (anyio's clock)."""

    @property
    def connection_count(self) -> int:
        return self._admission.count

    def connections_open_since(self, since_s: float) -> int:
        """Open connections admitted at or before `since_s` (anyio's clock)."""
        return sum(1 for admitted_s in self._admitted_s.values() if admitted_s <= since_s)

    async def serve(self) -> None:
        async with self._listener, anyio.create_task_group() as task_group:
            await serve_listener(self._listener, self._serve, task_group, server="rsm")

    async def _serve(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            host = peer_host(stream.extra(SocketAttribute.remote_address, None))
            if self._admission.admit(host) is not None:
                return
            _stop_eager_reading(stream)
            try:
                connection = ClientConnection(
                    stream, self._endpoint, self._auth, hints_tls=self._hints_tls
                )
                self._admitted_s[connection] = anyio.current_time()
                try:
                    await connection.run()
                finally:
                    del self._admitted_s[connection]
            finally:
                self._admission.release(host)


def _stop_eager_reading(stream: anyio.abc.ByteStream) -> None:
    """Pause the asyncio transport under a stream accepted from anyio's TCP listener.

    anyio resumes a socket stream's transport only while a `receive` waits for
    data, and pauses it after; its `connect_tcp` pauses a new transport, its TCP
    listener does not.  So a client that starts sending at once, and never lets
    a `receive` wait, is read into memory without bound whatever the reader
    does: the backpressure below would never reach TCP.  The transport is not
    public, hence the lookup; a stream without one (the simulated network's) has
    nothing to pause.  A TLS stream's is under its transport stream.
    """
    transport = getattr(getattr(stream, "transport_stream", stream), "_transport", None)
    pause_reading = getattr(transport, "pause_reading", None)
    if pause_reading is not None:
        pause_reading()


class ClientConnection:
    """One client connection (see the module docstring); it is the `Answerer` of its requests."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        endpoint: Endpoint,
        auth: ClientAuth,
        *,
        hints_tls: bool = False,
    ) -> None:
        self._stream = stream
        self._hints_tls = hints_tls
        """Whether NotLeader answers name the leader's TLS port instead of the replica's
        hint (which is of the kind of the replica's main port)."""
        self._endpoint = endpoint
        self._auth = auth
        self._checks = auth.tokens is not None
        """Whether requests are checked against a token (else only AUTH is looked at)."""
        self._grant: Grant | None = None
        """What the token this connection presented grants."""
        self._token_refused = False
        self._outbox = Outbox(
            stream,
            coalesce_bytes_max=limits.socket_send_coalesce_bytes_max,
            send_timeout_ms=limits.socket_send_timeout_ms,
        )
        self._pending = 0
        self._waiting_reads: dict[int, tuple[int, float]] = {}
        """request id -> (ticket, when it gives up: anyio's clock, s) of a read_your_writes
        query waiting for its index."""
        self._expiring = False
        """Whether `_expire_waiting_reads` runs."""
        self._closed = False
        self._task_group: anyio.abc.TaskGroup | None = None

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                task_group.start_soon(self._write_loop)
                await self._read_loop()
                task_group.cancel_scope.cancel()
        finally:
            self._closed = True
            for ticket, _ in self._waiting_reads.values():
                self._endpoint.cancel_read(ticket)
            self._waiting_reads.clear()

    # --- answers ------------------------------------------------------------------------------

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        if self._closed:
            return
        self._pending -= 1
        if op == Op.QUERY:
            self._waiting_reads.pop(request_id, None)
        if self._hints_tls and outcome.status == RsmStatus.NOT_LEADER:
            outcome = outcome._replace(detail=self._endpoint.leader_address(tls=True))
        frame = encode_response(op, request_id, outcome, index)
        self._send(frame)

    async def _expire_waiting_reads(self) -> None:
        """Answer `Timeout` to each read that waited `limits.waiting_read_ms_max` for its
        index: its client gave up long ago (a deadline is shorter), and a read waiting for
        an index that never comes (a bogus `min_index`) must not hold a waiter for good."""
        waiting = self._waiting_reads
        while waiting:
            await anyio.sleep(limits.waiting_read_check_interval_ms / 1000)
            now_s = anyio.current_time()
            for request_id, (ticket, gives_up_s) in list(waiting.items()):
                if gives_up_s <= now_s:
                    self._endpoint.cancel_read(ticket)
                    error = Timeout(
                        f"index not applied here within {limits.waiting_read_ms_max} ms"
                    )
                    self.answer(Op.QUERY, request_id, Outcome.failure(error), 0)
        self._expiring = False

    def _send(self, frame: bytes) -> None:
        self._outbox.put(frame)

    def _refuse(self, op: int, request_id: int, error: StatusError) -> None:
        self._send(encode_error(op, request_id, error))

    # --- loops --------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(limits.frame_bytes_max)
        stream = self._stream
        endpoint = self._endpoint
        outbox = self._outbox
        try:
            while True:
                # No timeout: an idle client connection is healthy.
                data = await stream.receive(limits.socket_receive_bytes)
                bodies = decoder.feed(data)
                for body in bodies:
                    if outbox.backlogged:
                        endpoint.flush()
                        await outbox.wait_drained()
                    self._dispatch(body)
                if bodies:
                    endpoint.flush()
        except CONNECTION_ERRORS:
            return
        except (RemoteProtocolError, ProtocolViolation) as error:
            emit(logger, logging.INFO, "rsm.bad_client", error=str(error))

    def _dispatch(self, body: bytes) -> None:
        try:
            request = decode_request(body)
        except UndecodableRequest as error:
            self._send(error.response())
            return
        endpoint = self._endpoint
        request_id = request.request_id
        if (self._checks or type(request) is AuthRequest) and self._refused(request):
            return
        if self._pending >= limits.connection_pending_requests_max:
            op = _OPS[type(request)]
            self._refuse(op, request_id, Overloaded(f"{self._pending} requests pending"))
            return
        self._pending += 1
        if type(request) is CallRequest:
            endpoint.handle_call(request, self)
        elif type(request) is QueryRequest:
            ticket = endpoint.handle_query(request, self)
            if ticket is not None:
                gives_up_s = anyio.current_time() + limits.waiting_read_ms_max / 1000
                self._waiting_reads[request_id] = (ticket, gives_up_s)
                if not self._expiring:
                    self._expiring = True
                    task_group = self._task_group
                    assert task_group is not None
                    task_group.start_soon(self._expire_waiting_reads)
        elif type(request) is StatusRequest:
            self.answer(Op.STATUS, request_id, Outcome(RsmStatus.OK, endpoint.status()), 0)
        elif type(request) is SnapshotRequest:
            task_group = self._task_group
            assert task_group is not None
            task_group.start_soon(self._snapshot, request)
        else:
            assert type(request) is TransferRequest
            task_group = self._task_group
            assert task_group is not None
            task_group.start_soon(self._transfer, request)

    def _refused(self, request: Request) -> bool:
        """With tokens: answer an AUTH, or refuse a request its connection may not make (not
        authenticated, or beyond its token's role); False to serve the request."""
        auth = self._auth
        tokens = auth.tokens
        if type(request) is AuthRequest:
            self._authenticate(request, tokens)
            return True
        if tokens is None:
            return False
        grant = self._grant
        error: StatusError
        if grant is None:
            auth.unauthenticated_requests += 1
            error = NotAuthenticated(
                "the client token this connection presented was refused"
                if self._token_refused
                else "this replica requires a client token: present it in AUTH first"
            )
        elif grant.role < _ROLE_NEEDED[type(request)]:
            auth.forbidden_requests += 1
            needed = _ROLE_NEEDED[type(request)].name.lower()
            error = Forbidden(f"{grant.principal} may not do this: it takes the {needed} role")
        else:
            return False
        self._refuse(_OPS[type(request)], request.request_id, error)
        return True

    def _authenticate(self, request: AuthRequest, tokens: TokenTable | None) -> None:
        grant = None if tokens is None else tokens.grant_of(request.token)
        if tokens is not None and grant is None:
            self._auth.auth_failures += 1
            self._grant = None
            self._token_refused = True
            self._refuse(Op.AUTH, request.request_id, NotAuthenticated("unknown client token"))
            return
        self._grant = grant
        self._token_refused = False
        principal = None if grant is None else grant.principal
        outcome = Outcome(RsmStatus.OK, principal)
        self._send(encode_response(Op.AUTH, request.request_id, outcome, 0))

    async def _transfer(self, request: TransferRequest) -> None:
        try:
            result = await self._endpoint.transfer_leadership(request.target)
        except StatusError as error:
            self.answer(Op.TRANSFER_LEADERSHIP, request.request_id, Outcome.failure(error), 0)
        else:
            outcome = Outcome(RsmStatus.OK, result)
            self.answer(Op.TRANSFER_LEADERSHIP, request.request_id, outcome, 0)

    async def _snapshot(self, request: SnapshotRequest) -> None:
        try:
            result = await self._endpoint.take_snapshot()
        except (RsmError, BookieError) as error:
            self.answer(Op.SNAPSHOT, request.request_id, Outcome.failure(_snapshot_error(error)), 0)
        else:
            self.answer(Op.SNAPSHOT, request.request_id, Outcome(RsmStatus.OK, result), 0)

    async def _write_loop(self) -> None:
        try:
            await self._outbox.run()
        except CONNECTION_ERRORS:
            task_group = self._task_group
            assert task_group is not None
            task_group.cancel_scope.cancel()


def _snapshot_error(error: RsmError | BookieError) -> StatusError:
    """What a client is answered when the snapshot it asked for failed: a transient cause
    (bookies or ZooKeeper unreachable) as `Unavailable`, any other (the application's
    `snapshot()` raised, a state the codec refuses) as `CommandFailed` with the error's type
    name (as a command's failure is); both with its text.  The replica goes on either way."""
    if isinstance(error, StatusError):
        return error
    if error.retryable:
        return Unavailable(f"the snapshot failed: {type(error).__name__}: {error}")
    return CommandFailed(str(error), type(error).__name__)


_OPS: Final = {
    CallRequest: Op.CALL,
    QueryRequest: Op.QUERY,
    StatusRequest: Op.STATUS,
    TransferRequest: Op.TRANSFER_LEADERSHIP,
    SnapshotRequest: Op.SNAPSHOT,
    AuthRequest: Op.AUTH,
}

_ROLE_NEEDED: Final = {
    QueryRequest: Role.READ,
    StatusRequest: Role.READ,
    CallRequest: Role.WRITE,
    TransferRequest: Role.ADMIN,
    SnapshotRequest: Role.ADMIN,
}
