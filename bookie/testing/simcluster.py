"""The simulated world of a seeded whole-cluster run: network, metadata, bookies, disks, clients.

`SimCluster` puts the real shells together on `VirtualTimeLoop`
(`bookie.testing.simloop`) so that a workload and a nemesis can drive them
from one seed.  It is shared by every seeded simulation (the ledger
simulation, `bookie.testing.ledger_sim`, and the state machines',
`rsm.testing.rsm_sim`), so it holds the world and the fault primitives,
never a policy about which fault to inject when (that is
`bookie.testing.nemesis`).

What is in the world:

* One `SimNetwork`: hosts are bookie ids and client names.
* One `MemoryMetadataServer`, with one session per component: each bookie
  incarnation and each client gets its own `MemoryMetadataStore`, so a fault
  can expire or suspend exactly one of them.
* N bookies, each a real `BookieServer` on a `SimListener` over a
  `MemoryLedgerStorage` wrapped in a `SimDisk`.  A disk task per bookie syncs
  the storage a random fsync latency after mutations start waiting (plus the
  bookie's `disk_delay_ms`, the "slow disk" fault); whatever arrives during
  that latency joins the same sync, so group commit emerges as it does in
  the journal.
* Clients: `LedgerClient`s with the simulated connector of their host, a
  seeded `Random`, and a wall clock derived from virtual time.  A client is a
  target for faults (`clients`) once it is open; `client_hooks` hear of it
  before it connects anywhere.
* Autorecovery (`run_autorecovery`): a standalone autorecovery process on a
  host of its own, with its own metadata session, the host's connector and a
  seeded `Random`; it is no target for faults.

Crash and restart.  `crash(bookie_id)` is a power cut: the host goes down on
the network (its connections reset), the bookie's tasks are cancelled, and
its disk keeps what was synced plus the oldest `survivors` unsynced
mutations (`MemoryLedgerStorage.crash`).  Its metadata session is cut off,
not closed, so its registration lingers until the session expires
`bookie_session_timeout_ms` later, as it would in ZooKeeper; a client may
still pick the dead bookie meanwhile.  `restart(bookie_id)` starts a new
incarnation on the same address from the crashed disk; it registers again
once the old session's znode is gone.  A registration that ends in a metadata
outage (`MetadataUnavailable`) is tried again once the session is back, which
is what a supervisor restarting the process would get to.

Determinism.  Every random choice comes from `Random`s derived, in a fixed
order, from the one given to `SimCluster`; the world keeps its collections in
lists and dicts, never sets of strings (their iteration order changes from
process to process); the loop orders tasks and cancel scopes by creation
(`bookie.testing.simloop`).  The trace (`Trace`) records one line per notable event
with the virtual time, so two runs of one seed can be compared line by line
(`trace_difference`).

Invariants: a bookie is `up` exactly while its host is up on the network; at
most one incarnation of a bookie serves at a time (a crashed incarnation
never touches the disk that replaced its own); every store the cluster opens
is closed by the time `SimCluster.start`'s block ends, or handed to the task
that expires it.
"""

from __future__ import annotations

import contextlib
import random
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import anyio
import anyio.abc

from bookie import limits
from bookie.autorecovery.service import run_autorecovery
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.core.bookie_handler import BookieIdentity
from bookie.errors import MetadataUnavailable, StorageError
from bookie.meta.api import SessionState
from bookie.meta.bookies import BookieInfo, init_cluster, register
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore
from bookie.server.server import BookieServer
from bookie.storage.api import LedgerRecord
from bookie.storage.memory import MemoryLedgerStorage
from bookie.testing.simnet import SimNetwork

BOOKIE_PORT = limits.port_default

WALL_CLOCK_EPOCH_MS = 1_700_000_000_000
"""What a client's wall clock reads at virtual time 0 (only stamped on metadata)."""

TRACE_LINES_MAX = 1_000_000
"""A run that traces more than this is broken (a retry loop spinning): it fails loudly."""

