"""The admin HTTP server: routing, request heads, and one real exchange over loopback."""

from __future__ import annotations

import json

import anyio
import pytest

from bookie import limits
from bookie.address import Address
from bookie.errors import AdminUnavailable, HttpError
from bookie.net.http_server import Answer, Request, Routes, json_answer, parse_head, serve_http

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
    with pytest.raises(HttpError) as wrong_method:
        routes.match("POST", "/api/v1/ledgers/12")
    assert wrong_method.value.status == 405


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"nonsense", 400),
        (b"GET / HTTP/2", 505),
        (b"GET / HTTP/1.1\r\nbroken", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: x", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked", 411),
        (f"POST / HTTP/1.1\r\nContent-Length: {limits.admin_body_bytes_max + 1}".encode(), 413),
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
