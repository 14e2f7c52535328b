"""`BookieServer`: the bookie's TCP server, with an `async with` lifetime.

It listens on a host and port, accepts up to `connections_max` client
connections, `limits.connections_per_address_max` of them from one host (later
ones are closed at once), serves each TCP client with a
`TransportConnection` (an asyncio protocol; no task per connection; over a
`StreamTransport` for the clients of an injected listener, the simulated
network), optionally also on a second port for TLS (`bookie.net.tls`: the
same connections, after a handshake), and runs one timer task
that answers long-poll READs whose deadline passed.  Requests flow connection
-> `RequestProcessor` -> `BookieHandler` (protocol decisions) -> storage; this
module only wires them together and owns the tasks.

What it does not do: ZooKeeper registration, cookies, configuration files or
the command line.  Those wrap a `BookieServer` from outside; the constructor
takes everything it needs explicitly (a storage that is already open, a
`disk_space` callable, the address).

Graceful shutdown (leaving the `async with` block normally):

1. stop accepting connections and stop reading requests on every connection;
2. answer every parked long poll as timed out (EOK, no packet, current LAC);
3. wait, up to `shutdown_drain_ms`, for storage to sync every pending answer,
   which then goes out as usual; whatever is still not synced then is answered
   EIO (outcome unknown): every pending add gets exactly one answer, never none;
4. wait, within the same `shutdown_drain_ms`, for the answers to be sent, and
   close every connection.

Leaving the block with an exception skips the drain: connections are closed
at once and their clients see the connection drop.
"""

from __future__ import annotations

import asyncio
import itertools
from types import TracebackType

import anyio
import anyio.abc

from bookie import limits
from bookie.clock import loop_clock_ms
from bookie.core.bookie_handler import BookieHandler, BookieIdentity
from bookie.core.tokens import TokenTable
from bookie.errors import Status
from bookie.net.accepting import serve_listener
from bookie.net.admission import ConnectionAdmission
from bookie.net.stream_transport import StreamTransport
from bookie.net.tls import TlsListen, TlsServer
from bookie.server.processor import DiskSpace, RequestProcessor
from bookie.server.transport_connection import TransportConnection
from bookie.storage.api import LedgerStorage


