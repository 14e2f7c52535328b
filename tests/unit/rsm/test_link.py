"""`rsm.link.Link` against a scripted replica on a real loopback socket: requests
taken while connecting, answers matched by id in any order, and every waiter told
exactly once, `LinkLost.sent` saying whether the request may have arrived."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from bookie.wire.codec import FrameDecoder
from rsm.core.protocol import (
    CallRequest,
    Consistency,
    QueryRequest,
    Request,
    decode_request,
    encode_response,
)
from rsm.core.sessions import Outcome
from rsm.errors import StatusError
from rsm.link import Link, LinkLost, Response
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio

Replica = Callable[[anyio.abc.SocketStream], Awaitable[None]]


class Recorder:
    def __init__(self) -> None:
        self.responses: list[Response] = []
        self.losses: list[LinkLost] = []

    @property
    def told(self) -> int:
        return len(self.responses) + len(self.losses)

    def answered(self, response: Response) -> None:
        self.responses.append(response)

    def lost(self, error: LinkLost) -> None:
        self.losses.append(error)


def query(request_id: int, name: str = "get") -> QueryRequest:
    return QueryRequest(request_id, name, [], {}, Consistency.LINEARIZABLE, 0)


async def requests_of(stream: anyio.abc.SocketStream, count: int) -> list[Request]:
    decoder = FrameDecoder()
    requests: list[Request] = []
    while len(requests) < count:
        requests += [decode_request(body) for body in decoder.feed(await stream.receive())]
    return requests


def answer(request: Request, value: object) -> bytes:
    return encode_response(2, request.request_id, Outcome(value=value), 7)


@asynccontextmanager
async def link_to(replica: Replica, *, answer_timeout_ms: int | None = None) -> AsyncIterator[Link]:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def connector(address: str) -> anyio.abc.ByteStream:
        return await anyio.connect_tcp("127.0.0.1", port)

    link = Link(
        f"127.0.0.1:{port}",
        connector,
        connect_timeout_ms=2_000,
        answer_timeout_ms=answer_timeout_ms,
    )

    async def serve(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            await replica(stream)

    async with listener, anyio.create_task_group() as task_group:
        task_group.start_soon(listener.serve, serve)
        task_group.start_soon(link.run)
        with anyio.fail_after(10):
            yield link
        task_group.cancel_scope.cancel()


async def test_answers_are_matched_by_request_id_in_any_order() -> None:
    async def replica(stream: anyio.abc.SocketStream) -> None:
        first, second = await requests_of(stream, 2)
        await stream.send(answer(second, "two") + answer(first, "one"))
        await anyio.sleep_forever()

    one, two = Recorder(), Recorder()
    async with link_to(replica) as link:
        link.send(query(1), one)  # taken while the link is still connecting
        link.send(query(2), two)
        assert link.waiting_count == 2
        await wait_for(lambda: one.told and two.told)
        assert link.waiting_count == 0
    assert [(r.request_id, r.value, r.log_index) for r in one.responses] == [(1, "one", 7)]
    assert [(r.request_id, r.value) for r in two.responses] == [(2, "two")]


async def test_when_the_replica_leaves_every_waiter_learns_its_request_may_have_arrived() -> None:
    async def replica(stream: anyio.abc.SocketStream) -> None:
        await requests_of(stream, 2)
        await stream.aclose()

    waiters = [Recorder(), Recorder()]
    async with link_to(replica) as link:
        for request_id, waiter in enumerate(waiters, start=1):
            link.send(query(request_id), waiter)
        await wait_for(lambda: link.closed)
        late = Recorder()
        link.send(query(3), late)
    assert [(w.told, w.losses[0].sent) for w in waiters] == [(1, True), (1, True)]
    assert [loss.sent for loss in late.losses] == [False]  # told at once: never sent


async def test_a_replica_that_cannot_be_reached_sent_nothing() -> None:
    async def refuse(address: str) -> anyio.abc.ByteStream:
        raise OSError("connection refused")

    waiter = Recorder()
    link = Link("127.0.0.1:1", refuse, connect_timeout_ms=1_000)
    link.send(query(1), waiter)
    await link.run()
    assert [(loss.sent, "connection refused" in str(loss)) for loss in waiter.losses] == [
        (False, True)
    ]


async def test_a_silent_replica_ends_the_link_after_the_answer_timeout() -> None:
    async def silent(stream: anyio.abc.SocketStream) -> None:
        await anyio.sleep_forever()

    waiter = Recorder()
    async with link_to(silent, answer_timeout_ms=100) as link:
        link.send(query(1), waiter)
        await wait_for(lambda: waiter.told == 1)
    assert [loss.sent for loss in waiter.losses] == [True]
    assert "no answer" in str(waiter.losses[0])


async def test_a_forgotten_request_is_never_told() -> None:
    async def replica(stream: anyio.abc.SocketStream) -> None:
        first, second = await requests_of(stream, 2)
        await stream.send(answer(first, "late") + answer(second, "on time"))
        await anyio.sleep_forever()

    forgotten, kept = Recorder(), Recorder()
    async with link_to(replica) as link:
        link.send(query(1), forgotten)
        link.forget(1)
        link.send(query(2), kept)
        await wait_for(lambda: kept.told == 1)
    assert forgotten.told == 0


async def test_garbage_from_the_replica_ends_the_link() -> None:
    async def garbage(stream: anyio.abc.SocketStream) -> None:
        await requests_of(stream, 1)
        await stream.send(b"\x00\x00\x00\x03\xff\xff\xff")
        await anyio.sleep_forever()

    waiter = Recorder()
    async with link_to(garbage) as link:
        link.send(query(1), waiter)
        await wait_for(lambda: waiter.told == 1)
        assert link.closed
    assert [loss.sent for loss in waiter.losses] == [True]


async def test_a_request_the_protocol_cannot_carry_raises_and_is_not_sent() -> None:
    async def replica(stream: anyio.abc.SocketStream) -> None:
        (request,) = await requests_of(stream, 1)
        await stream.send(answer(request, "fine"))
        await anyio.sleep_forever()

    bad, good = Recorder(), Recorder()
    async with link_to(replica) as link:
        with pytest.raises(StatusError):
            link.send(CallRequest(1, "set", [object()], {}, 1, 1, 0), bad)
        link.send(query(2), good)
        await wait_for(lambda: good.told == 1)
        assert link.waiting_count == 0
    assert (bad.told, [r.value for r in good.responses]) == (0, ["fine"])
