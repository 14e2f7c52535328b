"""Accept loops outlast a shortage of file descriptors (bookie/net/accepting.py): an admin
server whose process runs out of them logs it, goes on serving the connections it has, and
accepts again once they are gone; before, the accept's EMFILE ended the server and the
process hosting it."""

from __future__ import annotations

import errno
import os
import sys

import anyio
import pytest

from bookie import limits
from bookie.net.accepting import AcceptRetry, accept_with_retry
from tests.unit.bookie.net.test_http_server import _health
from tests.unit.bookie.server.support import eventually

pytestmark = pytest.mark.anyio

HELD = 8
"""Connections the test holds open; the server may hold 4 more descriptors than it started
with, so accepting some of these fails for want of descriptors."""

SERVER = """
import logging, os, resource, sys
import anyio
from bookie.address import Address
from bookie.net.http_server import Routes, json_answer, serve_http

logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")

async def health(_):
    return json_answer({"status": "ok"})

async def main():
    routes = Routes()
    routes.add("GET", "/health", health)
    async with serve_http(Address("127.0.0.1", 0), routes) as bound:
        used = len(os.listdir("/proc/self/fd"))
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (used + 4, hard))
        print(bound.port, flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


async def _line_containing(stream: anyio.abc.ByteReceiveStream, text: bytes) -> bytes:
    buffered = b""
    with anyio.fail_after(10):
        while text not in buffered:
            buffered += await stream.receive()
    return buffered


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc")
async def test_an_admin_server_out_of_descriptors_serves_on() -> None:
    async with await anyio.open_process([sys.executable, "-c", SERVER]) as server:
        assert server.stdout is not None
        assert server.stderr is not None
        port = int(await _line_containing(server.stdout, b"\n"))
        held = [await anyio.connect_tcp("127.0.0.1", port) for _ in range(HELD)]
        try:
            for stream in held:
                await stream.send(b"G")  # requests that never end: their descriptors stay
            logged = await _line_containing(server.stderr, b"net.accept_failed")
            assert b"Traceback" not in logged
            assert server.returncode is None
        finally:
            for stream in held:
                await stream.aclose()

        async def served() -> bool:
            return await _health(port) == b"200"

        await eventually(served, poll_s=0.05, timeout_s=10)
        assert server.returncode is None
        server.terminate()


async def test_the_retry_waits_out_a_shortage_skips_an_aborted_connection_and_raises_the_rest(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    slept_ms: list[float] = []

    async def sleep(seconds: float) -> None:
        slept_ms.append(round(seconds * 1000))

    monkeypatch.setattr(anyio, "sleep", sleep)
    retry = AcceptRetry("test")
    for _ in range(9):
        await retry.failed(OSError(errno.EMFILE, "Too many open files"))
    await retry.failed(OSError(errno.ECONNABORTED, "Software caused connection abort"))
    assert slept_ms == [10, 20, 40, 80, 160, 320, 640, 1000, 1000], "doubling to the bound"
    retry.succeeded()
    await retry.failed(OSError(errno.ENFILE, "Too many open files in system"))
    assert slept_ms[-1] == limits.accept_retry_delay_ms_min
    with pytest.raises(OSError, match="Bad file descriptor"):
        await retry.failed(OSError(errno.EBADF, "Bad file descriptor"))
    assert sum(r.getMessage() == "net.accept_failed" for r in caplog.records) == 10


async def test_accept_with_retry_returns_the_connection_after_failures() -> None:
    results: list[OSError | str] = [OSError(errno.ECONNABORTED, "gone"), "connection"]

    async def accept() -> str:
        result = results.pop(0)
        if isinstance(result, OSError):
            raise result
        return result

    assert await accept_with_retry(accept, AcceptRetry("test")) == "connection"
