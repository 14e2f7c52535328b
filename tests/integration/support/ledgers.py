"""Ledger clients against real bookie processes, and a wire tap to order what they send.

* `start_bookies` starts bookie processes of a `BookieCluster` side by side and
  returns once each is registered (`bookie.ready`), so a client opened then
  sees them all as writable; `running_bookies` is a whole cluster of them.
* `ledger_client` opens a `LedgerClient` with its own ZooKeeper session, short
  timeouts (`scenario_config`) and seeded placement.
* `WireTap` is a connector for `LedgerClient.open`: it opens real TCP
  connections and sits on them.  Each request frame the client sends is
  decoded and put to the rule of its bookie, which sends it, holds it (until
  `release`) or drops it; each response the bookie sends back is decoded and
  recorded.  So a test can put the messages of two clients and three bookie
  processes in one chosen order (BookKeeper's `LedgerRecovery2Test` does the
  same with mock bookies), and waits on what was sent, held or answered rather
  than sleeping.

Invariants of the tap: a frame is decided once, when the client sends it;
held frames go out in the order they were sent, on the connection they were
sent on (lost with it when it breaks); the tap changes no byte of what it
lets through.
"""

from __future__ import annotations

import contextlib
import enum
import random
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc

from bookie.client.config import ClientConfig
from bookie.client.connections import tcp_connector
from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.codec import FrameDecoder, decode_request, decode_response, frame
from bookie.wire.messages import (
    ADD_FLAG_RECOVERY,
    ENTRY_ID_LAST,
    READ_FLAG_FENCE,
    AddRequest,
    IdentifyRequest,
    IdentifyResponse,
    ReadRequest,
    Request,
    Response,
)

from .processes import WAIT_S, BookieCluster, BookieProcess, BookieSetup

PASSWORD = b"scenario"
_BROKEN = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


def scenario_config(**overrides: int) -> ClientConfig:
    """Client knobs for scenarios: failures show within a second or two, no timer traffic.

    The explicit LAC is off so that what bookies know of the LAC comes from the
    adds alone, as in BookKeeper's tests; reconnect backoffs stay short so a
    restarted bookie is reachable again at once.
    """
    values = {
        "add_timeout_ms": 2_000,
        "read_timeout_ms": 2_000,
        "speculative_read_timeout_ms": 300,
        "connect_timeout_ms": 1_000,
        "explicit_lac_interval_ms": 0,
        "long_poll_timeout_ms": 2_000,
        "tail_retry_delay_ms": 50,
        "metadata_retry_delay_ms": 50,
        "reconnect_delay_ms_min": 20,
        "reconnect_delay_ms_max": 200,
    }
    values.update(overrides)
    return ClientConfig(**values)


