"""A simulated network of hosts with TCP semantics, for `VirtualTimeLoop` runs.

What it models, and why that is the right model:

* A connection is an ordered, reliable byte stream in each direction, as TCP
  is.  Bytes sent arrive after a latency drawn from the seeded `Random`, never
  reordered within a direction.  Across connections (to different bookies, or
  a new connection after a reset) messages do interleave in any order.
* A partition between two hosts *clogs* their links: bytes in flight or sent
  later are held, not dropped, and new connections between them hang until
  `connect_timeout_s` and then fail.  Healing delivers what was held, late.  This
  is what a real network partition does to TCP; the protocol layers' own
  timeouts are what must cope with it.
* Lost messages happen the way they do with TCP: a connection is reset (a host
  crashes, or the nemesis resets connections) and everything in flight on it is
  gone; each side sees the stream break.  `reset_connections` is the "drop"
  fault.
* A stalled host (`stall`: its process stopped by SIGSTOP) clogs every link
  it has, both ways, as a partition does: what it would send and what is sent
  to it are held, and `resume` delivers them.  Its kernel still completes
  handshakes, so connects to it succeed (their bytes are held); partitions and
  `heal` leave a stall as it is.  That the process itself makes no progress
  meanwhile is the caller's business (nothing it sends leaves).
* A crashed host's listeners stop and its connections reset; restarting it is
  the caller's business (start new servers on the same host name).

Addresses are "host:port" strings (`bookie.address`); a host name is any
string, so bookie ids like "bookie-1:3181" work unchanged.  All randomness comes from the `Random`
given to `SimNetwork`, all time from the running loop's virtual clock.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteStream, Listener, TaskGroup

from bookie.address import parse_address

Handler = Callable[[ByteStream], Coroutine[Any, Any, Any]]

_DELIVERY_STEP_S = 1e-9
"""Minimum spacing of two deliveries on one direction of one connection."""

_STREAM_BUFFER_BYTES_MAX = 64 * 1024 * 1024
"""A receiver that never reads cannot make the simulation eat all memory."""


class SimConnectError(OSError):
    """Connecting failed: nobody listens there, the host is down, or it is partitioned away."""


@dataclass(slots=True)
class _Pipe:
    """One direction of one connection: bytes from `source` host to `target` host."""

    network: SimNetwork
    source: str
    target: str
    receiver: SimStream | None = None
    last_delivery_s: float = 0.0
    held: deque[bytes | None] = field(default_factory=deque)
    """Bytes (None = EOF) waiting for a partition to heal, in order."""
    broken: bool = False

    def transmit(self, data: bytes | None) -> None:
        if self.broken:
            return
        if self.held or self.network.is_clogged(self.source, self.target):
            self.held.append(data)
            return
        now = asyncio.get_running_loop().time()
        latency_s = self.network.sample_latency_s()
        # Strictly later than the previous delivery: asyncio's timer heap does
        # not keep FIFO order among equal deadlines, and a direction must.
        deliver_at = max(self.last_delivery_s + _DELIVERY_STEP_S, now + latency_s)
        self.last_delivery_s = deliver_at
        asyncio.get_running_loop().call_at(deliver_at, self._deliver, data)

    def _deliver(self, data: bytes | None) -> None:
        # A partition that starts while bytes are in flight does not stop them:
        # they were already past the cut.  Checking only at transmit time also
        # keeps the direction FIFO (held bytes are always later than in-flight).
        if self.broken or self.receiver is None:
            return
        self.receiver._arrive(data)

    def release_held(self) -> None:
        held, self.held = self.held, deque()
        for data in held:
            self.transmit(data)


class SimStream(ByteStream):
    """One end of a simulated connection."""

    def __init__(self, network: SimNetwork, local_host: str, outgoing: _Pipe) -> None:
        self._network = network
        self.local_host = local_host
        self._outgoing = outgoing
        self._buffer = bytearray()
        self._eof = False
        self._reset = False
        self._closed = False
        self._waiter: asyncio.Future[None] | None = None

    # --- called by the pipe -------------------------------------------------------------------

    def _arrive(self, data: bytes | None) -> None:
        if data is None:
            self._eof = True
        else:
            if len(self._buffer) + len(data) > _STREAM_BUFFER_BYTES_MAX:
                raise RuntimeError("simulated receive buffer overflow: the receiver never reads")
            self._buffer += data
        self._wake()

    def _break(self) -> None:
        self._reset = True
        self._outgoing.broken = True
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- ByteStream ---------------------------------------------------------------------------

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            if self._reset:
                raise anyio.BrokenResourceError
            if self._buffer:
                chunk = bytes(self._buffer[:max_bytes])
                del self._buffer[:max_bytes]
                return chunk
            if self._eof:
                raise anyio.EndOfStream
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def send(self, item: bytes) -> None:
        if self._closed:
            raise anyio.ClosedResourceError
        if self._reset:
            raise anyio.BrokenResourceError
        await anyio.lowlevel.checkpoint()
        self._outgoing.transmit(bytes(item))

    async def send_eof(self) -> None:
        if not (self._closed or self._reset):
            self._outgoing.transmit(None)

    async def aclose(self) -> None:
        if self._closed:
            return
        if not self._reset:
            self._outgoing.transmit(None)
        self._closed = True
        self._network._forget(self)
        self._wake()

    @property
    def extra_attributes(self) -> dict[Any, Callable[[], Any]]:
        return {}


class SimListener(Listener[ByteStream]):
    """Accepts simulated connections to one host:port."""

    def __init__(self, network: SimNetwork, address: str) -> None:
        self._network = network
        self.address = address
        self._handler: Handler | None = None
        self._task_group: TaskGroup | None = None
        self._stopped = asyncio.Event()

    async def serve(self, handler: Handler, task_group: TaskGroup | None = None) -> None:
        async with anyio.create_task_group() as own_group:
            self._handler = handler
            self._task_group = task_group or own_group
            try:
                await self._stopped.wait()
            finally:
                self._handler = None
                self._unbind()

    @property
    def serving(self) -> bool:
        """Whether connections are accepted (`serve` is running)."""
        return self._handler is not None

    def _accept(self, stream: SimStream) -> bool:
        if self._handler is None or self._task_group is None:
            return False
        self._task_group.start_soon(self._handler, stream)
        return True

    async def aclose(self) -> None:
        self._stopped.set()
        self._unbind()

    def _unbind(self) -> None:
        # Only our own binding: after a crash, a restarted server may already
        # listen on this address while this listener is still unwinding.
        if self._network._listeners.get(self.address) is self:
            del self._network._listeners[self.address]

    @property
    def extra_attributes(self) -> dict[Any, Callable[[], Any]]:
        return {}


class SimNetwork:
    """Hosts, listeners and connections of one simulation run."""

    def __init__(
        self,
        rng: random.Random,
        *,
        latency_ms_min: float = 0.05,
        latency_ms_max: float = 2.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._rng = rng
        self.latency_ms_min = latency_ms_min
        self.latency_ms_max = latency_ms_max
        self.connect_timeout_s = connect_timeout_s
        self._listeners: dict[str, SimListener] = {}
        self._down: set[str] = set()
        self._cuts: set[tuple[str, str]] = set()
        self._stalled: dict[str, None] = {}
        """The stalled hosts (a dict as an ordered set)."""
        self._streams: dict[int, tuple[SimStream, _Pipe]] = {}

    # --- faults -------------------------------------------------------------------------------

    def sample_latency_s(self) -> float:
        return self._rng.uniform(self.latency_ms_min, self.latency_ms_max) / 1000.0

    def is_partitioned(self, source: str, target: str) -> bool:
        return (source, target) in self._cuts

    def is_clogged(self, source: str, target: str) -> bool:
        """Whether bytes from `source` to `target` are held: a partition or a stall."""
        return (source, target) in self._cuts or source in self._stalled or target in self._stalled

    def stall(self, host: str) -> None:
        """Clog every link of `host`, both ways, until `resume` (see the module docstring)."""
        self._stalled[host] = None

    def resume(self, host: str) -> None:
        """End `host`'s stall and deliver what it held (unless a partition still holds it)."""
        del self._stalled[host]
        for stream, pipe in list(self._streams.values()):
            if host in (stream.local_host, pipe.target):
                pipe.release_held()

    def is_stalled(self, host: str) -> bool:
        return host in self._stalled

    def partition(self, side_a: list[str], side_b: list[str]) -> None:
        """Clog every link between a host of `side_a` and a host of `side_b`, both ways."""
        for a in side_a:
            for b in side_b:
                self._cuts.add((a, b))
                self._cuts.add((b, a))

    def heal(self) -> None:
        """Remove every partition and deliver what they held (stalls go on holding theirs)."""
        self._cuts.clear()
        for _, pipe in list(self._streams.values()):
            pipe.release_held()

    def reset_connections(self, host: str) -> int:
        """Break every connection of `host` (in-flight bytes are lost); return how many."""
        broken = 0
        for stream, pipe in list(self._streams.values()):
            if host in (stream.local_host, pipe.target):
                stream._break()
                broken += 1
        return broken

    def reset_link(self, host: str, peer: str) -> int:
        """Break every connection between `host` and `peer` only (in-flight bytes on them
        are lost); return how many ends broke.  The one-message "drop": a request to
        one bookie vanishes while the same request to the others arrives."""
        broken = 0
        for stream, pipe in list(self._streams.values()):
            if {stream.local_host, pipe.target} == {host, peer}:
                stream._break()
                broken += 1
        return broken

    def crash(self, host: str) -> None:
        """The host goes down: its listeners stop, its connections reset, connects to it fail."""
        self._down.add(host)
        for address, listener in list(self._listeners.items()):
            if parse_address(address).host == host:
                listener._stopped.set()
                del self._listeners[address]
        self.reset_connections(host)

    def restart(self, host: str) -> None:
        """The host is back up (its servers must be started again by the caller)."""
        self._down.discard(host)

    def is_down(self, host: str) -> bool:
        return host in self._down

    # --- endpoints ----------------------------------------------------------------------------

    def listen(self, address: str) -> SimListener:
        host = parse_address(address).host
        if host in self._down:
            raise SimConnectError(f"host {host} is down")
        if address in self._listeners:
            raise OSError(f"address {address} already in use")
        listener = SimListener(self, address)
        self._listeners[address] = listener
        return listener

    async def connect(self, source_host: str, address: str) -> ByteStream:
        """Open a connection from `source_host` to `address`."""
        target_host = parse_address(address).host
        if source_host in self._down:
            raise SimConnectError(f"host {source_host} is down")
        if self.is_partitioned(source_host, target_host):
            await anyio.sleep(self.connect_timeout_s)
            raise SimConnectError(f"connect {source_host} -> {address} timed out (partition)")
        await anyio.sleep(self.sample_latency_s())
        listener = self._listeners.get(address)
        if listener is None or target_host in self._down:
            raise SimConnectError(f"connection to {address} refused")
        to_server = _Pipe(self, source_host, target_host)
        to_client = _Pipe(self, target_host, source_host)
        client_end = SimStream(self, source_host, to_server)
        server_end = SimStream(self, target_host, to_client)
        to_server.receiver = server_end
        to_client.receiver = client_end
        self._streams[id(client_end)] = (client_end, to_server)
        self._streams[id(server_end)] = (server_end, to_client)
        if not listener._accept(server_end):
            raise SimConnectError(f"connection to {address} refused")
        return client_end

    def _forget(self, stream: SimStream) -> None:
        self._streams.pop(id(stream), None)

    def connector(self, source_host: str) -> Callable[[str], Awaitable[ByteStream]]:
        """A `connect(address)` function for components running on `source_host`."""

        async def connect(address: str) -> ByteStream:
            return await self.connect(source_host, address)

        return connect
