"""Hostile clients on every port we own, against real processes: the servers go on serving.

One store (three `bookie serve`, one `kvstore serve`) for the module; its three
kinds of port each meet, one at a time:

* slow-loris: a request sent one byte a second;
* a flood of connections from one address, past the server's bound per
  address (a client arriving from another address afterwards is served);
* a client that sends requests without end and never reads an answer;
* frames past the size bounds (a length prefix of 4 GiB, a RESP bulk of 2 GB).

Meanwhile a well-behaved client, connected before, sends a request every
`PROBE_INTERVAL_S` and must get each answer within `LIVENESS_S` (a liveness
bound, not a latency target: the latencies are printed).  The server process's
resident memory, read from /proc before and at the height of the attack, must
not grow by more than `RSS_GROWTH_BYTES_MAX`.
"""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute
from kvstore import limits as kv_limits

from bookie import limits as bookie_limits
from bookie.local.zookeeper import LocalZooKeeper
from bookie.wire import codec
from bookie.wire.messages import GetBookieInfoRequest, GetBookieInfoResponse
from rsm import limits as rsm_limits
from rsm.core import protocol
from tests.unit.kvstore.local_store import Store, running_store

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow, pytest.mark.anyio]

HOST = "127.0.0.1"
PROBE_INTERVAL_S = 0.2
LIVENESS_S = 10.0
"""Longest a well-behaved request may wait for its answer during an attack."""
RSS_GROWTH_BYTES_MAX = 256 * 1024 * 1024
SLOW_LORIS_BYTES = 3
"""Bytes the slow-loris client sends, one a second."""
FLOOD_BEYOND = 50
"""Connections the flood opens past the server's bound per address."""
OTHER_HOST = "127.0.0.2"
"""Where a client that arrives after the flood connects from."""
UNREAD_SEND_BYTES_MAX = 512 * 1024 * 1024
"""A non-reading client that could send this much found a server that never stopped reading."""
BIG_VALUE_BYTES = 256 * 1024
"""The value the non-reading RESP client asks for over and over."""
STALL_S = 2.0
"""A send that makes no progress for this long counts as stalled (the server stopped reading)."""


# --- the ports and their well-behaved requests ---------------------------------------------------


class FramedClient:
    """A connection that speaks length-prefixed frames (the bookie and replica protocols)."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.decoder = codec.FrameDecoder()
        self.frames: list[bytes] = []

    async def exchange(self, request: bytes) -> bytes:
        """Send one framed request; the body of the next frame that comes back."""
        await self.stream.send(request)
        while not self.frames:
            self.frames += self.decoder.feed(await self.stream.receive())
        return self.frames.pop(0)


class RespClient:
    """A RESP connection, read line by line."""

    def __init__(self, stream: anyio.abc.SocketStream) -> None:
        self.stream = stream
        self.buffer = b""

    async def line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            self.buffer += await self.stream.receive()
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line


@dataclass(frozen=True)
class Port:
    """One server port: how to probe it, a request to abuse it with, frames it must refuse."""

    name: str
    port: int
    pid: int
    connections_per_address_max: int
    probe: Callable[[anyio.abc.SocketStream], Callable[[int], Awaitable[None]]]
    request: bytes
    oversized: tuple[bytes, ...]


def _bookie_probe(stream: anyio.abc.SocketStream) -> Callable[[int], Awaitable[None]]:
    client = FramedClient(stream)

    async def probe(number: int) -> None:
        body = await client.exchange(codec.encode_request(GetBookieInfoRequest(number)))
        response = codec.decode_response(body)
        assert isinstance(response, GetBookieInfoResponse)
        assert (response.request_id, response.status) == (number, 0)

    return probe


def _replica_probe(stream: anyio.abc.SocketStream) -> Callable[[int], Awaitable[None]]:
    client = FramedClient(stream)

    async def probe(number: int) -> None:
        body = await client.exchange(protocol.encode_request(protocol.StatusRequest(number)))
        response = protocol.decode_response(body)
        assert (response.request_id, response.ok) == (number, True)

    return probe


def _resp_probe(stream: anyio.abc.SocketStream) -> Callable[[int], Awaitable[None]]:
    client = RespClient(stream)

    async def probe(number: int) -> None:
        value = b"%d" % number
        await stream.send(b"SET probe %s\r\n" % value)
        assert await client.line() == b"+OK"
        await stream.send(b"GET probe\r\n")
        assert [await client.line(), await client.line()] == [b"$%d" % len(value), value]

    return probe


LENGTH_4_GIB = b"\xff\xff\xff\xf0"


def ports(store: Store) -> list[Port]:
    bookie = store.cluster.bookies.bookies[0]
    replica = store.cluster.replicas[0]
    assert bookie.process is not None
    assert replica.process is not None
    return [
        Port(
            "bookie",
            bookie.port,
            bookie.process.pid,
            bookie_limits.connections_per_address_max,
            _bookie_probe,
            codec.encode_request(GetBookieInfoRequest(1)),
            (LENGTH_4_GIB + b"junk", codec.frame(b"\x9f" + b"\x00" * (4 * 1024 * 1024))),
        ),
        Port(
            "replica",
            replica.port,
            replica.process.pid,
            rsm_limits.server_connections_per_address_max,
            _replica_probe,
            protocol.encode_request(protocol.StatusRequest(1)),
            (LENGTH_4_GIB + b"junk", b"\x00\x41\x00\x01" + b"\x00" * (4 * 1024 * 1024 + 1)),
        ),
        Port(
            "resp",
            replica.resp_port,
            replica.process.pid,
            kv_limits.connections_per_address_max,
            _resp_probe,
            b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n",
            (
                b"*1\r\n$2000000000\r\n",
                b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$%d\r\n" % (2 * 1024 * 1024),
                b"x" * (128 * 1024),
            ),
        ),
    ]


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = f"/hostile-{os.getpid()}"
    with running_store(zookeeper, root, tmp_path_factory.mktemp("store"), replicas=1) as running:
        with running.client(running.names[0]) as client:
            client.set("big", b"v" * BIG_VALUE_BYTES)
        yield running


@pytest.fixture(params=["bookie", "replica", "resp"])
def port(request: pytest.FixtureRequest, store: Store) -> Port:
    return next(each for each in ports(store) if each.name == request.param)


# --- measuring --------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for process {pid}")


@asynccontextmanager
async def probing(port: Port) -> AsyncIterator[list[float]]:
    """A well-behaved client of `port` sending a request every `PROBE_INTERVAL_S` for the block;
    yields its latencies (seconds), printed at the end.  Fails if any answer takes `LIVENESS_S`."""
    latencies: list[float] = []
    async with await anyio.connect_tcp(HOST, port.port) as stream:
        probe = port.probe(stream)
        with anyio.fail_after(LIVENESS_S):
            await probe(0)
        async with anyio.create_task_group() as task_group:

            async def loop() -> None:
                number = 1
                while True:
                    started = time.monotonic()
                    with anyio.fail_after(LIVENESS_S):
                        await probe(number)
                    latencies.append(time.monotonic() - started)
                    number += 1
                    # The well-behaved client's pace: a steady trickle of requests is the
                    # stimulus, measured under the attack, not a wait for anything.
                    await anyio.sleep(PROBE_INTERVAL_S)

            task_group.start_soon(loop)
            yield latencies
            task_group.cancel_scope.cancel()
    shown = ", ".join(
        f"{name} {value * 1000:.1f} ms"
        for name, value in (
            ("median", statistics.median(latencies)),
            ("max", max(latencies)),
        )
    )
    print(f"\n{port.name}: {len(latencies)} well-behaved requests answered meanwhile: {shown}")


@asynccontextmanager
async def attack(port: Port) -> AsyncIterator[None]:
    """Probe `port` and watch its server's memory for the block (see the module docstring)."""
    before = rss_bytes(port.pid)
    async with probing(port) as latencies:
        yield
        peak = rss_bytes(port.pid)
        await _wait_until(lambda: len(latencies) >= 2)
    print(f"{port.name}: server RSS {before >> 20} MiB before, {peak >> 20} MiB during the attack")
    assert peak - before < RSS_GROWTH_BYTES_MAX


