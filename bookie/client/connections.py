"""One pipelined connection per bookie, opened on first use and reopened after a loss.

The ledger client sends every request of every ledger through a
`ConnectionPool`: `submit(bookie_id, request, on_response, timeout_ms)`, or
`submit_frame` for a request encoded once and sent to several bookies (an ADD
to its write set).  The pool finds or opens the `BookieConnection` of that
bookie; callers never hold a connection themselves.

How a bookie is reached: its address comes from its registration
(`set_address`, fed by the client's bookie watch); without a `connector` the
connection is TCP (`BookieConnection.connect`, driven as an asyncio
protocol), with one (`async (address) -> ByteStream`: the simulated network
under simulation, a wrapped stream) it runs over the streams the connector
opens (`BookieConnection.over`).  Nothing here reads a clock other than
through anyio.

Who answers.  An address can change hands: a bookie that died may have its
port taken by a bookie of another cluster on the same machine, whose ledger
ids (every cluster counts from 0) and master keys (the same password) can be
the same as ours.  Its answers would then pass for this bookie's, and one
explicit LAC sent there would give it a LAC it never had (readers would then
look for entries nobody wrote).  So on every new connection the pool first
asks IDENTIFY, and treats the connection as one it could not open when the
bookie names another bookie id or another cluster instance id (`identity_problem`);
nothing else is sent on it before that answer.  It waits up to the read
timeout: the bookie answers from memory, but a loaded one may be slow, and
an alive bookie must not count as unreachable for that.

Each bookie's link is in one of four states:

* IDLE: no connection.  A request starts a connection attempt and waits in the
  link's queue.
* CONNECTING: requests queue (at most `connection_inflight_max`; past it they
  fail with `TooManyRequests`).  On success the queue is sent in order; on
  failure (or after `connect_timeout_ms`) every queued request fails with
  `BookieUnavailable`.
* CONNECTED: requests go straight to the connection.
* BACKOFF: the last attempt failed or the connection was lost.  Until the
  backoff ends, requests fail at once with `BookieUnavailable`, so a writer
  replaces a dead bookie without waiting for it; the first request after the
  backoff connects again.  The backoff starts at `reconnect_delay_ms_min`,
  doubles with every failure in a row up to `reconnect_delay_ms_max`, and
  resets when a connection succeeds or the bookie registers anew (a new
  address, or a new registration at the same one: it restarted).

Invariants:

* No request goes out on a connection before the bookie at its other end
  answered IDENTIFY without naming another bookie or another cluster.
* Every request submitted is answered exactly once, never from inside
  `submit`: by the connection (response, timeout, loss), or by the pool
  (failure while not connected), through one dispatcher task.
* Request ids come from one counter shared by every connection of the pool,
  so a frame encoded under one id is valid on any of them.
* All tasks (one per connection attempt or connection, one dispatcher) live in
  the task group given at construction, owned by the `LedgerClient`.
"""

from __future__ import annotations

import enum
import itertools
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final

import anyio
import anyio.abc

from bookie.address import Address, parse_address
from bookie.client.bookie_conn import BookieConnection, OnResponse
from bookie.client.config import ClientConfig
from bookie.clock import loop_clock_ms
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    ClientClosed,
    InvalidAddress,
    TooManyRequests,
)
from bookie.wire.codec import encode_request
from bookie.wire.messages import IdentifyResponse, Request

Connector = Callable[[str], Awaitable[anyio.abc.ByteStream]]
"""Opens a byte stream to a bookie's address ("host:port")."""

_CONNECT_ERRORS: Final = (OSError, TimeoutError, anyio.BrokenResourceError, BookieError)


def bookie_address(address: str) -> Address:
    """The `Address` a bookie registered (`bookie.address`); `BookieUnavailable` otherwise."""
    try:
        return parse_address(address)
    except InvalidAddress as error:
        raise BookieUnavailable(f"bookie address {address!r} is not host:port") from error


