"""Bookies in the metadata store: cluster initialisation, registration, discovery, cookies.

Works over any `MetadataStore`; paths from `layout.MetadataLayout`.

* `init_cluster` creates the root, its directories and INSTANCEID (a random
  UUID unless given).  Idempotent and race-safe: any number of bookies may
  run it at once; all of them end up with the one instance id that won.
* `register` keeps a bookie's ephemeral registration znode in place for as
  long as its `async with` block runs: under `available/` when writable, under
  `available/readonly/` when read-only.  The znode dies with the session; after
  LOST the registration re-creates it as soon as the new session is CONNECTED.
  `set_read_only` moves it with one atomic commit, so the bookie is never
  listed in both places nor in neither.
* `list_bookies` / `watch_bookies` let clients find bookies and wait for the
  set to change.
* Cookies (a bookie's identity: which cluster, which address, which
  directories) are read and written with compare-and-set.  They are
  persistent: `list_cookies` names every bookie that joined the cluster and
  was not decommissioned (its cookie deleted, `delete_cookie`), running or not.

Value formats, each one canonical CBOR map (see `records.py`):

Registration znode, version 1::

    "v"  uint          1
    "a"  text          address clients connect to ("host:port")
    "r"  text / null   rack, for rack-aware placement
    "s"  int           id of the session that created the znode
    "t"  text          address of its TLS listener ("host:port"); absent without one

Cookie znode, version 1::

    "v"  uint          1
    "i"  text          cluster instance id (INSTANCEID)
    "b"  text          bookie id
    "a"  text          advertised address ("host:port")
    "j"  text          journal directory
    "l"  array of text ledger directories

INSTANCEID holds the instance id as UTF-8 text.

Invariant: while the registration's block runs and the session is CONNECTED
(after any re-registration completed), exactly one of the bookie's two
registration paths exists and it was created by the current session.  The
session id in the value is what tells our own znode (for example one created
by a request whose answer was lost) from a stale one left by a previous
process, which is waited out until ZooKeeper expires it.  That wait is
bounded (`stale_wait_ms`, twice the session timeout by default), counted from
the last time this bookie's own session (re)connected: a ZooKeeper server
that restarts, or an ensemble that elects a new leader, starts every old
session's timeout again, and its clients are disconnected when it does; a
znode that outlives the bound while this bookie was connected all along
belongs to a live session, another bookie with the same id.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, fields

import anyio

from bookie import limits
from bookie.errors import (
    BadMetadata,
    MetadataError,
    MetadataUnavailable,
    NodeExists,
    NoNode,
    SessionExpired,
    preview,
)
from bookie.meta import paths
from bookie.meta.api import (
    ANY_VERSION,
    NO_NODE_VERSION,
    Create,
    Delete,
    MetadataStore,
    SessionState,
)
from bookie.meta.layout import READONLY_DIRECTORY, MetadataLayout, check_bookie_id
from bookie.meta.records import (
    decode_record,
    encode_record,
    expect_array,
    expect_int,
    expect_optional_text,
    expect_text,
)

REGISTRATION_FORMAT_VERSION = 1
COOKIE_FORMAT_VERSION = 1

# --- cluster ----------------------------------------------------------------------------------


async def init_cluster(
    store: MetadataStore,
    root: str = limits.metadata_root_default,
    *,
    instance_id: str | None = None,
) -> str:
    """Create the cluster's znodes where missing; return the cluster's instance id.

    `instance_id` is used only if the cluster has none yet (a simulation
    passes one drawn from its seed; otherwise a random UUID is made).  Raises
    `BadMetadata` if INSTANCEID holds junk, and what the store raises.
    """
    layout = MetadataLayout(root)
    for path in (layout.available, layout.available_readonly, layout.cookies):
        with contextlib.suppress(NodeExists):
            await store.create(path, b"", make_parents=True)
    candidate = instance_id if instance_id is not None else str(uuid.uuid4())
    assert candidate, "an instance id is never empty"
    try:
        await store.create(layout.instance_id, candidate.encode())
    except NodeExists:
        return await read_instance_id(store, root)
    return candidate


async def read_instance_id(store: MetadataStore, root: str = limits.metadata_root_default) -> str:
    """The cluster's instance id; `NoNode` if the cluster was never initialised."""
    path = MetadataLayout(root).instance_id
    value = (await store.get(path)).value
    try:
        text = value.decode()
    except UnicodeDecodeError as error:
        raise BadMetadata(f"{path}: instance id is not UTF-8 text") from error
    return expect_text(text, f"{path}: instance id")


