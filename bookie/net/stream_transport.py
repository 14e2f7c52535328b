"""`StreamTransport`: an asyncio transport over an anyio byte stream.

Connection shells are asyncio protocols (`bookie.net.framed_protocol`).  A
listener or connector that is not plain TCP (the seeded simulation's network,
a test's memory streams) yields anyio byte streams; a `StreamTransport` runs
one protocol over one stream with two tasks: a reader hands what it receives
to `data_received`, never while reading is paused (what it received then
waits, one receive's worth), and a writer (`bookie.net.outbox.Outbox`) sends
what `write` queued, coalesced.  So each shell has one driver, whatever its
stream.

Semantics, as protocols rely on them from asyncio's socket transports:

* `close` sends what was written, then closes; `abort` drops it and closes at
  once; the peer's end of stream calls `eof_received` and then, unless the
  protocol answers True, `close`;
* `connection_lost` is called exactly once, when `run` ends, with the
  connection error that ended it or None;
* flow control: when more than the high-water mark of written bytes wait,
  `pause_writing` is called; once they fall to the low-water mark,
  `resume_writing` (`set_write_buffer_limits`, asyncio's defaults: 64 KiB high,
  a quarter of it low).  A single send that stalls for `send_timeout_ms` also
  ends the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.abc

from bookie import limits
from bookie.net.connection_errors import CONNECTION_ERRORS
from bookie.net.outbox import Outbox

_HIGH_WATER_BYTES_DEFAULT: Final = 64 * 1024


class StreamTransport(asyncio.Transport):
    """`protocol`'s transport over `stream`; `run` is the connection's lifetime.  The
    bounds default to the bookie protocol's (`bookie.limits`)."""

    def __init__(
        self,
        stream: anyio.abc.ByteStream,
        protocol: asyncio.Protocol,
        *,
        receive_bytes: int = limits.socket_receive_bytes,
        coalesce_bytes_max: int = limits.socket_send_coalesce_bytes_max,
        send_timeout_ms: int = limits.socket_send_timeout_ms,
    ) -> None:
        super().__init__()
        self._stream = stream
        self._protocol = protocol
        self._receive_bytes = receive_bytes
        self._outbox = Outbox(
            stream,
            coalesce_bytes_max=coalesce_bytes_max,
            send_timeout_ms=send_timeout_ms,
            on_sent=self._on_sent,
        )
        self._scope = anyio.CancelScope()
        self._close_requested = anyio.Event()
        self._closing = False
        self._reading_paused = False
        self._resumed: anyio.Event | None = None
        self._high_water_bytes = _HIGH_WATER_BYTES_DEFAULT
        self._low_water_bytes = _HIGH_WATER_BYTES_DEFAULT // 4
        self._writing_paused = False
        self._error: Exception | None = None

    async def run(self) -> None:
        """Serve the connection until it is closed, aborted or broken."""
        self._protocol.connection_made(self)
        try:
            with self._scope:
                async with anyio.create_task_group() as task_group:
                    task_group.start_soon(self._guard, self._outbox.run)
                    task_group.start_soon(self._guard, self._read_loop)
                    await self._close_requested.wait()
                    await self._outbox.flushed()
                    self._scope.cancel()
        finally:
            self._closing = True
            self._outbox.clear()
            with anyio.CancelScope(shield=True):
                await self._stream.aclose()
            self._protocol.connection_lost(self._error)

    async def _guard(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run the reader or the writer; a connection error ends the connection."""
        try:
            await loop()
        except CONNECTION_ERRORS as error:
            self._error = error
            self._scope.cancel()

    async def _read_loop(self) -> None:
        stream = self._stream
        while True:
            try:
                data = await stream.receive(self._receive_bytes)
            except anyio.EndOfStream:
                if not self._protocol.eof_received():
                    self.close()
                return
            while self._reading_paused and not self._closing:
                resumed = self._resumed = anyio.Event()
                await resumed.wait()
            if self._closing:
                return
            self._protocol.data_received(data)

    def _on_sent(self) -> None:
        if self._writing_paused and self._outbox.queued_bytes <= self._low_water_bytes:
            self._writing_paused = False
            self._protocol.resume_writing()

    def _check_high_water(self) -> None:
        if not self._writing_paused and self._outbox.queued_bytes > self._high_water_bytes:
            self._writing_paused = True
            self._protocol.pause_writing()

    # --- asyncio.Transport --------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        if not self._closing:
            self._outbox.put(bytes(data))
            self._check_high_water()

    def get_write_buffer_size(self) -> int:
        return self._outbox.queued_bytes

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _HIGH_WATER_BYTES_DEFAULT if low is None else 4 * low
        if low is None:
            low = high // 4
        assert 0 <= low <= high
        self._high_water_bytes = high
        self._low_water_bytes = low
        self._check_high_water()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True
        self._close_requested.set()

    def abort(self) -> None:
        self._closing = True
        self._outbox.clear()
        self._scope.cancel()

    def pause_reading(self) -> None:
        self._reading_paused = True

    def resume_reading(self) -> None:
        self._reading_paused = False
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            resumed.set()
