"""The `MetadataStore` (api.py) over a real ZooKeeper, through kazoo.

kazoo is thread-based: a connection thread talks to the server and worker
threads run completion and watch callbacks.  This module keeps all of that
off the event loop and brings results back safely:

* Operations use kazoo's `*_async` methods, which only queue the request; the
  result's completion callback (on a kazoo thread) posts a wake-up to the
  `_LoopBridge`, and the waiting task reads the result on the loop.  Every
  operation waits under `anyio.fail_after(operation_timeout_ms)`; past it the
  call raises `MetadataUnavailable` and its outcome is unknown.
* kazoo threads never block on the event loop: they only append to the
  bridge's thread-safe queue.  One thread owned by the store (started and
  joined within its `async with`) drains that queue and runs each batch on
  the loop with `anyio.from_thread.run_sync` and the loop token captured at
  connect, in the order posted.  Each item is one
  operation's completion, one watch firing or one session transition, so the
  queue is bounded by `limits.metadata_operations_inflight_max` (enforced),
  the number of distinct watched paths, and the session transitions.
* Session-state listeners (called by kazoo on its connection thread) post the
  transition to the bridge; the store publishes it to `session_events()`.

Errors: every kazoo exception becomes a `bookie.errors` class through the one
table `_ERRORS`.  Watches: one kazoo watcher (`_Trigger`) per watched path,
shared by every task waiting on that path.  kazoo fires all watchers when the
connection drops or the session expires, so waiting tasks wake, wait until the
session is CONNECTED again and re-check: watches survive reconnects and
session expiry, and being level-triggered they miss nothing.  The re-check
compares the zxid of the node's (or its children's) last change too, not the
version (or names) alone: a node deleted and created again while no watch was
registered (a new leader's ephemeral `leader` znode) is back at version 0.

Lifetime: `async with ZkMetadataStore.connect(hosts, ...) as store:`.  The
optional `root` is created if missing and every path the caller passes is
below it (a chroot done here rather than by kazoo, so it can be created over
the same connection).  When the session expires kazoo opens a new one by
itself: the store reports LOST, then CONNECTED with a new `session_id`.
Reconnect attempts back off from `limits.zk_reconnect_delay_ms_min` to a
pause short enough that several fit in one session timeout
(`_reconnect_delay_ms_max`): a restarted ZooKeeper server gives the sessions it
restores their timeout afresh from its start, so a client that comes back
within it keeps its session, however long the server was down.  kazoo warns
at each failed attempt; per outage the first warning of each kind is logged
and its repeats go to debug level (`_ConnectionLog`), so an outage is a few
lines in a process's log, not one a second.

Credentials: a session given a `ZkDigest` (by default the one
`BOOKIE_ZK_DIGEST_FILE` names, `bookie.meta.zk_digest`) authenticates with
it and creates every znode, the root included, with its ACL;
`secure_tree` gives existing znodes that ACL.

TLS: a session given a `ZkTls` (by default the one `BOOKIE_ZK_TLS_CA_FILE`
and its companions describe, `bookie.meta.zk_tls`) speaks TLS to the
servers' `secureClientPort`, trusting that CA file alone; a session that
cannot be established says whether it tried with TLS or without, the usual
cause of a session that never comes (a plain client at a TLS port, or the
reverse).

`expire_session()` is a test hook that makes the server expire the session
for real (ephemeral nodes deleted by ZooKeeper itself), by the standard trick
of opening a second connection with the same session id and password and
closing it.  To make it deterministic the store's own reconnection attempts
are held back meanwhile (`_ReconnectGate`); otherwise the store could win the
session back before the second connection closes it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import queue
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final, assert_never

import anyio
import anyio.lowlevel
from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RequestTimeoutError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.hosts import collect_hosts
from kazoo.protocol.states import EventType, KazooState, WatchedEvent
from kazoo.retry import KazooRetry

from bookie import limits
from bookie.errors import (
    InvalidConfig,
    MetadataError,
    MetadataUnavailable,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
)
from bookie.meta import paths
from bookie.meta.api import (
    ANY_VERSION,
    NO_NODE_VERSION,
    Check,
    Create,
    Delete,
    Op,
    SessionState,
    SetData,
    Versioned,
)
from bookie.meta.session_events import SessionEventFeed, SessionEvents
from bookie.meta.zk_digest import ZK_DIGEST_FILE_ENV, ZkDigest, digest_from_environment
from bookie.meta.zk_tls import ZK_TLS_CA_FILE_ENV, ZkTls, zk_tls_from_environment

_ERRORS: Final[dict[type[BaseException], type[MetadataError]]] = {
    NoNodeError: NoNode,
    NodeExistsError: NodeExists,
    BadVersionError: MetadataVersionConflict,
    NotEmptyError: NotEmpty,
    # ConnectionClosedError subclasses SessionExpiredError in kazoo, but it means
    # "this connection is going away" (a reconnect or our own close), not expiry.
    ConnectionClosedError: MetadataUnavailable,
    SessionExpiredError: SessionExpired,
    ConnectionLoss: MetadataUnavailable,
    SessionMovedError: MetadataUnavailable,
    OperationTimeoutError: MetadataUnavailable,
    RequestTimeoutError: MetadataUnavailable,
    KazooTimeoutError: MetadataUnavailable,
    NoChildrenForEphemeralsError: MetadataError,
    BadArgumentsError: MetadataError,
    KazooException: MetadataError,
}
"""kazoo exception -> our class; the nearest class in the exception's MRO wins."""