# --- registration -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BookieInfo:
    """What a client needs to use a bookie."""

    address: str
    """host:port to connect to (the advertised address, not necessarily the bind address)."""
    rack: str | None = None
    tls_address: str | None = None
    """host:port of its TLS listener, if it has one (clients with TLS connect there)."""

    def __post_init__(self) -> None:
        assert self.address, "a bookie has an address"
        assert self.rack is None or self.rack, "a rack is named or None"
        assert self.tls_address is None or self.tls_address, "a TLS address is named or None"

    def client_address(self, tls: bool) -> str:
        """Where a client connects: the TLS listener for a client with TLS, if there is one
        (a client with TLS sent to the plain port fails its handshake, and says so)."""
        return self.tls_address or self.address if tls else self.address


@dataclass(frozen=True, slots=True)
class Bookies:
    """The registered bookies at one moment, as `list_bookies` saw them."""

    writable: Mapping[str, BookieInfo] = field(default_factory=dict)
    read_only: Mapping[str, BookieInfo] = field(default_factory=dict)
    listed: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    """Raw children of each registration directory (None: absent), for `watch_bookies`."""
    sessions: Mapping[str, int] = field(default_factory=dict)
    """Bookie id -> the ZooKeeper session that created its registration: a new one means the
    bookie registered anew (restarted, or re-registered after losing its session)."""


def encode_registration(info: BookieInfo, session_id: int) -> bytes:
    record: dict[str, object] = {
        "v": REGISTRATION_FORMAT_VERSION,
        "a": info.address,
        "r": info.rack,
        "s": session_id,
    }
    if info.tls_address is not None:
        record["t"] = info.tls_address
    data = encode_record(record)
    assert decode_registration(data, "registration") == (info, session_id)
    return data


def decode_registration(data: bytes, what: str) -> tuple[BookieInfo, int]:
    """The info and creating session id in a registration value; `BadMetadata` if invalid."""
    record = decode_record(data, what, ("a", "r", "s"), REGISTRATION_FORMAT_VERSION, ("t",))
    tls_address = record.get("t")
    info = BookieInfo(
        address=expect_text(record["a"], f"{what}: address"),
        rack=expect_optional_text(record["r"], f"{what}: rack"),
        tls_address=None if tls_address is None else expect_text(tls_address, f"{what}: TLS"),
    )
    return info, expect_int(record["s"], f"{what}: session id", -(1 << 63), (1 << 63) - 1)


