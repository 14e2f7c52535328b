"""A pipelined framework connection from a follower's server to the leader, shared by all.

When the local replica does not lead, the router (`kvstore.router`) sends
writes and linearizable reads to the leader over the framework's own client
protocol (`rsm/core/protocol.py`: length-prefixed CBOR frames, CALL and QUERY,
answers matched by request id).  One `ForwardLink` per leader address
carries the requests of every Redis connection of this server, so the
leader reads many of them per system call and cuts one batch for them.

A link is created in the "connecting" state and takes requests at once;
they leave when the connection is up.  Answers go to each request's
`Answerer` (the router's attempt) as they arrive.  When the link ends,
every request still waiting is answered at once: `Unavailable` when the
connection never came up (nothing was sent: not logged), `OutcomeUnknown`
otherwise (a CALL may be in the log; retrying it with the same session seq
is safe).  A link ends when the connection fails, when the leader sends
something that is not a response, when connecting takes longer than
`limits.forward_connect_timeout_ms`, when the oldest request waits longer
than `limits.forward_answer_timeout_ms` without the leader sending
anything, and when it is closed.

Invariants: every request handed to `send` is answered exactly once; a
link never reconnects (the router makes a new one); the writer sends at
most `rsm.limits.socket_send_coalesce_bytes_max` bytes per system call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import anyio.abc

from bookie.errors import RemoteProtocolError
from bookie.net.connection_errors import CONNECTION_ERRORS
from bookie.wire.codec import FrameDecoder
from kvstore import limits
from rsm import limits as rsm_limits
from rsm.core.protocol import Op, Request, decode_response, encode_request
from rsm.errors import OutcomeUnknown, ProtocolViolation, StatusError, Unavailable
from rsm.host import Answerer, CallRequest, Outcome

Connector = Callable[[str], Awaitable[anyio.abc.ByteStream]]
"""Opens a byte stream to a framework address ("host:port")."""

_CONNECTION_ERRORS: Final = (*CONNECTION_ERRORS, RemoteProtocolError, ProtocolViolation)
_CHECKS_PER_TIMEOUT: Final = 4
"""How often, per answer timeout, a waiting reader looks at the age of the oldest request."""


class _Stalled(Exception):
    """The leader sent nothing for too long while requests waited."""


class ForwardLink:
    """One framework connection to `address` (see the module docstring)."""

    def __init__(self, address: str, connector: Connector) -> None:
        self.address = address
        self._connector = connector
        self._waiting: dict[int, tuple[int, Answerer]] = {}
        """request id -> (op, who waits for the answer)."""
        self._output: list[bytes] = []
        self._writer_wakeup: anyio.Event | None = None
        self._progress_s = 0.0
        """When the leader last sent something, or the first request of an idle link was sent."""
        self._connected = False
        self.closed = False
        self._scope = anyio.CancelScope()

    @property
    def waiting_count(self) -> int:
        return len(self._waiting)

    def send(self, request: Request, answerer: Answerer) -> None:
        """Send `request` (answered through `answerer`, possibly at once if the link is closed)."""
        op = _op(request)
        if self.closed:
            answerer.answer(op, request.request_id, _unsent("the link is closed"), 0)
            return
        try:
            frame = encode_request(request)
        except StatusError as error:
            answerer.answer(op, request.request_id, Outcome.failure(error), 0)
            return
        if not self._waiting:
            self._progress_s = anyio.current_time()
        self._waiting[request.request_id] = (op, answerer)
        self._output.append(frame)
        wakeup = self._writer_wakeup
        if wakeup is not None:
            self._writer_wakeup = None
            wakeup.set()

    def close(self) -> None:
        self._scope.cancel()

    async def run(self) -> None:
        """Connect, then carry requests and answers until the link ends (see the docstring)."""
        reason = "the connection ended"
        try:
            with self._scope:
                try:
                    with anyio.fail_after(limits.forward_connect_timeout_ms / 1000):
                        stream = await self._connector(self.address)
                except (OSError, TimeoutError) as error:
                    reason = f"cannot connect to the leader {self.address}: {error!r}"
                    return
                self._connected = True
                async with stream, anyio.create_task_group() as task_group:
                    task_group.start_soon(self._guard, self._write_loop, stream, task_group)
                    await self._guard(self._read_loop, stream, task_group)
        finally:
            self._end(reason)

    async def _guard(
        self,
        loop: Callable[[anyio.abc.ByteStream], Awaitable[None]],
        stream: anyio.abc.ByteStream,
        task_group: anyio.abc.TaskGroup,
    ) -> None:
        """Run one of the loops; whatever ends it ends the link."""
        try:
            await loop(stream)
        except (*_CONNECTION_ERRORS, _Stalled):
            pass
        task_group.cancel_scope.cancel()

    async def _read_loop(self, stream: anyio.abc.ByteStream) -> None:
        decoder = FrameDecoder(rsm_limits.frame_bytes_max)
        timeout_s = limits.forward_answer_timeout_ms / 1000
        waiting = self._waiting
        while True:
            data = b""
            with anyio.move_on_after(timeout_s / _CHECKS_PER_TIMEOUT):
                data = await stream.receive(rsm_limits.socket_receive_bytes)
            now_s = anyio.current_time()
            if not data:
                if waiting and now_s - self._progress_s > timeout_s:
                    raise _Stalled(f"the leader {self.address} answered nothing for {timeout_s} s")
                continue
            self._progress_s = now_s
            for body in decoder.feed(data):
                response = decode_response(body)
                entry = waiting.pop(response.request_id, None)
                if entry is None:
                    continue
                op, answerer = entry
                outcome = Outcome(
                    response.status, response.value, response.message or "", response.detail
                )
                answerer.answer(op, response.request_id, outcome, response.log_index)

    async def _write_loop(self, stream: anyio.abc.ByteStream) -> None:
        # No timeout of its own: a send that stalls leaves requests unanswered,
        # and the reader ends the link after `forward_answer_timeout_ms`.
        coalesce_bytes_max = rsm_limits.socket_send_coalesce_bytes_max
        while True:
            if not self._output:
                wakeup = self._writer_wakeup = anyio.Event()
                await wakeup.wait()
                continue
            output = self._output
            size = 0
            count = 0
            for frame in output:
                if count and size + len(frame) > coalesce_bytes_max:
                    break
                size += len(frame)
                count += 1
            data = b"".join(output[:count])
            del output[:count]
            await stream.send(data)

    def _end(self, reason: str) -> None:
        """Answer every waiting request: the link is gone."""
        self.closed = True
        waiting, self._waiting = self._waiting, {}
        self._output.clear()
        if self._connected:
            outcome = Outcome.failure(OutcomeUnknown(f"{reason} (leader {self.address})"))
        else:
            outcome = _unsent(reason)
        for request_id, (op, answerer) in waiting.items():
            answerer.answer(op, request_id, outcome, 0)


def _unsent(reason: str) -> Outcome:
    return Outcome.failure(Unavailable(reason))


def _op(request: Request) -> int:
    """The op code of a CALL or QUERY request."""
    return int(Op.CALL) if type(request) is CallRequest else int(Op.QUERY)
