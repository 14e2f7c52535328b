"""One client connection of the bookie server: socket in, frames to the processor, socket out.

A `ServerConnection` runs two loops on one TCP stream:

* the reader receives up to `limits.socket_receive_bytes` at a time, splits
  frames with `FrameDecoder` and hands each body to the `RequestProcessor`;
* the writer sends every queued response frame in one `send` (up to
  `limits.socket_send_coalesce_bytes_max` bytes), so a group commit that
  releases a thousand acknowledgements costs one system call, not a thousand.

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
from bookie.errors import RemoteProtocolError
from bookie.server.processor import PendingItem, RequestProcessor, now_ms
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
        self._output: list[bytes] = []
        self._output_bytes = 0
        self._writer_wakeup: anyio.Event | None = None
        self._drained: anyio.Event | None = None
        """Set when the output falls back under the bound the reader waits on."""
        self._flushed: anyio.Event | None = None
        """Set when the output is empty (graceful shutdown waits on it)."""
        self._reader_scope = anyio.CancelScope()
        self._scope = anyio.CancelScope()

    @property
    def connection_id(self) -> int:
        return self._connection_id

    @property
    def pending(self) -> deque[PendingItem]:
        return self._pending

    def send(self, frame: bytes) -> None:
        self._output.append(frame)
        self._output_bytes += len(frame)
        wakeup = self._writer_wakeup
        if wakeup is not None:
            self._writer_wakeup = None
            wakeup.set()

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
        while self._output_bytes:
            flushed = self._flushed = anyio.Event()
            await flushed.wait()

    # --- loops --------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        decoder = FrameDecoder()
        stream = self._stream
        process = self._processor.process
        output_bytes_max = limits.socket_send_coalesce_bytes_max
        try:
            while True:
                # No timeout: an idle client connection is healthy; every
                # request it sends is answered on its own schedule.
                data = await stream.receive(limits.socket_receive_bytes)
                frames = decoder.feed(data)
                if not frames:
                    continue
                now = now_ms()
                for body in frames:
                    if self._output_bytes > output_bytes_max:
                        await self._wait_drained()
                    process(self, body, now)
        except _CONNECTION_ERRORS:
            return
        except RemoteProtocolError as error:
            _log.warning("closing connection %d: %s", self._connection_id, error)

    async def _wait_drained(self) -> None:
        while self._output_bytes > limits.socket_send_coalesce_bytes_max:
            drained = self._drained = anyio.Event()
            await drained.wait()

    async def _write_loop(self) -> None:
        stream = self._stream
        timeout_s = limits.socket_send_timeout_ms / 1000
        try:
            while True:
                if not self._output:
                    wakeup = self._writer_wakeup = anyio.Event()
                    await wakeup.wait()
                    continue
                data = self._take_output()
                with anyio.fail_after(timeout_s):
                    await stream.send(data)
                self._output_bytes -= len(data)
                drained = self._drained
                if drained is not None and (
                    self._output_bytes <= limits.socket_send_coalesce_bytes_max
                ):
                    self._drained = None
                    drained.set()
                flushed = self._flushed
                if flushed is not None and not self._output_bytes:
                    self._flushed = None
                    flushed.set()
        except _CONNECTION_ERRORS:
            self._scope.cancel()

    def _take_output(self) -> bytes:
        """Up to `socket_send_coalesce_bytes_max` bytes of queued frames, joined."""
        output = self._output
        size = 0
        count = 0
        for frame in output:
            if count and size + len(frame) > limits.socket_send_coalesce_bytes_max:
                break
            size += len(frame)
            count += 1
        data = b"".join(output[:count]) if count > 1 else output[0]
        del output[:count]
        return data