class Registration:
    """A bookie's registration, alive for the `register` block; see the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        layout: MetadataLayout,
        bookie_id: str,
        info: BookieInfo,
        *,
        read_only: bool,
        stale_wait_ms: int,
    ) -> None:
        check_bookie_id(bookie_id)
        self._store = store
        self._layout = layout
        self._bookie_id = bookie_id
        self._info = info
        self._read_only = read_only
        self._stale_wait_ms = stale_wait_ms
        self._lock = anyio.Lock()
        self._owner_session_id: int | None = None
        """The session that created the znode; the znode is gone once it is not the current one."""

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def registered(self) -> bool:
        """Whether the znode is in place (False from a session loss until it is re-created)."""
        return self._owner_session_id == self._store.session_id

    @property
    def path(self) -> str:
        """Where the registration znode is (or is about to be re-created)."""
        return self._layout.registration(self._bookie_id, read_only=self._read_only)

    async def set_read_only(self, read_only: bool) -> None:
        """Move the registration to `available/readonly/` (True) or back to `available/`.

        Atomic: one commit deletes the old znode and creates the new one.
        While the session is lost the move happens at re-registration.  Raises
        what the store raises; the registration is then where it was before.
        """
        async with self._lock:
            if read_only == self._read_only:
                return
            if not self.registered:
                self._read_only = read_only
                return
            source = self.path
            target = self._layout.registration(self._bookie_id, read_only=read_only)
            session_id = self._store.session_id
            value = encode_registration(self._info, session_id)
            try:
                await self._store.commit(
                    [Delete(source, ANY_VERSION), Create(target, value, ephemeral=True)]
                )
            except (NoNode, NodeExists):
                # An earlier attempt whose answer was lost may have moved it already.
                if not await self._is_ours(target, session_id):
                    raise
            self._read_only = read_only

    async def _register(self) -> None:
        """Create the znode; wait out a stale one of a dead session (bounded: see the module
        docstring)."""
        async with self._lock:
            path = self.path
            wait_s = self._stale_wait_ms / 1000
            created = False
            failure: Exception | None = None
            # Subscribed before the wait starts, so no reconnection goes unseen.
            events = self._store.session_events()
            async with anyio.create_task_group() as task_group:
                waiting = task_group.cancel_scope
                waiting.deadline = anyio.current_time() + wait_s
                task_group.start_soon(_restart_on_reconnection, events, waiting, wait_s)
                try:
                    self._owner_session_id = await self._create(path)
                    created = True
                except Exception as error:  # raised as it is below: the task group would wrap it
                    failure = error
                waiting.cancel()
            if failure is not None:
                raise failure
            if not created:
                if self._store.session_state is not SessionState.CONNECTED:
                    # Cut off while waiting: the znode may be long gone, and its
                    # deletion is not heard until the session is back.
                    raise MetadataUnavailable(
                        f"{path}: lost the metadata session while waiting "
                        f"{self._stale_wait_ms} ms for another session's znode to go"
                    )
                raise NodeExists(
                    f"{path}: held by another session for over {self._stale_wait_ms} ms "
                    f"while this bookie was connected; is another bookie running with id "
                    f"{self._bookie_id!r}?"
                )

    async def _create(self, path: str) -> int:
        """Create the znode, once no other session holds it; the id of the session that did."""
        while True:
            session_id = self._store.session_id
            value = encode_registration(self._info, session_id)
            try:
                await self._store.create(path, value, ephemeral=True)
                return session_id
            except NodeExists:
                if await self._is_ours(path, session_id):
                    return session_id
            # Someone else's znode, most likely our previous process's: ZooKeeper
            # deletes it when that session expires.  Gone already (since the create
            # failed): create it again now, for a watch on an absent znode waits for
            # its creation.
            version = await self._version(path)
            if version != NO_NODE_VERSION:
                await self._store.watch(path, version)

    async def _is_ours(self, path: str, session_id: int) -> bool:
        try:
            stored = await self._store.get(path)
        except NoNode:
            return False
        _info, owner = decode_registration(stored.value, f"registration {path}")
        return owner == session_id

    async def _version(self, path: str) -> int:
        version = await self._store.exists(path)
        return NO_NODE_VERSION if version is None else version

    async def _keep_registered(
        self,
        events: AsyncIterator[SessionState],
        on_reregistered: Callable[[Registration], None] | None,
    ) -> None:
        """Re-create the znode after every session loss, once the new session is up, and
        tell `on_reregistered` each time."""
        async for state in events:
            while state is SessionState.CONNECTED and not self.registered:
                try:
                    await self._register()
                    if on_reregistered is not None:
                        on_reregistered(self)
                except (MetadataUnavailable, SessionExpired):
                    # Retried while the session stays connected; if it does not,
                    # the next CONNECTED brings us back here.
                    await anyio.sleep(limits.zk_reconnect_delay_ms_max / 1000)
                    if self._store.session_state is not SessionState.CONNECTED:
                        break

    async def _unregister(self) -> None:
        if self.registered:
            with contextlib.suppress(NoNode, MetadataUnavailable, SessionExpired):
                await self._store.delete(self.path)
        self._owner_session_id = None


async def _restart_on_reconnection(
    events: AsyncIterator[SessionState], waiting: anyio.CancelScope, wait_s: float
) -> None:
    """Move `waiting`'s deadline to `wait_s` from now each time the session (re)connects."""
    async for state in events:
        if state is SessionState.CONNECTED:
            waiting.deadline = anyio.current_time() + wait_s


