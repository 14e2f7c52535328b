"""One TCP client connection of the bookie server, driven as an asyncio protocol.

`BookieServer` serves its TCP clients with `TransportConnection`s and keeps
`ServerConnection` (two tasks over an anyio byte stream) for listeners that are
not plain TCP (the simulated network).  Both give the `RequestProcessor` the same
connection and keep the same invariants; this one does it with callbacks instead
of tasks:

* bytes received are split into frames and handed to the processor in the
  transport's `data_received` callback;
* answers queued in one turn of the event loop are joined and handed to the
  transport once, at the end of that turn, so a group commit that releases a
  thousand acknowledgements costs one write, not a thousand.

Why two drivers: the tasks' machinery (a receive, a send under a timeout scope
and an event per batch, each through anyio's backend lookup) costs a bookie as
much CPU as the requests' own work (docs/protocol.md, section 9); the ledger
client's connections are driven the same way (`bookie.client.bookie_conn`).

Invariants (as `ServerConnection`'s):

* Unframeable input (`RemoteProtocolError`) closes this connection only;
  nothing of it reaches storage.
* Backpressure: while the transport holds more than
  `limits.socket_send_coalesce_bytes_max` bytes (it paused writing), no
  request is taken: the frames already received wait in `_held`, reading is
  paused, and TCP slows the client instead of the bookie's memory growing.
  Answers queued here are handed to the transport as soon as they pass the
  same bound, so a connection holds at most twice the bound plus one answer.
  Taking resumes when the transport resumes writing.
* A client that lets writing stay paused for `limits.socket_send_timeout_ms`
  (it stopped reading) has its connection closed.
* `stop_reading()` (graceful shutdown) takes no more requests; answers queued or
  released later are still sent until `close()`.  `flushed()` returns once every
  queued answer has reached the kernel.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Final, cast

import anyio

from bookie import limits
from bookie.clock import loop_clock_ms_reader
from bookie.errors import RemoteProtocolError
from bookie.server.processor import PendingItem, RequestProcessor
from bookie.wire.codec import FrameDecoder

_log = logging.getLogger(__name__)

_QUEUED_BYTES_MAX: Final = limits.socket_send_coalesce_bytes_max


class TransportConnection(asyncio.Protocol):
    """A TCP client connection.  `on_open` decides whether it is served (False: closed at
    once); `on_close` is called once when a served connection is gone."""

    def __init__(
        self,
        connection_id: int,
        processor: RequestProcessor,
        *,
        on_open: Callable[[TransportConnection], bool],
        on_close: Callable[[TransportConnection], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        self._now_ms = loop_clock_ms_reader()
        self._call_soon = loop.call_soon
        self._call_later = loop.call_later
        self._connection_id = connection_id
        self._process = processor.process
        self._on_open = on_open
        self._on_close = on_close
        self._pending: deque[PendingItem] = deque()
        self._transport: asyncio.Transport | None = None
        self._served = False
        self._decoder = FrameDecoder()
        self._frames: list[bytes] = []
        """Answers queued this turn of the loop, not yet handed to the transport."""
        self._frames_bytes = 0
        self._held: list[bytes] = []
        """Request frames received but not taken while writing is paused."""
        self._writing_paused = False
        self._reading_stopped = False
        self._stall_timer: asyncio.TimerHandle | None = None
        self._flush_waiter: anyio.Event | None = None

    # --- what the processor and the server use ------------------------------------------------

    @property
    def connection_id(self) -> int:
        return self._connection_id

    @property
    def pending(self) -> deque[PendingItem]:
        return self._pending

    @property
    def queued_bytes(self) -> int:
        """Bytes of answers queued here or in the transport, not yet taken by the kernel."""
        buffered = 0 if self._transport is None else self._transport.get_write_buffer_size()
        return self._frames_bytes + buffered

    def send(self, frame: bytes) -> None:
        """Queue one answer; it goes out with the others queued in this turn of the loop."""
        frames = self._frames
        frames.append(frame)
        self._frames_bytes += len(frame)
        if len(frames) == 1:
            self._call_soon(self._flush)

    def stop_reading(self) -> None:
        """Take no more requests; answers keep going out until `close()`."""
        self._reading_stopped = True
        self._held = []
        if self._transport is not None:
            self._transport.pause_reading()

    def close(self) -> None:
        """End the connection now; answers not yet handed to the kernel are dropped."""
        if self._transport is not None:
            self._transport.abort()

    async def flushed(self) -> None:
        """Return once every queued answer has been handed to the kernel (or the connection
        is gone).  For the graceful shutdown: it lowers the write buffer's bound to zero."""
        self._flush()
        transport = self._transport
        if transport is None or transport.is_closing() or not transport.get_write_buffer_size():
            return
        waiter = self._flush_waiter = anyio.Event()
        # Pauses writing now and resumes it (waking the waiter) once the buffer is empty.
        transport.set_write_buffer_limits(high=0, low=0)
        await waiter.wait()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP transport (uvloop's does not derive from asyncio.Transport).
        tcp = self._transport = cast(asyncio.Transport, transport)
        if not self._on_open(self):
            tcp.close()
            return
        self._served = True
        tcp.set_write_buffer_limits(high=_QUEUED_BYTES_MAX)

    def data_received(self, data: bytes) -> None:
        if self._reading_stopped:
            return
        try:
            frames = self._decoder.feed(data)
        except RemoteProtocolError as error:
            _log.warning("closing connection %d: %s", self._connection_id, error)
            self.close()
            return
        if self._held:  # taking waits for the transport: keep the order
            self._held.extend(frames)
        elif frames:
            self._take(frames)

    def eof_received(self) -> bool:
        return False  # the client is gone: close; `connection_lost` follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._frames = []
        self._held = []
        self._cancel_stall_timer()
        self._wake_flush_waiter()
        if self._served:
            self._served = False
            self._on_close(self)

    def pause_writing(self) -> None:
        self._writing_paused = True
        if self._transport is not None:
            self._transport.pause_reading()
        self._stall_timer = self._call_later(limits.socket_send_timeout_ms / 1000, self._stalled)

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._cancel_stall_timer()
        self._wake_flush_waiter()
        if self._reading_stopped:
            return
        held, self._held = self._held, []
        if held:
            self._take(held)
        if not self._writing_paused and self._transport is not None:
            self._transport.resume_reading()

    # --- internals ----------------------------------------------------------------------------

    def _take(self, frames: list[bytes]) -> None:
        """Hand request frames to the processor until answers back up; hold the rest."""
        now = self._now_ms()
        process = self._process
        for index, body in enumerate(frames):
            if self._frames_bytes > _QUEUED_BYTES_MAX:
                self._flush()  # the transport pauses writing if it cannot take them
            if self._writing_paused:
                self._held = frames[index:]
                return
            process(self, body, now)

    def _flush(self) -> None:
        frames = self._frames
        if not frames:
            return
        self._frames = []
        self._frames_bytes = 0
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(frames[0] if len(frames) == 1 else b"".join(frames))

    def _stalled(self) -> None:
        self._stall_timer = None
        _log.warning(
            "closing connection %d: the client took no answer for %d ms",
            self._connection_id,
            limits.socket_send_timeout_ms,
        )
        self.close()

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _wake_flush_waiter(self) -> None:
        if self._flush_waiter is not None:
            self._flush_waiter.set()
            self._flush_waiter = None
