"""`Outbox`: frames go out coalesced up to the bound, and backpressure holds while a
slow stream leaves more than the bound queued."""

from __future__ import annotations

from typing import cast

import anyio
import anyio.abc
import pytest

from bookie.net.outbox import Outbox
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


class GatedStream:
    """Records each send; a send returns only once the test opens the gate."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.gate = anyio.Event()

    async def send(self, data: bytes) -> None:
        await self.gate.wait()
        self.sent.append(data)


def outbox_on(stream: GatedStream, bound: int = 10) -> Outbox:
    return Outbox(
        cast(anyio.abc.ByteStream, stream), coalesce_bytes_max=bound, send_timeout_ms=1_000
    )


async def send_all(stream: GatedStream, outbox: Outbox) -> None:
    """Open the stream and run the outbox until everything queued was sent."""
    stream.gate.set()
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(outbox.run)
        with anyio.fail_after(5):
            await outbox.flushed()
        task_group.cancel_scope.cancel()


async def test_queued_frames_go_out_joined_up_to_the_bound() -> None:
    stream = GatedStream()
    outbox = outbox_on(stream)
    for frame in (b"aaaa", b"bbbb", b"cc", b"dddddddd"):
        outbox.put(frame)
    await send_all(stream, outbox)
    assert stream.sent == [b"aaaabbbbcc", b"dddddddd"]
    assert outbox.queued_bytes == 0


async def test_a_frame_larger_than_the_bound_goes_out_alone() -> None:
    stream = GatedStream()
    outbox = outbox_on(stream, bound=4)
    outbox.put(b"0123456789")
    outbox.put(b"ab")
    await send_all(stream, outbox)
    assert stream.sent == [b"0123456789", b"ab"]


async def test_backpressure_holds_until_the_stream_takes_the_backlog() -> None:
    stream = GatedStream()
    outbox = outbox_on(stream)
    drained = False

    async def reader() -> None:
        nonlocal drained
        await outbox.wait_drained()
        drained = True

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(outbox.run)
        outbox.put(b"x" * 8)
        outbox.put(b"y" * 8)
        assert outbox.backlogged
        task_group.start_soon(reader)
        await wait_for(lambda: outbox.queued_bytes == 16)
        assert not drained, "the stream has not taken anything yet"
        stream.gate.set()
        await wait_for(lambda: drained)
        assert not outbox.backlogged
        task_group.cancel_scope.cancel()


async def test_a_stalled_send_ends_run_with_a_timeout() -> None:
    stream = GatedStream()
    outbox = Outbox(cast(anyio.abc.ByteStream, stream), coalesce_bytes_max=10, send_timeout_ms=50)
    outbox.put(b"never taken")
    with anyio.fail_after(5), pytest.raises(TimeoutError):
        await outbox.run()
