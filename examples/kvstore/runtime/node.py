"""One key-value replica: an rsm `Replica` of `KVStore`, its router and its RESP server.

    async with KvNode(store=store, ledgers=ledgers, resp_listen="127.0.0.1:6379") as node:
        ...  # serves Redis clients on node.resp_address until the block ends

A node is what `kvstore serve` runs: the framework's replica (its client
port, `listen`, is where other replicas' servers forward writes when this
one leads), a `Router` that sends each command to the leader, and a
`RespServer` for Redis clients.  It also records its Redis address in
ZooKeeper (`kvstore.endpoints`) for `kvstore status`.

Stopping.  Leaving the block normally stops the RESP server first (its
connections close), then the replica stops gracefully (a leader hands over
to a caught-up replica, so the next leader needs no fencing).  Leaving it
by an exception or a cancellation stops at once, as a crash would.

`redis_server` is that server side alone (router and RESP server) beside a
replica someone else runs: the seeded simulation's
(`kvstore.testing.kv_sim`).

Everything external is injected (metadata store, ledger client, listeners,
randomness, wall clock, the connector to other replicas), so the same code
runs in a process and in the seeded simulation.

Invariants: the RESP server runs only while the replica does; the store's
key and value bounds are the node's settings and must be equal on every
replica of a store (they decide what commands answer).
"""

from __future__ import annotations

import contextlib
import functools
import random
import ssl
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from types import TracebackType

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from bookie.address import Address, parse_address
from bookie.client.ledger_client import LedgerClient
from bookie.clock import system_wall_clock_ms
from bookie.core.tokens import TokenTable
from bookie.errors import InvalidAddress, MetadataError, NodeExists
from bookie.meta.api import ANY_VERSION, MetadataStore
from bookie.net.tls import TlsListen
from kvstore import limits
from kvstore.connection.acl import AccessControl
from kvstore.endpoints import Endpoint, encode_endpoint, endpoint_path
from kvstore.runtime.router import Router
from kvstore.runtime.server import ReplicaInfo, RespServer, ServerConfig
from kvstore.state_machine import KVStore
from rsm import Replica, Role
from rsm import limits as rsm_limits
from rsm.client import tcp_connector
from rsm.config import ReplicaConfig
from rsm.errors import InvalidConfig
from rsm.host import RSM_ROOT, listen_tcp
from rsm.link import Connector

DEFAULT_APP = "kv"


@dataclass(frozen=True, slots=True)
class StoreSettings:
    """What decides the store's answers (equal on every replica) and the parser's bounds."""

    key_bytes_max: int = limits.key_bytes_max_default
    value_bytes_max: int = limits.value_bytes_max_default
    request_bytes_max: int = limits.request_bytes_max_default
    command_deadline_ms: int = limits.command_deadline_ms_default

    def __post_init__(self) -> None:
        if self.key_bytes_max < 1 or self.value_bytes_max < 1:
            raise InvalidConfig("key and value size bounds must be at least 1 byte")
        if self.request_bytes_max > limits.request_bytes_max_default:
            raise InvalidConfig(
                f"requests may be at most {limits.request_bytes_max_default} bytes "
                "(a command must fit in one framework request)"
            )
        if self.key_bytes_max + self.value_bytes_max > self.request_bytes_max:
            raise InvalidConfig("a key and a value of the largest sizes must fit in a request")
        if not 0 < self.command_deadline_ms < limits.command_deadline_ms_default * 10:
            raise InvalidConfig("the command deadline must be positive and below 300 s")


def check_command_deadline(settings: StoreSettings, config: ReplicaConfig) -> None:
    """`InvalidConfig` unless the server gives up on a command before its session may be dropped.

    The framework drops a session idle past its TTL, or past `sessions_max` once idle for
    `session_evict_idle_ms`, in logged time, which may run `logged_time_rate_max` times as
    fast as time passes; a write retried after that could be applied twice.
    """
    session_idle_ms_max = min(config.session_evict_idle_ms, config.session_ttl_ms)
    deadline_ms_max = session_idle_ms_max / rsm_limits.logged_time_rate_max
    if settings.command_deadline_ms >= deadline_ms_max:
        raise InvalidConfig(
            f"the command deadline ({settings.command_deadline_ms} ms) must be below "
            f"{deadline_ms_max:.0f} ms, the sessions' eviction idle time and TTL over the "
            f"rate logged time may run at ({rsm_limits.logged_time_rate_max}): a session "
            "dropped while a command is retried could apply it twice"
        )