async def tcp_connector(address: str) -> anyio.abc.ByteStream:
    """A TCP byte stream to "host:port", for connectors that wrap one (a recorder, a
    fault injector): without a connector the pool connects over TCP by itself."""
    target = bookie_address(address)
    return await anyio.connect_tcp(target.host, target.port)


def identity_problem(
    bookie_id: str, instance_id: str | None, answer: IdentifyResponse
) -> str | None:
    """Why the bookie that gave `answer` is not `bookie_id` of the cluster `instance_id`
    (None: not known), or None when it may be: it names no other bookie and no other
    cluster.  A bookie that states no identity (one started without, in tests) passes."""
    if answer.bookie_id is not None and answer.bookie_id != bookie_id:
        return f"bookie {answer.bookie_id} listens there, not {bookie_id}"
    stated = answer.instance_id
    if stated is not None and instance_id is not None and stated != instance_id:
        return (
            f"a bookie of cluster {stated} listens there, "
            f"not bookie {bookie_id} of cluster {instance_id}"
        )
    return None


class _LinkState(enum.Enum):
    IDLE = "idle"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    BACKOFF = "backoff"


_Queued = tuple[int, bytes, OnResponse, int]
"""A request waiting for its connection: (request id, frame, on_response, timeout_ms)."""


class _Link:
    """What the pool knows about one bookie."""

    __slots__ = (
        "bookie_id",
        "address",
        "state",
        "connection",
        "queued",
        "generation",
        "scope",
        "retry_at_ms",
        "delay_ms",
        "last_failure",
    )

    def __init__(self, bookie_id: str, address: str, delay_ms: int) -> None:
        self.bookie_id = bookie_id
        self.address = address
        self.state = _LinkState.IDLE
        self.connection: BookieConnection | None = None
        self.queued: list[_Queued] = []
        self.generation = 0
        """Grows when the address changes: an attempt of an older generation no longer counts."""
        self.scope: anyio.CancelScope | None = None
        self.retry_at_ms = 0
        self.delay_ms = delay_ms
        self.last_failure = ""


class Wakeup:
    """A re-armable signal from answer callbacks to the task that drives a core.

    Callbacks and the driving task share one event loop, so a `set` can only
    happen while the task is parked in `wait`, or before it re-checks its
    condition (which it does before every `wait`): no wake-up is lost.  Made by
    `ConnectionPool.wakeup`, so that closing the pool wakes every waiter.
    """

    __slots__ = ("_event", "__weakref__")

    def __init__(self) -> None:
        self._event: anyio.Event | None = None

    def set(self) -> None:
        event = self._event
        if event is not None:
            self._event = None
            event.set()

    async def wait(self, timeout_ms: int | None) -> None:
        """Return on the next `set`, or after `timeout_ms` (None: no timeout)."""
        event = self._event = anyio.Event()
        if timeout_ms is None:
            await event.wait()
            return
        with anyio.move_on_after(timeout_ms / 1000):
            await event.wait()


