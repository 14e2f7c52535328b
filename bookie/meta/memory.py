"""ZooKeeper's data model in one process: the in-memory metadata store.

Used by unit tests and by the seeded single-threaded simulation, so it is
deterministic: no threads, no clock, no randomness.  Three layers:

* `MemoryMetadataServer`: the node tree, the live sessions and the watch
  registrations.  One server is shared by every client of a simulated cluster.
* `MemorySession`: one client's session on a server, synchronous.  Operations
  return or raise at once; watches are one-shot callbacks; session transitions
  go to listeners.  A simulation drives this layer directly and turns
  callbacks into events on its own queue.
* `MemoryMetadataStore`: the async `MetadataStore` (api.py) over one
  `MemorySession`; the only place that uses anyio.  Its `watch` and
  `watch_children` are level-triggered loops over the one-shot callbacks.

Callbacks (watches and session listeners) run in the order the changes
happened, after the operation that caused them has finished, never in the
middle of it, so a callback may call the store again; what that call causes is
run after the callbacks already queued.

Semantics are api.py's; the model of connection trouble, for tests and the
simulation, is:

* `suspend()`: the client is cut off.  Calls raise `MetadataUnavailable` at
  once and apply nothing; watch callbacks are held back.  The session and its
  ephemeral nodes live on, as they would on a real server until it expires the
  session.
* `resume()`: CONNECTED, then the held watch callbacks.
* `expire_session()`: the server ends the session: its ephemeral nodes vanish
  at once (other sessions' watches see it).  A connected client then hears
  LOST, gets a new session id and hears CONNECTED; a suspended client hears
  the same when it resumes.

Watches belong to the client, not to its session: a watch registered before
an expiry still fires for a change after it (the ZooKeeper store gets the
same effect by re-arming its watches after a new session starts).

Invariants: every node but the root has its parent in the tree and is in its
parent's `children`; an ephemeral node's owner is a live session and it has
no children; versions only grow while a node exists; a failed `commit`
leaves the tree exactly as it was.
"""

from __future__ import annotations

import functools
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final, TypeVar, assert_never

import anyio
import anyio.lowlevel