async def _wait_until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(LIVENESS_S):
        while not condition():
            await anyio.sleep(PROBE_INTERVAL_S / 4)


# --- the attacks ------------------------------------------------------------------------------


async def test_slow_loris(port: Port) -> None:
    async with attack(port), await anyio.connect_tcp(HOST, port.port) as slow:
        for byte in port.request[:SLOW_LORIS_BYTES]:
            await slow.send(bytes((byte,)))
            await anyio.sleep(1.0)  # the attack itself: one byte a second


async def test_flood_of_connections(port: Port) -> None:
    connections: list[socket.socket] = []
    async with contextlib.AsyncExitStack() as flood, attack(port):
        for _ in range(port.connections_per_address_max + FLOOD_BEYOND):
            connection = await flood.enter_async_context(await anyio.connect_tcp(HOST, port.port))
            # A duplicate of its descriptor, to peek at (asyncio's socket object cannot).
            raw = connection.extra(SocketAttribute.raw_socket)
            connections.append(
                flood.enter_context(socket.fromfd(raw.fileno(), raw.family, raw.type))
            )
            # Each sends a request's first bytes and waits there (or finds itself refused).
            with contextlib.suppress(anyio.BrokenResourceError, OSError):
                await connection.send(port.request[:3])
        await _wait_until(lambda: sum(map(_refused, connections)) >= FLOOD_BEYOND)
        async with await anyio.connect_tcp(HOST, port.port, local_host=OTHER_HOST) as newcomer:
            with anyio.fail_after(LIVENESS_S):
                await port.probe(newcomer)(1)
        refused = sum(map(_refused, connections))
        print(f"\n{port.name}: {refused} of {len(connections)} flood connections were refused")


def _refused(connection: socket.socket) -> bool:
    """Whether the server answered or closed `connection` (it sent only part of a request)."""
    try:
        connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


async def test_client_that_never_reads(port: Port) -> None:
    burst = port.request * max(1, 64 * 1024 // len(port.request))
    sent = 0
    async with attack(port), await anyio.connect_tcp(HOST, port.port) as greedy:
        while sent < UNREAD_SEND_BYTES_MAX:
            with anyio.move_on_after(STALL_S) as scope:
                await greedy.send(burst)
            if scope.cancelled_caught:
                break
            sent += len(burst)
        print(f"\n{port.name}: the non-reading client could send {sent >> 20} MiB, then stalled")
        assert sent < UNREAD_SEND_BYTES_MAX, "the server never stopped reading"


async def test_oversized_frames(port: Port) -> None:
    async with attack(port):
        for data in port.oversized:
            async with await anyio.connect_tcp(HOST, port.port) as client:
                with anyio.fail_after(LIVENESS_S):
                    received = await _send_until_closed(client, data)
            print(f"\n{port.name}: an oversized request of {len(data)} bytes got {received[:60]!r}")
            if port.name == "resp":
                assert received.startswith(b"-ERR Protocol error")


async def _send_until_closed(client: anyio.abc.SocketStream, data: bytes) -> bytes:
    """Send `data` (the server may close before it is all sent); what came back until EOF."""
    received = b""
    with contextlib.suppress(anyio.BrokenResourceError, ConnectionError):
        await client.send(data)
    try:
        while True:
            received += await client.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError):
        return received