class KvNode:
    """One replica of a key-value store and its Redis server (see the module docstring)."""

    def __init__(
        self,
        *,
        store: MetadataStore,
        ledgers: LedgerClient,
        app: str = DEFAULT_APP,
        replica_id: str | None = None,
        listen: str = "127.0.0.1:0",
        advertise: str | None = None,
        listener: anyio.abc.Listener[anyio.abc.ByteStream] | None = None,
        resp_listen: str = "127.0.0.1:0",
        resp_advertise: str | None = None,
        resp_listener: anyio.abc.Listener[anyio.abc.ByteStream] | None = None,
        resp_tls: TlsListen | None = None,
        settings: StoreSettings | None = None,
        config: ReplicaConfig | None = None,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] = system_wall_clock_ms,
        connector: Connector = tcp_connector,
        on_role: Callable[[Role], None] | None = None,
        rsm_root: str = RSM_ROOT,
        client_tokens: TokenTable | None = None,
        access: AccessControl | None = None,
        tls: ssl.SSLContext | None = None,
        tls_allowed_names: Collection[str] | None = None,
        tls_listen: str | None = None,
        tls_advertise: str | None = None,
    ) -> None:
        """`resp_tls`: a second RESP port, for TLS; `tls` and `tls_allowed_names`: the
        replica's port on TLS (`rsm.Replica`; `connector` must then connect with TLS),
        or with `tls_listen` (and `tls_advertise`) a second, TLS, port beside the plain
        `listen` (`connector` then connects without TLS)."""
        if resp_listener is not None and resp_advertise is None:
            raise InvalidConfig("a node given its RESP listener must be given its RESP address")
        self.app = app
        self._resp_tls = resp_tls
        self.settings = settings or StoreSettings()
        config = config or ReplicaConfig()
        check_command_deadline(self.settings, config)
        self._store = store
        self._rng = rng if rng is not None else random.Random()
        self.replica = Replica(
            KVStore(
                key_bytes_max=self.settings.key_bytes_max,
                value_bytes_max=self.settings.value_bytes_max,
            ),
            app=app,
            store=store,
            ledgers=ledgers,
            replica_id=replica_id,
            listen=listen,
            advertise=advertise,
            listener=listener,
            config=config,
            rng=self._rng,
            wall_clock_ms=wall_clock_ms,
            on_role=on_role,
            rsm_root=rsm_root,
            client_tokens=client_tokens,
            tls=tls,
            tls_allowed_names=tls_allowed_names,
            tls_listen=tls_listen,
            tls_advertise=tls_advertise,
        )
        self._resp_listen = resp_listen
        self._resp_advertise = resp_advertise
        self._resp_listener = resp_listener
        self._connector = connector
        self._access = access
        self.resp_address = ""
        """host:port Redis clients connect to (set once the node runs)."""
        self.server: RespServer | None = None
        self._lifetime: contextlib.AbstractAsyncContextManager[KvNode] | None = None

    def clients_connected_since(self, since_s: float) -> int:
        """Redis clients connected now that were admitted at or before `since_s` (the event
        loop's clock; 0 before the node serves)."""
        return 0 if self.server is None else self.server.connections_open_since(since_s)

    async def __aenter__(self) -> KvNode:
        assert self._lifetime is None, "a KvNode is entered once"
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
    async def _run(self) -> AsyncIterator[KvNode]:
        listener, port = await self._open_resp_listener()
        replica = self.replica
        try:
            async with replica:
                await self._publish_endpoint()
                async with redis_server(
                    replica,
                    listener,
                    port=port,
                    settings=self.settings,
                    connector=self._connector,
                    rng=self._rng,
                    access=self._access,
                    tls=self._resp_tls,
                ) as server:
                    self.server = server
                    yield self
        finally:
            await listener.aclose()

    async def _open_resp_listener(self) -> tuple[anyio.abc.Listener[anyio.abc.ByteStream], int]:
        if self._resp_listener is not None:
            assert self._resp_advertise is not None
            self.resp_address = self._resp_advertise
            return self._resp_listener, parse_address(self._resp_advertise).port
        try:
            listen = parse_address(self._resp_listen, port_zero=True)
        except InvalidAddress as error:
            raise InvalidConfig(f"RESP address {self._resp_listen!r} is not host:port") from error
        listener = await listen_tcp(listen, "the RESP port")
        port = int(listener.extra(SocketAttribute.local_port))
        self.resp_address = self._resp_advertise or str(Address(listen.host, port))
        return listener, port

    async def _publish_endpoint(self) -> None:
        """Record this node's addresses; a ZooKeeper that is briefly unreachable (a lost
        connection on a loaded machine) is waited for, as the replica's own start-up does."""
        replica = self.replica
        path = endpoint_path(self.app, replica.replica_id)
        value = encode_endpoint(Endpoint(replica.replica_id, self.resp_address, replica.address))
        while True:
            try:
                try:
                    await self._store.create(path, value, make_parents=True)
                except NodeExists:
                    await self._store.set(path, value, ANY_VERSION)
                return
            except MetadataError as error:
                if not error.retryable:
                    raise
                await anyio.sleep(self.replica.config.retry_delay_ms / 1000)