class BookieServer:
    """A bookie serving one `LedgerStorage` over TCP.  Use as `async with BookieServer(...)`."""

    def __init__(
        self,
        storage: LedgerStorage,
        disk_space: DiskSpace,
        *,
        host: str = "127.0.0.1",
        port: int = limits.port_default,
        read_only: bool = False,
        identity: BookieIdentity | None = None,
        connections_max: int = limits.connections_max,
        connections_per_address_max: int = limits.connections_per_address_max,
        shutdown_drain_ms: int = limits.shutdown_drain_ms_max,
        long_poll_waiters_max: int = limits.long_poll_waiters_max,
        pending_requests_per_connection_max: int = limits.pending_requests_per_connection_max,
        pending_requests_total_max: int = limits.pending_requests_total_max,
        pending_bytes_total_max: int = limits.pending_bytes_total_max,
        listener: anyio.abc.Listener[anyio.abc.ByteStream] | None = None,
        tokens: TokenTable | None = None,
        tls: TlsListen | None = None,
    ) -> None:
        """`listener`, when given, replaces the TCP listener on host:port (the simulation
        passes a `bookie.testing.simnet.SimListener`); `port` then reports 0 unless the
        listener says otherwise.  `identity` is what IDENTIFY answers (clients check it
        on every connection); a bookie process always has one.  With `tokens`, a client is
        served only after an AUTH with one of them.  `tls`, when given, is a second
        listener, for TLS, serving the same requests."""
        assert 0 <= port <= 0xFFFF
        assert connections_max > 0
        assert 0 <= shutdown_drain_ms <= limits.shutdown_drain_ms_max
        self._storage = storage
        self._host = host
        self._requested_port = port
        self._admission = ConnectionAdmission(
            total_max=connections_max, per_address_max=connections_per_address_max
        )
        self._shutdown_drain_ms = shutdown_drain_ms
        self._handler = BookieHandler(
            storage.recovered_ledgers(),
            storage.fenced_tombstones(),
            read_only=read_only,
            identity=identity,
            long_poll_waiters_max=long_poll_waiters_max,
            tokens=tokens,
        )
        self._processor = RequestProcessor(
            self._handler,
            storage,
            disk_space,
            on_parked=self._on_parked,
            pending_requests_per_connection_max=pending_requests_per_connection_max,
            pending_requests_total_max=pending_requests_total_max,
            pending_bytes_total_max=pending_bytes_total_max,
        )
        self._connections: dict[int, TransportConnection] = {}
        self._connection_ids = itertools.count(1)
        self._injected_listener = listener
        self._tls_server = (
            None
            if tls is None
            else TlsServer(
                tls.context,
                self._new_transport_connection,
                name="bookie",
                allowed_names=tls.allowed_names,
            )
        )
        self._tls = tls
        self._tls_port = 0
        self._tls_scope = anyio.CancelScope()
        self._tcp_server: asyncio.Server | None = None
        self._all_gone: anyio.Event | None = None
        """Set when the last connection is gone (the server waits for it at the end)."""
        self._port = 0
        self._started = False
        self._task_group: anyio.abc.TaskGroup | None = None
        self._accept_scope = anyio.CancelScope()
        self._timer_scope = anyio.CancelScope()
        self._timer_wakeup: anyio.Event | None = None
        self._timer_deadline_ms: int | None = None
        self._draining = False

    # --- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> BookieServer:
        listener = self._injected_listener
        if listener is None:
            loop = asyncio.get_running_loop()
            tcp_server = self._tcp_server = await loop.create_server(
                self._new_transport_connection, self._host, self._requested_port
            )
            self._port = tcp_server.sockets[0].getsockname()[1]
        else:
            self._port = self._requested_port
        if self._tls is not None:
            assert self._tls_server is not None
            self._tls_port = self._tls_server.bind(self._tls.host, self._tls.port)
        self._processor.start()
        self._started = True
        task_group = self._task_group = anyio.create_task_group()
        await task_group.__aenter__()
        if listener is not None:
            task_group.start_soon(self._accept_loop, listener, task_group)
        task_group.start_soon(self._timer_loop)
        if self._tls_server is not None:
            task_group.start_soon(self._tls_accept_loop, self._tls_server)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        assert task_group is not None
        drain_error: BaseException | None = None
        if exc is None:
            try:
                await self._drain()
            except BaseException as error:  # cancelled from outside: still close everything
                drain_error = error
                exc_type, exc, traceback = type(error), error, error.__traceback__
        self._stop_accepting()
        self._timer_scope.cancel()
        for connection in list(self._connections.values()):
            connection.close()
        # An aborted transport tells its protocol in the next turn of the loop;
        # shielded, as the task group must be left in this same call.
        with anyio.CancelScope(shield=True):
            while self._connections:
                gone = self._all_gone = anyio.Event()
                await gone.wait()
        self._processor.close()
        try:
            suppressed = await task_group.__aexit__(exc_type, exc, traceback)
            if self._tls_server is not None:
                self._tls_server.close()
        except BaseExceptionGroup as group:
            # The server's own tasks do not raise, so the group holds the error
            # of the `async with` body (or of the drain): hand it back unwrapped.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise
        if drain_error is not None and not suppressed:
            raise drain_error
        return suppressed

    async def _drain(self) -> None:
        """Steps 1-4 of the graceful shutdown in the module docstring."""
        deadline_s = anyio.current_time() + self._shutdown_drain_ms / 1000
        self._draining = True
        self._stop_accepting()
        self._timer_scope.cancel()
        for connection in self._connections.values():
            connection.stop_reading()
        # Every parked poll's deadline is at most the longest poll from now.
        self._processor.expire(loop_clock_ms() + limits.long_poll_timeout_ms_max)
        with anyio.move_on_after(deadline_s - anyio.current_time()):
            await self._processor.wait_idle()
        if self._processor.pending_total:
            self._processor.fail_pending(
                Status.EIO, "bookie shut down before the request was made durable"
            )
        with anyio.move_on_after(max(0.0, deadline_s - anyio.current_time())):
            for connection in list(self._connections.values()):
                await connection.flushed()

    # --- state --------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        """The port actually bound (useful when constructed with port 0)."""
        assert self._started, "the server is not started"
        return self._port

    @property
    def tls_port(self) -> int | None:
        """The TLS listener's port (None without one)."""
        assert self._started, "the server is not started"
        return None if self._tls is None else self._tls_port

    @property
    def tls_server(self) -> TlsServer | None:
        """The TLS listener (its counts of accepted and refused handshakes), if any."""
        return self._tls_server

    @property
    def read_only(self) -> bool:
        return self._handler.read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        """Read-only (disk full): normal adds get EREADONLY; recovery adds and reads go on."""
        self._handler.read_only = value

    @property
    def draining(self) -> bool:
        """True once a graceful shutdown has begun: no new requests are taken."""
        return self._draining

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def pending_requests(self) -> int:
        """Requests whose answer waits for a storage sync."""
        return self._processor.pending_total

    @property
    def queued_answer_bytes(self) -> int:
        """Bytes of answers the connections hold, not yet taken by the kernel."""
        return sum(connection.queued_bytes for connection in self._connections.values())

    @property
    def parked_reads(self) -> int:
        return self._handler.parked_reads

    @property
    def handler(self) -> BookieHandler:
        """The protocol decisions (read for its counters)."""
        return self._handler

    @property
    def processor(self) -> RequestProcessor:
        """The request path (its latency histograms and counters are exported as metrics)."""
        return self._processor

    def delete_ledger(self, ledger_id: int) -> None:
        """Garbage collection: drop a ledger from storage and from the request logic together.

        Raises what `LedgerStorage.delete_ledger` raises (then nothing changed).
        """
        self._processor.delete_ledger(ledger_id)

    # --- connections --------------------------------------------------------------------------

    def _stop_accepting(self) -> None:
        self._accept_scope.cancel()
        self._tls_scope.cancel()
        if self._tcp_server is not None:
            self._tcp_server.close()

    def _new_transport_connection(self) -> TransportConnection:
        return TransportConnection(
            next(self._connection_ids),
            self._processor,
            on_open=self._transport_opened,
            on_close=self._transport_closed,
        )

    def _transport_opened(self, connection: TransportConnection) -> bool:
        if self._accept_scope.cancel_called:
            return False
        if self._admission.admit(connection.peer_host) is not None:
            return False
        self._connections[connection.connection_id] = connection
        self._processor.connection_opened(connection)
        return True

    def _transport_closed(self, connection: TransportConnection) -> None:
        del self._connections[connection.connection_id]
        self._admission.release(connection.peer_host)
        self._processor.connection_closed(connection)
        if not self._connections and self._all_gone is not None:
            self._all_gone.set()
            self._all_gone = None

    # --- tasks --------------------------------------------------------------------------------

    async def _accept_loop(
        self,
        listener: anyio.abc.Listener[anyio.abc.ByteStream],
        task_group: anyio.abc.TaskGroup,
    ) -> None:
        with self._accept_scope:
            async with listener:
                await serve_listener(listener, self._serve, task_group, server="bookie")

    async def _tls_accept_loop(self, tls_server: TlsServer) -> None:
        with self._tls_scope:
            await tls_server.serve()

    async def _serve(self, stream: anyio.abc.ByteStream) -> None:
        transport = StreamTransport(stream, self._new_transport_connection())
        await transport.run()

    async def _timer_loop(self) -> None:
        """Answer long polls at their deadline; `_on_parked` wakes it for an earlier one."""
        with self._timer_scope:
            while True:
                deadline_ms = self._handler.next_deadline_ms()
                self._timer_deadline_ms = deadline_ms
                wakeup = self._timer_wakeup = anyio.Event()
                if deadline_ms is None:
                    await wakeup.wait()
                    continue
                delay_ms = deadline_ms - loop_clock_ms()
                if delay_ms > 0:
                    with anyio.move_on_after(delay_ms / 1000):
                        await wakeup.wait()
                    continue
                self._processor.expire(loop_clock_ms())

    def _on_parked(self, deadline_ms: int) -> None:
        current = self._timer_deadline_ms
        wakeup = self._timer_wakeup
        if wakeup is not None and (current is None or deadline_ms < current):
            self._timer_wakeup = None
            wakeup.set()