_DISK_BYTES = (1 << 40, 1 << 41)
"""(free, total) bytes every simulated disk reports: the simulation never fills a disk."""


class TraceOverflow(RuntimeError):
    """The trace passed `TRACE_LINES_MAX` lines."""


class Trace:
    """One line per notable event: `<virtual ms> <component> <event>`."""

    __slots__ = ("_lines", "_lines_max")

    def __init__(self, lines_max: int = TRACE_LINES_MAX) -> None:
        assert lines_max > 0
        self._lines: list[str] = []
        self._lines_max = lines_max

    def record(self, component: str, event: str) -> None:
        """Append one line, stamped with the running loop's virtual time."""
        if len(self._lines) >= self._lines_max:
            raise TraceOverflow(f"the trace passed {self._lines_max} lines")
        self._lines.append(f"{anyio.current_time() * 1000:12.3f} {component} {event}")

    @property
    def lines(self) -> Sequence[str]:
        return self._lines

    def tail(self, count: int) -> list[str]:
        """The last `count` lines (fewer if the trace is shorter)."""
        assert count >= 0
        return self._lines[len(self._lines) - count :] if count else []


def trace_difference(first: Sequence[str], second: Sequence[str]) -> str | None:
    """None when two traces are equal; otherwise where and how they first differ."""
    for number, (line_a, line_b) in enumerate(zip(first, second, strict=False), start=1):
        if line_a != line_b:
            return f"traces differ at line {number}:\n  first:  {line_a}\n  second: {line_b}"
    if len(first) != len(second):
        shorter = min(len(first), len(second))
        longer = first if len(first) > len(second) else second
        return (
            f"traces differ in length ({len(first)} and {len(second)} lines); "
            f"line {shorter + 1} is: {longer[shorter]}"
        )
    return None


class SimDisk:
    """A bookie's `LedgerStorage`: a `MemoryLedgerStorage` that wakes the disk task.

    Every mutation goes through to the memory storage; the disk task waits in
    `wait_unsynced` until some mutation is not yet synced, which is all a
    group-committing journal needs to know.
    """

    __slots__ = ("storage", "_wakeup")

    def __init__(self, storage: MemoryLedgerStorage) -> None:
        self.storage = storage
        self._wakeup: anyio.Event | None = None

    @property
    def unsynced_mutations(self) -> int:
        return self.storage.last_ticket - self.storage.synced_ticket

    async def wait_unsynced(self) -> None:
        """Return once some mutation waits for a sync."""
        while self.unsynced_mutations == 0 or self.storage.failure is not None:
            wakeup = self._wakeup = anyio.Event()
            await wakeup.wait()

    def _written(self, ticket: int) -> int:
        wakeup = self._wakeup
        if wakeup is not None:
            self._wakeup = None
            wakeup.set()
        return ticket

    # --- LedgerStorage ------------------------------------------------------------------------

    def recovered_ledgers(self) -> Iterable[LedgerRecord]:
        return self.storage.recovered_ledgers()

    def fenced_tombstones(self) -> Iterable[int]:
        return self.storage.fenced_tombstones()

    def set_master_key(self, ledger_id: int, master_key: bytes) -> int:
        return self._written(self.storage.set_master_key(ledger_id, master_key))

    def add_entry(self, ledger_id: int, entry_id: int, packet: bytes) -> int:
        return self._written(self.storage.add_entry(ledger_id, entry_id, packet))

    def fence(self, ledger_id: int) -> int:
        return self._written(self.storage.fence(ledger_id))

    def set_explicit_lac(self, ledger_id: int, lac: int, packet: bytes) -> int:
        return self._written(self.storage.set_explicit_lac(ledger_id, lac, packet))

    def delete_ledger(self, ledger_id: int) -> int:
        return self._written(self.storage.delete_ledger(ledger_id))

    @property
    def synced_ticket(self) -> int:
        return self.storage.synced_ticket

    def add_sync_listener(self, listener: Callable[[int], None]) -> Callable[[], None]:
        return self.storage.add_sync_listener(listener)

    @property
    def failure(self) -> StorageError | None:
        return self.storage.failure

    def read_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self.storage.read_entry(ledger_id, entry_id)

    def last_entry_id(self, ledger_id: int) -> int:
        return self.storage.last_entry_id(ledger_id)

    def entry_ranges(self, ledger_id: int) -> list[tuple[int, int]]:
        return self.storage.entry_ranges(ledger_id)

    def ledger_ids(self) -> list[int]:
        return self.storage.ledger_ids()


