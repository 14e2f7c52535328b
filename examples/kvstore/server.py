"""The RESP server shell: client connections in, commands to the router, replies out, in order.

A `RespServer` accepts connections on an injected `Listener` (TCP in a
process, the simulated network in the simulation) and serves each with a
`RespConnection`, which runs two loops on its stream:

* the reader receives up to `limits.read_bytes_max` bytes at a time (never
  more than the parser has room for), feeds the parser (`kvstore.resp`) and
  hands every complete command to `kvstore.dispatch.plan`, then carries out
  the action: an immediate reply, or a write, read or transaction through
  the `Router`; after each chunk it calls `Router.flush` once, so the leader
  cuts one batch for everything that chunk carried;
* the writer sends the replies that are ready, in request order, encoded
  and joined into one send (up to `limits.send_bytes_max`), so a pipeline's
  replies leave together.

Replies are owed in request order: each command takes the next *ticket*;
replies that arrive out of order (a stale read before an earlier write's
outcome) wait for the earlier ones.  A reply is encoded in the protocol
version (RESP2 or RESP3) the connection had when its command was read, so a
pipelined `HELLO 3` changes only the replies after it.

Bounds.  A connection owes at most `limits.connection_replies_max` replies:
at the bound the reader stops reading until the writer has sent some, so a
client that sends without reading is slowed by TCP, and a connection's
writes in flight stay within its session's window (`kvstore.session`).  The
parser holds at most `limits.buffered_bytes_max` bytes.  A send that
stalls for `limits.send_timeout_ms` closes the connection: the server's
watchdog looks at every connection's send in progress a few times per
timeout, rather than each send running under its own `fail_after`, whose
cancel scope costs more than the rest of a GET (tens of microseconds per
reply).  WATCH waits for its read before the next command is dispatched
(EXEC needs its position).

Ends.  QUIT, and a protocol error (garbage: the parser's `ProtocolError`),
stop the reading; the replies owed are sent, the protocol error's last,
then the connection is closed.  Other connections are not affected: one
connection's failure ends its own task only.  A client that closes its end
closes the connection at once (replies still owed are dropped; commands
already handed to the router complete anyway).  Over
`limits.connections_max` connections, a new one is answered "ERR max number
of clients reached" and closed, as Redis does (`ServerConfig.connections_max`).

Invariants: every ticket is answered exactly once while the connection
lives; the writer never sends a reply before an earlier one; the reader
never has more than `connection_replies_max` replies owed.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import anyio.abc

from bookie.logs import emit
from kvstore import limits
from kvstore.connection import ClientState, ServerStatus
from kvstore.dispatch import Answer, Execute, Read, WatchRead, Write, failure_reply, finish, plan
from kvstore.errors import ProtocolError
from kvstore.resp import Reply, RespParser, encode_reply
from kvstore.router import Lane, Receiver
from rsm.core.sessions import Outcome

logger = logging.getLogger(__name__)

_CONNECTION_ERRORS: Final = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
)
_TOO_MANY_CLIENTS: Final = b"-ERR max number of clients reached\r\n"
_WATCHDOG_LOOKS_PER_TIMEOUT: Final = 4


class _Pending:
    """Marks a reply not yet known, and the protocol version it will be encoded in."""

    __slots__ = ("resp3",)

    def __init__(self, resp3: bool) -> None:
        self.resp3 = resp3


_PENDING_RESP2: Final = _Pending(False)
_PENDING_RESP3: Final = _Pending(True)


class Router(Protocol):
    """What a connection needs of the router (`kvstore.router.Router` is one)."""

    def lane(self) -> Lane: ...

    def call(
        self, lane: Lane, name: str, args: list[Any], receiver: Receiver, ticket: int
    ) -> None: ...

    def read(
        self,
        lane: Lane,
        name: str,
        args: list[Any],
        receiver: Receiver,
        ticket: int,
        *,
        stale: bool,
    ) -> None: ...

    def flush(self) -> None: ...

    def close_lane(self, lane: Lane) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """What INFO says about the replica beside the server."""

    role: str
    leader_address: str | None
    epoch: int
    applied_index: int
    caught_up: bool
    keys: int
    keys_with_ttl: int


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A server's knobs: the parser's bounds, and what CONFIG GET shows."""

    port: int = 0
    """The port clients connect to (for INFO)."""
    request_bytes_max: int = limits.request_bytes_max_default
    bulk_bytes_max: int = limits.bulk_bytes_max_default
    connections_max: int = limits.connections_max
    settings: Mapping[str, str] | None = None
    """Extra CONFIG GET settings (name -> value), besides the server's own."""