from bookie.errors import (
    MetadataError,
    MetadataUnavailable,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
    NotEmpty,
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

SEQUENCE_DIGITS: Final = 10

_T = TypeVar("_T")

_TRANSITIONS: Final = frozenset(
    {
        (SessionState.CONNECTED, SessionState.SUSPENDED),
        (SessionState.SUSPENDED, SessionState.CONNECTED),
        (SessionState.CONNECTED, SessionState.LOST),
        (SessionState.SUSPENDED, SessionState.LOST),
        (SessionState.LOST, SessionState.CONNECTED),
    }
)


@dataclass(slots=True)
class _Node:
    value: bytes
    version: int = 0
    child_version: int = 0
    """Grows on every child created or deleted; gives sequential nodes their suffix."""
    owner: int | None = None
    """Session id of an ephemeral node's owner; None for a persistent node."""
    children: set[str] = field(default_factory=set)


class WatchHandle:
    """A registered one-shot watch; `cancel` makes sure its callback will not run."""

    __slots__ = ("_callback", "_client", "_key", "_registry", "active")

    def __init__(
        self,
        client: MemorySession,
        registry: dict[str, dict[int, WatchHandle]],
        key: tuple[str, int],
        callback: Callable[[], None],
    ) -> None:
        self._client = client
        self._registry = registry
        self._key = key
        self._callback = callback
        self.active = True

    def cancel(self) -> None:
        if not self.active:
            return
        self.active = False
        path, watch_id = self._key
        watches = self._registry.get(path)
        if watches is not None:
            watches.pop(watch_id, None)
            if not watches:
                del self._registry[path]
        self._client._watches.pop(self, None)

    def _fire(self) -> None:
        if self.active:
            self.active = False
            self._callback()


class ListenerHandle:
    """A registered session listener; `cancel` stops it from being called."""

    __slots__ = ("_callback", "_client", "active")

    def __init__(self, client: MemorySession, callback: Callable[[SessionState], None]) -> None:
        self._client = client
        self._callback = callback
        self.active = True

    def cancel(self) -> None:
        self.active = False
        self._client._listeners.pop(self, None)

    def _call(self, state: SessionState) -> None:
        if self.active:
            self._callback(state)


class _Transaction:
    """Tree mutations in progress: how to undo them, and which watches they trigger."""

    __slots__ = ("children_changed", "data_changed", "undo")

    def __init__(self) -> None:
        self.undo: list[Callable[[], None]] = []
        self.data_changed: list[str] = []
        self.children_changed: list[str] = []


class MemoryMetadataServer:
    """The shared state: a node tree, live sessions, watch registrations, pending callbacks."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {paths.ROOT: _Node(b"")}
        self._session_ids = itertools.count(1)
        self._sessions: dict[int, MemorySession] = {}
        self._watch_ids = itertools.count(1)
        self._data_watches: dict[str, dict[int, WatchHandle]] = {}
        self._child_watches: dict[str, dict[int, WatchHandle]] = {}
        self._callbacks: deque[Callable[[], None]] = deque()
        self._dispatching = False

    def session(self) -> MemorySession:
        """A new client with a new session (synchronous API)."""
        return MemorySession(self)

    def client(self) -> MemoryMetadataStore:
        """A new client with a new session (async `MetadataStore` API)."""
        return MemoryMetadataStore(self.session())

    def expire(self, session_id: int) -> None:
        """End session `session_id` as the server would after its timeout (test hook)."""
        client = self._sessions.pop(session_id, None)
        assert client is not None, f"session {session_id} is not live"
        self._drop_ephemerals(session_id)
        client._on_expired()
        self.run_callbacks()

    def run_callbacks(self) -> None:
        """Run every queued callback, in order (a no-op when already running them)."""
        if self._dispatching:
            return
        self._dispatching = True
        try:
            while self._callbacks:
                self._callbacks.popleft()()
        finally:
            self._dispatching = False

    # --- used by MemorySession ----------------------------------------------------------------

    def _open_session(self, client: MemorySession) -> int:
        session_id = next(self._session_ids)
        self._sessions[session_id] = client
        return session_id

    def _close_session(self, session_id: int) -> None:
        if self._sessions.pop(session_id, None) is not None:
            self._drop_ephemerals(session_id)

    def _drop_ephemerals(self, session_id: int) -> None:
        owned = sorted(
            (path for path, node in self._nodes.items() if node.owner == session_id), reverse=True
        )
        transaction = _Transaction()
        for path in owned:
            self._delete(transaction, path, ANY_VERSION)
        self._notify(transaction)

    def _node(self, path: str) -> _Node:
        paths.check_path(path)
        node = self._nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node

    def _get(self, path: str) -> Versioned:
        node = self._node(path)
        return Versioned(node.value, node.version)

    def _exists(self, path: str) -> int | None:
        paths.check_path(path)
        node = self._nodes.get(path)
        return None if node is None else node.version

    def _children(self, path: str) -> list[str]:
        return sorted(self._node(path).children)

    def _run(self, apply: Callable[[_Transaction], _T]) -> _T:
        """Apply one operation (or a whole commit) atomically, then queue its watches."""
        transaction = _Transaction()
        try:
            result = apply(transaction)
        except BaseException:
            for undo in reversed(transaction.undo):
                undo()
            raise
        self._notify(transaction)
        return result

    def _create(
        self,
        transaction: _Transaction,
        session_id: int,
        path: str,
        value: bytes,
        *,
        ephemeral: bool,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        paths.check_path(path)
        assert path != paths.ROOT, "the root always exists"
        paths.check_value(path, len(value))
        parent_path = paths.parent_of(path)
        if make_parents and parent_path not in self._nodes:
            self._create(
                transaction, session_id, parent_path, b"", ephemeral=False, make_parents=True
            )
        parent = self._nodes.get(parent_path)
        if parent is None:
            raise NoNode(f"{parent_path} (parent of {path})")
        if parent.owner is not None:
            raise MetadataError(f"{parent_path} is ephemeral and cannot have children")
        if sequential:
            path = f"{path}{parent.child_version:0{SEQUENCE_DIGITS}d}"
        if path in self._nodes:
            raise NodeExists(path)
        name = paths.name_of(path)
        self._nodes[path] = _Node(value, owner=session_id if ephemeral else None)
        parent.children.add(name)
        parent.child_version += 1

        def undo() -> None:
            del self._nodes[path]
            parent.children.discard(name)
            parent.child_version -= 1

        transaction.undo.append(undo)
        transaction.data_changed.append(path)
        transaction.children_changed += [path, parent_path]
        return path

    def _set(self, transaction: _Transaction, path: str, value: bytes, version: int) -> int:
        node = self._node(path)
        paths.check_value(path, len(value))
        _check_version(path, node, version)
        previous_value, previous_version = node.value, node.version
        node.value = value
        node.version += 1

        def undo() -> None:
            node.value, node.version = previous_value, previous_version

        transaction.undo.append(undo)
        transaction.data_changed.append(path)
        return node.version

    def _delete(self, transaction: _Transaction, path: str, version: int) -> None:
        if path == paths.ROOT:
            raise MetadataError("the root cannot be deleted")
        node = self._node(path)
        _check_version(path, node, version)
        if node.children:
            raise NotEmpty(f"{path} has {len(node.children)} children")
        parent_path = paths.parent_of(path)
        parent = self._nodes[parent_path]
        name = paths.name_of(path)
        del self._nodes[path]
        parent.children.discard(name)
        parent.child_version += 1

        def undo() -> None:
            self._nodes[path] = node
            parent.children.add(name)
            parent.child_version -= 1

        transaction.undo.append(undo)
        transaction.data_changed.append(path)
        transaction.children_changed += [path, parent_path]

    def _check(self, path: str, version: int) -> None:
        _check_version(path, self._node(path), version)

    def _commit(self, transaction: _Transaction, session_id: int, ops: Sequence[Op]) -> None:
        paths.check_commit(ops)
        for op in ops:
            match op:
                case Check(path, version):
                    self._check(path, version)
                case Create(path, value, ephemeral):
                    self._create(transaction, session_id, path, value, ephemeral=ephemeral)
                case SetData(path, value, version):
                    self._set(transaction, path, value, version)
                case Delete(path, version):
                    self._delete(transaction, path, version)
                case _:
                    assert_never(op)

    def _notify(self, transaction: _Transaction) -> None:
        for path, registry in itertools.chain(
            ((path, self._data_watches) for path in transaction.data_changed),
            ((path, self._child_watches) for path in transaction.children_changed),
        ):
            for watch in registry.pop(path, {}).values():
                watch._client._watches.pop(watch, None)
                watch._client._deliver(watch._fire)

    def _add_watch(
        self,
        client: MemorySession,
        registry: dict[str, dict[int, WatchHandle]],
        path: str,
        callback: Callable[[], None],
    ) -> WatchHandle:
        paths.check_path(path)
        watch_id = next(self._watch_ids)
        handle = WatchHandle(client, registry, (path, watch_id), callback)
        registry.setdefault(path, {})[watch_id] = handle
        return handle


def _check_version(path: str, node: _Node, version: int) -> None:
    if version not in (ANY_VERSION, node.version):
        raise MetadataVersionConflict(f"{path}: version is {node.version}, expected {version}")


class MemorySession:
    """One client of a `MemoryMetadataServer`, with its session; synchronous.

    Every operation raises what api.py says, at once; `MetadataUnavailable`
    while suspended (nothing applied).  Using a closed session is a programmer
    error.
    """

    def __init__(self, server: MemoryMetadataServer) -> None:
        self._server = server
        self._session_id = server._open_session(self)
        self._state = SessionState.CONNECTED
        self._expired_while_suspended = False
        self._held: list[Callable[[], None]] = []
        # Dicts as ordered sets: callbacks run in registration order, deterministically.
        self._listeners: dict[ListenerHandle, None] = {}
        self._watches: dict[WatchHandle, None] = {}
        self._closed = False

    @property
    def server(self) -> MemoryMetadataServer:
        return self._server

    @property
    def session_id(self) -> int:
        return self._session_id

    @property
    def state(self) -> SessionState:
        return self._state

    # --- data operations ------------------------------------------------------------------------

    def get(self, path: str) -> Versioned:
        self._check_usable()
        return self._server._get(path)

    def exists(self, path: str) -> int | None:
        self._check_usable()
        return self._server._exists(path)

    def children(self, path: str) -> list[str]:
        self._check_usable()
        return self._server._children(path)

    def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        self._check_usable()
        server = self._server
        created = server._run(
            lambda transaction: server._create(
                transaction,
                self._session_id,
                path,
                value,
                ephemeral=ephemeral,
                sequential=sequential,
                make_parents=make_parents,
            )
        )
        server.run_callbacks()
        return created

    def set(self, path: str, value: bytes, version: int) -> int:
        self._check_usable()
        server = self._server
        new_version = server._run(lambda txn: server._set(txn, path, value, version))
        server.run_callbacks()
        return new_version

    def delete(self, path: str, version: int = ANY_VERSION) -> None:
        self._check_usable()
        server = self._server
        server._run(lambda transaction: server._delete(transaction, path, version))
        server.run_callbacks()

    def commit(self, ops: Sequence[Op]) -> None:
        self._check_usable()
        server = self._server
        server._run(lambda transaction: server._commit(transaction, self._session_id, ops))
        server.run_callbacks()

    # --- watches and listeners ------------------------------------------------------------------

    def add_watch(self, path: str, callback: Callable[[], None]) -> WatchHandle:
        """Call `callback` once, the next time `path`'s data changes or it is created or deleted."""
        assert not self._closed
        handle = self._server._add_watch(self, self._server._data_watches, path, callback)
        self._watches[handle] = None
        return handle

    def add_children_watch(self, path: str, callback: Callable[[], None]) -> WatchHandle:
        """Call `callback` once, the next time a child of `path` is created or deleted, or
        `path` itself is created or deleted."""
        assert not self._closed
        handle = self._server._add_watch(self, self._server._child_watches, path, callback)
        self._watches[handle] = None
        return handle

    def add_session_listener(self, callback: Callable[[SessionState], None]) -> ListenerHandle:
        """Call `callback` with every session state transition from now on."""
        assert not self._closed
        handle = ListenerHandle(self, callback)
        self._listeners[handle] = None
        return handle

    # --- test hooks -----------------------------------------------------------------------------

    def suspend(self) -> None:
        """Cut the client off from the server (the session lives on)."""
        assert not self._closed
        assert self._state is SessionState.CONNECTED, "only a connected session can be suspended"
        self._transition(SessionState.SUSPENDED)
        self._server.run_callbacks()

    def resume(self) -> None:
        """Reconnect after `suspend`: CONNECTED (after LOST if the session expired meanwhile)."""
        assert not self._closed
        assert self._state is SessionState.SUSPENDED, "only a suspended session can resume"
        if self._expired_while_suspended:
            self._expired_while_suspended = False
            self._renew()
        else:
            self._transition(SessionState.CONNECTED)
        held, self._held = self._held, []
        self._server._callbacks.extend(held)
        self._server.run_callbacks()

    def expire_session(self) -> None:
        """Have the server expire this client's session now (see the module docstring)."""
        assert not self._closed
        if self._expired_while_suspended:
            return
        self._server.expire(self._session_id)

    def close(self) -> None:
        """End the session: its ephemeral nodes vanish, its watches and listeners are dropped."""
        if self._closed:
            return
        self._closed = True
        for watch in list(self._watches):
            watch.cancel()
        for listener in list(self._listeners):
            listener.cancel()
        self._held.clear()
        if not self._expired_while_suspended:
            self._server._close_session(self._session_id)
        self._server.run_callbacks()

    # --- internals ------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        assert not self._closed, "metadata session used after close"
        if self._state is SessionState.SUSPENDED:
            raise MetadataUnavailable(f"metadata session {self._session_id} is suspended")

    def _deliver(self, callback: Callable[[], None]) -> None:
        if self._closed:
            return
        if self._state is SessionState.SUSPENDED:
            self._held.append(callback)
        else:
            self._server._callbacks.append(callback)

    def _on_expired(self) -> None:
        if self._state is SessionState.SUSPENDED:
            self._expired_while_suspended = True
        else:
            self._renew()

    def _renew(self) -> None:
        self._transition(SessionState.LOST)
        self._session_id = self._server._open_session(self)
        self._transition(SessionState.CONNECTED)

    def _transition(self, state: SessionState) -> None:
        assert (self._state, state) in _TRANSITIONS, (self._state, state)
        self._state = state
        for handle in self._listeners:
            self._server._callbacks.append(functools.partial(handle._call, state))


class MemoryMetadataStore:
    """The async `MetadataStore` (api.py) over one `MemorySession`.

    Use `MemoryMetadataServer().client()` for clients that share a tree, or
    `MemoryMetadataStore()` for a private one.  `async with` closes the session
    at the end.  `expire_session`, `suspend` and `resume` are the test hooks of
    `MemorySession`, synchronous and immediate; `hold_session_events` and
    `release_session_events` model a client that notices late (its ZooKeeper
    thread starved, its process paused): its readers of `session_events` hear
    nothing in between, then every transition held, in order.
    """

    def __init__(self, session: MemorySession | None = None) -> None:
        self._session = session if session is not None else MemoryMetadataServer().session()
        self._feed = SessionEventFeed()
        self._held_states: list[SessionState] | None = None
        self._listener = self._session.add_session_listener(self._publish)

    def _publish(self, state: SessionState) -> None:
        if self._held_states is not None:
            self._held_states.append(state)
        else:
            self._feed.publish(state)

    def hold_session_events(self) -> None:
        """Hold session transitions back from this client's readers (see the class docstring)."""
        if self._held_states is None:
            self._held_states = []

    def release_session_events(self) -> None:
        """Publish the transitions held since `hold_session_events`, and stop holding."""
        held, self._held_states = self._held_states, None
        for state in held or ():
            self._feed.publish(state)

    @property
    def session(self) -> MemorySession:
        """The synchronous client underneath (for tests and the simulation)."""
        return self._session

    async def __aenter__(self) -> MemoryMetadataStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """End the session (its ephemeral nodes vanish) and every `session_events` reader."""
        self._listener.cancel()
        self._session.close()
        self._held_states = None  # nobody is left to hear them
        self._feed.close()

    async def get(self, path: str) -> Versioned:
        await anyio.lowlevel.checkpoint()
        return self._session.get(path)

    async def exists(self, path: str) -> int | None:
        await anyio.lowlevel.checkpoint()
        return self._session.exists(path)

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        await anyio.lowlevel.checkpoint()
        return self._session.create(
            path, value, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents
        )

    async def set(self, path: str, value: bytes, version: int) -> int:
        await anyio.lowlevel.checkpoint()
        return self._session.set(path, value, version)

    async def delete(self, path: str, version: int = ANY_VERSION) -> None:
        await anyio.lowlevel.checkpoint()
        self._session.delete(path, version)

    async def children(self, path: str) -> list[str]:
        await anyio.lowlevel.checkpoint()
        return self._session.children(path)

    async def commit(self, ops: Sequence[Op]) -> None:
        await anyio.lowlevel.checkpoint()
        self._session.commit(ops)

    async def watch(self, path: str, version: int) -> None:
        await anyio.lowlevel.checkpoint()
        # Reading and registering without an await in between means no change
        # can slip between them: this is what makes the wait level-triggered.
        current = self._session.exists(path)
        if (NO_NODE_VERSION if current is None else current) != version:
            return
        fired = anyio.Event()
        handle = self._session.add_watch(path, fired.set)
        try:
            # Any change ends the wait, even one that leaves the version where it
            # was: a node deleted and created again starts over at version 0.
            await fired.wait()
        finally:
            handle.cancel()

    async def watch_children(self, path: str, children: Sequence[str]) -> None:
        await anyio.lowlevel.checkpoint()
        try:
            current = self._session.children(path)
        except NoNode:
            return
        if current != sorted(children):
            return
        fired = anyio.Event()
        handle = self._session.add_children_watch(path, fired.set)
        try:
            # Any change ends the wait, even a child removed and added again.
            await fired.wait()
        finally:
            handle.cancel()

    def session_events(self) -> SessionEvents:
        return self._feed.subscribe()

    @property
    def session_state(self) -> SessionState:
        return self._session.state

    @property
    def session_id(self) -> int:
        return self._session.session_id

    def expire_session(self) -> None:
        self._session.expire_session()

    def suspend(self) -> None:
        self._session.suspend()

    def resume(self) -> None:
        self._session.resume()