_STATES: Final[dict[str, SessionState]] = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}

_ROLLED_BACK: Final = (RolledBackError, RuntimeInconsistency)
"""What kazoo reports for the ops of a failed multi other than the one that failed."""


def translate_error(error: BaseException, what: str) -> MetadataError:
    """The `bookie.errors` exception for a kazoo exception raised while doing `what`."""
    for cls in type(error).__mro__:
        target = _ERRORS.get(cls)
        if target is not None:
            return target(f"{what}: {type(error).__name__} {error}".rstrip())
    raise AssertionError(f"not a kazoo error: {error!r}")


class _LoopBridge:
    """Carries callables from kazoo's threads to the event loop, in order, never blocking them."""

    def __init__(self, token: anyio.lowlevel.EventLoopToken) -> None:
        self._token = token
        self._inbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()

    def post(self, action: Callable[[], None]) -> None:
        """Run `action` on the event loop soon (any thread; never blocks)."""
        self._inbox.put(action)

    def close(self) -> None:
        """Let `pump` return after running what was posted before."""
        self._inbox.put(None)

    def pump(self) -> None:
        """Run posted callables on the loop until `close` (the body of the bridge's thread)."""
        stop = False
        while not stop:
            # Everything already posted goes to the loop in one hop.
            actions: list[Callable[[], None]] = []
            item = self._inbox.get()
            while True:
                if item is None:
                    stop = True
                    break
                actions.append(item)
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
            try:
                anyio.from_thread.run_sync(_run_all, actions, token=self._token)
            except anyio.RunFinishedError:
                return


def _run_all(actions: list[Callable[[], None]]) -> None:
    for action in actions:
        action()


def _reconnect_delay_ms_max(session_timeout_ms: int) -> float:
    """The longest delay between reconnect attempts for a session of `session_timeout_ms`.

    A ZooKeeper server that restarts gives every session it restores the whole
    timeout again from the moment it has loaded them, however long it was down; a
    client that tries again only after that long finds its session expired.  So the
    pause, jitter included, stays under a `limits.zk_reconnects_per_session_timeout`-th of
    the timeout (for short sessions such as the replicas' 1 s), and under
    `limits.zk_reconnect_delay_ms_max` for long ones.
    """
    within_session = (
        session_timeout_ms
        / limits.zk_reconnects_per_session_timeout
        / (1 + limits.zk_reconnect_jitter)
    )
    return max(
        limits.zk_reconnect_delay_ms_min, min(limits.zk_reconnect_delay_ms_max, within_session)
    )


