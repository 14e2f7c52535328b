"""A pipelined client connection to ONE bookie.

The ledger client keeps one `BookieConnection` per bookie and sends every
request of every ledger through it.  Requests are pipelined: many are in
flight at once, each tagged with a request id the connection assigns, and
responses are matched by that id in whatever order the bookie sends them (a
read is answered while earlier adds still wait for their fsync).

Two ways to use it:

* The callback API, for the ledger client's hot path:
  `submit(request, on_response, timeout_ms)`.  `on_response` is called
  exactly once, later, never from inside `submit`: with the response (whatever
  its status: a non-OK status is data here, not an exception), or with
  `BookieUnavailable` when the connection is lost or closed, or with
  `ClientTimeout` when no response came within `timeout_ms`.  No task, event,
  future or cancel scope is created per request.  `submit_frame` is the same
  for a request the caller encoded itself, so that one encoded ADD can go to
  every bookie of a write set.
* Awaitable conveniences (`add`, `read`, `read_lac`, `write_lac`,
  `bookie_info`, `identify`, `list_entries`) that return the response and raise the
  `StatusError` of a non-OK status (`bookie.errors.error_for_status`).

The connection is driven as an asyncio protocol (`bookie.net.framed_protocol`):
bytes received are handled in the transport's `data_received` callback, and
the frames queued in one turn of the event loop are joined and handed to the
transport once, at the end of that turn; no task per direction, since tasks
cost more than the work once requests come one or a few at a time, as a
replicated state machine's leader sends them (docs/protocol.md, section 9).
`connect` runs it over TCP; `over(stream)` over any anyio byte stream (the
simulated network, a recorder in tests, a wrapped stream) through a
`bookie.net.stream_transport.StreamTransport`.

Request ids come from an iterator given at construction, which several
connections may share (the ledger client shares one between all of its
connections: an ADD encoded once under one id is valid on each of them).
Either way an id is never in flight twice on one connection.

Invariants:

* At most `inflight_max` requests are in flight; `submit` past it raises
  `TooManyRequests` and sends nothing.
* Every request submitted is answered exactly once: a response, a timeout or
  the connection loss, whichever comes first; a response that arrives after
  its request timed out is dropped.
* Timeouts are found by one periodic sweep (every
  `limits.request_timeout_sweep_interval_ms`).  A submit reads no clock: its
  deadline counts from the time the last sweep or the last data received
  noted (at most one interval old while the loop keeps up), plus one interval
  to make up for that, so a request times out between `timeout_ms` and
  `timeout_ms` plus two sweep intervals after it was submitted.
  Requests are kept in one insertion-ordered dict per distinct `timeout_ms`, in
  which deadlines therefore ascend: the sweep stops at the first request of
  each dict that is not due, so its cost is the number of timeouts, not the
  number of requests in flight.
* Everything queued in one turn of the event loop goes out in one write
  (over a stream, in sends of up to `limits.socket_send_coalesce_bytes_max`
  bytes).
* On any connection failure (peer closed, socket error, writing paused by
  the transport for `limits.socket_send_timeout_ms`, undecodable bytes from
  the bookie) every
  request in flight fails with `BookieUnavailable` once, and `submit` raises
  `BookieUnavailable` from then on.  A failed connection is not reconnected:
  the owner opens a new one.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Final, TypeVar

import anyio
import anyio.abc

from bookie import limits
from bookie.clock import loop_clock_ms_reader
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    ClientTimeout,
    NotAuthenticated,
    RemoteProtocolError,
    Status,
    TooManyRequests,
    error_for_status,
)
from bookie.net.credentials import TOKEN_FILE_VARIABLE, environment_token
from bookie.net.framed_protocol import FramedProtocol
from bookie.net.stream_transport import StreamTransport
from bookie.net.tls import describe
from bookie.wire.codec import FrameDecoder, decode_response, encode_request
from bookie.wire.messages import (
    ADD_FLAG_RECOVERY,
    READ_FLAG_FENCE,
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    IdentifyRequest,
    IdentifyResponse,
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

OnResponse = Callable[[Response | BookieError], None]
"""Receives the response, or `BookieUnavailable` / `ClientTimeout`; must not raise."""

_ResponseT = TypeVar("_ResponseT", bound=Response)

_EOK: Final = int(Status.EOK)
_SWEEP_INTERVAL_MS: Final = limits.request_timeout_sweep_interval_ms


class _Link(FramedProtocol):
    """The asyncio protocol a `BookieConnection` runs on (over TCP or a `StreamTransport`)."""

    def __init__(self, connection: BookieConnection) -> None:
        super().__init__(send_timeout_ms=limits.socket_send_timeout_ms)
        self._connection = connection

    def data_received(self, data: bytes) -> None:
        self._connection.on_data(data)

    def eof_received(self) -> bool:
        return False  # close; `connection_lost` follows

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._connection.on_lost(exc)

    def send_stalled(self) -> None:
        self._connection.on_send_stalled(self.send_timeout_ms)


def checked_response(
    result: Response | BookieError,
    request: Request,
    response_type: type[_ResponseT],
    address: str | None,
) -> _ResponseT:
    """What an awaited `request` gets from its `on_response`: the response, if it is a
    `response_type` with an OK status; raised otherwise (`BookieError` as it came, the
    `StatusError` of a non-OK status, `RemoteProtocolError` for a response of the wrong
    kind from the bookie at `address`)."""
    if isinstance(result, BookieError):
        raise result
    if not isinstance(result, response_type):
        raise RemoteProtocolError(
            f"bookie {address} answered a {type(request).__name__} with a {type(result).__name__}"
        )
    if result.status != _EOK:
        raise error_for_status(result.status, result.message or "")
    return result


class BookieConnection:
    """One connection to one bookie.  Open it with `BookieConnection.connect` (TCP) or
    `BookieConnection.over` (any byte stream)."""

    def __init__(
        self,
        address: str,
        *,
        inflight_max: int,
        request_ids: Iterator[int] | None = None,
    ) -> None:
        assert inflight_max > 0
        self.address = address
        """host:port of the bookie, for messages."""
        self._link = _Link(self)
        self._inflight_max = inflight_max
        self._request_ids = itertools.count(1) if request_ids is None else request_ids
        # request id -> (on_response, timeout_ms); the timeout names the bucket
        # of `_deadlines` that holds the request's deadline.
        self._inflight: dict[int, tuple[OnResponse, int]] = {}
        self._deadlines: dict[int, dict[int, int]] = {}
        self._decoder = FrameDecoder()
        self.over_tls = False
        """Connected with TLS (`connect(tls=...)`)."""
        self._failure: str | None = None
        """Why the connection failed; each caller gets its own exception saying so."""
        self._failed = anyio.Event()
        self.now_ms = loop_clock_ms_reader()
        """The event loop's clock in milliseconds (`bookie.clock`)."""
        self._clock_ms = self.now_ms()
        """The loop's clock as last read by the sweep or on data received; never decreases."""
        # The loops run under their own scope, so that stopping them on a
        # failure leaves the owner's code in the `async with` block running.
        self._loops_scope = anyio.CancelScope()

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        connect_timeout_ms: int = limits.connect_timeout_ms_default,
        inflight_max: int = limits.bookie_connection_inflight_max,
        request_ids: Iterator[int] | None = None,
        token: bytes | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> AsyncIterator[BookieConnection]:
        """Connect over TCP (with `tls`, TLS over it: the bookie's certificate verified for
        `host`); raises `BookieUnavailable` if the bookie cannot be reached in time or its
        handshake fails, `NotAuthenticated` if it refuses the client token.

        `token` is presented before anything else; by default the process's token
        (`bookie.net.credentials`), if it has one.  Leaving the block closes the
        connection; requests still in flight then fail with `BookieUnavailable`.
        """
        address = f"{host}:{port}"
        connection = cls(address, inflight_max=inflight_max, request_ids=request_ids)
        connection.over_tls = tls is not None
        loop = asyncio.get_running_loop()
        link = connection._link
        try:
            with anyio.fail_after(connect_timeout_ms / 1000):
                if tls is None:
                    await loop.create_connection(lambda: link, host, port)
                else:
                    await loop.create_connection(lambda: link, host, port, ssl=tls)
        except ssl.SSLError as error:
            raise BookieUnavailable(
                f"cannot connect to bookie {address}: {describe(error)}"
            ) from error
        except (OSError, TimeoutError) as error:
            raise BookieUnavailable(f"cannot connect to bookie {address}: {error}") from error
        async with connection._serving(None):  # its end aborts the transport (`_fail`)
            await connection._authenticate(token, connect_timeout_ms)
            yield connection

    @classmethod
    @asynccontextmanager
    async def over(
        cls,
        stream: anyio.abc.ByteStream,
        address: str,
        *,
        inflight_max: int = limits.bookie_connection_inflight_max,
        request_ids: Iterator[int] | None = None,
        token: bytes | None = None,
    ) -> AsyncIterator[BookieConnection]:
        """Run the protocol over an already connected stream (closed on exit); `token` as
        for `connect`.

        For streams that are not plain TCP: the simulated network, a recorder in
        tests, the ledger client's injected connector.
        """
        connection = cls(address, inflight_max=inflight_max, request_ids=request_ids)
        transport = StreamTransport(stream, connection._link)
        async with stream, connection._serving(transport):  # its end aborts the transport
            await connection._authenticate(token, limits.connect_timeout_ms_default)
            yield connection

    @asynccontextmanager
    async def _serving(self, transport: StreamTransport | None) -> AsyncIterator[None]:
        """Run the sweep (and the stream transport, if any) while the caller's block runs;
        fail the connection when it ends."""
        try:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(self._run_loops, transport)
                try:
                    yield
                finally:
                    self._fail(f"connection to {self.address} closed")
        except BaseExceptionGroup as group:
            # The loops never raise, so a group holds the caller's own error:
            # hand it back as it was raised, not wrapped.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _authenticate(self, token: bytes | None, timeout_ms: int) -> None:
        """Present `token` (or the process's) in an AUTH request, if there is one."""
        token = environment_token() if token is None else token
        if token is None:
            return
        try:
            await self._call(AuthRequest(0, token), AuthResponse, timeout_ms)
        except NotAuthenticated as error:
            raise NotAuthenticated(
                f"bookie {self.address} refused this client's token ({error}): is "
                f"{TOKEN_FILE_VARIABLE} the file of a token the bookie's client_tokens_file lists?"
            ) from None

    # --- state --------------------------------------------------------------------------------

    @property
    def inflight(self) -> int:
        """Requests submitted and not yet answered."""
        return len(self._inflight)

    @property
    def is_usable(self) -> bool:
        """False once the connection failed or was closed."""
        return self._failure is None

    @property
    def failure(self) -> str | None:
        """Why the connection failed or was closed; None while it is usable."""
        return self._failure

    async def wait_failed(self) -> None:
        """Return once the connection has failed or been closed."""
        await self._failed.wait()

    # --- callback API -------------------------------------------------------------------------

    def submit(self, request: Request, on_response: OnResponse, timeout_ms: int) -> int:
        """Send `request` under a fresh request id (its own `request_id` is ignored).

        Returns the request id.  Raises `BookieUnavailable` if the connection
        has failed, `TooManyRequests` if `inflight_max` requests are in flight,
        and `LocalProtocolError` if a field is out of range; in those cases
        nothing is sent and `on_response` is never called.
        """
        assert timeout_ms > 0
        if self._failure is not None:
            raise BookieUnavailable(self._failure)
        if len(self._inflight) >= self._inflight_max:
            raise TooManyRequests(f"{len(self._inflight)} requests in flight to {self.address}")
        request_id = next(self._request_ids)
        # The same record with the new id; `tuple.__new__` skips the `_replace`
        # machinery, which costs more than encoding the request.
        frame = encode_request(tuple.__new__(type(request), (request_id, *request[1:])))
        self.submit_frame(request_id, frame, on_response, timeout_ms)
        return request_id

    def submit_frame(
        self, request_id: int, frame: bytes, on_response: OnResponse, timeout_ms: int
    ) -> None:
        """Send a request the caller encoded (`codec.encode_request`) under `request_id`.

        `request_id` must come from the `request_ids` this connection was given
        (so it is not in flight here already).  Raises and answers like `submit`.
        """
        assert timeout_ms > 0
        if self._failure is not None:
            raise BookieUnavailable(self._failure)
        inflight = self._inflight
        if len(inflight) >= self._inflight_max:
            raise TooManyRequests(f"{len(inflight)} requests in flight to {self.address}")
        assert request_id not in inflight, "request ids are unique per connection"
        inflight[request_id] = (on_response, timeout_ms)
        bucket = self._deadlines.get(timeout_ms)
        if bucket is None:
            bucket = self._deadlines[timeout_ms] = {}
        bucket[request_id] = self._clock_ms + timeout_ms + _SWEEP_INTERVAL_MS
        self._link.queue(frame)

    # --- awaitable API ------------------------------------------------------------------------

    async def add(
        self,
        ledger_id: int,
        entry_id: int,
        master_key: bytes,
        packet: bytes,
        *,
        recovery: bool = False,
        timeout_ms: int = limits.add_timeout_ms_default,
    ) -> AddResponse:
        flags = ADD_FLAG_RECOVERY if recovery else 0
        request = AddRequest(0, ledger_id, entry_id, master_key, flags, packet)
        return await self._call(request, AddResponse, timeout_ms)

    async def read(
        self,
        ledger_id: int,
        entry_id: int,
        *,
        fence: bool = False,
        master_key: bytes | None = None,
        previous_lac: int | None = None,
        long_poll_timeout_ms: int | None = None,
        timeout_ms: int = limits.read_timeout_ms_default,
    ) -> ReadResponse:
        """Read one entry; with `previous_lac`, a long poll (see docs/protocol.md).

        A long poll's `timeout_ms` counts from the moment the request is sent,
        so it is extended by `long_poll_timeout_ms` here.
        """
        flags = READ_FLAG_FENCE if fence else 0
        request = ReadRequest(
            0, ledger_id, entry_id, flags, master_key, previous_lac, long_poll_timeout_ms
        )
        total_timeout_ms = timeout_ms + (long_poll_timeout_ms or 0)
        return await self._call(request, ReadResponse, total_timeout_ms)

    async def read_lac(
        self, ledger_id: int, *, timeout_ms: int = limits.read_timeout_ms_default
    ) -> ReadLacResponse:
        return await self._call(ReadLacRequest(0, ledger_id), ReadLacResponse, timeout_ms)

    async def write_lac(
        self,
        ledger_id: int,
        master_key: bytes,
        lac: int,
        packet: bytes,
        *,
        timeout_ms: int = limits.add_timeout_ms_default,
    ) -> WriteLacResponse:
        request = WriteLacRequest(0, ledger_id, master_key, lac, packet)
        return await self._call(request, WriteLacResponse, timeout_ms)

    async def bookie_info(
        self, *, timeout_ms: int = limits.read_timeout_ms_default
    ) -> GetBookieInfoResponse:
        return await self._call(GetBookieInfoRequest(0), GetBookieInfoResponse, timeout_ms)

    async def identify(
        self, *, timeout_ms: int = limits.read_timeout_ms_default
    ) -> IdentifyResponse:
        return await self._call(IdentifyRequest(0), IdentifyResponse, timeout_ms)

    async def list_entries(
        self, ledger_id: int, *, timeout_ms: int = limits.read_timeout_ms_default
    ) -> ListEntriesResponse:
        return await self._call(ListEntriesRequest(0, ledger_id), ListEntriesResponse, timeout_ms)

    async def _call(
        self, request: Request, response_type: type[_ResponseT], timeout_ms: int
    ) -> _ResponseT:
        # No fail_after here: the sweep answers the request with ClientTimeout
        # and a lost connection answers it with BookieUnavailable, so the wait
        # below is bounded by `timeout_ms` plus two sweep intervals.
        answered = anyio.Event()
        outcome: list[Response | BookieError] = []

        def on_response(result: Response | BookieError) -> None:
            outcome.append(result)
            answered.set()

        self.submit(request, on_response, timeout_ms)
        await answered.wait()
        return checked_response(outcome[0], request, response_type, self.address)

    # --- loops --------------------------------------------------------------------------------

    async def _run_loops(self, transport: StreamTransport | None) -> None:
        with self._loops_scope:
            async with anyio.create_task_group() as task_group:
                if transport is not None:
                    task_group.start_soon(transport.run)
                task_group.start_soon(self._sweep_loop)

    def on_data(self, data: bytes) -> None:
        """Bytes received from the bookie: answer every request whose response they complete."""
        if self._failure is not None:
            return
        self._clock_ms = self.now_ms()
        inflight = self._inflight
        deadlines = self._deadlines
        try:
            for body in self._decoder.feed(data):
                response = decode_response(body)
                request_id = response[0]
                entry = inflight.pop(request_id, None)
                if entry is None:
                    continue  # it timed out already and was answered then
                on_response, timeout_ms = entry
                bucket = deadlines[timeout_ms]
                del bucket[request_id]
                if not bucket:
                    del deadlines[timeout_ms]
                on_response(response)
        except RemoteProtocolError as error:
            self._fail(f"bookie {self.address} broke the protocol: {error}")

    def on_lost(self, error: Exception | None) -> None:
        """The transport is gone: a socket error, or (None) the bookie closed it."""
        if isinstance(error, ssl.SSLError):
            cause = describe(error)  # mutual TLS refused after the client's handshake
        else:
            cause = "closed by the bookie" if error is None else repr(error)
            if self.over_tls and (error is None or isinstance(error, ConnectionResetError)):
                cause += (
                    " (TLS: this is also how a bookie refuses a client certificate: missing, "
                    "expired or not signed by its CA; its tls.refused log line says which)"
                )
        self._fail(f"connection to bookie {self.address} lost: {cause}")

    def on_send_stalled(self, stalled_ms: int) -> None:
        """The transport's writing stayed paused that long: the bookie stopped reading."""
        self._fail(f"sending to bookie {self.address} stalled for {stalled_ms} ms")

    async def _sweep_loop(self) -> None:
        interval_s = limits.request_timeout_sweep_interval_ms / 1000
        while True:
            await anyio.sleep(interval_s)
            now_ms = self._clock_ms = self.now_ms()
            self._sweep(now_ms)

    def _sweep(self, now_ms: int) -> None:
        """Answer every request whose deadline passed with `ClientTimeout`."""
        expired: list[tuple[int, int]] = []
        for timeout_ms, bucket in self._deadlines.items():
            for request_id, deadline_ms in bucket.items():
                if deadline_ms > now_ms:
                    break
                expired.append((timeout_ms, request_id))
        for timeout_ms, request_id in expired:
            bucket = self._deadlines[timeout_ms]
            del bucket[request_id]
            if not bucket:
                del self._deadlines[timeout_ms]
            on_response, _ = self._inflight.pop(request_id)
            on_response(
                ClientTimeout(
                    f"no answer from bookie {self.address} to request {request_id} "
                    f"within {timeout_ms} ms"
                )
            )

    def _fail(self, reason: str) -> None:
        """Fail every request in flight and stop the loops; only the first call acts."""
        if self._failure is not None:
            return
        self._failure = reason
        self._failed.set()
        inflight = list(self._inflight.values())
        self._inflight.clear()
        self._deadlines.clear()
        self._link.drop_queued()
        self._loops_scope.cancel()
        self._link.abort()
        for on_response, _ in inflight:
            on_response(BookieUnavailable(reason))