@contextlib.asynccontextmanager
async def redis_server(
    replica: Replica,
    listener: anyio.abc.Listener[anyio.abc.ByteStream],
    *,
    port: int,
    settings: StoreSettings,
    connector: Connector,
    rng: random.Random,
    access: AccessControl | None = None,
    tls: TlsListen | None = None,
) -> AsyncIterator[RespServer]:
    """Serve Redis clients on `listener` beside the running `replica` of a `KVStore`, for the
    block: its `Router` (forwarding through `connector`) and `RespServer` (with `tls`, on a
    second, TLS, port too), whose clients log in as `access`'s users (None: nobody needs
    to).  `port` is what INFO shows.  Leaving the block stops both (the server's
    connections are aborted)."""
    router = Router(replica, connector=connector, rng=rng, deadline_ms=settings.command_deadline_ms)
    server = RespServer(
        listener,
        router,
        replica_info=functools.partial(replica_info, replica),
        config=ServerConfig(
            port=port,
            request_bytes_max=settings.request_bytes_max,
            bulk_bytes_max=settings.request_bytes_max,
            settings={
                "kvstore-key-bytes-max": str(settings.key_bytes_max),
                "kvstore-value-bytes-max": str(settings.value_bytes_max),
            },
            access=access,
        ),
        tls=tls,
    )
    try:
        async with anyio.create_task_group() as task_group:
            await task_group.start(router.run)
            task_group.start_soon(_retry_on_new_leaders, replica, router)
            task_group.start_soon(server.serve)
            yield server
            task_group.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        # The router and the server raise only fatal errors; one is
        # handed back as it was raised, not wrapped.
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


async def _retry_on_new_leaders(replica: Replica, router: Router) -> None:
    """Have the router retry its waiting commands whenever a new leader is published, so a
    failover costs the clients no backoff on top of the takeover."""
    while True:
        router.leader_changed(await replica.wait_leader_change())


def replica_info(replica: Replica) -> ReplicaInfo:
    """What INFO says about `replica`, a replica of a `KVStore`.

    Its role is `leader` only while it serves as leader: a replica that won the
    log waits out its predecessor's read lease and publishes itself before it
    takes commands, and says `taking_over` until then, so a client that looks
    for the leader in INFO finds one that answers."""
    status = replica.status()
    machine = replica.machine
    assert isinstance(machine, KVStore)
    newest = replica.snapshots.value.newest
    role = status["role"]
    if role == "leader" and not status["serving"]:
        role = "taking_over"
    return ReplicaInfo(
        role=role,
        leader_address=status["leader_address"],
        epoch=status["epoch"],
        applied_index=status["applied_index"],
        caught_up=status["caught_up"],
        lag_entries=status["lag_entries"],
        keys=len(machine.values),
        keys_with_ttl=len(machine.expire_at_ms),
        expired_keys=machine.expired_keys,
        app=replica.app,
        snapshot_index=None if newest is None else newest.index,
        snapshot_created_ms=None if newest is None else newest.created_ms,
    )
