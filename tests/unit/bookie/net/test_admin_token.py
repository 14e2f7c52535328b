"""The admin token: read from its file, required on every POST of an admin server, counted."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bookie.address import Address
from bookie.errors import InvalidConfig
from bookie.metrics import exposition, registry
from bookie.net.admin_token import ADMIN_TOKEN_FILE_ENV, AdminGuard, admin_token_from_environment
from bookie.net.http_server import Answer, Request, common_routes, json_answer, serve_http

pytestmark = pytest.mark.anyio

TOKEN = "t0ken-for-tests"


def test_the_guard_refuses_a_missing_or_wrong_token_and_counts() -> None:
    guard = AdminGuard(TOKEN.encode())
    assert guard.refusal(f"Bearer {TOKEN}") is None
    assert guard.refusal(f"bearer  {TOKEN} ") is None
    missing = [guard.refusal(header) for header in (None, "", TOKEN, f"Basic {TOKEN}")]
    assert {error.status for error in missing if error is not None} == {401}
    wrong = [guard.refusal(header) for header in ("Bearer x", f"Bearer {TOKEN}x", "Bearer ")]
    assert {error.status for error in wrong if error is not None} == {403}
    assert (guard.missing, guard.wrong) == (4, 3)
    text = exposition([registry(guard.families)]).decode()
    assert 'admin_requests_refused_total{reason="missing"} 4.0' in text
    assert 'admin_requests_refused_total{reason="wrong"} 3.0' in text
    assert all(TOKEN not in str(error) for error in [*missing, *wrong])


def test_the_token_comes_from_its_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ADMIN_TOKEN_FILE_ENV, raising=False)
    assert admin_token_from_environment() is None
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    monkeypatch.setenv(ADMIN_TOKEN_FILE_ENV, str(path))
    assert admin_token_from_environment() == TOKEN.encode()
    path.write_text("")
    with pytest.raises(InvalidConfig, match=f"^{ADMIN_TOKEN_FILE_ENV}={path}: the file is empty"):
        admin_token_from_environment()


async def _ready(_: Request) -> Answer:
    return json_answer({"ready": True})


async def _status(port: int, request: bytes) -> tuple[int, bytes]:
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        received = b""
        while True:
            try:
                received += await stream.receive()
            except anyio.EndOfStream:
                break
    return int(received.split(b" ", 2)[1]), received


async def test_posts_need_the_token_and_gets_do_not(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    monkeypatch.setenv(ADMIN_TOKEN_FILE_ENV, str(path))
    routes = common_routes(lambda: b"", _ready, {})
    posted: list[bytes] = []

    async def act(request: Request) -> Answer:
        posted.append(request.body)
        return json_answer({"done": True}, 202)

    routes.add("POST", "/act", act)
    post = b"POST /act HTTP/1.1\r\nContent-Length: 2\r\n%s\r\n{}"
    async with serve_http(Address("127.0.0.1", 0), routes) as bound:
        assert (await _status(bound.port, post % b""))[0] == 401
        assert (await _status(bound.port, post % b"Authorization: Bearer nope\r\n"))[0] == 403
        assert posted == [], "a refused POST never reaches its handler"
        good = b"Authorization: Bearer " + TOKEN.encode() + b"\r\n"
        assert (await _status(bound.port, post % good))[0] == 202
        assert posted == [b"{}"]
        assert (await _status(bound.port, b"GET /ready HTTP/1.1\r\n\r\n"))[0] == 200
        code, metrics = await _status(bound.port, b"GET /metrics HTTP/1.1\r\n\r\n")
        assert code == 200
        assert b'admin_requests_refused_total{reason="wrong"} 1.0' in metrics
        assert (await _status(bound.port, b"POST /nowhere HTTP/1.1\r\n\r\n"))[0] == 404