@contextlib.asynccontextmanager
async def register(
    store: MetadataStore,
    bookie_id: str,
    info: BookieInfo,
    *,
    read_only: bool = False,
    root: str = limits.metadata_root_default,
    stale_wait_ms: int = limits.bookie_registration_stale_wait_ms_default,
    on_reregistered: Callable[[Registration], None] | None = None,
) -> AsyncIterator[Registration]:
    """Register bookie `bookie_id` for the duration of the block (see the module docstring);
    `on_reregistered` is called after each re-registration that follows a session loss.

    The cluster must be initialised (`init_cluster`).  Before the block
    starts, raises `NodeExists` if a znode of another session still holds
    the id `stale_wait_ms` after this session last (re)connected (another
    live bookie with the same id), and
    what the store raises.  Inside the block, re-registration runs in a task
    group, so its failures (the same `NodeExists`, `BadMetadata`) and the
    block's own exceptions leave it as an `ExceptionGroup`.  On exit the znode
    is deleted so clients stop using the bookie at once.
    """
    registration = Registration(
        store,
        MetadataLayout(root),
        bookie_id,
        info,
        read_only=read_only,
        stale_wait_ms=stale_wait_ms,
    )
    # Subscribed before the first registration, so no session loss can go unseen.
    events = store.session_events()
    await registration._register()
    try:
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(registration._keep_registered, events, on_reregistered)
            yield registration
            task_group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await registration._unregister()


async def list_bookies(store: MetadataStore, root: str = limits.metadata_root_default) -> Bookies:
    """The registered bookies, writable and read-only, with their info.

    A bookie whose znode vanishes during the listing is left out.  Directories
    that do not exist yet (cluster not initialised) list as empty.  Raises
    `BadMetadata` if a registration value is junk, and what the store raises.
    """
    layout = MetadataLayout(root)
    listed: dict[str, tuple[str, ...] | None] = {}
    found: list[dict[str, BookieInfo]] = []
    sessions: dict[str, int] = {}
    for directory in (layout.available, layout.available_readonly):
        bookies: dict[str, BookieInfo] = {}
        try:
            names = await store.children(directory)
        except NoNode:
            listed[directory] = None
            found.append(bookies)
            continue
        listed[directory] = tuple(names)
        for name in names:
            if directory == layout.available and name == READONLY_DIRECTORY:
                continue
            path = paths.join(directory, name)
            try:
                stored = await store.get(path)
            except NoNode:
                continue
            bookies[name], sessions[name] = decode_registration(
                stored.value, f"registration {path}"
            )
        found.append(bookies)
    return Bookies(writable=found[0], read_only=found[1], listed=listed, sessions=sessions)


async def watch_bookies(store: MetadataStore, seen: Bookies) -> None:
    """Return once the set of registered bookies may differ from `seen` (a `list_bookies`
    result): a bookie appeared, vanished or moved between writable and read-only.

    Raises the `MetadataError` of the first watch that failed (itself, not wrapped in an
    exception group, so callers can retry on it)."""
    failures: list[MetadataError] = []
    async with anyio.create_task_group() as task_group:

        async def watch_one(directory: str, children: tuple[str, ...] | None) -> None:
            try:
                if children is None:
                    await store.watch(directory, NO_NODE_VERSION)
                else:
                    await store.watch_children(directory, children)
            except MetadataError as error:
                failures.append(error)
            task_group.cancel_scope.cancel()

        for directory, children in seen.listed.items():
            task_group.start_soon(watch_one, directory, children)
    if failures:
        raise failures[0]


