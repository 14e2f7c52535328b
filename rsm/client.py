"""The client of a replicated application: `connect(app, zk=...)` and `connect_sync`.

    async with rsm.connect("counter", zk="127.0.0.1:2181") as client:
        await client.call("add", 5)                  # through the log, exactly once
        await client.query("get")                    # linearizable, on the leader
        await client.query("get", consistency="read_your_writes")   # any replica
        await client.query("get", consistency="stale")              # any replica, at once

Discovery.  The client watches the application's `leader` znode and sends
commands (and linearizable queries) to the address it names; a replica that
is not the leader answers NotLeader with the leader's address when it knows
it, and the client goes there at once.  Other queries go to a replica picked
at random from `replicas/`.  A client whose connector speaks TLS
(`tls_connector`) dials the replicas' TLS ports, any other their plain ports
(a replica may publish both, rsm/core/log_format.py); a leader without the
port the client needs is `NoAddressForTransport`, naming it, at once.

Retries.  The session and what follows each attempt are decided by
`rsm/core/exactly_once.py`; this module does the I/O.  Every retryable error
(NotLeader, OutcomeUnknown, Unavailable, Overloaded, an attempt's timeout, a
lost connection) is retried with exponential backoff and jitter drawn from
the client's `Random`, at most `attempts_max` times and within `deadline_ms`
overall, after which the call raises `Timeout` (its outcome unknown).  An
error that is not retryable (CommandFailed, UnknownCommand, BadArguments,
...) is raised at once.  So is `NoSuchApplication`, with
`ClientConfig.require_application` (the `rsm` command's), when no leader is
known and the application's log znode does not exist: no replica of it ever
ran, so there is nothing to wait for (a misspelt name or chroot, usually).

Exactly-once.  The client is one session: a random `client_id` and a `seq` per
command, 1, 2, ...; every attempt of a call carries the same seq, and
`ack_seq`, the highest seq below which the client holds every answer, so
replicas may forget those results.  A retry after a leader failure therefore
returns the first result and the command is applied once (see
rsm/core/sessions.py).  At most `outstanding_commands_max` seqs are open,
counted from the oldest unanswered one (`call` waits past it), fewer than a
session keeps results for.

Expired sessions.  When the replicas answer `SessionExpired` (the session was
idle past the application's session TTL, or evicted at its session bound) the
client starts a new session, and each call of the old one goes again under a
new seq, unless one of its attempts may have been logged (a lost connection,
an attempt's timeout, `OutcomeUnknown`): the old session's results are gone,
so that call raises `Timeout` rather than risk applying it twice.

Index tokens.  Every answer carries an index: a command's position in the log,
or the index a replica had applied when it answered a query.  The client
keeps the highest it saw (`last_index`) and sends it with `read_your_writes`
queries, so a client reads its own writes (and never goes back in time) on
any replica.

Many calls may be in flight from one client at once; they share one
pipelined connection per replica.  Everything is injected (store, connector,
rng), so the client runs unchanged in the simulation.

A program that forwards its own clients' requests to the framework (the
key-value store's router) keeps one session per client of its own with the
same policy: `Session`, `Command`, `RetryPolicy`, `Backoff`, `Decision` and
`new_client_id` are public here for it.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import random
import ssl
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.from_thread

from bookie.address import parse_address
from bookie.errors import InvalidAddress, MetadataError, NoNode
from bookie.meta.api import NO_NODE_VERSION, MetadataStore
from bookie.meta.zk import ZkMetadataStore
from bookie.net.tls import connect_tls
from rsm import limits
from rsm.core.exactly_once import Backoff, Command, Decision, RetryPolicy, Session, new_client_id
from rsm.core.layout import RSM_ROOT, AppLayout
from rsm.core.log_format import CandidateInfo, decode_candidate, decode_leader
from rsm.core.protocol import (
    CallRequest,
    Consistency,
    QueryRequest,
    Request,
    Response,
    SnapshotRequest,
    StatusRequest,
    TransferRequest,
)
from rsm.errors import (
    InvalidConfig,
    MalformedValue,
    NoAddressForTransport,
    NoSuchApplication,
    OutcomeUnknown,
    RsmStatus,
    StatusError,
    Timeout,
    Unavailable,
)
from rsm.link import Connector, Link, LinkLost

__all__ = [
    "Backoff",
    "Client",
    "ClientConfig",
    "Command",
    "Decision",
    "RetryPolicy",
    "Session",
    "SyncClient",
    "TlsConnector",
    "connect",
    "connect_sync",
    "new_client_id",
    "tcp_connector",
    "tls_connector",
]


async def tcp_connector(address: str) -> anyio.abc.ByteStream:
    """The default connector: a TCP connection to "host:port"."""
    try:
        target = parse_address(address)
    except InvalidAddress as error:
        raise OSError(f"replica address {address!r} is not host:port") from error
    return await anyio.connect_tcp(target.host, target.port)


class TlsConnector:
    """A connector over TLS to "host:port", a replica's TLS port, its certificate checked
    against `context`'s CAs and its host; `OSError` saying what went wrong, as
    `tcp_connector`'s.  A client given one dials the replicas' TLS ports."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context

    async def __call__(self, address: str) -> anyio.abc.ByteStream:
        try:
            target = parse_address(address)
        except InvalidAddress as error:
            raise OSError(f"replica address {address!r} is not host:port") from error
        return await connect_tls(target.host, target.port, self.context)


