"""`Link`: one pipelined connection to one replica, shared by every request sent there.

The framework's client (`rsm.client`) and a program that forwards its own
clients' requests to the leader (the key-value store's router) send the client
protocol's requests (docs/protocol.md, "Client protocol": length-prefixed CBOR
frames, answers matched by request id) through links: one per address, carrying
the requests of every caller, so a replica reads many of them per system call
and cuts one batch for them.

A link is created "connecting" and takes requests at once; they leave when
the connection is up.  Each request names a `Waiter`, told exactly once:
`answered(response)` when its response arrives, or `lost(LinkLost)` when the
link ends first.  `LinkLost.sent` is False when the connection never came up
(nothing was sent, so nothing was logged) and True otherwise (a CALL may be in
the log; retrying it under the same session seq is safe).

A link ends when the connection fails, when the replica sends something that
is not a response, when connecting takes longer than `connect_timeout_ms`, when
a send stalls for `limits.socket_send_timeout_ms`, when (with an
`answer_timeout_ms`) the oldest request waits that long without the replica
sending anything, and when it is closed.

A process whose environment names a token file (`RSM_TOKEN_FILE`, read when a
link connects; docs/security.md, "Client tokens") presents that token in an
AUTH request before every other request of the link.  The requests behind it
are pipelined, not held: a replica that refuses the token answers each of
them UNAUTHENTICATED, which is what their waiters are told.  AUTH uses request
id 0, which callers never use (their ids count from 1).

Invariants: every request handed to `send` is told exactly once, unless it
was `forget`-ten first; a link never reconnects (its owner makes a new one);
the writer sends at most `limits.socket_send_coalesce_bytes_max` bytes per
system call.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import anyio
import anyio.abc

from bookie.errors import InvalidConfig, RemoteProtocolError
from bookie.logs import emit
from bookie.net.connection_errors import CONNECTION_ERRORS
from bookie.net.credentials import environment_token
from bookie.net.outbox import Outbox
from bookie.wire.codec import FrameDecoder
from rsm import limits
from rsm.core.protocol import AuthRequest, Request, Response, decode_response, encode_request
from rsm.errors import ProtocolViolation

__all__ = ["Connector", "Link", "LinkLost", "Response", "Waiter"]

logger = logging.getLogger(__name__)

Connector = Callable[[str], Awaitable[anyio.abc.ByteStream]]
"""Opens a byte stream to a replica's address ("host:port")."""

_LINK_ERRORS: Final = (*CONNECTION_ERRORS, RemoteProtocolError, ProtocolViolation)
TOKEN_FILE_VARIABLE: Final = "RSM_TOKEN_FILE"
"""Names the file of the client token this process presents to replicas."""
_AUTH_REQUEST_ID: Final = 0
_CHECKS_PER_TIMEOUT: Final = 4
"""How often, per answer timeout, a waiting reader looks at the age of the oldest request."""


class LinkLost(Exception):
    """The link ended before the answer came; `sent`: the request may have arrived."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class Waiter(Protocol):
    """Who waits for one request's answer; told once, never blocks, never raises."""

    def answered(self, response: Response) -> None: ...

    def lost(self, error: LinkLost) -> None: ...


class _AuthAnswer:
    """The answer to a link's AUTH: a refusal is logged once; the requests behind it are
    answered UNAUTHENTICATED by the replica itself."""

    def __init__(self, address: str) -> None:
        self.address = address

    def answered(self, response: Response) -> None:
        if not response.ok:
            emit(
                logger,
                logging.WARNING,
                "rsm.token_refused",
                replica=self.address,
                reason=response.message,
                remedy=f"is {TOKEN_FILE_VARIABLE} the file of a token the replica accepts?",
            )

    def lost(self, error: LinkLost) -> None:
        """The link ended before the answer: its other waiters hear of it."""


class _Stalled(Exception):
    """The replica sent nothing for too long while requests waited."""