# --- cookies ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cookie:
    """A bookie's identity, kept in the metadata store and in each of its data directories.

    A bookie refuses to start when the copies differ: it would otherwise serve
    a cluster it does not belong to, or an empty disk in place of a lost one.
    """

    instance_id: str
    bookie_id: str
    advertised_address: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]

    def __post_init__(self) -> None:
        check_bookie_id(self.bookie_id)
        assert self.instance_id, "a cookie names its cluster"
        assert self.advertised_address, "a cookie names its address"
        assert self.journal_dir, "a cookie names its journal directory"
        assert self.ledger_dirs, "a bookie has at least one ledger directory"
        assert all(self.ledger_dirs), "ledger directories are named"

    def encode(self) -> bytes:
        data = encode_record(
            {
                "v": COOKIE_FORMAT_VERSION,
                "i": self.instance_id,
                "b": self.bookie_id,
                "a": self.advertised_address,
                "j": self.journal_dir,
                "l": list(self.ledger_dirs),
            }
        )
        assert Cookie.decode(data) == self
        return data

    @staticmethod
    def decode(data: bytes, what: str = "cookie") -> Cookie:
        """The cookie in `data`; `BadMetadata` if it is not a valid cookie."""
        record = decode_record(data, what, ("i", "b", "a", "j", "l"), COOKIE_FORMAT_VERSION)
        ledger_dirs = tuple(
            expect_text(item, f"{what}: ledger directory")
            for item in expect_array(record["l"], f"{what}: ledger directories")
        )
        if not ledger_dirs:
            raise BadMetadata(f"{what}: no ledger directory")
        bookie_id = expect_text(record["b"], f"{what}: bookie id")
        if not paths.is_valid_name(bookie_id) or bookie_id == READONLY_DIRECTORY:
            raise BadMetadata(f"{what}: bookie id {preview(bookie_id)} cannot name a bookie")
        return Cookie(
            instance_id=expect_text(record["i"], f"{what}: instance id"),
            bookie_id=bookie_id,
            advertised_address=expect_text(record["a"], f"{what}: advertised address"),
            journal_dir=expect_text(record["j"], f"{what}: journal directory"),
            ledger_dirs=ledger_dirs,
        )

    def differences(self, other: Cookie) -> list[str]:
        """One line per field that differs, "field: <here> here, <there> there" (empty if equal),
        for a refusal message that says exactly what changed."""
        return [
            f"{item.name}: {getattr(self, item.name)!r} here, {getattr(other, item.name)!r} there"
            for item in fields(self)
            if getattr(self, item.name) != getattr(other, item.name)
        ]


async def read_cookie(
    store: MetadataStore, bookie_id: str, root: str = limits.metadata_root_default
) -> tuple[Cookie, int] | None:
    """The bookie's cookie and its version, or None if it has none.

    Raises `BadMetadata` if the stored cookie is junk or names another bookie.
    """
    path = MetadataLayout(root).cookie(bookie_id)
    try:
        stored = await store.get(path)
    except NoNode:
        return None
    cookie = Cookie.decode(stored.value, f"cookie at {path}")
    if cookie.bookie_id != bookie_id:
        raise BadMetadata(f"cookie at {path} belongs to bookie {cookie.bookie_id!r}")
    return cookie, stored.version


async def list_cookies(store: MetadataStore, root: str = limits.metadata_root_default) -> list[str]:
    """The ids of the bookies that have a cookie, sorted; none before the cluster is
    initialised.  Raises what the store raises."""
    try:
        return sorted(await store.children(MetadataLayout(root).cookies))
    except NoNode:
        return []


async def delete_cookie(
    store: MetadataStore,
    bookie_id: str,
    version: int,
    root: str = limits.metadata_root_default,
) -> None:
    """Remove the bookie's cookie as read at `version` (decommissioning): it is no longer a
    member of the cluster.  `MetadataVersionConflict` if it changed, `NoNode` if gone."""
    await store.delete(MetadataLayout(root).cookie(bookie_id), version)


async def write_cookie(
    store: MetadataStore,
    cookie: Cookie,
    version: int | None,
    root: str = limits.metadata_root_default,
) -> int:
    """Store `cookie`; return its new version.

    `version=None` creates it (`NodeExists` if the bookie already has one);
    otherwise it replaces the cookie read at `version` (`MetadataVersionConflict`
    if it changed since).
    """
    path = MetadataLayout(root).cookie(cookie.bookie_id)
    if version is None:
        await store.create(path, cookie.encode(), make_parents=True)
        return 0
    return await store.set(path, cookie.encode(), version)
