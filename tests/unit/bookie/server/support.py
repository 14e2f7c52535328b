"""Helpers shared by the server and client tests: a server on a free loopback
port, entry packets, condition waits (local state, or queries that ask again) and raw
frame I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import cbor2

from bookie.server.server import BookieServer
from bookie.storage.api import LedgerStorage
from bookie.wire.codec import FrameDecoder
from bookie.wire.packet import Digest, DigestType, master_key

KEY = master_key(b"secret")
DIGEST = Digest(DigestType.CRC32C, b"secret")
DISK_FREE_BYTES = 600
DISK_TOTAL_BYTES = 1000


def packet(ledger_id: int, entry_id: int, lac: int | None = None) -> bytes:
    lac = entry_id - 1 if lac is None else lac
    return DIGEST.build_entry(ledger_id, entry_id, lac, 100 * (entry_id + 1), b"p" * 100)


@asynccontextmanager
async def running_server(storage: LedgerStorage, **options: Any) -> AsyncIterator[BookieServer]:
    """A BookieServer over `storage` on a free loopback port."""
    # A short drain: a test that leaves adds unsynced should not wait the full bound.
    options.setdefault("shutdown_drain_ms", 50)
    server = BookieServer(
        storage, lambda: (DISK_FREE_BYTES, DISK_TOTAL_BYTES), host="127.0.0.1", port=0, **options
    )
    async with server:
        yield server


async def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Let the event loop run until `condition()` holds; fail after `timeout_s`."""
    with anyio.fail_after(timeout_s):
        while not condition():
            await anyio.lowlevel.checkpoint()


async def eventually(
    check: Callable[[], Awaitable[bool]], *, poll_s: float, timeout_s: float
) -> None:
    """Ask `check()` (a query of a store or a cluster) every `poll_s` until it holds; fail
    after `timeout_s`."""
    with anyio.fail_after(timeout_s):
        while not await check():
            await anyio.sleep(poll_s)


async def read_bodies(
    stream: anyio.abc.ByteStream, count: int, timeout_s: float = 5.0
) -> list[Any]:
    """Read exactly `count` frames from a raw stream, as decoded CBOR items."""
    decoder = FrameDecoder()
    items: list[Any] = []
    with anyio.fail_after(timeout_s):
        while len(items) < count:
            data = await stream.receive()
            items.extend(cbor2.loads(body) for body in decoder.feed(data))
    assert len(items) == count
    return items


async def read_until_closed(stream: anyio.abc.ByteStream, timeout_s: float = 5.0) -> list[Any]:
    """Every frame the peer sends before closing the connection, as decoded CBOR items."""
    decoder = FrameDecoder()
    items: list[Any] = []
    with anyio.fail_after(timeout_s):
        while True:
            try:
                data = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return items
            items.extend(cbor2.loads(body) for body in decoder.feed(data))
