"""`Replica`: one replica of one application, as an `async with` block.

A replica is a follower, a leader-elect taking over, or the leader, and moves
between them in one loop (`_role_loop`), so there is never more than one
writer of its state.  Every decision about its role (when to stop following,
whether a takeover may go on, when to step down, stand, or stand aside) is
the pure `RoleMachine`'s (rsm/core/roles.py, with the transitions): this
shell reports what its loops see and carries out the effects.

Around that loop, tasks owned by the replica's task group:

* the client-facing server (rsm/runtime/server.py), which hands requests to
  `handle_call` / `handle_query` (the `Endpoint` of the server);
* the election loop: stands as a candidate once the follower is caught up
  (`limits.candidate_lag_entries_max`), evaluates the leader-elect on every
  change of the candidates, the handoff or the log, and tells the role loop
  (stop following and take over; or stop leading);
* the session loop: LOST means step down (the candidacy and membership went
  with the session, and are created again once caught up); SUSPENDED is only
  logged: a leader keeps leading through a dropped ZooKeeper connection,
  since a successor must fence its ledger before acknowledging anything;
* the leader watch (`Leadership.follow_leader`), for NotLeader hints;
* the snapshot work (rsm/runtime/snapshot_service.py): the snapshots znode watch and
  the snapshot policy; while leading, also truncation and garbage deletion.

A replica starts from the newest valid snapshot (and replays the log after
it), before it serves anything; it refuses to start when the log was
truncated past every snapshot it could load.  A follower that finds the log
truncated past its state (it was away too long) loads a snapshot the same way
and goes on; a replica whose state is current never reloads.  Each of these
steps that reads or writes ZooKeeper (the application's znodes, the snapshot,
the log, the replica's registration) tries again after a transient error
(`rsm.retry`, every `retry_delay_ms`): a connection lost for a moment on a
loaded machine delays a start rather than ending it.

Safety does not rest on any of this timing: a leader only acknowledges what
Qa bookies acknowledged (I2), a successor fences the old ledger before it
replays it, and the log changes only by CAS (I1).

Stopping.  Leaving the block normally is a graceful stop: a leader stops
taking writes, drains, closes its ledger and, in one CAS, closes its segment,
hands leadership to a caught-up candidate (when there is one) and removes its
candidacy and leader znode, so the successor needs no fencing.  Leaving it by
an exception or a cancellation stops at once, as a crash would.

Everything external is injected (metadata store, ledger client, listener,
randomness, wall clock), and time is read only through anyio, so the same code
runs in a process (`rsm run`) and in the seeded simulation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from bookie.address import Address, parse_address
from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.clock import system_wall_clock_ms
from bookie.core.tokens import TokenTable
from bookie.errors import BookieError, InvalidAddress
from bookie.logs import emit
from bookie.meta.api import (
    ANY_VERSION,
    Delete,
    MetadataStore,
    SessionState,
    SetData,
)
from bookie.meta.api import (
    Op as MetadataOp,
)
from bookie.meta.session_events import SessionDowntime
from bookie.net.tls import TlsStreamListener
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core import log_state
from rsm.core.commands import AppliedPosition
from rsm.core.election import Candidate
from rsm.core.layout import RSM_ROOT, AppLayout, check_replica_id
from rsm.core.log_format import Handoff, LeaderInfo, encode_handoff, encode_log
from rsm.core.protocol import CallRequest, Consistency, Op, QueryRequest
from rsm.core.roles import (
    CancelFollow,
    CancelTakeover,
    Effect,
    ForgetCandidacy,
    Role,
    RoleMachine,
    Step,
    StepDown,
    WakeElection,
    WakeElectionAt,
)
from rsm.core.sessions import Outcome, SessionTable
from rsm.core.snapshot_policy import snapshotter
from rsm.core.state_machine import StateMachine
from rsm.errors import (
    BadRequest,
    InvalidConfig,
    NotLeader,
    StatusError,
    Timeout,
    Truncated,
    Unavailable,
)
from rsm.runtime.applier import Answerer, Applier, Read
from rsm.runtime.election import ElectionView, Leadership
from rsm.runtime.leader_term import LeaderTerm
from rsm.runtime.listening import listen_tcp
from rsm.runtime.log import LogFollower, LogStore, SegmentReader
from rsm.runtime.orphans import orphan_loop
from rsm.runtime.server import ClientAuth, ReplicaServer
from rsm.runtime.snapshot_service import SnapshotService
from rsm.runtime.stats import ReplicaStats
from rsm.runtime.takeover import Takeover, take_over
from rsm.runtime.transient import is_transient
from rsm.snapshots.inspect import manifest_plain
from rsm.snapshots.loader import Restored
from rsm.snapshots.store import SnapshotStore

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


class _LocalAnswer:
    """The answerer of an in-process call: one event, one outcome."""

    __slots__ = ("event", "outcome", "index")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.outcome = Outcome()
        self.index = 0

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        self.outcome = outcome
        self.index = index
        self.event.set()


class _TimedAnswerer:
    """An `Answerer` that adds the time a query waited for its answer to the replica's
    `ReplicaStats.read_wait_seconds`, then passes the answer on."""

    __slots__ = ("_answerer", "_stats", "_arrived_s")

    def __init__(self, answerer: Answerer, stats: ReplicaStats) -> None:
        self._answerer = answerer
        self._stats = stats
        self._arrived_s = time.perf_counter()

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        self._stats.read_wait_seconds += time.perf_counter() - self._arrived_s
        self._answerer.answer(op, request_id, outcome, index)


_LEASE_WAIT_STEP_S = 0.001


async def _bind(
    listen: str, advertise: str | None, *, tls: bool
) -> tuple[anyio.abc.Listener[anyio.abc.ByteStream], str]:
    """A TCP listener on `listen` ("host:port", port 0: any free one) and the address it is
    advertised as; `InvalidConfig` naming the flag (`tls`: the TLS port's) or the address
    when unusable."""
    what, flag = ("TLS listen", "--tls-advertise") if tls else ("listen", "--advertise")
    try:
        address = parse_address(listen, port_zero=True)
    except InvalidAddress as error:
        raise InvalidConfig(f"{what} address {listen!r} is not host:port") from error
    if advertise is None and address.host in ("0.0.0.0", "::"):
        raise InvalidConfig(f"listening on {address.host} needs {flag}: the address to tell others")
    role = "the framework's TLS port" if tls else "the framework's port"
    listener: anyio.abc.Listener[anyio.abc.ByteStream] = await listen_tcp(address, role)
    port = listener.extra(SocketAttribute.local_port)
    return listener, advertise or str(Address(address.host, port))


class Replica:
    """One replica of application `app`; see the module docstring.

    `machine` is a `StateMachine` class or a factory (called without
    arguments), or an instance.  Loading a snapshot needs a fresh instance:
    the factory makes it, or for an instance its class called without
    arguments.  `listener` replaces the TCP listener on `listen`
    ("host:port", port 0: any free one); with it, `advertise` is required.
    `advertise` is the address clients and other replicas are told (default:
    the listening address); `replica_id` defaults to it.  `lease_clock_s`
    (seconds, monotonic) measures read leases and a successor's wait for them
    (rsm/core/reads.py); by default the event loop's clock, which is what a
    test replaces to give replicas clocks of different rates.  `on_role` is
    called with the new role on every change of role (a replica starts as a
    follower), between two steps of the role loop: it must not block.  With
    `tls` (a server context, `bookie.net.tls.server_context`) the TCP listener
    on `listen` speaks TLS, serving only clients whose certificate subject
    common name is in `tls_allowed_names` when that is given; refusals are
    counted in `tls_listener`.  With `tls` and `tls_listen` ("host:port"), the
    replica serves plain TCP on `listen` and TLS on `tls_listen` (advertised
    as `tls_advertise`, by default the listening address), side by side, with
    the same client tokens: a store moves to TLS one replica at a time.  The
    discovery znodes carry both addresses (rsm/core/log_format.py); the
    addresses the replica hands in-process callers (`address`, NotLeader
    hints, `wait_leader_change`) are of the kind its `listen` port speaks,
    and each listener's NotLeader answers name the leader's port of its own
    kind.
    """

    def __init__(
        self,
        machine: StateMachine | Callable[[], StateMachine],
        *,
        app: str,
        store: MetadataStore,
        ledgers: LedgerClient,
        replica_id: str | None = None,
        listen: str = "127.0.0.1:0",
        advertise: str | None = None,
        listener: anyio.abc.Listener[anyio.abc.ByteStream] | None = None,
        config: ReplicaConfig | None = None,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] = system_wall_clock_ms,
        lease_clock_s: Callable[[], float] | None = None,
        on_role: Callable[[Role], None] | None = None,
        rsm_root: str = RSM_ROOT,
        client_tokens: TokenTable | None = None,
        tls: ssl.SSLContext | None = None,
        tls_allowed_names: Collection[str] | None = None,
        tls_listen: str | None = None,
        tls_advertise: str | None = None,
    ) -> None:
        if listener is not None and advertise is None:
            raise InvalidConfig("a replica given its listener must be given its advertise address")
        if tls_listen is None and tls_advertise is not None:
            raise InvalidConfig("a TLS advertise address needs a TLS listen address")
        if tls_listen is not None and tls is None:
            raise InvalidConfig("a TLS listen address needs a TLS server context")
        self.app = app
        self._tls = tls
        self._tls_listen = tls_listen
        self._tls_advertise = tls_advertise
        self._main_tls = tls is not None and tls_listen is None
        """Whether the `listen` port speaks TLS (else it is plain)."""
        self._tls_allowed_names = tls_allowed_names
        self.tls_listener: TlsStreamListener | None = None
        """The TLS listener (its counts of accepted and refused handshakes), if any."""
        self.config = config if config is not None else ReplicaConfig()
        if isinstance(machine, StateMachine):
            instance = machine
            self._machine_factory: Callable[[], StateMachine] = _factory_of(machine)
        else:
            instance = machine()
            self._machine_factory = machine
        self._store = store
        self._ledgers = ledgers
        self._layout = AppLayout.of(app, rsm_root)
        self._log_store = LogStore(store, self._layout)
        self._reader = SegmentReader(ledgers, self.config.ledger_password)
        self._applier = Applier(instance, self.config)
        self._listen = listen
        self.client_auth = ClientAuth(client_tokens)
        """Whom the replica's server serves (`client_tokens`: only clients presenting one of
        them), and its refusals."""
        self._servers: list[ReplicaServer] = []
        self._advertise = advertise
        self._listener = listener
        self._address: str | None = None
        self._requested_id = replica_id
        self._rng = rng if rng is not None else random.Random()
        self._wall_clock_ms = wall_clock_ms
        self._lease_clock_s = lease_clock_s
        self._on_role = on_role
        self._roles = RoleMachine(self.config.retry_delay_ms)
        self._announced_role = Role.FOLLOWER
        self._term: LeaderTerm | None = None
        self._view: ElectionView | None = None
        self._follow_scope: anyio.CancelScope | None = None
        self._follower: LogFollower | None = None
        self._takeover_scope: anyio.CancelScope | None = None
        self._election_wakeup = anyio.Event()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._leadership: Leadership | None = None
        self._lifetime: contextlib.AbstractAsyncContextManager[Replica] | None = None
        self._snapshots: SnapshotService | None = None
        self.last_transfer_window_ms: int | None = None
        self.takeovers = 0
        self.stats = ReplicaStats()
        """What the replica counts for its metrics (rsm/runtime/metrics.py)."""
        self._takeover_started_s = 0.0

    # --- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> Replica:
        assert self._lifetime is None, "a Replica is entered once"
        self._lifetime = self._run()
        return await self._lifetime.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._lifetime is not None
        return await self._lifetime.__aexit__(exc_type, exc, traceback)

    @contextlib.asynccontextmanager
    async def _run(self) -> AsyncIterator[Replica]:
        if self._lease_clock_s is None:
            self._lease_clock_s = asyncio.get_running_loop().time
        await self._retry_transient("create_layout", self._log_store.ensure_layout)
        listener, address = await self._open_listener()
        tls_server: ReplicaServer | None = None
        tls_address: str | None = address if self._main_tls else None
        try:
            if self._tls_listen is not None:
                tls_listener, tls_address = await self._open_tls_listener(self._tls_listen)
                tls_server = ReplicaServer(self, tls_listener, self.client_auth, hints_tls=True)
            replica_id = check_replica_id(self._requested_id or address)
            snapshots = self._snapshots = SnapshotService(
                app=self.app,
                replica_id=replica_id,
                snapshots=SnapshotStore(self._store, self._ledgers, self._layout, self.config),
                applier=self._applier,
                config=self.config,
                machine_factory=self._machine_factory,
                wall_clock_ms=self._wall_clock_ms,
            )
            await self._start_from_snapshot()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await listener.aclose()
                if self.tls_listener is not None:
                    await self.tls_listener.aclose()
            raise
        leadership = self._leadership = Leadership(
            self._store,
            self._log_store,
            replica_id=replica_id,
            address=None if self._main_tls else address,
            tls_address=tls_address,
            retry_delay_ms=self.config.retry_delay_ms,
        )
        self._address = address
        try:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                server = ReplicaServer(self, listener, self.client_auth)
                self._servers = [server] if tls_server is None else [server, tls_server]
                for serving in self._servers:
                    task_group.start_soon(serving.serve)
                await self._retry_transient("register", leadership.register)
                task_group.start_soon(leadership.follow_leader)
                task_group.start_soon(self._session_loop)
                task_group.start_soon(self._election_loop)
                task_group.start_soon(self._role_loop)
                task_group.start_soon(snapshots.watch)
                task_group.start_soon(snapshots.policy_loop, self._is_snapshotter)
                emit(
                    logger,
                    logging.INFO,
                    "rsm.replica_started",
                    app=self.app,
                    replica_id=replica_id,
                    address=address,
                    **({"tls_address": tls_address} if tls_address is not None else {}),
                )
                try:
                    yield self
                    # Reached only when the block ended normally: a graceful stop.
                    await self._stop_gracefully()
                finally:
                    task_group.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The replica's tasks raise only fatal errors; one error is handed back
            # as it was raised, not wrapped.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    async def _open_listener(self) -> tuple[anyio.abc.Listener[anyio.abc.ByteStream], str]:
        if self._listener is not None:
            assert self._advertise is not None
            return self._listener, self._advertise
        listener, address = await _bind(self._listen, self._advertise, tls=False)
        if self._main_tls:
            listener = self._tls_wrapped(listener)
        return listener, address

    async def _open_tls_listener(
        self, tls_listen: str
    ) -> tuple[anyio.abc.Listener[anyio.abc.ByteStream], str]:
        """The second, TLS, listener beside a plain `listen` port, and its advertised address."""
        listener, address = await _bind(tls_listen, self._tls_advertise, tls=True)
        return self._tls_wrapped(listener), address

    def _tls_wrapped(self, listener: anyio.abc.Listener[anyio.abc.ByteStream]) -> TlsStreamListener:
        assert self._tls is not None
        self.tls_listener = TlsStreamListener(
            listener, self._tls, name="replica", allowed_names=self._tls_allowed_names
        )
        return self.tls_listener

    # --- state --------------------------------------------------------------------------------

    @property
    def _lease_clock(self) -> Callable[[], float]:
        assert self._lease_clock_s is not None, "set when the replica starts"
        return self._lease_clock_s

    @property
    def _election(self) -> Leadership:
        assert self._leadership is not None, "the replica is not running"
        return self._leadership

    @property
    def replica_id(self) -> str:
        return self._election.replica_id

    @property
    def machine(self) -> StateMachine:
        """The state machine (another instance after a snapshot was loaded)."""
        return self._applier.machine

    @property
    def snapshots(self) -> SnapshotService:
        assert self._snapshots is not None, "the replica is not running"
        return self._snapshots

    @property
    def address(self) -> str:
        """The advertised address of the `listen` port (TLS or plain, as it speaks)."""
        assert self._address is not None, "the replica is not running"
        return self._address

    def clients_connected_since(self, since_s: float) -> int:
        """Connections open on the replica's protocol port(s) that were admitted at or
        before `since_s` (anyio's clock; 0 before it serves)."""
        return sum(server.connections_open_since(since_s) for server in self._servers)

    @property
    def tls_address(self) -> str | None:
        """The advertised address of the replica's TLS port, if it has one."""
        return self._election.tls_address

    def leader_address(self, *, tls: bool) -> str | None:
        """The address of the leader's TLS port (`tls`) or plain port, as this replica last
        saw the `leader` znode; None when no other replica leads or it has no such port."""
        leader = self._election.leader
        if leader is None or leader.replica_id == self.replica_id:
            return None
        return leader.tls_address if tls else leader.address

    def _kind_of_main(self, leader: LeaderInfo | None) -> str | None:
        """`leader`'s address of the kind the `listen` port speaks, if it has one."""
        if leader is None:
            return None
        return leader.tls_address if self._main_tls else leader.address

    @property
    def role(self) -> Role:
        return self._roles.role

    @property
    def is_leader(self) -> bool:
        """True while this replica serves as leader (its term accepts commands)."""
        term = self._term
        return term is not None and term.accepting

    @property
    def epoch(self) -> int:
        """The epoch of this replica's term while it leads, else the log's epoch as last seen."""
        term = self._term
        if term is not None:
            return term.epoch
        return self._view.log_epoch if self._view is not None else 0

    @property
    def applied_index(self) -> int:
        return self._applier.applied_index

    @property
    def applied_position(self) -> AppliedPosition:
        """Index, logged time and epoch of the last entry applied."""
        return self._applier.position

    @property
    def session_table(self) -> SessionTable:
        """The replicated session table (read it, never change it)."""
        return self._applier.sessions

    @property
    def ledgers(self) -> LedgerClient:
        """The ledger client the replica reads and writes its log with."""
        return self._ledgers

    @property
    def leader_changes(self) -> int:
        """How often this replica saw the `leader` znode name a new leader (or a new epoch)."""
        return self._election.leader_changes

    @property
    def term(self) -> LeaderTerm | None:
        return self._term

    def status(self) -> dict[str, Any]:
        """What this replica is and how far it got: the STATUS answer.

        `role` (follower, taking_over, leader) and `serving` (leads and takes
        commands), `epoch`, `applied_index` / `applied_time_ms` (the last entry
        applied), the leader as its znode says (`leader_id`, `leader_address`,
        `leader_epoch`), `candidate` (stands for election), `caught_up`,
        `lag_entries` (entries of the ledger it reads that are confirmed and not
        applied yet: `LogFollower.lag_entries`; 0 while it leads),
        `sessions` (clients in the session table), `waiting_reads`
        (read_your_writes waiting for their index), `takeovers`,
        `last_transfer_window_ms`, while leading `term`: the ledger
        written (and `ensemble_change_deferred`: a failed bookie of its
        ensemble has no replacement, so entries get fewer copies), queued
        commands, batches in flight, rollovers and the last rollover's pause;
        `snapshots` (taken, loaded, skipped, the last ones, truncations) and
        `state_hashes` (the newest recorded, checks against the log, and
        `diverged_at`: the first index where this replica's state differed
        from the leader's, or None); `load`: counters since the process
        started, `commits` and `commit_seconds` (batches committed here as
        leader, the sum of their commit latencies), `reads` (queries this
        replica answered or took) and `read_wait_seconds` (how long they waited
        for their answers here, summed; a read answered at once adds nothing).
        """
        leadership = self._election
        leader = leadership.leader
        term = self._term
        position = self._applier.position
        return {
            "app": self.app,
            "replica_id": leadership.replica_id,
            "address": self._address,
            "tls_address": leadership.tls_address,
            "role": self._roles.role.value,
            "serving": self.is_leader,
            "epoch": self.epoch,
            "applied_index": position.index,
            "applied_time_ms": position.time_ms,
            "leader_id": leader.replica_id if leader is not None else None,
            "leader_address": self._kind_of_main(leader),
            "leader_epoch": leader.epoch if leader is not None else None,
            "candidate": leadership.candidacy is not None,
            "caught_up": self._roles.caught_up,
            "lag_entries": self._lag_entries(),
            "sessions": len(self._applier.sessions),
            "waiting_reads": self._applier.waiting_reads,
            "takeovers": self.takeovers,
            "last_transfer_window_ms": self.last_transfer_window_ms,
            "term": term.status() if term is not None else None,
            "snapshots": self._snapshots.status() if self._snapshots is not None else None,
            "state_hashes": self._applier.hashes.status(),
            "load": {
                "commits": self.stats.commit_seconds.count,
                "commit_seconds": self.stats.commit_seconds.sum,
                "reads": self.stats.reads,
                "read_wait_seconds": self.stats.read_wait_seconds,
            },
        }

    # --- requests (the server's Endpoint) -----------------------------------------------------

    def handle_call(self, request: CallRequest, answerer: Answerer) -> None:
        term = self._term
        if term is None or not term.accepting:
            answerer.answer(Op.CALL, request.request_id, self._not_leader(), 0)
            return
        term.submit_call(request, answerer)

    def handle_query(self, request: QueryRequest, answerer: Answerer) -> int | None:
        stats = self.stats
        stats.reads += 1
        answerer = _TimedAnswerer(answerer, stats)
        read = Read(answerer, request.request_id, request.name, request.args, request.kwargs)
        if request.consistency is Consistency.LINEARIZABLE:
            term = self._term
            if term is None or not term.accepting:
                answerer.answer(Op.QUERY, request.request_id, self._not_leader(), 0)
                return None
            term.submit_read(read)
            return None
        if request.consistency is Consistency.READ_YOUR_WRITES:
            try:
                return self._applier.read_at(request.min_index, read)
            except StatusError as error:
                answerer.answer(Op.QUERY, request.request_id, Outcome.failure(error), 0)
                return None
        self._applier.answer_read(read)
        return None

    def read_now(
        self, name: str, args: list[Any], kwargs: dict[str, Any] | None = None
    ) -> Outcome | None:
        """A linearizable read answered at once by a leader under its read lease, or None
        (not leading, or the read needs a confirmation round: use `handle_query`)."""
        term = self._term
        if term is None or not term.accepting:
            return None
        outcome = term.read_now(name, args, kwargs)
        if outcome is not None:
            self.stats.reads += 1
        return outcome

    def lease_time_ms(self) -> int | None:
        """When a linearizable read may be answered at once from `machine`'s state: the
        time (ms) to read it at, as a query's `Context.time_ms` would be; None when not
        (not leading, or the read lease needs a confirmation round: use `handle_query`).

        For an application that answers its hottest reads itself, without a query's
        dispatch by name and its `Outcome`: it reads `machine` in the same callback, at
        this time, and changes nothing.  The guarantee is `read_now`'s; counted as a read."""
        term = self._term
        if term is None or not term.accepting:
            return None
        time_ms = term.lease_time_ms()
        if time_ms is None:
            return None
        self.stats.reads += 1
        return self._not_before_applied(time_ms)

    def read_applied(
        self, name: str, args: list[Any], *, time_ms: int, waited_s: float = 0.0
    ) -> Outcome:
        """Query `name` answered at once from this replica's applied state, as of `time_ms`
        when that is later than the last applied entry's time.

        For a caller that established the read's freshness itself: a follower that learned
        the leader's applied index and clock for a linearizable read (a query the leader
        answered after the read arrived) and has applied at least that index.  `waited_s`:
        how long the read waited for that (the replica's read latency counts it)."""
        stats = self.stats
        stats.reads += 1
        stats.read_wait_seconds += waited_s
        return self._applier.query(name, args, None, time_ms=time_ms)

    def read_applied_time_ms(self, time_ms: int, *, reads: int, waited_s: float = 0.0) -> int:
        """For `reads` reads answered from `machine`'s applied state in one callback (the
        `read_applied` case, for an application that reads its state itself, as with
        `lease_time_ms`): the time to read it at, `time_ms` or the last applied entry's
        time if later.  Counted as `reads` reads, each having waited `waited_s`."""
        stats = self.stats
        stats.reads += reads
        stats.read_wait_seconds += waited_s * reads
        return self._not_before_applied(time_ms)

    def _not_before_applied(self, time_ms: int) -> int:
        """`time_ms`, or the last applied entry's time if later (as a query reads)."""
        applied_ms = self._applier.position.time_ms
        return time_ms if time_ms > applied_ms else applied_ms

    def cancel_read(self, ticket: int) -> None:
        self._applier.cancel_read(ticket)

    def flush(self) -> None:
        term = self._term
        if term is not None:
            term.pump()

    def _not_leader(self) -> Outcome:
        hint = self.leader_address(tls=self._main_tls)
        return Outcome.failure(NotLeader(f"replica {self.replica_id} is not the leader", hint))

    # --- in-process API -----------------------------------------------------------------------

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Run command `name` through the log, on this replica (which must lead); its result.

        No session: a caller that retries after an error may apply a command
        twice.  Clients that need exactly-once use `rsm.connect`.
        """
        answer = _LocalAnswer()
        self.handle_call(CallRequest(0, name, list(args), kwargs), answer)
        self.flush()
        await answer.event.wait()
        return answer.outcome.unwrap()

    async def query(
        self,
        name: str,
        *args: Any,
        consistency: Consistency | str = Consistency.LINEARIZABLE,
        min_index: int = 0,
        **kwargs: Any,
    ) -> Any:
        """Answer query `name` on this replica at the given consistency; its result."""
        answer = _LocalAnswer()
        request = QueryRequest(
            0, name, list(args), kwargs, Consistency.parse(consistency), min_index
        )
        self.handle_query(request, answer)
        self.flush()
        await answer.event.wait()
        return answer.outcome.unwrap()

    # --- the role loop ------------------------------------------------------------------------

    async def _role_loop(self) -> None:
        roles = self._roles
        while True:
            await self._follow()
            if roles.stopping:
                break
            self._step_ended(Step.FOLLOW_ENDED)
            taken = await self._try_take_over()
            if taken is None:
                self._step_ended(Step.TAKEOVER_LOST)
            else:
                await self._lead(taken)

    def _step_ended(self, step: Step) -> None:
        self._roles.step_ended(step)
        self._announce_role()

    def _announce_role(self) -> None:
        """Tell `on_role` about a change of role since it was last told."""
        role = self._roles.role
        if role is not self._announced_role:
            self._announced_role = role
            if self._on_role is not None:
                self._on_role(role)

    def _apply(self, effects: list[Effect]) -> None:
        """Carry out what the role machine decided, in order."""
        for effect in effects:
            if isinstance(effect, CancelFollow):
                if self._follow_scope is not None:
                    self._follow_scope.cancel()
            elif isinstance(effect, CancelTakeover):
                if self._takeover_scope is not None:
                    self._takeover_scope.cancel()
            elif isinstance(effect, StepDown):
                if self._term is not None:
                    self._term.step_down(effect.reason, stand_aside=False)
            elif isinstance(effect, ForgetCandidacy):
                self._election.candidacy = None
            elif isinstance(effect, WakeElection):
                self._wake_election()
            else:
                assert isinstance(effect, WakeElectionAt)
                task_group = self._task_group
                assert task_group is not None
                task_group.start_soon(self._wake_election_after, effect.delay_ms)

    async def _follow(self) -> None:
        follower = self._follower = LogFollower(
            self._log_store,
            self._reader,
            self._applier,
            lag_entries_max=self.config.candidate_lag_entries_max,
            retry_delay_ms=self.config.retry_delay_ms,
            on_progress=self._on_progress,
        )
        with anyio.CancelScope() as scope:
            self._follow_scope = scope
            if not self._roles.should_follow():
                scope.cancel()
            while True:
                try:
                    await follower.run()
                except Truncated as error:
                    await self._reload(error)
        self._follow_scope = None

    def _lag_entries(self) -> int:
        follower = self._follower
        if self._roles.role is Role.LEADER or follower is None:
            return 0
        return follower.lag_entries

    def _on_progress(self, caught_up: bool) -> None:
        self._apply(self._roles.caught_up_changed(caught_up))

    async def _try_take_over(self) -> Takeover | None:
        roles = self._roles
        taken: Takeover | None = None
        self._takeover_started_s = anyio.current_time()
        with anyio.CancelScope() as scope:
            self._takeover_scope = scope
            for _attempt in range(limits.takeover_attempts_max):
                if not roles.may_take_over():
                    break
                try:
                    taken = await take_over(
                        log_store=self._log_store,
                        reader=self._reader,
                        ledgers=self._ledgers,
                        applier=self._applier,
                        replica_id=self.replica_id,
                        app=self.app,
                        config=self.config,
                        still_elected=roles.may_take_over,
                        lease_clock_s=self._lease_clock,
                    )
                except Truncated as error:
                    await self._reload(error)
                    continue
                except Exception as error:
                    if not is_transient(error):
                        raise
                    emit(logger, logging.WARNING, "rsm.takeover_retry", error=repr(error))
                    await anyio.sleep(self.config.retry_delay_ms / 1000)
                    continue
                if taken is not None:
                    break
            else:
                emit(logger, logging.WARNING, "rsm.takeover_abandoned")
                await self._stand_aside()
        self._takeover_scope = None
        return taken

    async def _lead(self, taken: Takeover) -> None:
        term = LeaderTerm(
            applier=self._applier,
            ledgers=self._ledgers,
            log_store=self._log_store,
            handle=taken.handle,
            log=taken.log,
            log_version=taken.log_version,
            replica_id=self.replica_id,
            config=self.config,
            rng=self._rng,
            wall_clock_ms=self._wall_clock_ms,
            lease_clock_s=self._lease_clock,
            stats=self.stats,
        )
        self._term = term
        effects = self._roles.takeover_won()
        self._announce_role()
        self.takeovers += 1
        # Told to stop after the CAS was won: the term ends at once and its
        # ledger is closed like any other.
        self._apply(effects)
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(self._serve, term, taken)
            task_group.start_soon(self.snapshots.truncation_loop, term)
            task_group.start_soon(
                functools.partial(
                    orphan_loop,
                    lambda: term.ended is not None,
                    store=self._store,
                    ledgers=self._ledgers,
                    layout=self._layout,
                    config=self.config,
                    wall_clock_ms=self._wall_clock_ms,
                )
            )
            await term.run()
            task_group.cancel_scope.cancel()
        self.stats.read_rounds_ended_terms += term.read_rounds
        self._term = None
        self._step_ended(Step.TERM_ENDED)
        if term.stepped_down:
            await self._after_step_down(term)

    async def _serve(self, term: LeaderTerm, taken: Takeover) -> None:
        if not await term.wait_started():
            return
        # Whatever the fenced leader's read lease still covers must run out
        # before this term acknowledges anything (rsm/core/reads.py).  The
        # lease clock may run slower than the loop's: sleep until it agrees,
        # in steps of at least a millisecond (waiting longer is safe).
        clock_s = self._lease_clock
        while (remaining_s := taken.serve_from_s - clock_s()) > 0:
            await anyio.sleep(max(remaining_s, _LEASE_WAIT_STEP_S))
        if term.ended is not None:
            return
        try:
            await self._election.publish(term.epoch)
        except (StatusError, BookieError) as error:
            term.step_down(f"could not publish the leader znode: {error!r}")
            return
        term.serve()
        self.stats.failover_seconds.observe(anyio.current_time() - self._takeover_started_s)
        emit(
            logger,
            logging.INFO,
            "rsm.leader",
            epoch=term.epoch,
            ledger_id=term.segment.ledger_id,
            first_index=term.segment.first_index,
            recovered=taken.recovered,
        )

    async def _after_step_down(self, term: LeaderTerm) -> None:
        handle = term.handle
        task_group = self._task_group
        assert task_group is not None
        if not handle.is_closed:
            task_group.start_soon(_close_abandoned, handle)
        with anyio.move_on_after(self.config.retry_delay_ms / 1000 * 5):
            await self._election.unpublish(term.epoch)
            if term.stand_aside:
                await self._stand_aside()

    async def _stand_aside(self) -> None:
        """Let another candidate be elected: withdraw (to re-stand later) and clear the pin."""
        leadership = self._election
        self._roles.standing_aside()
        try:
            await leadership.withdraw()
            await leadership.clear_pin()
        except BookieError as error:
            emit(logger, logging.WARNING, "rsm.stand_aside_failed", error=repr(error))
        self._apply([self._roles.stood_aside(anyio.current_time())])

    async def _wake_election_after(self, delay_ms: int) -> None:
        await anyio.sleep(delay_ms / 1000)
        # A timer may fire a hair before its deadline (asyncio runs timers due
        # within its clock's resolution; a virtual clock rounds): wait out what
        # is left, or `_may_stand` refuses and nothing wakes the election again.
        while (remaining_s := self._roles.stand_not_before_s - anyio.current_time()) > 0:
            await anyio.sleep(remaining_s)
        self._wake_election()

    # --- snapshots ----------------------------------------------------------------------------

    async def _start_from_snapshot(self) -> None:
        """Load the newest valid snapshot, if any; refuse to start when the log was truncated
        past every snapshot that could be loaded (nothing could rebuild the state).

        A newer snapshot may be registered, and the log truncated past the one loaded,
        while it loads: then the snapshots znode is read again and the newer one loaded
        (`rsm.snapshot_superseded`), up to `limits.snapshot_load_rounds_max` times."""
        for _round in range(limits.snapshot_load_rounds_max):
            await self._load_snapshot()
            seen = self.snapshots.value.newest
            log, _version = await self._retry_transient("read_log", self._log_store.read)
            next_index = self._applier.applied_index + 1
            if next_index >= log.first_index:
                return
            value = await self._retry_transient("read_snapshots", self.snapshots.refresh)
            newest = value.newest
            if newest is None or (seen is not None and newest.index <= seen.index):
                break  # no snapshot newer than those the load tried: nothing bridges the gap
            emit(
                logger,
                logging.WARNING,
                "rsm.snapshot_superseded",
                applied_index=next_index - 1,
                log_first_index=log.first_index,
                newest_index=newest.index,
            )
        raise Truncated(
            f"cannot start: the log of {self.app!r} begins at index {log.first_index} "
            f"(truncated), and no valid snapshot reaches index {log.first_index - 1}; "
            f"the newest usable state ends at index {next_index - 1} "
            "(see `rsm snapshot ls` and the rsm.snapshot_skipped errors above)"
        )

    async def _load_snapshot(self) -> Restored | None:
        return await self._retry_transient(
            "load_snapshot", functools.partial(self.snapshots.load_newest, self._log_first_index)
        )

    async def _log_first_index(self) -> int:
        log, _version = await self._log_store.read()
        return log.first_index

    async def _reload(self, cause: Truncated) -> None:
        """The log was truncated past this replica's state: load a snapshot to go on from."""
        emit(logger, logging.WARNING, "rsm.reload_snapshot", reason=str(cause))
        restored = await self._load_snapshot()
        if restored is None:
            raise Truncated(
                f"{cause}; no valid snapshot is newer than this replica's state (index "
                f"{self._applier.applied_index}), so it cannot go on"
            ) from None

    async def _retry_transient(self, step: str, operation: Callable[[], Awaitable[_T]]) -> _T:
        """`operation`'s result, trying again every `retry_delay_ms` after a transient error
        (ZooKeeper's connection lost for a moment, a bookie busy), each logged as
        `rsm.retry step=<step>`: a replica starting or reloading on a loaded machine
        waits for its metadata rather than exiting.  Other errors are raised."""
        while True:
            try:
                return await operation()
            except Exception as error:
                if not is_transient(error):
                    raise
                emit(logger, logging.WARNING, "rsm.retry", step=step, error=repr(error))
                await anyio.sleep(self.config.retry_delay_ms / 1000)

    def _is_snapshotter(self) -> bool:
        """Whether this replica takes the scheduled snapshots now (see snapshot_policy)."""
        view = self._view
        if view is None or not self._roles.may_snapshot():
            return False
        return snapshotter(view.candidates, view.elect) == self.replica_id

    async def take_snapshot(self) -> dict[str, Any]:
        """Snapshot this replica's state now (`rsm snapshot create`); the manifest as a map.

        The snapshot runs in the replica's task group (`SnapshotService.request`): it
        completes and is registered even when the caller stops waiting."""
        task_group = self._task_group
        if task_group is None:
            return manifest_plain(await self.snapshots.take("requested"))
        return manifest_plain(await self.snapshots.request(task_group))

    # --- election -----------------------------------------------------------------------------

    def _wake_election(self) -> None:
        self._election_wakeup.set()

    async def _election_loop(self) -> None:
        leadership = self._election
        roles = self._roles
        while True:
            wakeup = self._election_wakeup = anyio.Event()
            try:
                if roles.must_register():
                    await leadership.register()
                    roles.registered()
                if leadership.candidacy is None and roles.may_stand(anyio.current_time()):
                    if roles.pin_to_clear:
                        await leadership.clear_pin()
                        roles.pin_cleared()
                    await leadership.stand()
                view = await leadership.evaluate()
                if leadership.candidacy is not None and leadership.candidacy not in view.children:
                    leadership.candidacy = None  # it went with an old session
                    continue
                self._view = view
                self._on_election(view)
                await leadership.wait_for_change(view, wakeup)
            except Exception as error:
                if not is_transient(error):
                    raise
                await anyio.sleep(self.config.retry_delay_ms / 1000)

    def _on_election(self, view: ElectionView) -> None:
        candidacy = self._election.candidacy
        is_elect = candidacy is not None and view.elect is not None and view.elect.name == candidacy
        term = self._term
        if is_elect and not self._roles.elected and term is None:
            emit(
                logger,
                logging.INFO,
                "rsm.elected",
                log_epoch=view.log_epoch,
                candidates=len(view.candidates),
            )
        self._apply(
            self._roles.election_evaluated(is_elect, term is not None and term.ended is None)
        )

    # --- ZooKeeper session --------------------------------------------------------------------

    async def _session_loop(self) -> None:
        """Log each session transition (`rsm.session`: a warning when the session is
        suspended or lost, one info line with `down_ms` when it is connected again) and
        act on it."""
        downtime = SessionDowntime()
        async for state in self._store.session_events():
            role = self._roles.role.value
            down_ms = downtime.observe(state, anyio.current_time())
            if state is not SessionState.CONNECTED:
                emit(logger, logging.WARNING, "rsm.session", state=state.value, role=role)
            elif down_ms is not None:
                emit(
                    logger,
                    logging.INFO,
                    "rsm.session",
                    state=state.value,
                    role=role,
                    down_ms=down_ms,
                )
            if state is SessionState.LOST:
                self._apply(self._roles.session_lost(self._term is not None))
            self._wake_election()

    # --- handover -----------------------------------------------------------------------------

    async def wait_leader_change(self) -> str | None:
        """Wait until this replica next sees the published leader change (a takeover or a
        handover anywhere); the new leader's address, None while none is published.  For a
        server that holds or forwards commands for the leader."""
        return self._kind_of_main(await self._election.leader_changed())

    async def transfer_leadership(self, to: str | None = None) -> dict[str, Any]:
        """Hand leadership to replica `to` (None: any caught-up candidate); see `_hand_over`.

        Returns `{"target": id, "epoch": its epoch, "window_ms": how long no
        leader took writes}` once the target serves (`window_ms` None if it did
        not within `transfer_wait_ms_max`).  Raises `NotLeader` when this
        replica does not lead, `Unavailable` when no suitable candidate exists,
        `BadRequest` when `to` is not one.
        """
        term = self._term
        if term is None or not self._roles.may_hand_over(term.accepting):
            raise NotLeader(
                f"replica {self.replica_id} is not the leader", self._not_leader().detail
            )
        if to == self.replica_id:
            return {"target": to, "epoch": term.epoch, "window_ms": 0}
        self._roles.handover_started()
        try:
            view = await self._election.evaluate()
            target = _choose_target(view, to, self.replica_id)
            started_s = anyio.current_time()  # the term takes writes until the handover
            await self._hand_over(term, target)
        except BookieError as error:
            raise Unavailable(f"the candidates could not be read: {error}") from None
        finally:
            self._roles.handover_ended()
        window_ms: int | None = None
        epoch: int | None = None
        with anyio.move_on_after(self.config.transfer_wait_ms_max / 1000):
            leader = await self._election.wait_leader(
                lambda info: info.replica_id == target.replica_id and info.epoch > term.epoch
            )
            epoch = leader.epoch
            window_ms = round((anyio.current_time() - started_s) * 1000)
        self.last_transfer_window_ms = window_ms
        self.stats.handoffs += 1
        if window_ms is not None:
            self.stats.handoff_window_seconds.observe(window_ms / 1000)
        return {"target": target.replica_id, "epoch": epoch, "window_ms": window_ms}

    async def _hand_over(self, term: LeaderTerm, target: Candidate | None) -> None:
        """Stop, drain, close the ledger; one CAS: close the segment, name `target` in the
        handoff, drop this replica's candidacy and leader znode.  The term then ends, and
        `rsm.handed_over` logs the successor (`target` null: none was named, whichever
        candidate comes next takes over).

        The caller starts the handover in the role machine first, so that
        nothing steps the term down meanwhile for having stopped being
        leader-elect.
        """
        assert self._roles.handing_over
        try:
            with anyio.fail_after(self.config.stop_drain_ms_max / 1000):
                await term.drain()
                await term.close_ledger()
        except TimeoutError:
            term.step_down("a handover did not drain in time")
            raise Timeout("the leader did not drain in time; it stepped down") from None
        except BookieError as error:
            term.step_down(f"closing the ledger for a handover failed: {error!r}")
            raise Unavailable(f"the handover failed: {error}") from None
        leadership = self._election
        layout = self._layout
        segment = term.segment
        closed = log_state.close(
            term.log,
            epoch=term.epoch,
            ledger_id=segment.ledger_id,
            last_index=self._applier.applied_index,
        )
        ops: list[MetadataOp] = [SetData(layout.log, encode_log(closed), term.log_version)]
        if target is not None:
            handoff = encode_handoff(Handoff(target.replica_id, term.epoch))
            ops.append(SetData(layout.handoff, handoff, ANY_VERSION))
        if leadership.candidacy is not None:
            ops.append(Delete(layout.candidate(leadership.candidacy), ANY_VERSION))
        try:
            leader_version = await leadership.leader_version(term.epoch)
            if leader_version is not None:
                ops.append(Delete(layout.leader, leader_version))
            done = await self._log_store.cas(ops, lambda seen: seen.segments == closed.segments)
        except BookieError as error:
            term.step_down(f"the handover's CAS has an unknown outcome: {error!r}")
            raise Unavailable(f"the handover's outcome is unknown: {error}") from None
        if not done:
            term.step_down("the log or the election moved during a handover")
            raise NotLeader("the log moved during the handover; this replica stepped down")
        leadership.candidacy = None
        self._apply(self._roles.handed_over())
        term.end("handed over" if target is None else f"handed over to {target.replica_id}")
        emit(
            logger,
            logging.INFO,
            "rsm.handed_over",
            epoch=term.epoch,
            target=None if target is None else target.replica_id,
            address=None if target is None else target.address or target.tls_address,
        )

    async def _stop_gracefully(self) -> None:
        term = self._term
        leading = self._roles.stop(term is not None and term.accepting)
        self._wake_election()
        leadership = self._election
        try:
            if term is not None and leading:
                view = await leadership.evaluate()
                others = [c for c in view.candidates if c.replica_id != self.replica_id]
                await self._hand_over(term, others[0] if others else None)
            else:
                await leadership.withdraw()
            await leadership.unregister()
        except (StatusError, BookieError) as error:
            emit(logger, logging.WARNING, "rsm.stop_not_graceful", error=repr(error))
        emit(logger, logging.INFO, "rsm.replica_stopped", replica_id=self.replica_id)


def _factory_of(instance: StateMachine) -> Callable[[], StateMachine]:
    """Fresh instances like `instance`, for loading snapshots: its class called without
    arguments, or a clear error saying what to pass instead."""
    machine_class = type(instance)

    def fresh() -> StateMachine:
        try:
            return machine_class()
        except TypeError as error:
            raise InvalidConfig(
                f"loading a snapshot needs a fresh {machine_class.__qualname__}, but it cannot "
                f"be made without arguments ({error}): give the replica a factory instead of "
                "an instance, e.g. functools.partial(Class, ...)"
            ) from None

    return fresh


def _choose_target(view: ElectionView, to: str | None, replica_id: str) -> Candidate:
    others = [c for c in view.candidates if c.replica_id != replica_id]
    if to is None:
        if not others:
            raise Unavailable("no other caught-up replica stands for election")
        return others[0]
    for candidate in others:
        if candidate.replica_id == to:
            return candidate
    raise BadRequest(
        f"replica {to!r} is not a caught-up candidate; candidates: {[c.replica_id for c in others]}"
    )


async def _close_abandoned(handle: WriteHandle) -> None:
    """Close the ledger of a term that stepped down, if it still can be (best effort)."""
    with anyio.move_on_after(limits.close_abandoned_ms_max / 1000):
        with contextlib.suppress(BookieError):
            await handle.close()
