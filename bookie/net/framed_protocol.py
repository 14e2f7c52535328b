"""`FramedProtocol`: what every connection shell driven as an asyncio protocol shares.

The bookie server's client connections, the ledger client's connections to
bookies and the key-value store's RESP connections are asyncio protocols, whose
callbacks run on the event loop without a task per connection (docs/protocol.md,
section 9, says why).  They run over asyncio's socket transports, or over a
`bookie.net.stream_transport.StreamTransport` for any other anyio byte stream
(the simulated network).  This base gives them:

* **Per-loop-turn coalescing.**  `queue(frame)` keeps a frame until the end of
  the current turn of the event loop; then `flush()` hands every frame queued
  in that turn to the transport in one `write`, so a group commit that releases
  a thousand answers costs one system call, not a thousand.  `write(data)`
  writes at once, for a subclass that orders its own output.
* **Send-stall detection.**  The transport pauses writing when its buffer
  passes its high-water mark: the peer stopped reading.  A timer of
  `send_timeout_ms` starts then and stops when writing resumes; when it fires,
  `send_stalled()` is called (by default: abort the connection).  One timer
  per stall, none per message.

Invariants: frames go to the transport in the order they were queued; nothing
is written after `connection_lost`; `send_stalled` is called at most once per
pause, and never after writing resumed or the connection was lost.
"""

from __future__ import annotations

import asyncio
from typing import cast


class FramedProtocol(asyncio.Protocol):
    """The shared half of a connection protocol (see the module docstring).

    Subclasses that override the asyncio callbacks call this class's version."""

    def __init__(self, *, send_timeout_ms: int) -> None:
        assert send_timeout_ms > 0
        loop = asyncio.get_running_loop()
        # Looked up once: each lookup through asyncio costs a system call on CPython 3.11.
        self._call_soon = loop.call_soon
        self._call_later = loop.call_later
        self._send_timeout_s = send_timeout_ms / 1000
        self.send_timeout_ms = send_timeout_ms
        self.transport: asyncio.Transport | None = None
        """Set by `connection_made`; kept after the connection is lost."""
        self.writing_paused = False
        """The transport paused writing and has not resumed it."""
        self._queued: list[bytes] = []
        """Frames queued this turn of the loop, not yet handed to the transport."""
        self._queued_bytes = 0
        self._stall_timer: asyncio.TimerHandle | None = None
        self._lost = False

    # --- output -------------------------------------------------------------------------------

    @property
    def queued_bytes(self) -> int:
        """Bytes queued here or in the transport, not yet taken by the kernel."""
        transport = self.transport
        buffered = 0 if transport is None else transport.get_write_buffer_size()
        return self._queued_bytes + buffered

    def queue(self, frame: bytes) -> None:
        """Queue `frame`; it goes out with the others queued in this turn of the loop."""
        queued = self._queued
        queued.append(frame)
        self._queued_bytes += len(frame)
        if len(queued) == 1:
            self._call_soon(self.flush)

    def flush(self) -> None:
        """Hand every queued frame to the transport now, in one write (frames queued
        before the connection is made wait for it)."""
        queued = self._queued
        transport = self.transport
        if not queued or transport is None:
            return
        self._queued = []
        self._queued_bytes = 0
        if not transport.is_closing():
            transport.write(queued[0] if len(queued) == 1 else b"".join(queued))

    def write(self, data: bytes) -> None:
        """Hand `data` to the transport now (dropped once the transport is closing)."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def drop_queued(self) -> None:
        """Forget the frames queued and not yet handed to the transport."""
        self._queued = []
        self._queued_bytes = 0

    def abort(self) -> None:
        """End the connection now; what the transport still buffers is dropped."""
        if self.transport is not None:
            self.transport.abort()

    def send_stalled(self) -> None:
        """Writing stayed paused for `send_timeout_ms`: the peer stopped reading.

        Subclasses say so in their own words; by default the connection is aborted."""
        self.abort()

    # --- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A TCP transport (uvloop's does not derive from asyncio.Transport) or a StreamTransport.
        self.transport = cast(asyncio.Transport, transport)
        if self._queued:
            self._call_soon(self.flush)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.drop_queued()
        self._cancel_stall_timer()

    def pause_writing(self) -> None:
        self.writing_paused = True
        if self._stall_timer is None and not self._lost:
            self._stall_timer = self._call_later(self._send_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._cancel_stall_timer()

    # --- internals ----------------------------------------------------------------------------

    def _stalled(self) -> None:
        self._stall_timer = None
        self.send_stalled()

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
