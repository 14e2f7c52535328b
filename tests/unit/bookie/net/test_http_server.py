"""The admin HTTP server: routing, request heads, and one real exchange over loopback."""

from __future__ import annotations

import json

import anyio
import pytest

from bookie import limits
from bookie.address import Address
from bookie.errors import AdminUnavailable, HttpError, MethodNotAllowed
from bookie.net.http_server import Answer, Request, Routes, json_answer, parse_head, serve_http
from tests.unit.bookie.server.support import eventually

pytestmark = pytest.mark.anyio


async def _echo(request: Request) -> Answer:
    return json_answer(
        {"params": dict(request.params), "query": dict(request.query), "body": request.json()}
    )


def test_routes_bind_parameters_and_tell_404_from_405() -> None:
    routes = Routes()
    routes.add("GET", "/api/v1/ledgers/{ledger_id}", _echo)
    handler, params = routes.match("GET", "/api/v1/ledgers/12")
    assert handler is _echo
    assert params == {"ledger_id": "12"}
    with pytest.raises(HttpError) as not_found:
        routes.match("GET", "/api/v1/ledgers")
    assert not_found.value.status == 404
    with pytest.raises(MethodNotAllowed) as wrong_method:
        routes.match("POST", "/api/v1/ledgers/12")
    assert (wrong_method.value.status, wrong_method.value.methods) == (405, ["GET"])


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"nonsense", 400),
        (b"GET / HTTP/2", 505),
        (b"GET / HTTP/1.1\r\nbroken", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: x", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", 411),
        (f"POST / HTTP/1.1\r\nContent-Length: {limits.admin_body_bytes_max + 1}".encode(), 413),
        (b"POST / HTTP/1.1\r\nContent-Length: " + b"9" * 5000, 413),
        (b"POST / HTTP/1.1\r\nContent-Length: 1_0", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: +10", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 100\r\nContent-Length: 2", 400),
    ],
)
def test_bad_heads_get_a_status(head: bytes, status: int) -> None:
    with pytest.raises(HttpError) as refused:
        parse_head(head)
    assert refused.value.status == status


async def _exchange(port: int, request: bytes) -> tuple[bytes, bytes]:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        received = b""
        with anyio.fail_after(10):
            while True:
                try:
                    received += await stream.receive()
                except anyio.EndOfStream:
                    break
    head, _, body = received.partition(b"\r\n\r\n")
    return head, body


async def test_one_request_per_connection_over_loopback() -> None:
    routes = Routes()
    routes.add("POST", "/things/{name}", _echo)
    async with serve_http(Address("127.0.0.1", 0), routes) as bound:
        body = b'{"a": 1}'
        head, answer = await _exchange(
            bound.port,
            b"POST /things/x?n=2 HTTP/1.1\r\nHost: h\r\nContent-Length: 8\r\n\r\n" + body,
        )
        assert head.startswith(b"HTTP/1.1 200 OK")
        assert b"Connection: close" in head
        assert json.loads(answer) == {
            "params": {"name": "x"},
            "query": {"n": "2"},
            "body": {"a": 1},
        }
        head, answer = await _exchange(
            bound.port, b"POST /things/x HTTP/1.1\r\nContent-Length: 3\r\n\r\n{{{"
        )
        assert head.startswith(b"HTTP/1.1 400")
        assert "not JSON" in json.loads(answer)["error"]


async def test_a_port_in_use_is_a_clear_error() -> None:
    async with serve_http(Address("127.0.0.1", 0), Routes()) as bound:
        with pytest.raises(AdminUnavailable, match=r"cannot listen on 127\.0\.0\.1"):
            async with serve_http(bound, Routes()):
                pass


def _routes() -> Routes:
    routes = Routes()
    routes.add("GET", "/health", _echo)
    routes.add("POST", "/things/{name}", _echo)
    return routes


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"GET http://[::1/health HTTP/1.1\r\n\r\n", b"400"),
        (b"GET /health HTTP/1.1\r\nX-A: " + b"a" * 60_000 + b"\r\n\r\n", b"431"),
        (b"POST /things/x HTTP/1.1\r\nContent-Length: 60000\r\n\r\n" + b"[" * 60_000, b"400"),
        (b"OPTIONS /health HTTP/1.1\r\n\r\n", b"405"),
    ],
    ids=["bad target", "head in one read", "nested JSON", "method"],
)
async def test_bad_requests_are_answered_and_the_server_serves_on(
    request_bytes: bytes, status: bytes
) -> None:
    async with serve_http(Address("127.0.0.1", 0), _routes()) as bound:
        head, body = await _exchange(bound.port, request_bytes)
        assert head.split(b" ")[1] == status
        assert b"Traceback" not in body
        if status == b"405":
            assert b"\r\nAllow: GET\r\n" in head
        head, _ = await _exchange(bound.port, b"GET /health HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK")


async def test_a_handler_s_bug_is_a_500_that_does_not_show_its_text() -> None:
    async def broken(_: Request) -> Answer:
        raise ValueError("secret detail")

    routes = Routes()
    routes.add("GET", "/broken", broken)
    async with serve_http(Address("127.0.0.1", 0), routes) as bound:
        head, body = await _exchange(bound.port, b"GET /broken HTTP/1.1\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 500")
    assert b"secret" not in body


async def _health(port: int) -> bytes:
    """The status line's code of GET /health, or b"reset" for a connection closed unread."""
    try:
        head, _ = await _exchange(port, b"GET /health HTTP/1.1\r\n\r\n")
    except anyio.BrokenResourceError:
        return b"reset"
    return head.split(b" ")[1]


async def test_one_peer_cannot_take_every_connection() -> None:
    """One host's connections that never finish their request fill its share only: the next
    one is refused with a 503 (read to its end, not reset), and once they are gone the host
    is served again."""
    async with serve_http(Address("127.0.0.1", 0), _routes()) as bound:
        idle = [
            await anyio.connect_tcp("127.0.0.1", bound.port)
            for _ in range(limits.admin_connections_per_address_max)
        ]
        try:
            for stream in idle:
                await stream.send(b"G")  # a request that never ends
            for _ in range(20):
                assert await _health(bound.port) == b"503"
        finally:
            for stream in idle:
                await stream.aclose()

        async def served() -> bool:
            return await _health(bound.port) == b"200"

        await eventually(served, poll_s=0.01, timeout_s=10)