@dataclass(frozen=True, slots=True)
class WorldConfig:
    """The physical constants of one simulated world (drawn from the seed by the caller)."""

    bookie_count: int = 5
    latency_ms_min: float = 0.05
    latency_ms_max: float = 2.0
    fsync_ms_min: float = 0.1
    fsync_ms_max: float = 2.0
    connect_timeout_ms: int = 1_000
    """How long a connect into a partition hangs before it fails."""
    bookie_session_timeout_ms: int = 2_000
    """How long a crashed bookie's registration outlives it."""
    root: str = limits.metadata_root_default

    def __post_init__(self) -> None:
        assert self.bookie_count >= 1
        assert 0 <= self.latency_ms_min <= self.latency_ms_max
        assert 0 <= self.fsync_ms_min <= self.fsync_ms_max
        assert self.connect_timeout_ms > 0
        assert self.bookie_session_timeout_ms > 0


@dataclass(eq=False)
class SimBookie:
    """One simulated bookie across its incarnations."""

    bookie_id: str
    disk: SimDisk
    incarnation: int = 0
    up: bool = False
    disk_delay_ms: float = 0.0
    """Extra latency of every sync: the "slow disk" fault."""
    store: MemoryMetadataStore | None = None
    """The metadata session of the running incarnation."""
    scope: anyio.CancelScope | None = None
    server: BookieServer | None = None
    stopped: anyio.Event | None = None
    """Set when the running incarnation has stopped (after a crash, once it unwound)."""

    @property
    def address(self) -> str:
        return f"{self.bookie_id}:{BOOKIE_PORT}"


@dataclass(frozen=True, slots=True)
class CrashReport:
    """What a crash lost: `lost` of the `unsynced` mutations never reach the restarted disk."""

    unsynced: int
    survivors: int

    @property
    def lost(self) -> int:
        return self.unsynced - self.survivors