def entry_payload(number: int, size_bytes: int = 64) -> bytes:
    """Payload of entry `number`: distinct per entry, so a read-back proves the order too."""
    seed = f"entry {number}|".encode()
    return (seed * (size_bytes // len(seed) + 1))[:size_bytes]


async def start_bookies(
    cluster: BookieCluster, setups: Sequence[BookieSetup]
) -> list[BookieProcess]:
    """Start every bookie of `setups` at once; return once all are registered."""
    started: dict[int, BookieProcess] = {}

    async def start(index: int, setup: BookieSetup) -> None:
        started[index] = await cluster.start(setup, wait_for="bookie.ready")

    async with anyio.create_task_group() as task_group:
        for index, setup in enumerate(setups):
            task_group.start_soon(start, index, setup)
    return [started[index] for index in range(len(setups))]


@asynccontextmanager
async def running_bookies(
    zookeeper: LocalZooKeeper, zk_root: str, directory: Path, count: int
) -> AsyncIterator[tuple[BookieCluster, list[BookieProcess]]]:
    """`count` registered bookie processes (one ledger directory each) for the block."""
    async with BookieCluster(zookeeper, zk_root, directory) as cluster:
        setups = [cluster.add_bookie(ledger_dirs=1) for _ in range(count)]
        yield cluster, await start_bookies(cluster, setups)


@asynccontextmanager
async def ledger_client(
    cluster: BookieCluster,
    *,
    seed: int,
    config: ClientConfig | None = None,
    tap: WireTap | None = None,
) -> AsyncIterator[LedgerClient]:
    """A ledger client of the cluster with its own ZooKeeper session."""
    async with (
        ZkMetadataStore.connect(cluster.zk_servers) as store,
        LedgerClient.open(
            store,
            root=cluster.zk_root,
            rng=random.Random(seed),
            config=scenario_config() if config is None else config,
            connector=None if tap is None else tap.connect,
        ) as client,
    ):
        yield client


# --- the wire tap -----------------------------------------------------------------------------


class Verdict(enum.Enum):
    SEND = "send"
    HOLD = "hold"
    DROP = "drop"


Rule = Callable[[Request], Verdict]
"""Decides the fate of one request frame to one bookie."""


def send_all(_request: Request) -> Verdict:
    return Verdict.SEND


def hold_all(_request: Request) -> Verdict:
    return Verdict.HOLD


def is_fencing_last_entry_read(request: Request) -> bool:
    """Recovery's first step: the fencing READ of "the last entry you hold"."""
    return (
        type(request) is ReadRequest
        and request.entry_id == ENTRY_ID_LAST
        and bool(request.flags & READ_FLAG_FENCE)
    )


def is_recovery_add(request: Request) -> bool:
    return type(request) is AddRequest and bool(request.flags & ADD_FLAG_RECOVERY)


@dataclass(frozen=True, slots=True)
class Sent:
    """A request the client sent (or tried to: `verdict` says what the tap did with it)."""

    address: str
    request: Request
    verdict: Verdict


@dataclass(frozen=True, slots=True)
class Answered:
    address: str
    response: Response


@dataclass(eq=False)
class _Held:
    stream: _TappedStream
    frames: list[bytes] = field(default_factory=list)


class WireTap:
    """A `Connector` that records every request and response and applies per-bookie rules."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.answered: list[Answered] = []
        self._rules: dict[str, Rule] = {}
        self._held: dict[str, list[_Held]] = {}
        self._changed = anyio.Event()

    # --- rules --------------------------------------------------------------------------------

    def set_rule(self, address: str, rule: Rule) -> None:
        """From now on, every request frame to `address` goes through `rule`."""
        self._rules[address] = rule

    def hold(self, address: str) -> None:
        """Hold every request to `address` until `release`."""
        self.set_rule(address, hold_all)

    async def release(self, address: str, then: Rule = send_all) -> None:
        """Send everything held for `address`, in order; apply `then` from now on."""
        self._rules[address] = then
        for held in self._held.pop(address, []):
            # A connection that broke meanwhile loses its held frames, as a
            # network would; the client has already counted them as failed.
            with contextlib.suppress(*_BROKEN):
                await held.stream.send_through(b"".join(held.frames))

    def held_count(self, address: str) -> int:
        return sum(len(held.frames) for held in self._held.get(address, []))

    # --- observing ----------------------------------------------------------------------------

    def requests(self, address: str, verdict: Verdict | None = None) -> list[Request]:
        return [
            sent.request
            for sent in self.sent
            if sent.address == address and (verdict is None or sent.verdict is verdict)
        ]

    def responses(self, address: str) -> list[Response]:
        return [answer.response for answer in self.answered if answer.address == address]

    async def wait_until(self, condition: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
        """Return once `condition()` holds, re-checked after every frame the tap sees."""
        with anyio.fail_after(timeout_s):
            while not condition():
                await self._changed.wait()

    # --- the connector ------------------------------------------------------------------------

    async def connect(self, address: str) -> anyio.abc.ByteStream:
        return _TappedStream(self, address, await tcp_connector(address))

    def _decide(self, address: str, stream: _TappedStream, body: bytes) -> bytes | None:
        """The frame to send now, or None (held or dropped)."""
        request = decode_request(body)
        if type(request) is IdentifyRequest:
            # A connection's IDENTIFY is part of connecting, which the tap neither holds nor
            # records: its rules and records are for the requests under test.
            return frame(body)
        verdict = self._rules.get(address, send_all)(request)
        self.sent.append(Sent(address, request, verdict))
        self._notify()
        if verdict is Verdict.SEND:
            return frame(body)
        if verdict is Verdict.HOLD:
            streams = self._held.setdefault(address, [])
            if not streams or streams[-1].stream is not stream:
                streams.append(_Held(stream))
            streams[-1].frames.append(frame(body))
        return None

    def _record(self, address: str, body: bytes) -> None:
        response = decode_response(body)
        if type(response) is not IdentifyResponse:
            self.answered.append(Answered(address, response))
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


class _TappedStream(anyio.abc.ByteStream):
    """One client connection to one bookie, seen by the tap in both directions."""

    def __init__(self, tap: WireTap, address: str, inner: anyio.abc.ByteStream) -> None:
        self._tap = tap
        self._address = address
        self._inner = inner
        self._outgoing = FrameDecoder()
        self._incoming = FrameDecoder()
        self._sending = anyio.Lock()
        """The client's sender and a `release` must not write to the socket at once."""

    async def send(self, item: bytes) -> None:
        frames = [
            decided
            for body in self._outgoing.feed(item)
            if (decided := self._tap._decide(self._address, self, body)) is not None
        ]
        if frames:
            await self.send_through(b"".join(frames))

    async def send_through(self, data: bytes) -> None:
        """Send frames the tap already decided on."""
        async with self._sending:
            await self._inner.send(data)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        data = await self._inner.receive(max_bytes)
        for body in self._incoming.feed(data):
            self._tap._record(self._address, body)
        return data

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()
