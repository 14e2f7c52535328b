"""The RESP server shell: client connections in, commands to the router, replies out, in order.

A `RespServer` serves the TCP sockets of an injected anyio `Listener` with
asyncio's protocol interface (anyio runs on asyncio here, with uvloop when
installed): each connection is a `RespConnection`, an `asyncio.Protocol`
whose callbacks run on the event loop, without a task of its own.  The
connections of a second, TLS, listener (`bookie.net.tls.TlsServer`) are the same
protocol after their handshake.  The connections of any other listener (the
seeded simulation's network) are
anyio byte streams: the same protocol runs over each on a
`bookie.net.stream_transport.StreamTransport`, with a reading and a writing task.
Either way:

* `data_received` feeds the parser (`kvstore.protocol.resp`) at most `room_bytes` at a
  time, hands every complete command to `kvstore.connection.dispatch.plan` and carries
  out the action: an immediate reply, or a write, read or transaction
  through the `Router` (which lets the local leader cut its batch once the turn
  of the event loop is over: one batch for everything the turn's chunks carried);
* a chunk that arrives while nothing is owed is answered on the spot for as
  long as each of its commands is known at once (server commands, and reads
  the local leader answers under its read lease, `Router.read_now`), in one
  write of at most about `limits.send_bytes_max`; from the first command that must wait,
  the rest of the chunk goes the way above, in order.  This is a GET's usual
  path on the leader, and it skips the tickets and the reply queue;
* shorter still, a chunk that is exactly one GET (`RespParser.lone_get`), from
  a connection without ACL rules, MULTI or READONLY, skips the parser's and
  the dispatch's layers (a client without pipelining sends just that): it is
  answered from the local leader's store at the time `Router.read_time_ms`
  gives under the read lease (`KVState.value_at`, as the query would), without
  the query's layers either; at a follower it waits for the router's next
  position round without an attempt of its own (`Router.get_after_round`), and
  its value comes back through `deliver_value`.  A chunk that is exactly one
  SET without options (`RespParser.lone_set`) likewise goes to the router's
  `call` without the parser's and the dispatch's layers;
* replies that are ready, in request order, are encoded, joined and written
  to the transport in one call: at the end of a chunk for immediate replies;
  for the router's answers, at once when the answer leaves no reply of the
  connection waiting (a client with one command in flight gets its reply
  while the leader is still answering the rest of the batch, so its next
  command overlaps that work), else once per event-loop iteration (`deliver`
  schedules it), so a pipeline's replies leave together.

Why protocols and not anyio streams: a stream needs a reading task and a
writing task per connection, and every command then costs two task switches,
a cancel-scope checkpoint and two epoll changes (the stream pauses and
resumes the transport around each receive).  For a key-value store whose
commands cost a few microseconds, that overhead would be most of the work
(examples/kvstore/README.md, "How it is built", has the measurement).

Replies are owed in request order: each command takes the next *ticket*;
replies that arrive out of order (a stale read before an earlier write's
outcome) wait for the earlier ones.  A reply is encoded in the protocol
version (RESP2 or RESP3) the connection had when its command was read, so a
pipelined `HELLO 3` changes only the replies after it.

Bounds.  A connection owes at most `limits.connection_replies_max` replies,
and stops taking commands once its encoded replies not yet written reach
`limits.connection_reply_bytes_max`: at either bound it pauses reading the
socket until replies have been written, so a client that sends without
reading is slowed by TCP instead of growing the server's memory, and a
connection's writes in flight stay within its session's window
(`rsm/core/exactly_once.py`).  Replies go to the transport at most
`limits.send_bytes_max` bytes per write.  The parser holds at most `limits.buffered_bytes_max`
bytes; bytes received beyond its room wait, with reading paused.  When the
transport's write buffer passes its high-water mark, asyncio pauses the
writing: replies stay owed (so the bound above holds reading too), and a
connection whose writing stays paused for `limits.send_timeout_ms` is
closed (`bookie.net.framed_protocol`'s stall timer).  WATCH waits for its
read before the next command is dispatched (EXEC needs its position).

Ends.  QUIT, and a protocol error (garbage: the parser's `ProtocolError`),
stop the reading; the replies owed are sent, the protocol error's last,
then the connection is closed.  Other connections are not affected.  A
client that closes its end closes the connection at once (replies still
owed are dropped; commands already handed to the router complete anyway).
Over `limits.connections_max` connections, a new one is answered "ERR max
number of clients reached" and closed, as Redis does
(`ServerConfig.connections_max`); over `limits.connections_per_address_max`
from one host, "ERR max number of clients reached for this address" (not in
Redis: one client machine cannot take every slot).  Cancelling `serve` closes the listening
sockets and aborts every connection.

Invariants: every ticket is answered exactly once while the connection
lives; replies are written in ticket order; no command is dispatched while
`connection_replies_max` replies are owed or a WATCH read is unanswered.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.stapled import MultiListener

from bookie.logs import emit
from bookie.net.admission import ConnectionAdmission, Refusal, peer_host
from bookie.net.framed_protocol import FramedProtocol
from bookie.net.stream_transport import StreamTransport
from bookie.net.tls import TlsListen, TlsServer
from kvstore import limits
from kvstore.connection.acl import AccessControl
from kvstore.connection.command_stats import CommandStats
from kvstore.connection.dispatch import (
    Action,
    Answer,
    Execute,
    Read,
    WatchRead,
    Write,
    failure_reply,
    finish,
    plan,
)
from kvstore.connection.server_commands import ClientState, ServerStatus
from kvstore.errors import ProtocolError, RedisError
from kvstore.protocol.resp import Reply, RespParser, encode_bulk, encode_reply
from kvstore.runtime.process_info import process_status
from kvstore.runtime.router import Lane, Receiver
from kvstore.state_machine import KVStore
from rsm import limits as rsm_limits
from rsm.host import Outcome

logger = logging.getLogger(__name__)

_REFUSALS: Final = {
    Refusal.SERVER_FULL: b"-ERR max number of clients reached\r\n",
    Refusal.ADDRESS_FULL: b"-ERR max number of clients reached for this address\r\n",
}


class _Pending:
    """Marks a reply not yet known, and the protocol version it will be encoded in."""

    __slots__ = ("resp3",)

    def __init__(self, resp3: bool) -> None:
        self.resp3 = resp3


_PENDING_RESP2: Final = _Pending(False)
_PENDING_RESP3: Final = _Pending(True)


class Router(Protocol):
    """What a connection needs of the router (`kvstore.runtime.router.Router` is one)."""

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

    def read_now(self, lane: Lane, name: str, args: list[Any]) -> Outcome | None: ...

    def read_time_ms(self, lane: Lane) -> int | None: ...

    def get_after_round(self, lane: Lane, key: bytes, receiver: Receiver, ticket: int) -> bool: ...

    @property
    def state(self) -> KVStore: ...

    def close_lane(self, lane: Lane) -> None: ...


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """What INFO says about the replica beside the server."""

    role: str
    leader_address: str | None
    epoch: int
    applied_index: int
    caught_up: bool
    lag_entries: int
    keys: int
    keys_with_ttl: int
    expired_keys: int = 0
    app: str = ""
    snapshot_index: int | None = None
    """The application's newest snapshot (None: none yet), and when it was created."""
    snapshot_created_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """A server's knobs: the parser's bounds, and what CONFIG GET shows."""

    port: int = 0
    """The port clients connect to (for INFO)."""
    request_bytes_max: int = limits.request_bytes_max_default
    bulk_bytes_max: int = limits.bulk_bytes_max_default
    connections_max: int = limits.connections_max
    connections_per_address_max: int = limits.connections_per_address_max
    settings: Mapping[str, str] | None = None
    """Extra CONFIG GET settings (name -> value), besides the server's own."""
    access: AccessControl | None = None
    """The ACL users (None: Redis's default user only, no password)."""