class RespServer:
    """Serves RESP connections until its task is cancelled (see the module docstring)."""

    def __init__(
        self,
        listener: anyio.abc.Listener[anyio.abc.ByteStream],
        router: Router,
        *,
        replica_info: Callable[[], ReplicaInfo],
        config: ServerConfig | None = None,
    ) -> None:
        self._listener = listener
        self.router = router
        self._replica_info = replica_info
        self.config = config or ServerConfig()
        self._settings = {
            "proto-max-bulk-len": str(self.config.bulk_bytes_max),
            "client-query-buffer-limit": str(self.config.request_bytes_max),
            "maxclients": str(self.config.connections_max),
            "databases": "1",
            "save": "",
            "appendonly": "no",
            **(self.config.settings or {}),
        }
        self._connections: set[RespConnection] = set()
        self._next_client_id = 1
        self._started_s = time.monotonic()

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def serve(self) -> None:
        async with self._listener, anyio.create_task_group() as task_group:
            task_group.start_soon(self._watchdog)
            await self._listener.serve(self._serve, task_group)

    async def _serve(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            if len(self._connections) >= self.config.connections_max:
                await _refuse(stream)
                return
            connection = RespConnection(stream, self, self._next_client_id)
            self._next_client_id += 1
            self._connections.add(connection)
            try:
                await connection.run()
            finally:
                self._connections.discard(connection)

    async def _watchdog(self) -> None:
        """Close every connection whose send has not completed within the send timeout."""
        timeout_s = limits.send_timeout_ms / 1000
        while True:
            await anyio.sleep(timeout_s / _WATCHDOG_LOOKS_PER_TIMEOUT)
            now_s = anyio.current_time()
            for connection in list(self._connections):
                connection.close_if_stalled(now_s - timeout_s)

    # --- the connections' ServerView ----------------------------------------------------------

    def clock_us(self) -> int:
        return time.time_ns() // 1000

    def status(self) -> ServerStatus:
        info = self._replica_info()
        return ServerStatus(
            process_id=os.getpid(),
            tcp_port=self.config.port,
            uptime_ms=round((time.monotonic() - self._started_s) * 1000),
            clock_us=self.clock_us(),
            connected_clients=len(self._connections),
            replica_role=info.role,
            leader_address=info.leader_address,
            epoch=info.epoch,
            applied_index=info.applied_index,
            caught_up=info.caught_up,
            keys=info.keys,
            keys_with_ttl=info.keys_with_ttl,
        )

    def config_settings(self) -> Mapping[str, str]:
        return self._settings


class _View:
    """The `ServerView` a connection's commands see (the server's, under Protocol's names)."""

    __slots__ = ("_server",)

    def __init__(self, server: RespServer) -> None:
        self._server = server

    def clock_us(self) -> int:
        return self._server.clock_us()

    def status(self) -> ServerStatus:
        return self._server.status()

    def config(self) -> Mapping[str, str]:
        return self._server.config_settings()


async def _refuse(stream: anyio.abc.ByteStream) -> None:
    try:
        with anyio.fail_after(limits.send_timeout_ms / 1000):
            await stream.send(_TOO_MANY_CLIENTS)
    except _CONNECTION_ERRORS:
        pass


class RespConnection:
    """One client connection (see the module docstring); the `Receiver` of its commands."""

    def __init__(self, stream: anyio.abc.ByteStream, server: RespServer, client_id: int) -> None:
        self._stream = stream
        self._server = server
        self._router = server.router
        self._view = _View(server)
        self.client = ClientState(client_id)
        self._lane = self._router.lane()
        self._replies: deque[bytes | _Pending] = deque()
        """What is owed, in order: encoded replies, or `_Pending` for those not known yet."""
        self._first_ticket = 0
        """The ticket of `_replies[0]`."""
        self._actions: dict[int, WatchRead | Execute] = {}
        """Tickets whose reply needs their action to be built (see `dispatch.finish`)."""
        self._watch_ticket: int | None = None
        """The WATCH whose read must be answered before the next command is dispatched."""
        self._writer_wakeup: anyio.Event | None = None
        self._reader_wakeup: anyio.Event | None = None
        self._draining = False
        """No more commands: send what is owed, then close."""
        self._closed = False
        self._sending_since_s: float | None = None
        """When the send in progress started (None: no send in progress), for the watchdog."""
        self._scope: anyio.CancelScope | None = None

    def close_if_stalled(self, started_before_s: float) -> None:
        """The watchdog's check: a send that started before `started_before_s` is stuck."""
        since_s = self._sending_since_s
        if since_s is not None and since_s < started_before_s and self._scope is not None:
            emit(logger, logging.INFO, "kvstore.send_timeout", client_id=self.client.client_id)
            self._scope.cancel()

    async def run(self) -> None:
        try:
            async with anyio.create_task_group() as task_group:
                self._scope = task_group.cancel_scope
                task_group.start_soon(self._write_loop, task_group)
                try:
                    await self._read_loop()
                except _CONNECTION_ERRORS:
                    task_group.cancel_scope.cancel()
                    return
                self._draining = True
                self._wake_writer()
        finally:
            self._closed = True
            self._router.close_lane(self._lane)

    # --- replies ------------------------------------------------------------------------------

    def deliver(self, ticket: int, outcome: Outcome, index: int) -> None:
        """The router's answer for `ticket` (see `kvstore.router.Receiver`)."""
        if self._closed:
            return
        position = ticket - self._first_ticket
        marker = self._replies[position]
        assert isinstance(marker, _Pending), "a ticket is answered once"
        action = self._actions.pop(ticket, None)
        reply: Reply
        if action is not None:
            reply = finish(action, outcome, self.client)
            if ticket == self._watch_ticket:
                self._watch_ticket = None
                self._wake_reader()
        elif outcome.ok:
            reply = outcome.value
        else:
            reply = failure_reply(outcome)
        out = bytearray()
        encode_reply(reply, out, marker.resp3)
        self._replies[position] = bytes(out)
        if position == 0:
            self._wake_writer()

    def _owe(self) -> int:
        """A ticket for a reply to come, in the current protocol version."""
        ticket = self._first_ticket + len(self._replies)
        self._replies.append(_PENDING_RESP3 if self.client.resp3 else _PENDING_RESP2)
        return ticket

    def _reply_now(self, reply: Reply) -> None:
        out = bytearray()
        encode_reply(reply, out, self.client.resp3)
        self._replies.append(bytes(out))
        if len(self._replies) == 1:
            self._wake_writer()

    def _wake_writer(self) -> None:
        wakeup = self._writer_wakeup
        if wakeup is not None:
            self._writer_wakeup = None
            wakeup.set()

    def _wake_reader(self) -> None:
        wakeup = self._reader_wakeup
        if wakeup is not None:
            self._reader_wakeup = None
            wakeup.set()

    # --- reading ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        """Read and dispatch until QUIT or a protocol error (returns) or the client leaves
        (raises one of the connection errors)."""
        config = self._server.config
        parser = RespParser(
            request_bytes_max=config.request_bytes_max, bulk_bytes_max=config.bulk_bytes_max
        )
        stream = self._stream
        router = self._router
        client = self.client
        while True:
            data = await stream.receive(min(limits.read_bytes_max, parser.room_bytes))
            parser.feed(data)
            try:
                while (args := parser.next_command()) is not None:
                    self._dispatch(args)
                    if client.close_after_reply:
                        return
                    if (
                        self._watch_ticket is not None
                        or len(self._replies) >= limits.connection_replies_max
                    ):
                        router.flush()
                        await self._wait_for_room()
            except ProtocolError as error:
                emit(logger, logging.INFO, "kvstore.bad_client", error=error.message)
                self._reply_now(error)
                return
            finally:
                router.flush()

    async def _wait_for_room(self) -> None:
        """Wait until WATCH's read is answered and fewer replies than the bound are owed."""
        while self._watch_ticket is not None or len(self._replies) >= limits.connection_replies_max:
            wakeup = self._reader_wakeup = anyio.Event()
            await wakeup.wait()

    def _dispatch(self, args: list[bytes]) -> None:
        action = plan(args, self.client, self._view)
        kind = type(action)
        if kind is Answer:
            assert isinstance(action, Answer)
            self._reply_now(action.reply)
            return
        ticket = self._owe()
        router = self._router
        lane = self._lane
        if kind is Write:
            assert isinstance(action, Write)
            router.call(lane, action.name, action.args, self, ticket)
        elif kind is Read:
            assert isinstance(action, Read)
            router.read(lane, action.name, action.args, self, ticket, stale=action.stale)
        elif kind is WatchRead:
            assert isinstance(action, WatchRead)
            self._actions[ticket] = action
            self._watch_ticket = ticket
            router.read(lane, "position", [], self, ticket, stale=action.stale)
        else:
            assert isinstance(action, Execute)
            self._actions[ticket] = action
            router.call(lane, "exec", [action.watched, action.calls], self, ticket)

    # --- writing ------------------------------------------------------------------------------

    async def _write_loop(self, task_group: anyio.abc.TaskGroup) -> None:
        stream = self._stream
        replies = self._replies
        try:
            while True:
                if not replies or type(replies[0]) is _Pending:
                    if self._draining and not replies:
                        break
                    wakeup = self._writer_wakeup = anyio.Event()
                    await wakeup.wait()
                    continue
                chunks: list[bytes] = []
                size = 0
                while replies and size < limits.send_bytes_max:
                    reply = replies[0]
                    if type(reply) is _Pending:
                        break
                    assert isinstance(reply, bytes)
                    chunks.append(reply)
                    size += len(reply)
                    replies.popleft()
                self._first_ticket += len(chunks)
                self._wake_reader()
                self._sending_since_s = anyio.current_time()
                await stream.send(b"".join(chunks) if len(chunks) > 1 else chunks[0])
                self._sending_since_s = None
        except _CONNECTION_ERRORS:
            pass
        task_group.cancel_scope.cancel()