class ConnectionPool:
    """The client's connections, one per bookie; see the module docstring."""

    def __init__(
        self,
        connector: Connector | None,
        config: ClientConfig,
        task_group: anyio.abc.TaskGroup,
        *,
        instance_id: str | None = None,
    ) -> None:
        """`connector`: None for TCP, else what opens the byte streams (see the module
        docstring); `instance_id`: the cluster's INSTANCEID, which every bookie connected
        to must state (None: not known, bookie ids are checked alone)."""
        self._connector = connector
        self._instance_id = instance_id
        self._config = config
        self._task_group = task_group
        self._links: dict[str, _Link] = {}
        self._request_ids = itertools.count(1)
        self._deferred: list[tuple[OnResponse, BookieError]] = []
        self._deferred_wakeup: anyio.Event | None = None
        self._closed = False
        self._wakeups: weakref.WeakSet[Wakeup] = weakref.WeakSet()
        task_group.start_soon(self._dispatch_deferred)

    # --- lifetime -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise `ClientClosed` once the pool is closed."""
        if self._closed:
            raise ClientClosed("the ledger client is closed")

    def wakeup(self) -> Wakeup:
        """A new `Wakeup`, which `close` sets too (its waiter then sees `closed`)."""
        wakeup = Wakeup()
        self._wakeups.add(wakeup)
        return wakeup

    # --- bookies ------------------------------------------------------------------------------

    def set_address(self, bookie_id: str, address: str) -> None:
        """Where `bookie_id` listens (from its registration).  A new address drops the old
        connection (requests in flight on it fail) and ends any backoff."""
        link = self._links.get(bookie_id)
        if link is None:
            self._links[bookie_id] = _Link(bookie_id, address, self._config.reconnect_delay_ms_min)
            return
        if link.address == address:
            return
        link.address = address
        link.generation += 1
        link.delay_ms = self._config.reconnect_delay_ms_min
        if link.scope is not None:
            link.scope.cancel()
            link.scope = None
        link.connection = None
        link.state = _LinkState.IDLE
        if link.queued:
            self._start_connecting(link)

    def end_backoff(self, bookie_id: str) -> None:
        """`bookie_id` registered anew at the same address (it restarted): the next request
        connects at once instead of failing until the backoff would have ended."""
        link = self._links.get(bookie_id)
        if link is not None and link.state is _LinkState.BACKOFF:
            link.retry_at_ms = 0
            link.delay_ms = self._config.reconnect_delay_ms_min

    def address(self, bookie_id: str) -> str | None:
        link = self._links.get(bookie_id)
        return None if link is None else link.address

    def failure(self, bookie_id: str) -> str | None:
        """Why the last connection to `bookie_id` failed, while it is backing off."""
        link = self._links.get(bookie_id)
        if link is None or link.state is not _LinkState.BACKOFF:
            return None
        return link.last_failure

    def is_connected(self, bookie_id: str) -> bool:
        link = self._links.get(bookie_id)
        return link is not None and link.state is _LinkState.CONNECTED

    # --- requests -----------------------------------------------------------------------------

    def next_request_id(self) -> int:
        """An id for `submit_frame`, unique across every connection of the pool."""
        return next(self._request_ids)

    def submit(
        self, bookie_id: str, request: Request, on_response: OnResponse, timeout_ms: int
    ) -> None:
        """Send `request` (its own request id is replaced) to `bookie_id`."""
        request_id = next(self._request_ids)
        frame = encode_request(tuple.__new__(type(request), (request_id, *request[1:])))
        self.submit_frame(bookie_id, request_id, frame, on_response, timeout_ms)

    def submit_frame(
        self,
        bookie_id: str,
        request_id: int,
        frame: bytes,
        on_response: OnResponse,
        timeout_ms: int,
    ) -> None:
        """Send a request encoded under `request_id` (from `next_request_id`) to `bookie_id`.

        `on_response` gets exactly one answer, later (see `BookieConnection.submit`).
        """
        link = self._links.get(bookie_id)
        if link is not None and link.connection is not None:
            try:
                link.connection.submit_frame(request_id, frame, on_response, timeout_ms)
            except BookieError as error:
                # Lost just now (its task has not seen it yet), or full.
                self._defer(on_response, error)
            return
        if self._closed:
            self._defer(on_response, ClientClosed("the ledger client is closed"))
            return
        if link is None:
            self._defer(on_response, BookieUnavailable(f"bookie {bookie_id} is not registered"))
            return
        if link.state is _LinkState.BACKOFF:
            wait_ms = link.retry_at_ms - loop_clock_ms()
            if wait_ms > 0:
                self._defer(
                    on_response,
                    BookieUnavailable(
                        f"bookie {bookie_id} at {link.address} is unavailable "
                        f"({link.last_failure}); next attempt in {wait_ms} ms"
                    ),
                )
                return
            link.state = _LinkState.IDLE
        if len(link.queued) >= self._config.connection_inflight_max:
            self._defer(
                on_response, TooManyRequests(f"{len(link.queued)} requests wait for {bookie_id}")
            )
            return
        link.queued.append((request_id, frame, on_response, timeout_ms))
        if link.state is _LinkState.IDLE:
            self._start_connecting(link)

    def close(self) -> None:
        """Refuse new requests and wake every `Wakeup` waiter, which then raises
        `ClientClosed`; the owner then cancels the task group, which closes every
        connection.  Requests not answered by then never will be: whoever waits
        for them waits on a `Wakeup` or was released by its handle."""
        self._closed = True
        for link in self._links.values():
            link.queued.clear()
        for wakeup in list(self._wakeups):
            wakeup.set()

    # --- links --------------------------------------------------------------------------------

    def _start_connecting(self, link: _Link) -> None:
        assert link.state is _LinkState.IDLE
        link.state = _LinkState.CONNECTING
        scope = link.scope = anyio.CancelScope()
        self._task_group.start_soon(self._run_link, link, link.generation, scope)

    async def _run_link(self, link: _Link, generation: int, scope: anyio.CancelScope) -> None:
        """Connect, check who answers, serve the link until the connection fails, then back
        off."""
        failure = "connection closed"
        connected = False
        with scope:
            try:
                async with self._open(link.address) as connection:
                    answer = await connection.identify(timeout_ms=self._config.read_timeout_ms)
                    problem = identity_problem(link.bookie_id, self._instance_id, answer)
                    if problem is not None:
                        raise BookieUnavailable(f"{link.address}: {problem}")
                    connected = True
                    failure = await self._serve(link, generation, connection)
            except _CONNECT_ERRORS as error:
                # Closing a stream that broke may raise too; it is the same loss.
                failure = f"{'connection lost' if connected else 'cannot connect'}: {error!r}"
        if link.generation == generation:
            self._back_off(link, failure)

    @asynccontextmanager
    async def _open(self, address: str) -> AsyncIterator[BookieConnection]:
        config = self._config
        if self._connector is None:
            target = bookie_address(address)
            async with BookieConnection.connect(
                target.host,
                target.port,
                connect_timeout_ms=config.connect_timeout_ms,
                inflight_max=config.connection_inflight_max,
                request_ids=self._request_ids,
                tls=config.tls,
            ) as connection:
                yield connection
            return
        with anyio.fail_after(config.connect_timeout_ms / 1000):
            stream = await self._connector(address)
        async with BookieConnection.over(
            stream,
            address,
            inflight_max=config.connection_inflight_max,
            request_ids=self._request_ids,
        ) as connection:
            yield connection

    async def _serve(self, link: _Link, generation: int, connection: BookieConnection) -> str:
        if link.generation != generation:
            return "superseded"
        link.connection = connection
        link.state = _LinkState.CONNECTED
        link.delay_ms = self._config.reconnect_delay_ms_min
        queued, link.queued = link.queued, []
        for request_id, frame, on_response, timeout_ms in queued:
            try:
                connection.submit_frame(request_id, frame, on_response, timeout_ms)
            except BookieError as error:
                self._defer(on_response, error)
        await connection.wait_failed()
        return connection.failure or "connection closed"

    def _back_off(self, link: _Link, failure: str) -> None:
        link.connection = None
        link.scope = None
        link.state = _LinkState.BACKOFF
        link.last_failure = failure
        link.retry_at_ms = loop_clock_ms() + link.delay_ms
        link.delay_ms = min(2 * link.delay_ms, self._config.reconnect_delay_ms_max)
        queued, link.queued = link.queued, []
        for _, _, on_response, _ in queued:
            self._defer(
                on_response,
                BookieUnavailable(f"bookie {link.bookie_id} at {link.address}: {failure}"),
            )

    # --- answers the pool gives itself --------------------------------------------------------

    def _defer(self, on_response: OnResponse, error: BookieError) -> None:
        self._deferred.append((on_response, error))
        wakeup = self._deferred_wakeup
        if wakeup is not None:
            self._deferred_wakeup = None
            wakeup.set()

    async def _dispatch_deferred(self) -> None:
        while True:
            if not self._deferred:
                wakeup = self._deferred_wakeup = anyio.Event()
                await wakeup.wait()
                continue
            batch, self._deferred = self._deferred, []
            for on_response, error in batch:
                on_response(error)