class RespServer:
    """Serves RESP connections until its task is cancelled (see the module docstring)."""

    def __init__(
        self,
        listener: anyio.abc.Listener[anyio.abc.ByteStream],
        router: Router,
        *,
        replica_info: Callable[[], ReplicaInfo],
        config: ServerConfig | None = None,
        tls: TlsListen | None = None,
    ) -> None:
        """`tls`, when given, is a second listener, for TLS (bound here, so `tls_port` is
        known at once; `serve` closes it), serving the same connections after a
        handshake (`bookie.net.tls`)."""
        self._listener = listener
        self.tls_server: TlsServer | None = None
        """The TLS listener (its counts of accepted and refused handshakes), if any."""
        self.tls_port: int | None = None
        if tls is not None:
            self.tls_server = TlsServer(
                tls.context, self._accept, name="resp", allowed_names=tls.allowed_names
            )
            self.tls_port = self.tls_server.bind(tls.host, tls.port)
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
        self.access = self.config.access or AccessControl()
        self._connections: dict[RespConnection, float] = {}
        """Each open connection and when it was admitted (the event loop's clock)."""
        self._admission = ConnectionAdmission(
            total_max=self.config.connections_max,
            per_address_max=self.config.connections_per_address_max,
        )
        self._next_client_id = 1
        self._connections_received = 0
        self._connections_rejected = 0
        self._closed_commands = CommandStats()
        """The counts of the connections that closed (the open ones keep their own)."""
        self._run_id = os.urandom(20).hex()
        self._started_s = time.monotonic()
        self.view = _View(self)

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def connections_open_since(self, since_s: float) -> int:
        """Open connections admitted at or before `since_s` (the event loop's clock)."""
        return sum(1 for admitted_s in self._connections.values() if admitted_s <= since_s)

    @property
    def connection_totals(self) -> tuple[int, int]:
        """(received, rejected): client connections since the server started."""
        return self._connections_received, self._connections_rejected

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        servers: list[asyncio.AbstractServer] = []
        listener = self._listener
        try:
            async with anyio.create_task_group() as task_group:
                if isinstance(listener, (anyio.abc.SocketListener, MultiListener)):
                    for sock in _raw_sockets(listener):
                        servers.append(await loop.create_server(self._accept, sock=sock))
                else:
                    task_group.start_soon(listener.serve, self._serve_stream)
                if self.tls_server is not None:
                    task_group.start_soon(self.tls_server.serve)
                await anyio.sleep_forever()
        finally:
            for server in servers:
                server.close()
            if self.tls_server is not None:
                self.tls_server.close()
            for connection in list(self._connections):
                connection.abort()
            await self._listener.aclose()

    async def _serve_stream(self, stream: anyio.abc.ByteStream) -> None:
        """One connection of a listener that is not TCP, on a `StreamTransport`."""
        transport = StreamTransport(
            stream,
            self._accept(),
            receive_bytes=rsm_limits.socket_receive_bytes,
            coalesce_bytes_max=rsm_limits.socket_send_coalesce_bytes_max,
            send_timeout_ms=limits.send_timeout_ms,
        )
        await transport.run()

    def _accept(self) -> RespConnection:
        client_id = self._next_client_id
        self._next_client_id += 1
        return RespConnection(self, client_id)

    def admit(self, connection: RespConnection) -> Refusal | None:
        """Count a new connection in (None), or say why not: the server is at `connections_max`,
        or the client's host at `connections_per_address_max`."""
        self._connections_received += 1
        refusal = self._admission.admit(connection.peer_host)
        if refusal is None:
            self._connections[connection] = asyncio.get_running_loop().time()
        else:
            self._connections_rejected += 1
        return refusal

    def forget(self, connection: RespConnection) -> None:
        self._connections.pop(connection, None)
        self._closed_commands.add(connection.client.stats)
        self._admission.release(connection.peer_host)

    # --- the connections' ServerView ----------------------------------------------------------

    def clock_us(self) -> int:
        return time.time_ns() // 1000

    def command_stats(self) -> CommandStats:
        """Every connection's counts since the server started (folded now)."""
        return CommandStats.total(
            [self._closed_commands, *(each.client.stats for each in self._connections)]
        )

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
            lag_entries=info.lag_entries,
            keys=info.keys,
            keys_with_ttl=info.keys_with_ttl,
            expired_keys=info.expired_keys,
            app=info.app,
            connections_max=self.config.connections_max,
            connections_received=self._connections_received,
            connections_rejected=self._connections_rejected,
            acl_access_denied_auth=self.access.auth_failures,
            acl_access_denied_cmd=self.access.commands_denied,
            acl_access_denied_key=self.access.keys_denied,
            snapshot_index=info.snapshot_index,
            snapshot_created_ms=info.snapshot_created_ms,
            process=process_status(self._run_id),
            commands=self.command_stats(),
        )

    def config_settings(self) -> Mapping[str, str]:
        return self._settings


