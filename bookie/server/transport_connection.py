"""One client connection of the bookie server, driven as an asyncio protocol.

`BookieServer` serves each client connection with a `TransportConnection`:
over asyncio's TCP transport, or over a `bookie.net.stream_transport.StreamTransport`
for a listener that is not plain TCP (the simulated network).  It gives the
`RequestProcessor` its connection:

* bytes received are split into frames and handed to the processor in the
  transport's `data_received` callback;
* answers queued in one turn of the event loop are joined and handed to the
  transport once, at the end of that turn (`bookie.net.framed_protocol`), so a
  group commit that releases a thousand acknowledgements costs one write.

Invariants:

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
from typing import Final

import anyio

from bookie import limits
from bookie.clock import loop_clock_ms_reader
from bookie.errors import RemoteProtocolError
from bookie.net.admission import peer_host
from bookie.net.framed_protocol import FramedProtocol
from bookie.server.processor import PendingItem, RequestProcessor
from bookie.wire.codec import FrameDecoder

_log = logging.getLogger(__name__)

_QUEUED_BYTES_MAX: Final = limits.socket_send_coalesce_bytes_max


class TransportConnection(FramedProtocol):
    """A client connection.  `on_open` decides whether it is served (False: closed at
    once); `on_close` is called once when a served connection is gone."""

    def __init__(
        self,
        connection_id: int,
        processor: RequestProcessor,
        *,
        on_open: Callable[[TransportConnection], bool],
        on_close: Callable[[TransportConnection], None],
    ) -> None:
        super().__init__(send_timeout_ms=limits.socket_send_timeout_ms)
        self._now_ms = loop_clock_ms_reader()
        self._connection_id = connection_id
        self._process = processor.process
        self._on_open = on_open
        self._on_close = on_close
        self._pending: deque[PendingItem] = deque()
        self._served = False
        self._decoder = FrameDecoder()
        self._held: list[bytes] = []
        """Request frames received but not taken while writing is paused."""
        self._reading_stopped = False
        self._flush_waiter: anyio.Event | None = None
        self.peer_host: str | None = None
        """The client's host, once connected (None over a stream without one)."""

    # --- what the processor and the server use ------------------------------------------------

    @property
    def connection_id(self) -> int:
        return self._connection_id

    @property
    def pending(self) -> deque[PendingItem]:
        return self._pending

    send = FramedProtocol.queue
    """Queue one answer; it goes out with the others queued in this turn of the loop."""

    def stop_reading(self) -> None:
        """Take no more requests; answers keep going out until `close()`."""
        self._reading_stopped = True
        self._held = []
        if self.transport is not None:
            self.transport.pause_reading()

    def close(self) -> None:
        """End the connection now; answers not yet handed to the kernel are dropped."""
        self.abort()

    async def flushed(self) -> None:
        """Return once every queued answer has been handed to the kernel (or the connection
        is gone).  For the graceful shutdown: it lowers the write buffer's bound to zero."""
        self.flush()
        transport = self.transport
        if transport is None or transport.is_closing() or not transport.get_write_buffer_size():
            return
        waiter = self._flush_waiter = anyio.Event()
        # Pauses writing now and resumes it (waking the waiter) once the buffer is empty.
        transport.set_write_buffer_limits(high=0, low=0)
        await waiter.wait()

    def send_stalled(self) -> None:
        _log.warning(
            "closing connection %d: the client took no answer for %d ms",
            self._connection_id,
            self.send_timeout_ms,
        )
        self.abort()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.peer_host = peer_host(transport.get_extra_info("peername"))
        if not self._on_open(self):
            transport.close()
            return
        self._served = True
        assert self.transport is not None
        self.transport.set_write_buffer_limits(high=_QUEUED_BYTES_MAX)

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
        super().connection_lost(exc)
        self._held = []
        self._wake_flush_waiter()
        if self._served:
            self._served = False
            self._on_close(self)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._wake_flush_waiter()
        if self._reading_stopped:
            return
        held, self._held = self._held, []
        if held:
            self._take(held)
        if not self.writing_paused and self.transport is not None:
            self.transport.resume_reading()

    # --- internals ----------------------------------------------------------------------------

    def _take(self, frames: list[bytes]) -> None:
        """Hand request frames to the processor until answers back up; hold the rest."""
        now = self._now_ms()
        process = self._process
        for index, body in enumerate(frames):
            if self._queued_bytes > _QUEUED_BYTES_MAX:
                self.flush()  # the transport pauses writing if it cannot take them
            if self.writing_paused:
                self._held = frames[index:]
                return
            process(self, body, now)

    def _wake_flush_waiter(self) -> None:
        if self._flush_waiter is not None:
            self._flush_waiter.set()
            self._flush_waiter = None
