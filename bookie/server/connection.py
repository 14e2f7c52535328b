"""One client connection of the bookie server over an anyio byte stream: stream in,
frames to the processor, stream out.

The server uses it for listeners that are not plain TCP (the simulated
network); TCP clients get the callback-driven `TransportConnection`, which
keeps the same invariants.  A `ServerConnection` runs two loops on one stream:

* the reader receives up to `limits.socket_receive_bytes` at a time, splits
  frames with `FrameDecoder` and hands each body to the `RequestProcessor`;
* the writer (`bookie.outbox.Outbox`) sends every queued response frame
  in one `send` (up to `limits.socket_send_coalesce_bytes_max` bytes), so a group
  commit that releases a thousand acknowledgements costs one system call, not a
  thousand.

Responses carry their request id, so they go out in whatever order they are
ready: a read is answered while earlier adds still wait for their sync.

Invariants:

* Unframeable or undecodable-without-request-id input (`RemoteProtocolError`)
  closes this connection only; nothing of it reaches storage.
* The reader stops taking requests while more than
  `limits.socket_send_coalesce_bytes_max` bytes of answers wait to be sent, so a
  client that does not read its answers is slowed by TCP instead of growing
  the bookie's memory; a send that stalls for `limits.socket_send_timeout_ms`
  closes the connection.
* `stop_reading()` (graceful shutdown) stops the reader only: answers still
  queued or released later are sent until `close()`.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Final

import anyio
import anyio.abc

from bookie import limits
from bookie.clock import loop_clock_ms
from bookie.errors import RemoteProtocolError
from bookie.outbox import Outbox
from bookie.server.processor import PendingItem, RequestProcessor
from bookie.wire.codec import FrameDecoder

_log = logging.getLogger(__name__)

# What a broken or closed socket raises through anyio.
_CONNECTION_ERRORS: Final = (
    anyio.EndOfStream,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
    TimeoutError,
)


class ServerConnection:
    """A client connection; `run()` serves it until the client leaves or `close()`."""

    def __init__(
        self, connection_id: int, stream: anyio.abc.ByteStream, processor: RequestProcessor
    ) -> None:
        self._connection_id = connection_id
        self._stream = stream
        self._processor = processor
        self._pending: deque[PendingItem] = deque()
        self._outbox = Outbox(
            stream,
            coalesce_bytes_max=limits.socket_send_coalesce_bytes_max,
            send_timeout_ms=limits.socket_send_timeout_ms,
        )
        self._reader_scope = anyio.CancelScope()
        self._scope = anyio.CancelScope()

    @property
    def connection_id(self) -> int:
        return self._connection_id

    @property
    def pending(self) -> deque[PendingItem]:
        return self._pending

    @property
    def queued_bytes(self) -> int:
        """Bytes of answers queued and not yet handed to the stream."""
        return self._outbox.queued_bytes

    def send(self, frame: bytes) -> None:
        self._outbox.put(frame)

    # --- lifetime -----------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve the connection; returns once it is over (the stream is left open)."""
        with self._scope:
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(self._write_loop)
                with self._reader_scope:
                    await self._read_loop()
                if not self._reader_scope.cancel_called:
                    # The client left or broke the protocol: nobody to answer.
                    self._scope.cancel()
                # Otherwise a graceful shutdown stopped the reader: the writer
                # goes on sending the last answers until `close()`.

    def stop_reading(self) -> None:
        """Take no more requests; answers keep going out until `close()`."""
        self._reader_scope.cancel()

    def close(self) -> None:
        """End the connection now (`run` returns)."""
        self._scope.cancel()

    async def flushed(self) -> None:
        """Return once every queued answer has been handed to the socket."""
        await self._outbox.flushed()

    # --- loops --------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        decoder = FrameDecoder()
        stream = self._stream
        process = self._processor.process
        outbox = self._outbox
        try:
            while True:
                # No timeout: an idle client connection is healthy; every
                # request it sends is answered on its own schedule.
                data = await stream.receive(limits.socket_receive_bytes)
                frames = decoder.feed(data)
                if not frames:
                    continue
                now = loop_clock_ms()
                for body in frames:
                    if outbox.backlogged:
                        await outbox.wait_drained()
                    process(self, body, now)
        except _CONNECTION_ERRORS:
            return
        except RemoteProtocolError as error:
            _log.warning("closing connection %d: %s", self._connection_id, error)

    async def _write_loop(self) -> None:
        try:
            await self._outbox.run()
        except _CONNECTION_ERRORS:
            self._scope.cancel()