def _raw_sockets(listener: object) -> list[socket.socket]:
    """The listening sockets behind an anyio TCP listener (several for a multi-address host)."""
    if isinstance(listener, MultiListener):
        return [sock for inner in listener.listeners for sock in _raw_sockets(inner)]
    assert isinstance(listener, anyio.abc.SocketListener), "the RESP server serves TCP sockets"
    return [listener.extra(SocketAttribute.raw_socket)]


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

    def access_control(self) -> AccessControl:
        return self._server.access


class RespConnection(FramedProtocol):
    """One client connection (see the module docstring); the `Receiver` of its commands."""

    def __init__(self, server: RespServer, client_id: int) -> None:
        super().__init__(send_timeout_ms=limits.send_timeout_ms)
        self._server = server
        self._router = server.router
        self._view = server.view
        self.client = ClientState(client_id, restriction=server.access.initial)
        config = server.config
        self._parser = RespParser(
            request_bytes_max=config.request_bytes_max, bulk_bytes_max=config.bulk_bytes_max
        )
        self._lane: Lane | None = None
        self._unfed = bytearray()
        """Bytes received that the parser had no room for yet."""
        self._replies: deque[bytes | _Pending] = deque()
        """What is owed, in order: encoded replies, or `_Pending` for those not known yet."""
        self._first_ticket = 0
        """The ticket of `_replies[0]`."""
        self._pending_count = 0
        """The `_Pending` entries of `_replies`: answers the router still owes."""
        self._reply_bytes = 0
        """Bytes of the encoded replies in `_replies`."""
        self._actions: dict[int, WatchRead | Execute] = {}
        """Tickets whose reply needs their action to be built (see `dispatch.finish`)."""
        self._commands: dict[int, str] = {}
        """The command name of each ticket the router owes, for counting its failure."""
        self._watch_ticket: int | None = None
        """The WATCH whose read must be answered before the next command is dispatched."""
        self._draining = False
        """No more commands: send what is owed, then close."""
        self._closed = False
        self.peer_host: str | None = None
        """The client's host, once connected (None over a stream without one)."""
        self._reading_paused = False
        self._servicing = False
        self._taking = False
        """Inside `_take_commands`: a reply delivered now is written right after it."""
        self._service_again = False
        self._service_scheduled = False

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peer_host = peer_host(transport.get_extra_info("peername"))
        refusal = self._server.admit(self)
        if refusal is not None:
            self._closed = True
            self.write(_REFUSALS[refusal])
            transport.close()
            return
        self._lane = self._router.lane()

    def data_received(self, data: bytes) -> None:
        if self._closed or self._draining:
            return
        parser = self._parser
        if not self._unfed and len(data) <= parser.room_bytes:
            if not self._replies and not self._reading_paused and not self.writing_paused:
                key = parser.lone_get(data)
                if key is not None and self._get_at_once(key):
                    return
                key_and_value = parser.lone_set(data)
                if key_and_value is not None and self._set_at_once(*key_and_value):
                    return
                parser.feed(data)  # the common case: no copy into `_unfed` and out again
                self._answer_at_once()
                return
            parser.feed(data)
        else:
            self._unfed += data
        self._service()

    def eof_received(self) -> bool:
        return False  # the client left: close at once (see the module docstring)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._closed = True
        lane, self._lane = self._lane, None
        if lane is not None:  # it was admitted
            self._server.forget(self)
            self._router.close_lane(lane)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._service()

    # --- the server's controls ----------------------------------------------------------------

    def send_stalled(self) -> None:
        emit(logger, logging.INFO, "kvstore.send_timeout", client_id=self.client.client_id)
        self.abort()

    # --- replies ------------------------------------------------------------------------------

    def deliver(self, ticket: int, outcome: Outcome, index: int) -> None:
        """The router's answer for `ticket` (see `kvstore.runtime.router.Receiver`)."""
        if self._closed:
            return
        position, resp3 = self._claim(ticket)
        action = self._actions.pop(ticket, None)
        name = self._commands.pop(ticket)
        reply: Reply
        watch_answered = False
        if action is not None:
            reply = finish(action, outcome, self.client)
            if ticket == self._watch_ticket:
                self._watch_ticket = None
                watch_answered = True
        elif outcome.ok:
            reply = outcome.value
        else:
            reply = failure_reply(outcome)
        if not outcome.ok:
            assert isinstance(reply, RedisError)
            self.client.stats.fail(name, reply.message)
        out = bytearray()
        encode_reply(reply, out, resp3)
        self._answered(position, bytes(out), watch_answered)

    def deliver_value(self, ticket: int, value: bytes | None) -> None:
        """The value of the GET handed over with `ticket` by `_get_at_once` (see
        `kvstore.runtime.router.Receiver`)."""
        if self._closed:
            return
        position, resp3 = self._claim(ticket)
        del self._commands[ticket]
        self._answered(position, encode_bulk(value, resp3), False)

    def _claim(self, ticket: int) -> tuple[int, bool]:
        """The reply owed for `ticket` is being answered: its position in `_replies`, and
        whether it is encoded in RESP3."""
        position = ticket - self._first_ticket
        marker = self._replies[position]
        assert isinstance(marker, _Pending), "a ticket is answered once"
        self._pending_count -= 1
        return position, marker.resp3

    def _answered(self, position: int, reply: bytes, watch_answered: bool) -> None:
        """The reply owed at `position` of `_replies` is `reply`: write what is ready now
        if nothing else is owed, else when the service next runs."""
        self._replies[position] = reply
        self._reply_bytes += len(reply)
        if not self._pending_count and not self._servicing and not watch_answered:
            # Nothing else owed is coming: write now rather than next iteration.
            self._write_ready()
            if self._service_again or self._reading_paused or self._draining or self._unfed:
                self._schedule_service()
        elif position == 0 or watch_answered:
            self._schedule_service()

    def _owe(self) -> int:
        """A ticket for a reply to come, in the current protocol version."""
        ticket = self._first_ticket + len(self._replies)
        self._replies.append(_PENDING_RESP3 if self.client.resp3 else _PENDING_RESP2)
        self._pending_count += 1
        return ticket

    def _reply_now(self, reply: Reply) -> None:
        out = bytearray()
        encode_reply(reply, out, self.client.resp3)
        self._replies.append(bytes(out))
        self._reply_bytes += len(out)

    # --- the service: read commands, write replies, pause, close ------------------------------

    def _schedule_service(self) -> None:
        if self._servicing:
            if not self._taking:
                self._service_again = True
        elif not self._service_scheduled:
            self._service_scheduled = True
            self._call_soon(self._scheduled_service)

    def _scheduled_service(self) -> None:
        self._service_scheduled = False
        try:
            self._service()
        except BaseException:
            # A bug: close the connection, as asyncio does when `data_received` raises, so
            # it never owes its client a reply for good; the loop logs the traceback.
            self.abort()
            raise

    def _service(self) -> None:
        """Dispatch what can be, write what is ready, then pause, resume or close the transport.

        Not reentrant: an answer delivered while it runs (the router may answer
        at once) makes it go round again instead, unless it came while commands
        were being taken, since the writing that follows takes it along."""
        if self._closed:
            return
        if self._servicing:
            self._service_again = True
            return
        self._servicing = True
        try:
            while True:
                self._service_again = False
                self._take_commands()
                self._write_ready()
                if not self._service_again:
                    break
        finally:
            self._servicing = False
        self._settle()

    def _blocked(self) -> bool:
        return (
            self._watch_ticket is not None
            or len(self._replies) >= limits.connection_replies_max
            or self._reply_bytes >= limits.connection_reply_bytes_max
        )

    def _take_commands(self) -> None:
        """Feed the parser and dispatch every complete command, until blocked or out of bytes."""
        if self._draining:
            return
        parser = self._parser
        unfed = self._unfed
        self._taking = True
        try:
            while not self._blocked():
                args = parser.next_command()
                if args is None:
                    if not unfed:
                        break
                    room = parser.room_bytes
                    assert room > 0, "an incomplete request is below the bound, so room is left"
                    if len(unfed) <= room:
                        parser.feed(bytes(unfed))
                        unfed.clear()
                    else:
                        parser.feed(bytes(unfed[:room]))
                        del unfed[:room]
                    continue
                self._dispatch(args)
                if self.client.close_after_reply:
                    self._draining = True
                    break
        except ProtocolError as error:
            emit(logger, logging.INFO, "kvstore.bad_client", error=error.message)
            self.client.stats.error(error.message)
            self._reply_now(error)
            self._draining = True
        finally:
            self._taking = False

    def _answer_at_once(self) -> None:
        """The common case of a chunk that arrives with nothing owed: answer its commands
        here, for as long as each one's reply is known at once (server commands, reads
        under the local leader's lease), and write the replies in one call; from the
        first command that must wait, the service takes over, in order.

        What it saves a GET is the service's work for replies that wait (tickets, the
        router's delivery, the reply queue, pausing and resuming the transport)."""
        parser = self._parser
        client = self.client
        view = self._view
        router = self._router
        lane = self._lane
        assert lane is not None
        out = bytearray()
        action: Action | None = None
        failed = handed_over = False
        try:
            while (args := parser.next_command()) is not None:
                action = plan(args, client, view)
                kind = type(action)
                if kind is Answer:
                    assert isinstance(action, Answer)
                    encode_reply(action.reply, out, client.resp3)
                    if client.close_after_reply:
                        action = None
                        self._draining = True
                        break
                elif kind is Read:
                    assert isinstance(action, Read)
                    if action.stale:
                        break
                    if action.name == "get":  # as `_get_at_once` answers it
                        time_ms = router.read_time_ms(lane)
                        if time_ms is None:
                            break
                        value = router.state.value_at(action.args[0], time_ms)
                        encode_reply(value, out, client.resp3)
                    else:
                        outcome = router.read_now(lane, action.name, action.args)
                        if outcome is None:
                            break
                        if outcome.ok:
                            encode_reply(outcome.value, out, client.resp3)
                        else:
                            error = failure_reply(outcome)
                            client.stats.fail(action.name, error.message)
                            encode_reply(error, out, client.resp3)
                else:
                    break
                action = None
                if len(out) >= limits.send_bytes_max:
                    self.write(bytes(out))
                    out.clear()
                    if self.writing_paused:
                        handed_over = True  # the service holds the rest until the client reads
                        break
        except ProtocolError:
            failed = True  # the service takes the error from the parser again, and answers it
        if action is None and not failed and not handed_over and not self._draining:
            if out:
                self.write(bytes(out))
            return
        if action is not None and not out and not parser.buffered_bytes:
            # A chunk that was one command to hand over (a client without pipelining):
            # the service would find nothing to take and nothing ready to write.
            self._carry_out(action)
            if self._blocked():
                self._settle()
            return
        if out:
            self._replies.append(bytes(out))
            self._reply_bytes += len(out)
        if action is not None:
            self._carry_out(action)
        self._service()

    def _get_at_once(self, key: bytes) -> bool:
        """A chunk that is one GET, with nothing owed, from a connection without ACL rules,
        MULTI or READONLY (else False, nothing done): handed on as `_answer_at_once` would
        hand it, without the parser's and the dispatch's layers.  Under the local leader's
        read lease (`Router.read_time_ms`) it is answered here from the leader's state,
        without the query's layers either; at a follower it waits for the router's next
        position round (`Router.get_after_round`); otherwise it is the router's read."""
        client = self.client
        if client.restriction is not None or client.in_transaction or client.stale_reads:
            return False
        router = self._router
        lane = self._lane
        assert lane is not None
        calls = client.stats.calls
        calls["get"] = calls.get("get", 0) + 1
        time_ms = router.read_time_ms(lane)
        if time_ms is not None:
            self.write(encode_bulk(router.state.value_at(key, time_ms), client.resp3))
            return True
        ticket = self._first_ticket  # nothing is owed: the ticket `_owe` gives next
        if router.get_after_round(lane, key, self, ticket):
            self._owe()
            self._commands[ticket] = "get"
            return True
        self._carry_out(Read("get", [key], False))
        self._service()
        return True

    def _set_at_once(self, key: bytes, value: bytes) -> bool:
        """A chunk that is one SET without options, with nothing owed, from a connection
        without ACL rules or MULTI (else False, nothing done): handed to the router as
        `_answer_at_once` would hand it, without the parser's and the dispatch's layers."""
        client = self.client
        if client.restriction is not None or client.in_transaction:
            return False
        lane = self._lane
        assert lane is not None
        calls = client.stats.calls
        calls["set"] = calls.get("set", 0) + 1
        ticket = self._owe()
        self._commands[ticket] = "set"
        self._router.call(lane, "set", [key, value], self, ticket)
        if self._blocked():
            self._settle()  # its reply reached a bound: pause reading
        return True

    def _dispatch(self, args: list[bytes]) -> None:
        self._carry_out(plan(args, self.client, self._view))

    def _carry_out(self, action: Action) -> None:
        kind = type(action)
        if kind is Answer:
            assert isinstance(action, Answer)
            self._reply_now(action.reply)
            return
        ticket = self._owe()
        router = self._router
        lane = self._lane
        assert lane is not None
        if kind is Write:
            assert isinstance(action, Write)
            self._commands[ticket] = action.name
            router.call(lane, action.name, action.args, self, ticket)
        elif kind is Read:
            assert isinstance(action, Read)
            self._commands[ticket] = action.name
            router.read(lane, action.name, action.args, self, ticket, stale=action.stale)
        elif kind is WatchRead:
            assert isinstance(action, WatchRead)
            self._commands[ticket] = "watch"
            self._actions[ticket] = action
            self._watch_ticket = ticket
            router.read(lane, "position", [], self, ticket, stale=action.stale)
        else:
            assert isinstance(action, Execute)
            self._commands[ticket] = "exec"
            self._actions[ticket] = action
            router.call(lane, "exec", [action.watched, action.calls], self, ticket)

    def _write_ready(self) -> None:
        """Write the replies that are ready at the head of the queue, `limits.send_bytes_max`
        bytes per call, until none is ready or the transport pauses writing."""
        replies = self._replies
        while replies and not self.writing_paused:
            held_back = self._blocked()
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
            if not chunks:
                return
            if held_back:
                self._service_again = True  # commands held back by a bound may go now
            self._reply_bytes -= size
            self._first_ticket += len(chunks)
            self.write(b"".join(chunks) if len(chunks) > 1 else chunks[0])

    def _settle(self) -> None:
        """Close a drained connection; pause reading while blocked, resume once not."""
        transport = self.transport
        if self._closed or transport is None:
            return
        if self._draining:
            if not self._replies:
                self._closed = True
                transport.close()  # after the buffered replies; connection_lost follows
            elif not self._reading_paused:
                self._reading_paused = True
                transport.pause_reading()
            return
        hold = self._blocked() or bool(self._unfed)
        if hold and not self._reading_paused:
            self._reading_paused = True
            transport.pause_reading()
        elif not hold and self._reading_paused:
            self._reading_paused = False
            transport.resume_reading()
