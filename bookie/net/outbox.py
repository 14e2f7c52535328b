"""`Outbox`: the frames queued for one stream, sent coalesced, with backpressure.

The replica's server (`rsm.runtime.server`) answers many requests per
connection out of order, and every protocol run over a stream
(`bookie.net.stream_transport`) writes through one; queuing the frames here and
sending every queued frame in one `send` (up to `coalesce_bytes_max` bytes) makes
a group commit that releases a thousand answers cost one system call, not a
thousand.

Backpressure: `backlogged` says more than `coalesce_bytes_max` bytes wait, and
`wait_drained` returns once they fall back under it, so a server's reader stops
taking requests from a client that does not read its answers; TCP then slows the
client instead of the server's memory growing.  A send that stalls for
`send_timeout_ms` ends `run` with `TimeoutError`.  `on_sent`, if given, is
called after each send (a transport's flow control watches `queued_bytes` so).
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import anyio.abc


class Outbox:
    """Frames waiting for one stream; `run()` is its writer task."""

    __slots__ = (
        "_stream",
        "_coalesce_bytes_max",
        "_send_timeout_s",
        "_frames",
        "_bytes",
        "_wakeup",
        "_drained",
        "_flushed",
        "_on_sent",
    )

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        *,
        coalesce_bytes_max: int,
        send_timeout_ms: int,
        on_sent: Callable[[], None] | None = None,
    ) -> None:
        assert coalesce_bytes_max > 0
        assert send_timeout_ms > 0
        self._stream = stream
        self._coalesce_bytes_max = coalesce_bytes_max
        self._send_timeout_s = send_timeout_ms / 1000
        self._frames: list[bytes] = []
        self._bytes = 0
        self._wakeup: anyio.Event | None = None
        self._drained: anyio.Event | None = None
        """Set when the queue falls back under the bound `wait_drained` waits on."""
        self._flushed: anyio.Event | None = None
        """Set when the queue is empty (`flushed` waits on it)."""
        self._on_sent = on_sent

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    @property
    def backlogged(self) -> bool:
        """More than `coalesce_bytes_max` bytes wait: stop taking requests."""
        return self._bytes > self._coalesce_bytes_max

    def put(self, frame: bytes) -> None:
        """Queue `frame`; it goes out with whatever else is queued by then."""
        self._frames.append(frame)
        self._bytes += len(frame)
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()

    def clear(self) -> None:
        """Drop every queued frame: the stream is gone and nobody will send them."""
        self._frames.clear()
        self._bytes = 0

    async def wait_drained(self) -> None:
        """Return once no more than `coalesce_bytes_max` bytes wait."""
        while self.backlogged:
            drained = self._drained = anyio.Event()
            await drained.wait()

    async def flushed(self) -> None:
        """Return once every queued frame has been handed to the stream."""
        while self._bytes:
            flushed = self._flushed = anyio.Event()
            await flushed.wait()

    async def run(self) -> None:
        """Send queued frames until cancelled; raises what the stream raises (or
        `TimeoutError` for a stalled send)."""
        stream = self._stream
        while True:
            if not self._frames:
                wakeup = self._wakeup = anyio.Event()
                await wakeup.wait()
                continue
            data = self._take()
            with anyio.fail_after(self._send_timeout_s):
                await stream.send(data)
            self._bytes -= len(data)
            if self._on_sent is not None:
                self._on_sent()
            drained = self._drained
            if drained is not None and not self.backlogged:
                self._drained = None
                drained.set()
            flushed = self._flushed
            if flushed is not None and not self._bytes:
                self._flushed = None
                flushed.set()

    def _take(self) -> bytes:
        """Up to `coalesce_bytes_max` bytes of queued frames (at least one), joined."""
        frames = self._frames
        limit = self._coalesce_bytes_max
        size = 0
        count = 0
        for frame in frames:
            if count and size + len(frame) > limit:
                break
            size += len(frame)
            count += 1
        data = b"".join(frames[:count]) if count > 1 else frames[0]
        del frames[:count]
        return data