class _ConnectionLog(logging.LoggerAdapter[logging.Logger]):
    """kazoo's logger for one store.  kazoo warns at every failed reconnect attempt,
    several times a second for as long as ZooKeeper is away; the first warning of each
    kind per outage is logged as it is, the repeats (until the session is connected
    again, `connected`) at debug level."""

    REPEATED: Final = frozenset({"Connection dropped: %s", "Connection time-out: %s"})
    """The templates of kazoo's per-attempt warnings."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self._lock = threading.Lock()
        self._seen: set[str] = set()

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        if level == logging.WARNING and msg in self.REPEATED:
            text = str(msg) % args
            with self._lock:
                if text in self._seen:
                    level = logging.DEBUG
                self._seen.add(text)
        super().log(level, msg, *args, **kwargs)

    def connected(self) -> None:
        """The outage is over: the next warnings are news again."""
        with self._lock:
            self._seen.clear()


def _any_accepts(hosts: str) -> bool:
    """Whether a TCP connection to any of `hosts` (as kazoo reads them: "host[:port],...")
    is accepted now: tells a ZooKeeper that is not there from one that does not make a
    session (blocking)."""
    addresses, _chroot = collect_hosts(hosts)
    for address in addresses:
        try:
            with socket.create_connection(
                address, timeout=limits.zk_probe_connect_timeout_ms / 1000
            ):
                return True
        except OSError:
            continue
    return False


class _ReconnectGate:
    """kazoo's sleep between reconnect attempts, which `expire_session` can hold closed."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()

    def sleep(self, seconds: float) -> None:
        self._open.wait()
        time.sleep(seconds)

    def close(self) -> None:
        self._open.clear()

    def open(self) -> None:
        self._open.set()


class _Firing:
    """One firing of a `_Trigger`: set once, and whether a node event caused it."""

    __slots__ = ("changed", "event")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.changed = False
        """A node event (created, deleted, data or children changed), as opposed to a
        session event: kazoo fires every watcher when a session is lost, because the
        server forgot its watches; that is a cue to register again, not a change."""


class _Trigger:
    """The one kazoo watcher of one (kind, path), shared by every task waiting on it.

    kazoo keeps its watchers in a set per path, so passing the same trigger on
    every re-check registers it once.  `firing` is replaced each time it fires,
    so a task that took `firing` before its re-check cannot miss a firing that
    happens during the re-check.
    """

    __slots__ = ("_bridge", "_on_idle", "armed", "firing", "key", "waiters")

    def __init__(
        self, bridge: _LoopBridge, key: tuple[str, str], on_idle: Callable[[_Trigger], None]
    ) -> None:
        self._bridge = bridge
        self.key = key
        self._on_idle = on_idle
        self.firing = _Firing()
        self.armed = False
        """Possibly registered with kazoo (not fired since it was passed to a read)."""
        self.waiters = 0

    def __call__(self, watched_event: WatchedEvent) -> None:
        """Called by kazoo on its callback thread."""
        changed = watched_event.type != EventType.NONE
        self._bridge.post(functools.partial(self._fire, changed))

    def _fire(self, changed: bool) -> None:
        firing, self.firing = self.firing, _Firing()
        self.armed = False
        firing.changed = changed
        firing.event.set()
        if self.waiters == 0:
            self._on_idle(self)