@dataclass(eq=False)
class SimCluster:
    """The world of one run; open it with `SimCluster.start`."""

    rng: random.Random
    config: WorldConfig
    trace: Trace
    network: SimNetwork = field(init=False)
    metadata: MemoryMetadataServer = field(init=False)
    bookies: dict[str, SimBookie] = field(init=False)
    clients: dict[str, MemoryMetadataStore] = field(init=False)
    """Metadata store of every client open now, by client name (its host)."""
    stats: Counter[str] = field(init=False)
    """How often each notable thing happened (faults, recoveries, ...): what a run tested."""
    client_hooks: list[Callable[[str], None]] = field(init=False)
    """Called with a client's name when it opens, before it connects anywhere (a standing
    partition places the newcomer on one of its sides)."""
    instance_id: str = field(init=False, default="")
    """The cluster's INSTANCEID, which every bookie states when a client connects."""
    _network_rng: random.Random = field(init=False)
    _disk_rng: random.Random = field(init=False)
    _task_group: anyio.abc.TaskGroup | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._network_rng = self.derive_rng()
        self.network = SimNetwork(
            self._network_rng,
            latency_ms_min=self.config.latency_ms_min,
            latency_ms_max=self.config.latency_ms_max,
            connect_timeout_s=self.config.connect_timeout_ms / 1000,
        )
        self._disk_rng = self.derive_rng()
        self.metadata = MemoryMetadataServer()
        self.bookies = {}
        for number in range(1, self.config.bookie_count + 1):
            bookie_id = f"bookie-{number}"
            self.bookies[bookie_id] = SimBookie(bookie_id, SimDisk(MemoryLedgerStorage()))
        self.clients = {}
        self.stats = Counter()
        self.client_hooks = []

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls, rng: random.Random, config: WorldConfig, trace: Trace
    ) -> AsyncIterator[SimCluster]:
        """A running world for the block: the cluster initialised, every bookie registered."""
        cluster = cls(rng, config, trace)
        async with cluster.metadata.client() as store:
            cluster.instance_id = await init_cluster(
                store, config.root, instance_id=f"sim-{rng.getrandbits(32):08x}"
            )
        async with anyio.create_task_group() as task_group:
            cluster._task_group = task_group
            for bookie in cluster.bookies.values():
                await task_group.start(cluster._run_bookie, bookie)
            yield cluster
            task_group.cancel_scope.cancel()

    def derive_rng(self) -> random.Random:
        """A new `Random` seeded from the world's: call in a fixed order to stay reproducible."""
        return random.Random(self.rng.getrandbits(64))

    def fingerprint(self) -> str:
        """A digest of the state of the world's network and disk randomness.

        Every latency drawn comes from them, so two runs that sent a different
        number of messages or synced a different number of times end with
        different fingerprints even when their traces happen to agree.
        """
        state = repr((self._network_rng.getstate(), self._disk_rng.getstate())).encode()
        return f"{zlib.crc32(state):08x}"

    def wall_clock_ms(self) -> int:
        return WALL_CLOCK_EPOCH_MS + int(anyio.current_time() * 1000)

    # --- bookies ------------------------------------------------------------------------------

    @property
    def bookie_ids(self) -> list[str]:
        return list(self.bookies)

    def holders(self, ledger_id: int, entry_id: int) -> list[str]:
        """The bookies whose disk (synced or not) holds the entry now."""
        return [
            bookie_id
            for bookie_id, bookie in self.bookies.items()
            if bookie.disk.read_entry(ledger_id, entry_id) is not None
        ]

    def crash(self, bookie_id: str, survivors: int | None = None) -> CrashReport:
        """Power-cut `bookie_id` (see the module docstring); `survivors` unsynced mutations
        reach its disk anyway (random when None)."""
        bookie = self.bookies[bookie_id]
        assert bookie.up, f"{bookie_id} is already down"
        assert not self.network.is_stalled(bookie_id), f"{bookie_id} is stalled: resume it first"
        assert bookie.scope is not None
        store = bookie.store
        stopped = bookie.stopped
        assert store is not None
        assert stopped is not None
        self.network.crash(bookie_id)
        unsynced = bookie.disk.unsynced_mutations
        if survivors is None:
            survivors = self._disk_rng.randint(0, unsynced) if self._disk_rng.random() < 0.5 else 0
        bookie.disk = SimDisk(bookie.disk.storage.crash(survivors))
        bookie.up = False
        bookie.store = None
        bookie.server = None
        bookie.scope.cancel()
        bookie.scope = None
        # Cut off, not closed: ZooKeeper keeps the registration until the session expires.
        if store.session_state is SessionState.CONNECTED:
            store.suspend()
        assert self._task_group is not None
        self._task_group.start_soon(self._expire_later, bookie_id, store, stopped)
        report = CrashReport(unsynced, survivors)
        self.trace.record(bookie_id, f"crash: lost {report.lost} of {unsynced} unsynced mutations")
        return report

    def restart(self, bookie_id: str) -> None:
        """Start a new incarnation of a crashed bookie from its disk, on the same address."""
        bookie = self.bookies[bookie_id]
        assert not bookie.up, f"{bookie_id} is running"
        self.network.restart(bookie_id)
        assert self._task_group is not None
        self._task_group.start_soon(self._run_bookie, bookie)

    async def _run_bookie(
        self,
        bookie: SimBookie,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        bookie.incarnation += 1
        incarnation = bookie.incarnation
        disk = bookie.disk
        store = self.metadata.client()
        listener = self.network.listen(bookie.address)
        server = BookieServer(
            disk,
            _disk_space,
            host=bookie.bookie_id,
            port=BOOKIE_PORT,
            listener=listener,
            identity=BookieIdentity(bookie.bookie_id, self.instance_id),
        )
        scope = anyio.CancelScope()
        stopped = anyio.Event()
        bookie.up = True
        bookie.store = store
        bookie.scope = scope
        bookie.server = server
        bookie.stopped = stopped
        self.trace.record(bookie.bookie_id, f"start incarnation {incarnation}")
        try:
            with scope:
                async with server, anyio.create_task_group() as disk_tasks:
                    disk_tasks.start_soon(self._sync_disk, bookie, disk)
                    while True:
                        try:
                            await self._serve_registered(bookie, store, task_status)
                        except MetadataUnavailable as error:
                            # What a supervisor restarting the process would get to.
                            self.trace.record(
                                bookie.bookie_id, f"not registered ({error}); again once back"
                            )
                            await _connected(store)
        finally:
            # A crash handed the store to `_expire_later`; otherwise this incarnation owns it.
            if bookie.store is store:
                bookie.store = None
                bookie.up = False
                with anyio.CancelScope(shield=True):
                    await store.aclose()
            stopped.set()

    async def _serve_registered(
        self,
        bookie: SimBookie,
        store: MemoryMetadataStore,
        task_status: anyio.abc.TaskStatus[None],
    ) -> None:
        async with register(
            store,
            bookie.bookie_id,
            BookieInfo(bookie.address),
            root=self.config.root,
            stale_wait_ms=4 * self.config.bookie_session_timeout_ms,
        ):
            self.trace.record(bookie.bookie_id, "registered")
            task_status.started()
            await anyio.sleep_forever()
        raise AssertionError("a registered bookie serves until cancelled")

    async def _sync_disk(self, bookie: SimBookie, disk: SimDisk) -> None:
        while True:
            await disk.wait_unsynced()
            latency_ms = self._disk_rng.uniform(self.config.fsync_ms_min, self.config.fsync_ms_max)
            await anyio.sleep((latency_ms + bookie.disk_delay_ms) / 1000)
            disk.storage.sync()

    async def _expire_later(
        self, bookie_id: str, store: MemoryMetadataStore, stopped: anyio.Event
    ) -> None:
        try:
            await anyio.sleep(self.config.bookie_session_timeout_ms / 1000)
            store.expire_session()
            self.trace.record(bookie_id, "session of the crashed incarnation expired")
        finally:
            # The crashed incarnation may still be unwinding (the world ends just
            # after the crash): it uses the store until it has stopped.
            with anyio.CancelScope(shield=True):
                await stopped.wait()
                await store.aclose()

    # --- clients ------------------------------------------------------------------------------

    async def run_autorecovery(self, name: str, settings: AutoRecoverySettings) -> None:
        """Run autorecovery (auditor candidate and worker) on host `name` until cancelled."""
        async with self.metadata.client() as store:
            await run_autorecovery(
                store, settings, self.derive_rng(), connector=self.network.connector(name)
            )

    @contextlib.asynccontextmanager
    async def client(self, name: str, config: ClientConfig) -> AsyncIterator[LedgerClient]:
        """A ledger client on host `name` with its own metadata session, for the block."""
        assert name not in self.clients, f"client {name} is open already"
        assert name not in self.bookies
        for hook in self.client_hooks:
            hook(name)
        async with (
            self.metadata.client() as store,
            LedgerClient.open(
                store,
                root=self.config.root,
                connector=self.network.connector(name),
                rng=self.derive_rng(),
                config=config,
                wall_clock_ms=self.wall_clock_ms,
            ) as client,
        ):
            # Only an open client is a target for faults: an application does not
            # get a client at all while the metadata service is unreachable.
            self.clients[name] = store
            try:
                yield client
            finally:
                del self.clients[name]


async def _connected(store: MemoryMetadataStore) -> None:
    """Return once `store`'s session is connected (at once if it is)."""
    events = store.session_events()
    if store.session_state is SessionState.CONNECTED:
        return
    async for state in events:
        if state is SessionState.CONNECTED:
            return


def _disk_space() -> tuple[int, int]:
    return _DISK_BYTES
