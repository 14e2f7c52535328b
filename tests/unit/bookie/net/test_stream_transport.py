"""`StreamTransport`: an asyncio protocol over an anyio byte stream keeps the socket
transports' contract: reading pauses, flow control by water marks, close sends
what was written, abort drops it, `connection_lost` exactly once."""

from __future__ import annotations

import asyncio
from typing import cast

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from bookie.net.stream_transport import StreamTransport
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


class ScriptedStream:
    """Gives what the test feeds it to `receive`; `send` waits for the gate, then records."""

    def __init__(self) -> None:
        self.incoming_send, self.incoming = anyio.create_memory_object_stream[bytes | None](10)
        self.sent: list[bytes] = []
        self.gate = anyio.Event()
        self.gate.set()
        self.closed = False
        self.broken = False
        self.sending = False

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self.incoming.receive()
        if data is None:
            raise anyio.EndOfStream
        return data

    async def send(self, data: bytes) -> None:
        self.sending = True
        await self.gate.wait()
        if self.broken:
            raise anyio.BrokenResourceError
        self.sent.append(data)

    async def aclose(self) -> None:
        self.closed = True
        self.incoming_send.close()
        self.incoming.close()


class Recorder(asyncio.Protocol):
    def __init__(self) -> None:
        self.events: list[object] = []
        self.transport: StreamTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(StreamTransport, transport)
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.events.append(data)

    def eof_received(self) -> bool:
        self.events.append("eof")
        return False

    def pause_writing(self) -> None:
        self.events.append("pause")

    def resume_writing(self) -> None:
        self.events.append("resume")

    def connection_lost(self, exc: Exception | None) -> None:
        self.events.append(("lost", type(exc).__name__ if exc else None))


def transport_over(stream: ScriptedStream, protocol: Recorder) -> StreamTransport:
    return StreamTransport(
        cast(anyio.abc.ByteStream, stream),
        protocol,
        receive_bytes=1024,
        coalesce_bytes_max=1024,
        send_timeout_ms=1_000,
    )


async def test_received_data_waits_while_reading_is_paused_and_eof_closes() -> None:
    stream, protocol = ScriptedStream(), Recorder()
    transport = transport_over(stream, protocol)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(transport.run)
        await wait_for(lambda: protocol.events == ["made"])
        transport.pause_reading()
        await stream.incoming_send.send(b"one")
        await wait_for(lambda: stream.incoming.statistics().current_buffer_used == 0)
        for _ in range(10):
            await anyio.lowlevel.checkpoint()
        assert protocol.events == ["made"]
        transport.resume_reading()
        await wait_for(lambda: protocol.events == ["made", b"one"])
        transport.write(b"bye")
        await stream.incoming_send.send(None)
    assert protocol.events == ["made", b"one", "eof", ("lost", None)]
    assert stream.sent == [b"bye"]
    assert stream.closed


async def test_writing_pauses_above_the_high_water_mark_and_resumes_at_the_low() -> None:
    stream, protocol = ScriptedStream(), Recorder()
    stream.gate = anyio.Event()
    transport = transport_over(stream, protocol)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(transport.run)
        await wait_for(lambda: protocol.events == ["made"])
        transport.set_write_buffer_limits(high=10, low=2)
        transport.write(b"0123456789")
        assert protocol.events == ["made"]
        transport.write(b"a")
        assert protocol.events == ["made", "pause"]
        assert transport.get_write_buffer_size() == 11
        stream.gate.set()
        await wait_for(lambda: protocol.events == ["made", "pause", "resume"])
        assert b"".join(stream.sent) == b"0123456789a"
        transport.close()
    assert protocol.events[-1] == ("lost", None)


async def test_lowering_the_high_water_mark_below_the_buffer_pauses_at_once() -> None:
    stream, protocol = ScriptedStream(), Recorder()
    stream.gate = anyio.Event()
    transport = transport_over(stream, protocol)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(transport.run)
        await wait_for(lambda: protocol.events == ["made"])
        transport.write(b"abc")
        transport.set_write_buffer_limits(high=0, low=0)
        assert protocol.events == ["made", "pause"]
        stream.gate.set()
        await wait_for(lambda: protocol.events[-1] == "resume")
        transport.abort()


async def test_abort_drops_what_was_written_and_reports_the_loss_once() -> None:
    stream, protocol = ScriptedStream(), Recorder()
    stream.gate = anyio.Event()
    transport = transport_over(stream, protocol)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(transport.run)
        transport.write(b"never")
        await wait_for(lambda: stream.sending)  # the writer holds it, waiting on the stream
        transport.abort()
        transport.abort()
        transport.write(b"after")
    assert stream.sent == []
    assert protocol.events == ["made", ("lost", None)]
    assert transport.is_closing()
    assert stream.closed


async def test_a_broken_stream_ends_the_connection_with_its_error() -> None:
    stream, protocol = ScriptedStream(), Recorder()
    stream.broken = True
    transport = transport_over(stream, protocol)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(transport.run)
        transport.write(b"x")
    assert protocol.events == ["made", ("lost", "BrokenResourceError")]
