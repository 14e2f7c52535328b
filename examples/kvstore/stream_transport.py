"""An asyncio transport over an anyio byte stream: RESP connections on listeners that are not TCP.

The RESP server drives its connections as `asyncio.Protocol`s (kvstore/server.py
says why).  A listener of another kind (the seeded simulation's network, a
test's memory streams) yields anyio byte streams; a `StreamTransport` runs one
connection's protocol over one with tasks, as the ledger client's
`BookieConnection.over` does: a reader hands what it receives to
`data_received`, never while reading is paused (what it received then waits,
one receive's worth), and a writer (an `Outbox`) sends what `write` queued,
coalesced.

Semantics, as the protocol relies on them from asyncio's socket transports:
`close` sends what was written, then closes; `abort` drops it and closes at
once; the peer's end of stream calls `eof_received` and then (the protocol
answers False) `close`; `connection_lost` is called exactly once, when `run`
ends, with the connection error that ended it or None.  Writing is never
paused: a send that stalls for `limits.send_timeout_ms` ends the connection,
as the server's watchdog ends one whose writing stays paused that long.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

import anyio
import anyio.abc

from bookie.outbox import Outbox
from kvstore import limits
from rsm import limits as rsm_limits

_CONNECTION_ERRORS: Final = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    OSError,
    TimeoutError,
)


class StreamTransport(asyncio.Transport):
    """`protocol`'s transport over `stream`; `run` is the connection's lifetime."""

    def __init__(self, stream: anyio.abc.ByteStream, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self._stream = stream
        self._protocol = protocol
        self._outbox = Outbox(
            stream,
            coalesce_bytes_max=rsm_limits.socket_send_coalesce_bytes_max,
            send_timeout_ms=limits.send_timeout_ms,
        )
        self._scope = anyio.CancelScope()
        self._close_requested = anyio.Event()
        self._closing = False
        self._paused = False
        self._resumed: anyio.Event | None = None
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
        except _CONNECTION_ERRORS as error:
            self._error = error
            self._scope.cancel()

    async def _read_loop(self) -> None:
        stream = self._stream
        while True:
            try:
                data = await stream.receive(rsm_limits.socket_receive_bytes)
            except anyio.EndOfStream:
                if not self._protocol.eof_received():
                    self.close()
                return
            # What was received while reading is paused waits here: one receive's worth.
            while self._paused and not self._closing:
                resumed = self._resumed = anyio.Event()
                await resumed.wait()
            if self._closing:
                return
            self._protocol.data_received(data)

    # --- asyncio.Transport --------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview[Any]) -> None:
        if not self._closing:
            self._outbox.put(bytes(data))

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
        self._paused = True

    def resume_reading(self) -> None:
        self._paused = False
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            resumed.set()