class ZkMetadataStore:
    """A `MetadataStore` on a ZooKeeper ensemble; create it with `connect`."""

    def __init__(
        self,
        client: KazooClient,
        *,
        hosts: str,
        root: str,
        session_timeout_ms: int,
        operation_timeout_ms: int,
        bridge: _LoopBridge,
        gate: _ReconnectGate,
        connection_log: _ConnectionLog,
        digest: ZkDigest | None = None,
        tls: ZkTls | None = None,
    ) -> None:
        self._client = client
        self._connection_log = connection_log
        self._digest = digest
        self._tls = tls
        self._hosts = hosts
        self._root = root
        self._session_timeout_ms = session_timeout_ms
        self._operation_timeout_s = operation_timeout_ms / 1000
        self._operation_timeout_ms = operation_timeout_ms
        self._bridge = bridge
        self._gate = gate
        self._inflight = anyio.Semaphore(limits.metadata_operations_inflight_max)
        self._feed = SessionEventFeed()
        self._state = SessionState.CONNECTED
        self._state_changed = anyio.Event()
        self._session_id = 0
        self._triggers: dict[tuple[str, str], _Trigger] = {}
        self._closed = False

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls,
        hosts: str,
        *,
        session_timeout_ms: int = limits.zk_session_timeout_ms_default,
        root: str | None = None,
        operation_timeout_ms: int = limits.zk_operation_timeout_ms_default,
        connect_timeout_ms: int | None = None,
        digest: ZkDigest | None = None,
        tls: ZkTls | None = None,
    ) -> AsyncIterator[ZkMetadataStore]:
        """Open a session on `hosts` ("host:port,host:port") and keep it until the block ends.

        The session authenticates with `digest` (default: `BOOKIE_ZK_DIGEST_FILE`'s,
        `bookie.meta.zk_digest`) and creates every znode with its ACL; without
        credentials, znodes are open to anyone.  With `tls` (default:
        `BOOKIE_ZK_TLS_CA_FILE`'s, `bookie.meta.zk_tls`) the session speaks TLS.  Raises
        `MetadataUnavailable` if no
        session is established within `connect_timeout_ms` (default:
        `operation_timeout_ms`).  Closing ends the session, so every ephemeral node
        of it vanishes at once.
        """
        assert "/" not in hosts, "pass the chroot as `root`, not in `hosts`"
        digest = digest if digest is not None else digest_from_environment()
        tls = tls if tls is not None else zk_tls_from_environment()
        root = paths.ROOT if root is None else root
        paths.check_path(root)
        gate = _ReconnectGate()
        connection_log = _ConnectionLog()
        handler = SequentialThreadingHandler() if tls is None else tls.handler()
        # kazoo requires the handler and the retry policies to share one sleep function.
        handler.sleep_func = gate.sleep
        client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_ms / 1000,
            handler=handler,
            connection_retry=KazooRetry(
                max_tries=-1,
                delay=limits.zk_reconnect_delay_ms_min / 1000,
                backoff=2,
                max_delay=_reconnect_delay_ms_max(session_timeout_ms) / 1000,
                max_jitter=limits.zk_reconnect_jitter,
                sleep_func=gate.sleep,
            ),
            auth_data=None if digest is None else digest.auth_data(),
            default_acl=None if digest is None else digest.acl(),
            use_ssl=tls is not None,
            logger=connection_log,
        )
        bridge = _LoopBridge(anyio.lowlevel.current_token())
        # A thread rather than a task: a task group here would wrap every
        # exception of the caller's block in an ExceptionGroup.
        pump = threading.Thread(target=bridge.pump, name="zk-loop-bridge", daemon=True)
        pump.start()
        store = cls(
            client,
            hosts=hosts,
            root=root,
            session_timeout_ms=session_timeout_ms,
            operation_timeout_ms=operation_timeout_ms,
            bridge=bridge,
            gate=gate,
            connection_log=connection_log,
            digest=digest,
            tls=tls,
        )
        try:
            await store._start(
                operation_timeout_ms if connect_timeout_ms is None else connect_timeout_ms
            )
            yield store
        finally:
            with anyio.CancelScope(shield=True):
                await store._stop()
                bridge.close()
                await anyio.to_thread.run_sync(pump.join)

    async def _start(self, timeout_ms: int) -> None:
        self._client.add_listener(self._on_kazoo_state)
        try:
            await anyio.to_thread.run_sync(self._client.start, timeout_ms / 1000)
        except KazooTimeoutError as error:
            if not await anyio.to_thread.run_sync(_any_accepts, self._hosts):
                how = "nothing accepts connections there: is ZooKeeper running at that address?"
            elif self._tls is not None:
                how = (
                    f"over TLS ({ZK_TLS_CA_FILE_ENV} is set): does the server serve TLS there, "
                    "with a certificate from that CA for this host name?"
                )
            else:
                how = (
                    f"without TLS ({ZK_TLS_CA_FILE_ENV} is not set): is it the server's plain port?"
                )
            raise MetadataUnavailable(
                f"no ZooKeeper session with {self._hosts} within {timeout_ms} ms, {how}"
            ) from error
        self._session_id = self._session_id_now()
        if self._root != paths.ROOT:
            root = self._root
            await self._call(f"create root {root}", lambda: self._client.ensure_path_async(root))

    async def _stop(self) -> None:
        self._closed = True
        self._client.remove_listener(self._on_kazoo_state)
        await anyio.to_thread.run_sync(self._client.stop)
        await anyio.to_thread.run_sync(self._client.close)
        self._feed.close()

    # --- operations -----------------------------------------------------------------------------

    async def get(self, path: str) -> Versioned:
        full = self._full(path)
        data, stat = await self._call(f"get {path}", lambda: self._client.get_async(full))
        return Versioned(bytes(data), stat.version)

    async def exists(self, path: str) -> int | None:
        full = self._full(path)
        stat = await self._call(f"exists {path}", lambda: self._client.exists_async(full))
        return None if stat is None else int(stat.version)

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        full = self._full(path)
        paths.check_value(path, len(value))
        created = await self._call(
            f"create {path}",
            lambda: self._client.create_async(
                full, value, ephemeral=ephemeral, sequence=sequential, makepath=make_parents
            ),
        )
        return paths.relative_to(self._root, created)

    async def set(self, path: str, value: bytes, version: int) -> int:
        full = self._full(path)
        paths.check_value(path, len(value))
        stat = await self._call(
            f"set {path}", lambda: self._client.set_async(full, value, version=version)
        )
        return int(stat.version)

    async def delete(self, path: str, version: int = ANY_VERSION) -> None:
        full = self._full(path)
        await self._call(f"delete {path}", lambda: self._client.delete_async(full, version=version))

    async def children(self, path: str) -> list[str]:
        full = self._full(path)
        names = await self._call(f"children {path}", lambda: self._client.get_children_async(full))
        return sorted(names)

    async def commit(self, ops: Sequence[Op]) -> None:
        paths.check_commit(ops)
        transaction = self._client.transaction()
        for op in ops:
            match op:
                case Check(path, version):
                    transaction.check(self._full(path), version)
                case Create(path, value, ephemeral):
                    transaction.create(self._full(path), value, ephemeral=ephemeral)
                case SetData(path, value, version):
                    transaction.set_data(self._full(path), value, version)
                case Delete(path, version):
                    transaction.delete(self._full(path), version)
                case _:
                    assert_never(op)
        results = await self._call(f"commit of {len(ops)} ops", transaction.commit_async)
        failed = False
        for index, result in enumerate(results):
            if isinstance(result, _ROLLED_BACK):
                failed = True
            elif isinstance(result, BaseException):
                op = ops[index]
                what = f"commit op {index} ({type(op).__name__} {op.path})"
                raise translate_error(result, what) from result
        if failed:
            raise MetadataError(f"commit of {len(ops)} ops rolled back without a cause")

    async def secure_tree(self, path: str) -> tuple[int, int]:
        """Give `path` and every znode below it the ACL this session creates znodes with
        (`bookie.meta.zk_digest`); return (znodes seen, znodes changed).  Idempotent: a
        znode that has that ACL already is left alone.  `InvalidConfig` for a session
        without credentials; `NoNode` when `path` does not exist."""
        if self._digest is None:
            raise InvalidConfig(
                f"no ZooKeeper credentials to secure {path} with: set {ZK_DIGEST_FILE_ENV}"
            )
        wanted = self._digest.acl()
        seen = changed = 0
        pending = [path]
        while pending:
            node = pending.pop()
            full = self._full(node)
            client = self._client
            acl, _stat = await self._call(
                f"acl of {node}", functools.partial(client.get_acls_async, full)
            )
            if list(acl) != wanted:
                await self._call(
                    f"set acl of {node}",
                    functools.partial(client.set_acls_async, full, wanted, version=ANY_VERSION),
                )
                changed += 1
            seen += 1
            names = await self._call(
                f"children {node}", functools.partial(client.get_children_async, full)
            )
            pending += (paths.join(node, name) for name in sorted(names, reverse=True))
        return seen, changed

    # --- watches --------------------------------------------------------------------------------

    async def watch(self, path: str, version: int) -> None:
        full = self._full(path)
        trigger = self._trigger("data", full)
        trigger.waiters += 1
        first_zxid: int | None = None
        """The zxid of the node's last change, as this wait first read it (see below)."""
        try:
            while True:
                firing = trigger.firing
                trigger.armed = True
                stat = await self._read_when_connected(
                    f"watch {path}", lambda: self._client.exists_async(full, watch=trigger)
                )
                current = NO_NODE_VERSION if stat is None else stat.version
                if current != version:
                    return
                # A watch lost with the connection (kazoo forgets its watchers then) is
                # registered again by this read, but changes made meanwhile fired nothing:
                # a node deleted and created again (a new leader's znode replacing its
                # predecessor's) is back at the version it had.  Its last change's zxid
                # is not.
                zxid = -1 if stat is None else stat.mzxid
                if first_zxid is None:
                    first_zxid = zxid
                elif zxid != first_zxid:
                    return
                await firing.event.wait()
                # Any change ends the wait, even one that leaves the version where
                # it was: a node deleted and created again starts over at version 0.
                if firing.changed:
                    return
        finally:
            self._release(trigger)

    async def watch_children(self, path: str, children: Sequence[str]) -> None:
        full = self._full(path)
        expected = sorted(children)
        trigger = self._trigger("children", full)
        trigger.waiters += 1
        first_zxid: int | None = None
        """The zxid of the last change of the node's children, as this wait first read it."""
        try:
            while True:
                firing = trigger.firing
                trigger.armed = True
                try:
                    names, stat = await self._read_when_connected(
                        f"watch children of {path}",
                        lambda: self._client.get_children_async(
                            full, watch=trigger, include_data=True
                        ),
                    )
                except NoNode:
                    return
                if sorted(names) != expected:
                    return
                # As in `watch`: children removed and added again while the watch was lost
                # (a bookie's registration, say) leave the names as they were, not the zxid.
                if first_zxid is None:
                    first_zxid = stat.pzxid
                elif stat.pzxid != first_zxid:
                    return
                await firing.event.wait()
                # Any change ends the wait, even a child removed and added again.
                if firing.changed:
                    return
        finally:
            self._release(trigger)

    def _trigger(self, kind: str, full_path: str) -> _Trigger:
        key = (kind, full_path)
        trigger = self._triggers.get(key)
        if trigger is None:
            trigger = _Trigger(self._bridge, key, self._forget)
            self._triggers[key] = trigger
        return trigger

    def _release(self, trigger: _Trigger) -> None:
        trigger.waiters -= 1
        assert trigger.waiters >= 0
        if trigger.waiters == 0 and not trigger.armed:
            self._forget(trigger)

    def _forget(self, trigger: _Trigger) -> None:
        """Drop an idle trigger (nobody waits, kazoo no longer holds it); a trigger that was
        already replaced under its key is left alone, since the key is no longer its own."""
        if self._triggers.get(trigger.key) is trigger:
            del self._triggers[trigger.key]

    # --- session --------------------------------------------------------------------------------

    def session_events(self) -> SessionEvents:
        return self._feed.subscribe()

    @property
    def session_state(self) -> SessionState:
        return self._state

    @property
    def session_id(self) -> int:
        return self._session_id

    async def expire_session(
        self, meanwhile: Callable[[], Awaitable[object]] | None = None
    ) -> None:
        """Test hook: have the ZooKeeper server expire this store's session, for real.

        Returns once the store is CONNECTED again with a new session (after
        LOST); raises `MetadataUnavailable` if that takes longer than the
        operation timeout.  Holds back the store's reconnection meanwhile,
        which assumes a single-server `hosts` (kazoo tries the next server of
        a list without pausing).  `meanwhile()`, if given, runs once the session
        is gone and before the store may reconnect: what it changes happens
        while this store's watches are lost.
        """
        client_id = self._client.client_id
        assert client_id is not None, "no session to expire"
        old_session_id = self._session_id

        def expire() -> None:
            intruder = KazooClient(
                hosts=self._hosts,
                client_id=client_id,
                timeout=self._session_timeout_ms / 1000,
                handler=None if self._tls is None else self._tls.handler(),
                use_ssl=self._tls is not None,
            )
            intruder.start(self._operation_timeout_s)
            intruder.stop()
            intruder.close()

        self._gate.close()
        try:
            await anyio.to_thread.run_sync(expire)
            if meanwhile is not None:
                await meanwhile()
        except KazooTimeoutError as error:
            raise MetadataUnavailable("could not take over the session to expire it") from error
        finally:
            self._gate.open()
        try:
            with anyio.fail_after(self._operation_timeout_s):
                while not (
                    self._state is SessionState.CONNECTED and self._session_id != old_session_id
                ):
                    await self._state_changed.wait()
        except TimeoutError as error:
            raise MetadataUnavailable("no new session after the forced expiry") from error

    def _on_kazoo_state(self, state: str) -> None:
        """Called by kazoo on its connection thread: must not block."""
        if state == KazooState.CONNECTED:
            self._connection_log.connected()
        self._bridge.post(functools.partial(self._publish, _STATES[state]))

    def _publish(self, state: SessionState) -> None:
        if self._closed or state is self._state:
            return
        if state is SessionState.CONNECTED:
            self._session_id = self._session_id_now()
        self._state = state
        self._feed.publish(state)
        changed, self._state_changed = self._state_changed, anyio.Event()
        changed.set()

    def _session_id_now(self) -> int:
        client_id = self._client.client_id
        return 0 if client_id is None else int(client_id[0])

    # --- plumbing -------------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        assert not self._closed, "metadata store used after close"
        return paths.under(self._root, path)

    async def _call(self, what: str, start: Callable[[], Any]) -> Any:
        """Start a kazoo `*_async` request and wait for its result on the loop."""
        done = anyio.Event()
        try:
            with anyio.fail_after(self._operation_timeout_s):
                async with self._inflight:
                    result = start()
                    result.rawlink(lambda _result: self._bridge.post(done.set))
                    await done.wait()
        except TimeoutError as error:
            raise MetadataUnavailable(
                f"{what}: no answer within {self._operation_timeout_ms} ms; outcome unknown"
            ) from error
        try:
            return result.get_nowait()
        except (KazooException, KazooTimeoutError) as error:
            raise translate_error(error, what) from error

    async def _read_when_connected(self, what: str, start: Callable[[], Any]) -> Any:
        """A read that may be repeated safely: retried across reconnections until it answers
        or the operation timeout passes (then `MetadataUnavailable`)."""
        try:
            with anyio.fail_after(self._operation_timeout_s):
                while True:
                    while self._state is not SessionState.CONNECTED:
                        await self._state_changed.wait()
                    changed = self._state_changed
                    try:
                        return await self._call(what, start)
                    except (MetadataUnavailable, SessionExpired):
                        # The connection went away under the read; wait for the
                        # session state to move before trying again.
                        await changed.wait()
        except TimeoutError as error:
            raise MetadataUnavailable(
                f"{what}: not connected within {self._operation_timeout_ms} ms"
            ) from error
