"""`FramedProtocol`: frames queued in one turn of the loop go out in one write, in
order; a stall timer runs only while writing is paused and fires once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from bookie.net.framed_protocol import FramedProtocol
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closing = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.aborted = self.closing = True


class Stalls(FramedProtocol):
    def __init__(self, send_timeout_ms: int) -> None:
        super().__init__(send_timeout_ms=send_timeout_ms)
        self.stalls = 0

    def send_stalled(self) -> None:
        self.stalls += 1


async def callbacks_run() -> None:
    """Return once the callbacks scheduled so far (a queued flush) have run: the loop runs
    them in order, so a marker scheduled now runs after them."""
    ran: list[bool] = []
    asyncio.get_running_loop().call_soon(ran.append, True)
    await wait_for(lambda: bool(ran))


async def test_frames_queued_in_one_turn_go_out_in_one_write_in_order() -> None:
    protocol = FramedProtocol(send_timeout_ms=1_000)
    transport = RecordingTransport()
    protocol.connection_made(transport)
    for frame in (b"a", b"bb", b"ccc"):
        protocol.queue(frame)
    assert transport.writes == []
    assert protocol.queued_bytes == 6
    await callbacks_run()
    protocol.queue(b"d")
    await callbacks_run()
    assert transport.writes == [b"abbccc", b"d"]
    assert protocol.queued_bytes == 0


async def test_frames_queued_before_the_connection_is_made_wait_for_it() -> None:
    protocol = FramedProtocol(send_timeout_ms=1_000)
    protocol.queue(b"early")
    await callbacks_run()
    transport = RecordingTransport()
    protocol.connection_made(transport)
    await callbacks_run()
    assert transport.writes == [b"early"]


async def test_nothing_is_written_once_the_transport_is_closing_or_lost() -> None:
    protocol = FramedProtocol(send_timeout_ms=1_000)
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.queue(b"x")
    transport.closing = True
    await callbacks_run()
    protocol.write(b"y")
    transport.closing = False
    protocol.queue(b"z")
    protocol.connection_lost(None)
    await callbacks_run()
    assert transport.writes == []


async def test_a_pause_that_lasts_the_send_timeout_is_reported_once() -> None:
    protocol = Stalls(send_timeout_ms=20)
    protocol.connection_made(RecordingTransport())
    protocol.pause_writing()
    protocol.pause_writing()  # a second pause does not start a second timer
    assert protocol.writing_paused
    await wait_for(lambda: protocol.stalls == 1)
    assert protocol._stall_timer is None  # nothing left to fire again


async def test_resuming_or_losing_the_connection_stops_the_stall_timer() -> None:
    resumed = Stalls(send_timeout_ms=20)
    resumed.connection_made(RecordingTransport())
    resumed.pause_writing()
    resumed.resume_writing()
    lost = Stalls(send_timeout_ms=20)
    lost.connection_made(RecordingTransport())
    lost.pause_writing()
    lost.connection_lost(None)
    lost.pause_writing()  # asyncio may still say so after the loss: no timer then
    assert (resumed._stall_timer, resumed.writing_paused) == (None, False)
    assert lost._stall_timer is None


async def test_by_default_a_stalled_connection_is_aborted() -> None:
    protocol = FramedProtocol(send_timeout_ms=20)
    transport = RecordingTransport()
    protocol.connection_made(transport)
    protocol.pause_writing()
    await wait_for(lambda: transport.aborted)