class Link:
    """One connection to `address` (see the module docstring); `run` is its lifetime."""

    def __init__(
        self,
        address: str,
        connector: Connector,
        *,
        connect_timeout_ms: int,
        answer_timeout_ms: int | None = None,
    ) -> None:
        assert connect_timeout_ms > 0
        assert answer_timeout_ms is None or answer_timeout_ms > 0
        self.address = address
        self._connector = connector
        self._connect_timeout_s = connect_timeout_ms / 1000
        self._answer_timeout_s = None if answer_timeout_ms is None else answer_timeout_ms / 1000
        self._waiting: dict[int, Waiter] = {}
        self._output: list[bytes] = []
        """Frames sent before the connection was up; handed to the outbox once it is."""
        self._outbox: Outbox | None = None
        self._progress_s = 0.0
        """When the replica last sent something, or the first request of an idle link left."""
        self._connected = False
        self.closed = False
        """The link ended or is ending: `send` tells its waiter at once."""
        self._scope = anyio.CancelScope()

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def send(self, request: Request, waiter: Waiter) -> None:
        """Send `request`; `waiter` is told its answer (at once if the link is closed).

        Raises what encoding raises (`StatusError`: a value CBOR cannot carry, a
        request over the bound); then nothing was sent and `waiter` is never told.
        """
        if self.closed:
            waiter.lost(LinkLost(f"the link to {self.address} is closed", sent=False))
            return
        frame = encode_request(request)
        waiting = self._waiting
        if not waiting and self._answer_timeout_s is not None:
            self._progress_s = anyio.current_time()
        waiting[request.request_id] = waiter
        outbox = self._outbox
        if outbox is None:
            self._output.append(frame)
        else:
            outbox.put(frame)

    def forget(self, request_id: int) -> None:
        """The caller stopped waiting for `request_id` (its own timeout): never tell it."""
        self._waiting.pop(request_id, None)

    def close(self) -> None:
        self.closed = True
        self._scope.cancel()

    async def run(self) -> None:
        """Connect, then carry requests and answers until the link ends."""
        reason = f"the connection to {self.address} ended"
        try:
            with self._scope:
                try:
                    token = environment_token(TOKEN_FILE_VARIABLE)
                    with anyio.fail_after(self._connect_timeout_s):
                        stream = await self._connector(self.address)
                except InvalidConfig as error:
                    reason = f"cannot present a client token to {self.address}: {error}"
                    return
                except (OSError, TimeoutError) as error:
                    reason = f"cannot connect to {self.address}: {error!r}"
                    return
                async with stream:
                    self._connected = True
                    reason = await self._carry(stream, token)
        finally:
            self._end(reason)

    async def _carry(self, stream: anyio.abc.ByteStream, token: bytes | None) -> str:
        """Run the writer and the reader until one ends (after presenting `token`, if any);
        why the link ended."""
        outbox = self._outbox = Outbox(
            stream,
            coalesce_bytes_max=limits.socket_send_coalesce_bytes_max,
            send_timeout_ms=limits.socket_send_timeout_ms,
        )
        if token is not None:
            self._waiting[_AUTH_REQUEST_ID] = _AuthAnswer(self.address)
            outbox.put(encode_request(AuthRequest(_AUTH_REQUEST_ID, token)))
        for frame in self._output:
            outbox.put(frame)
        self._output = []
        reasons: list[str] = []

        async def guard(loop: Callable[[], Awaitable[None]]) -> None:
            try:
                await loop()
            except (*_LINK_ERRORS, _Stalled) as error:
                reasons.append(f"the connection to {self.address} ended: {error!r}")
            task_group.cancel_scope.cancel()

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(guard, outbox.run)
            task_group.start_soon(guard, lambda: self._read_loop(stream))
        return reasons[0] if reasons else f"the connection to {self.address} was closed"

    async def _read_loop(self, stream: anyio.abc.ByteStream) -> None:
        decoder = FrameDecoder(limits.frame_bytes_max)
        waiting = self._waiting
        timeout_s = self._answer_timeout_s
        while True:
            if timeout_s is None:
                data = await stream.receive(limits.socket_receive_bytes)
            else:
                data = b""
                with anyio.move_on_after(timeout_s / _CHECKS_PER_TIMEOUT):
                    data = await stream.receive(limits.socket_receive_bytes)
                now_s = anyio.current_time()
                if not data:
                    if waiting and now_s - self._progress_s > timeout_s:
                        raise _Stalled(f"no answer for {timeout_s} s")
                    continue
                self._progress_s = now_s
            for body in decoder.feed(data):
                response = decode_response(body)
                waiter = waiting.pop(response.request_id, None)
                if waiter is not None:
                    waiter.answered(response)

    def _end(self, reason: str) -> None:
        """Tell every waiting request that the link is gone."""
        self.closed = True
        waiting, self._waiting = self._waiting, {}
        self._output = []
        if self._outbox is not None:
            self._outbox.clear()
        sent = self._connected
        for waiter in waiting.values():
            waiter.lost(LinkLost(reason, sent=sent))