def tls_connector(context: ssl.SSLContext) -> Connector:
    """A `TlsConnector` with `context` (a `bookie.net.tls.client_context`)."""
    return TlsConnector(context)


def uses_tls(connector: Connector) -> bool:
    """Whether `connector` speaks TLS, so that the replicas' TLS ports are the ones to dial."""
    return isinstance(connector, TlsConnector)


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """A client's knobs; defaults from `rsm.limits`."""

    attempt_timeout_ms: int = limits.client_attempt_timeout_ms_default
    deadline_ms: int = limits.client_deadline_ms_default
    attempts_max: int = limits.client_attempts_max_default
    backoff_ms_initial: int = limits.client_backoff_ms_initial
    backoff_ms_max: int = limits.client_backoff_ms_max
    outstanding_commands_max: int = limits.client_outstanding_commands_max_default
    connect_timeout_ms: int = limits.client_connect_timeout_ms_default
    require_application: bool = False
    """Raise `NoSuchApplication` at once when no leader is known and the application's log
    does not exist.  The `rsm` command sets it (a misspelt name); a program that starts
    replicas and clients together leaves it off: its first replica may not have created
    the log yet, and the client waits for a leader as for any other."""

    def __post_init__(self) -> None:
        for name in (
            "attempt_timeout_ms",
            "deadline_ms",
            "attempts_max",
            "backoff_ms_initial",
            "backoff_ms_max",
            "outstanding_commands_max",
            "connect_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise InvalidConfig(f"{name} must be positive, not {getattr(self, name)}")
        if self.backoff_ms_max < self.backoff_ms_initial:
            raise InvalidConfig("backoff_ms_max is below backoff_ms_initial")
        deadline_ms_max = limits.session_evict_idle_ms_default / limits.logged_time_rate_max
        if self.deadline_ms >= deadline_ms_max:
            raise InvalidConfig(
                f"deadline_ms must be below {deadline_ms_max:.0f}: the replicas may drop a "
                f"session idle {limits.session_evict_idle_ms_default} ms of logged time, which "
                f"may run {limits.logged_time_rate_max} times as fast, and a retry could then "
                "apply a command twice"
            )
        if self.outstanding_commands_max > limits.session_results_max_default:
            raise InvalidConfig(
                f"outstanding_commands_max may be at most {limits.session_results_max_default}: "
                "a session keeps no more results, so a retry could apply a command twice"
            )

    def retry_policy(self) -> RetryPolicy:
        """How one request is retried."""
        return RetryPolicy(
            deadline_ms=self.deadline_ms,
            backoff_ms_initial=self.backoff_ms_initial,
            backoff_ms_max=self.backoff_ms_max,
            attempts_max=self.attempts_max,
        )


class _Pending:
    """One request waiting for its answer on a link (a `rsm.link.Waiter`)."""

    __slots__ = ("event", "response", "error")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.response: Response | None = None
        self.error: LinkLost | None = None

    def answered(self, response: Response) -> None:
        self.response = response
        self.event.set()

    def lost(self, error: LinkLost) -> None:
        self.error = error
        self.event.set()


class Client:
    """A connection to one application's replicas; create it with `connect`."""

    def __init__(
        self,
        app: str,
        store: MetadataStore,
        *,
        connector: Connector,
        rng: random.Random,
        config: ClientConfig,
        task_group: anyio.abc.TaskGroup,
        rsm_root: str,
    ) -> None:
        self.app = app
        self._layout = AppLayout.of(app, rsm_root)
        self._store = store
        self._connector = connector
        self._tls = uses_tls(connector)
        self._rng = rng
        self._config = config
        self._task_group = task_group
        self._policy = config.retry_policy()
        self._session = Session(new_client_id(rng))
        self._room = anyio.Event()
        """Set when the session's window may have room again (its oldest seq ended, or it was
        renewed)."""
        self._request_ids = itertools.count(1)
        self._links: dict[str, Link] = {}
        self._leader_address: str | None = None
        self._leader_unreachable: NoAddressForTransport | None = None
        """Set while the published leader has no port of the client's transport."""
        self._hint: str | None = None
        self._leader_changed = anyio.Event()
        self._members: list[str] = []
        self._app_exists: bool | None = None
        """Whether the application's log znode exists: None until known; True for good once
        seen (nothing deletes it); False while it is absent."""
        self.last_index = 0
        """The highest index token this client has seen (see the module docstring)."""

    # --- the API ------------------------------------------------------------------------------

    async def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        """Run command `name` on the leader through the log; its result.

        Raises `CommandFailed` (the command raised: same type name and message
        on every replica), `UnknownCommand`, `BadArguments`, `NoSuchApplication`,
        or `Timeout` when no attempt succeeded in time (outcome unknown).
        """
        await self._wait_for_room()
        command = Command(self._policy, self._now_ms(), self._session)
        try:
            response = await self._request(
                lambda request_id: CallRequest(
                    request_id,
                    name,
                    list(args),
                    kwargs,
                    command.client_id,
                    command.seq,
                    self._ack_seq(command),
                ),
                to_leader=True,
                command=command,
            )
        finally:
            self._end(command)
        return self._result(response)

    async def query(
        self,
        name: str,
        /,
        *args: Any,
        consistency: Consistency | str = Consistency.LINEARIZABLE,
        min_index: int | None = None,
        replica: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """Answer query `name`; its result.

        `consistency`: "linearizable" (default, on the leader), "read_your_writes"
        (any replica, once it applied `min_index`, by default this client's
        `last_index`) or "stale" (any replica, at once).  `replica` sends it to
        that address instead of choosing.  The keywords `consistency`,
        `min_index` and `replica` are the client's, not the query's.
        """
        level = Consistency.parse(consistency)
        wanted = self.last_index if min_index is None else min_index
        if level is not Consistency.READ_YOUR_WRITES:
            wanted = 0
        response = await self._request(
            lambda request_id: QueryRequest(request_id, name, list(args), kwargs, level, wanted),
            to_leader=level is Consistency.LINEARIZABLE,
            target=replica,
        )
        return self._result(response)

    async def status(self, replica: str | None = None) -> dict[str, Any]:
        """The STATUS of replica `replica` (an address; default: the leader)."""
        response = await self._request(StatusRequest, to_leader=True, target=replica)
        value: dict[str, Any] = self._result(response)
        return value

    async def transfer_leadership(self, to: str | None = None) -> dict[str, Any]:
        """Ask the leader to hand leadership to replica id `to` (None: any caught-up one).

        Returns `{"target", "epoch", "window_ms"}` (see `Replica.transfer_leadership`).
        Not retried once the leader has it: a transfer is not idempotent.
        """
        response = await self._request(
            lambda request_id: TransferRequest(request_id, to),
            to_leader=True,
            idempotent=False,
        )
        value: dict[str, Any] = self._result(response)
        return value

    async def snapshot(self, replica: str | None = None) -> dict[str, Any]:
        """Have replica `replica` (an address; default: the leader) snapshot its state now.

        Returns the snapshot's manifest (`rsm.snapshots.inspect.manifest_plain`): a new
        one, or the newest registered one when that is already as current.
        Waits up to the client's deadline; not retried once a replica has it.
        """
        response = await self._request(
            SnapshotRequest, to_leader=replica is None, target=replica, idempotent=False
        )
        value: dict[str, Any] = self._result(response)
        return value

    async def replicas(self) -> dict[str, str]:
        """Replica id -> address of every replica registered now that has a port of this
        client's transport (TLS or plain; `members` has them all)."""
        return {
            replica_id: address
            for replica_id, info in (await self.members()).items()
            if (address := info.tls_address if self._tls else info.address) is not None
        }

    async def members(self) -> dict[str, CandidateInfo]:
        """Replica id -> the `replicas/<id>` value (both its addresses) of every replica
        registered now."""
        members: dict[str, CandidateInfo] = {}
        store = self._store
        try:
            names = await store.children(self._layout.replicas)
        except NoNode:
            return members
        for name in names:
            try:
                info = decode_candidate((await store.get(self._layout.replica(name))).value)
            except (NoNode, MalformedValue):
                continue
            members[info.replica_id] = info
        return members

    def dial_address(self, info: CandidateInfo) -> str:
        """The address of `info`'s replica this client dials; `NoAddressForTransport` if it
        has no port of the client's transport."""
        return info.dial(tls=self._tls)

    # --- requests -----------------------------------------------------------------------------

    def _result(self, response: Response) -> Any:
        self.last_index = max(self.last_index, response.log_index)
        if response.ok:
            return response.value
        raise response.error()

    async def _request(
        self,
        build: Callable[[int], Request],
        *,
        to_leader: bool,
        target: str | None = None,
        idempotent: bool = True,
        command: Command | None = None,
    ) -> Response:
        """Send until the attempts' policy (rsm/core/exactly_once.py) says to stop: return the
        answer it delivers, or raise the error of an attempt that got none, or `Timeout`.

        A `command` (a call) moves to the session renewed after its own expired,
        under a new seq, unless an attempt of it may have been logged: the
        replicas dropped the old session and its results, so it gives up then
        (`Command.follow`).
        """
        if command is None:
            command = Command(
                self._policy, self._now_ms(), idempotent=idempotent, pinned=target is not None
            )
        attempt_s = (
            self._config.attempt_timeout_ms if idempotent else self._config.deadline_ms
        ) / 1000
        deadline_s = command.deadline_ms / 1000
        backoff: Backoff | None = None
        last_error: StatusError = Unavailable(f"no replica of {self.app} was tried")
        session = self._session
        while True:
            now_s = anyio.current_time()
            remaining_s = deadline_s - now_s
            if command.start_attempt(now_s * 1000) is not Decision.SEND:
                raise Timeout(f"gave up on {self.app}: {last_error.message}") from last_error
            if command.needs_new_seq(session):
                await self._wait_for_room()
            if command.follow(session) is not Decision.SEND:
                raise Timeout(
                    f"gave up on {self.app}: the session expired after an attempt whose "
                    "outcome is unknown"
                ) from last_error
            response: Response | None = None
            hint: str | None = None
            address = target or await self._choose(to_leader)
            if address is None and self._config.require_application and await self._missing():
                raise NoSuchApplication(self.app)
            if address is None:
                last_error = Unavailable(f"no leader of {self.app} is known")
                status = RsmStatus.NOT_LEADER
            else:
                try:
                    with anyio.fail_after(min(attempt_s, remaining_s)):
                        response = await self._exchange(address, build)
                except TimeoutError:
                    last_error = Timeout(f"{address} did not answer in time")
                    status = RsmStatus.TIMEOUT
                except LinkLost as lost:
                    if lost.sent:  # it may have been acted on: never "not applied"
                        last_error = OutcomeUnknown(
                            f"connection to {address} was lost after the request went: {lost}"
                        )
                        status = RsmStatus.OUTCOME_UNKNOWN
                    else:
                        last_error = Unavailable(f"connection to {address} failed: {lost}")
                        status = RsmStatus.UNAVAILABLE
                    self._forget(address)
                else:
                    status = response.status
                    if status == RsmStatus.OK:
                        # The policy's first rule, without its call and a clock reading.
                        return response
                    if status == RsmStatus.NOT_LEADER:
                        hint = response.detail
            decision = command.decide(
                status,
                self._now_ms(),
                leader_address=hint,
                sent_to=address,
                answered=response is not None,
            )
            if decision is Decision.DELIVER:
                if response is None:
                    raise last_error from None
                return response
            if response is not None:
                last_error = response.error()
                if status == RsmStatus.NOT_LEADER:
                    self._hint = hint if hint != address else None
            if decision is Decision.RENEW:
                assert command.client_id is not None
                if self._session.renew_after(command.client_id, self._rng):
                    self._make_room()
            elif decision is Decision.WAIT:
                backoff = backoff or Backoff(self._policy)
                await self._pause(backoff.next_wait_ms(self._rng), deadline_s)
            elif decision is not Decision.REDIRECT:
                raise Timeout(f"gave up on {self.app}: {last_error.message}") from last_error

    async def _missing(self) -> bool:
        """Whether the application does not exist, as far as this client knows: only once the
        leader's watch found neither a leader nor a log, and a fresh read still finds no log
        (a first replica may have created it since)."""
        if self._app_exists is not False:
            return False
        try:
            self._app_exists = await self._store.exists(self._layout.log) is not None
        except MetadataError:
            return False
        return not self._app_exists

    async def _wait_for_room(self) -> None:
        """Wait until the session may open one more seq."""
        while not self._session.has_room(self._config.outstanding_commands_max):
            await self._room.wait()

    def _make_room(self) -> None:
        room, self._room = self._room, anyio.Event()
        room.set()

    def _ack_seq(self, command: Command) -> int:
        """The `ack_seq` an attempt of `command` carries: its session's.  If that session was
        renewed after the command followed it (while connecting), 0: the replicas dropped it,
        and no attempt of the command may have been logged."""
        session = self._session
        return session.ack_seq() if command.client_id == session.client_id else 0

    def _end(self, command: Command) -> None:
        """The call of `command` returned or raised: its seq is no longer open."""
        if command.client_id is not None and self._session.end(command.client_id, command.seq):
            self._make_room()

    def _now_ms(self) -> float:
        return anyio.current_time() * 1000

    async def _pause(self, wait_ms: float, deadline_s: float) -> None:
        """Wait `wait_ms` (at most until the deadline), or less if the leader znode changes."""
        delay_s = min(wait_ms / 1000, max(0.0, deadline_s - anyio.current_time()))
        with anyio.move_on_after(delay_s):
            await self._leader_changed.wait()

    async def _choose(self, to_leader: bool) -> str | None:
        if to_leader:
            address = self._hint or self._leader_address
            if address is None and self._leader_unreachable is not None:
                raise self._leader_unreachable
            return address
        if not self._members:
            self._members = sorted((await self.replicas()).values())
        if not self._members:
            return self._leader_address
        return self._rng.choice(self._members)

    def _forget(self, address: str) -> None:
        """A replica could not be reached: stop preferring it."""
        if self._hint == address:
            self._hint = None
        if address in self._members:
            self._members.remove(address)

    async def _exchange(self, address: str, build: Callable[[int], Request]) -> Response:
        """Send one request to `address`; its response.  Raises `LinkLost`."""
        link = self._link(address)
        request_id = next(self._request_ids)
        pending = _Pending()
        link.send(build(request_id), pending)
        try:
            await pending.event.wait()
        finally:
            link.forget(request_id)
        if pending.error is not None:
            raise pending.error
        assert pending.response is not None
        return pending.response

    def _link(self, address: str) -> Link:
        link = self._links.get(address)
        if link is not None and not link.closed:
            return link
        link = self._links[address] = Link(
            address, self._connector, connect_timeout_ms=self._config.connect_timeout_ms
        )
        self._task_group.start_soon(link.run)
        while len(self._links) > limits.client_replica_connections_max:
            oldest = next(iter(self._links))
            self._links.pop(oldest).close()
        return link

    # --- discovery ----------------------------------------------------------------------------

    async def _watch_leader(self) -> None:
        store = self._store
        path = self._layout.leader
        while True:
            try:
                try:
                    current = await store.get(path)
                    version = current.version
                    self._leader_address, self._leader_unreachable = None, None
                    try:
                        self._leader_address = decode_leader(current.value).dial(tls=self._tls)
                    except NoAddressForTransport as error:
                        self._leader_unreachable = error
                    self._app_exists = True
                except (NoNode, MalformedValue):
                    version = NO_NODE_VERSION
                    self._leader_address, self._leader_unreachable = None, None
                    if not self._app_exists:
                        self._app_exists = await store.exists(self._layout.log) is not None
                changed, self._leader_changed = self._leader_changed, anyio.Event()
                changed.set()
                await store.watch(path, version)
            except MetadataError:
                await anyio.sleep(self._config.backoff_ms_max / 1000)

    def _close(self) -> None:
        for link in self._links.values():
            link.close()


@contextlib.asynccontextmanager
async def connect(
    app: str,
    *,
    zk: str | None = None,
    zk_root: str | None = None,
    store: MetadataStore | None = None,
    connector: Connector | None = None,
    rng: random.Random | None = None,
    config: ClientConfig | None = None,
    rsm_root: str = RSM_ROOT,
) -> AsyncIterator[Client]:
    """A client of application `app`, for the block.

    Give `zk` ("host:port,...", with `zk_root` as the chroot if any) or an open
    `store`.  `connector` opens streams to replicas (TCP by default), `rng`
    draws the session id and the backoff jitter (OS-seeded by default).
    """
    if store is None:
        if zk is None:
            raise InvalidConfig("connect needs zk='host:port' or an open store")
        async with (
            ZkMetadataStore.connect(zk, root=zk_root) as zk_store,
            connect(
                app,
                store=zk_store,
                connector=connector,
                rng=rng,
                config=config,
                rsm_root=rsm_root,
            ) as client,
        ):
            yield client
        return
    try:
        async with anyio.create_task_group() as task_group:
            client = Client(
                app,
                store,
                connector=connector or tcp_connector,
                rng=rng if rng is not None else random.Random(),
                config=config if config is not None else ClientConfig(),
                task_group=task_group,
                rsm_root=rsm_root,
            )
            task_group.start_soon(client._watch_leader)
            try:
                yield client
            finally:
                client._close()
                task_group.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The client's own tasks do not raise, so a group holds the error of the
        # caller's block: hand it back as it was raised, not wrapped.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class SyncClient:
    """The blocking face of a `Client`, for scripts and REPLs (see `connect_sync`)."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, client: Client) -> None:
        self._portal = portal
        self._client = client

    @property
    def last_index(self) -> int:
        return self._client.last_index

    def call(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        return self._portal.call(functools.partial(self._client.call, name, *args, **kwargs))

    def query(self, name: str, /, *args: Any, **kwargs: Any) -> Any:
        return self._portal.call(functools.partial(self._client.query, name, *args, **kwargs))

    def status(self, replica: str | None = None) -> dict[str, Any]:
        return self._portal.call(self._client.status, replica)

    def transfer_leadership(self, to: str | None = None) -> dict[str, Any]:
        return self._portal.call(self._client.transfer_leadership, to)

    def snapshot(self, replica: str | None = None) -> dict[str, Any]:
        return self._portal.call(self._client.snapshot, replica)

    def replicas(self) -> dict[str, str]:
        return self._portal.call(self._client.replicas)


@contextlib.contextmanager
def connect_sync(app: str, **options: Any) -> Iterator[SyncClient]:
    """`connect` for blocking code: the client runs on its own event-loop thread.

    `with rsm.connect_sync("counter", zk="127.0.0.1:2181") as client: client.call("add", 5)`
    """
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(connect(app, **options)) as client,
    ):
        yield SyncClient(portal, client)
