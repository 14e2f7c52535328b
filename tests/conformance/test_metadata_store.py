"""The MetadataStore contract (bookie/meta/api.py), run against both implementations:
the in-memory store and the ZooKeeper store on a real ZooKeeper server.

Every test gets a `connect` factory opening clients of ONE shared service (a
fresh `MemoryMetadataServer`, or the session's ZooKeeper under a root of its
own), so tests about several sessions run the same way on both.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager

import anyio
import pytest

from bookie import limits
from bookie.errors import (
    MetadataError,
    MetadataValueTooLarge,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
    NotEmpty,
)
from bookie.meta.api import (
    ANY_VERSION,
    NO_NODE_VERSION,
    Check,
    Create,
    Delete,
    Op,
    SessionState,
    SetData,
)
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore
from bookie.meta.zk import ZkMetadataStore

pytestmark = pytest.mark.anyio

Store = MemoryMetadataStore | ZkMetadataStore
Connect = Callable[[], AbstractAsyncContextManager[Store]]

WAIT_S = 10.0
"""Upper bound on any wait for something that must happen (never reached when it works)."""

QUIET_S = 0.2
"""How long a watch is given to (wrongly) return when nothing changed."""

ZK_SESSION_TIMEOUT_MS = 4_000


@pytest.fixture(params=["memory", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def connect(request: pytest.FixtureRequest) -> Connect:
    if request.param == "memory":
        server = MemoryMetadataServer()
        return server.client
    zookeeper = request.getfixturevalue("zookeeper")
    root = request.getfixturevalue("zk_root")

    def open_zk() -> AbstractAsyncContextManager[Store]:
        return ZkMetadataStore.connect(
            zookeeper.connect_string, root=root, session_timeout_ms=ZK_SESSION_TIMEOUT_MS
        )

    return open_zk


@pytest.fixture
async def store(connect: Connect) -> AsyncIterator[Store]:
    async with connect() as opened:
        yield opened


async def expire(store: Store, meanwhile: Callable[[], Awaitable[object]] | None = None) -> None:
    """Have the service expire `store`'s session (returns once a new session is up), and
    run `meanwhile()`, if given, while the old session is gone and no new one is up yet
    (the memory store has no such time: it runs right after the expiry)."""
    if isinstance(store, MemoryMetadataStore):
        store.expire_session()
        if meanwhile is not None:
            await meanwhile()
    else:
        await store.expire_session(meanwhile)


async def settle(store: Store) -> None:
    """Return once every task started so far has sent its requests and had them answered.

    Tasks run until they block; a ZooKeeper session answers in order, so once a
    request sent after theirs is answered, theirs were too (and any watch they
    set is registered on the server).
    """
    await anyio.wait_all_tasks_blocked()
    await store.exists("/")


async def assert_woken_by(
    store: Store, waiter: Callable[[], Awaitable[None]], change: Callable[[], Awaitable[object]]
) -> None:
    """`waiter()` (a watch of `store`) stays blocked until `change()`, then returns."""
    woke = anyio.Event()

    async def wait() -> None:
        await waiter()
        woke.set()

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(wait)
            await settle(store)
            assert not woke.is_set()
            await change()
    assert woke.is_set()


# --- data -------------------------------------------------------------------------------------


async def test_absent_node(store: Store) -> None:
    assert await store.exists("/a") is None
    with pytest.raises(NoNode):
        await store.get("/a")
    with pytest.raises(NoNode):
        await store.children("/a")


async def test_create_then_read(store: Store) -> None:
    assert await store.create("/a", b"value") == "/a"
    got = await store.get("/a")
    assert (got.value, got.version) == (b"value", 0)
    assert await store.exists("/a") == 0


async def test_create_existing_node_fails(store: Store) -> None:
    await store.create("/a", b"first")
    with pytest.raises(NodeExists):
        await store.create("/a", b"second")
    assert (await store.get("/a")).value == b"first"


async def test_create_needs_parent_unless_asked_to_make_it(store: Store) -> None:
    with pytest.raises(NoNode):
        await store.create("/a/b/c", b"x")
    assert await store.create("/a/b/c", b"x", make_parents=True) == "/a/b/c"
    assert (await store.get("/a/b")).value == b""
    assert await store.children("/a") == ["b"]


async def test_set_is_compare_and_set(store: Store) -> None:
    await store.create("/a", b"0")
    assert await store.set("/a", b"1", 0) == 1
    with pytest.raises(MetadataVersionConflict):
        await store.set("/a", b"stale", 0)
    assert await store.set("/a", b"2", ANY_VERSION) == 2
    got = await store.get("/a")
    assert (got.value, got.version) == (b"2", 2)
    with pytest.raises(NoNode):
        await store.set("/missing", b"x", ANY_VERSION)


async def test_delete_is_compare_and_delete_of_a_leaf(store: Store) -> None:
    await store.create("/a", b"")
    await store.create("/a/b", b"")
    with pytest.raises(NotEmpty):
        await store.delete("/a")
    await store.set("/a/b", b"x", 0)
    with pytest.raises(MetadataVersionConflict):
        await store.delete("/a/b", 0)
    await store.delete("/a/b", 1)
    await store.delete("/a")
    assert await store.exists("/a") is None
    with pytest.raises(NoNode):
        await store.delete("/a")


async def test_children_are_sorted_names(store: Store) -> None:
    await store.create("/d", b"")
    for name in ["b", "c", "a"]:
        await store.create(f"/d/{name}", b"")
    assert await store.children("/d") == ["a", "b", "c"]
    assert await store.children("/d/a") == []


async def test_sequential_nodes_get_unique_increasing_suffixes(store: Store) -> None:
    await store.create("/q", b"")
    created = [await store.create("/q/n-", b"", sequential=True) for _ in range(5)]
    suffixes = [path.removeprefix("/q/n-") for path in created]
    assert all(len(suffix) == 10 and suffix.isdigit() for suffix in suffixes)
    assert [int(suffix) for suffix in suffixes] == sorted({int(suffix) for suffix in suffixes})
    assert await store.children("/q") == sorted(path.removeprefix("/q/") for path in created)


async def test_value_size_is_bounded(store: Store) -> None:
    with pytest.raises(MetadataValueTooLarge):
        await store.create("/big", b"x" * (limits.metadata_value_bytes_max + 1))
    half = b"x" * (limits.metadata_value_bytes_max // 2 + 1)
    with pytest.raises(MetadataValueTooLarge):
        await store.commit([Create("/big", half), Create("/big2", half)])
    assert await store.exists("/big") is None


async def test_ephemeral_node_cannot_have_children(store: Store) -> None:
    await store.create("/e", b"", ephemeral=True)
    with pytest.raises(MetadataError):
        await store.create("/e/child", b"")


async def test_ephemeral_nodes_vanish_with_their_session(connect: Connect, store: Store) -> None:
    await store.create("/members", b"")
    async with connect() as other:
        await other.create("/members/other", b"", ephemeral=True)
        await other.create("/members/again", b"", ephemeral=True, sequential=True)
        assert len(await store.children("/members")) == 2
    assert await store.children("/members") == []


# --- commit -----------------------------------------------------------------------------------


async def test_commit_applies_every_op(store: Store) -> None:
    await store.create("/a", b"a0")
    await store.create("/gone", b"")
    await store.commit(
        [
            Check("/a", 0),
            SetData("/a", b"a1", 0),
            Create("/b", b"b0"),
            Create("/b/e", b"", ephemeral=True),
            Delete("/gone", 0),
        ]
    )
    assert (await store.get("/a")).value == b"a1"
    assert (await store.get("/b/e")).version == 0
    assert await store.exists("/gone") is None


@pytest.mark.parametrize(
    ("failing_op", "error"),
    [
        (Check("/a", 5), MetadataVersionConflict),
        (Check("/missing", 0), NoNode),
        (Create("/a", b""), NodeExists),
        (SetData("/a", b"", 7), MetadataVersionConflict),
        (Delete("/missing", ANY_VERSION), NoNode),
    ],
)
async def test_commit_is_all_or_nothing(
    store: Store, failing_op: Op, error: type[Exception]
) -> None:
    await store.create("/a", b"a0")
    ops: list[Op] = [SetData("/a", b"a1", 0), Create("/new", b""), failing_op]
    with pytest.raises(error):
        await store.commit(ops)
    got = await store.get("/a")
    assert (got.value, got.version) == (b"a0", 0)
    assert await store.exists("/new") is None


# --- watches ----------------------------------------------------------------------------------


async def test_watch_returns_at_once_when_the_version_already_differs(store: Store) -> None:
    await store.create("/w", b"")
    await store.set("/w", b"1", 0)
    with anyio.fail_after(WAIT_S):
        await store.watch("/w", 0)
        await store.watch("/absent", 0)
        await store.watch("/w", NO_NODE_VERSION)


async def test_watch_does_not_return_while_nothing_changes(store: Store) -> None:
    await store.create("/w", b"")
    with anyio.move_on_after(QUIET_S) as scope:
        await store.watch("/w", 0)
    assert scope.cancelled_caught


async def test_watch_wakes_on_set_delete_and_create(connect: Connect, store: Store) -> None:
    await store.create("/w", b"")
    async with connect() as writer:
        await assert_woken_by(
            store, lambda: store.watch("/w", 0), lambda: writer.set("/w", b"1", 0)
        )
        await assert_woken_by(store, lambda: store.watch("/w", 1), lambda: writer.delete("/w"))
        await assert_woken_by(
            store, lambda: store.watch("/w", NO_NODE_VERSION), lambda: writer.create("/w", b"")
        )


async def test_watch_wakes_when_a_node_is_recreated_at_the_same_version(
    connect: Connect, store: Store
) -> None:
    """Versions restart at 0 on creation, so a node deleted and created again (as a new
    leader replaces an old leader's znode) looks unchanged by version alone."""
    await store.create("/w", b"old leader")
    async with connect() as writer:
        await assert_woken_by(
            store,
            lambda: store.watch("/w", 0),
            lambda: writer.commit([Delete("/w", 0), Create("/w", b"new leader")]),
        )
    got = await store.get("/w")
    assert (got.value, got.version) == (b"new leader", 0)


async def test_watch_misses_no_change(connect: Connect, store: Store) -> None:
    """A watcher that re-reads after every wake-up always reaches the last version, however
    the writes interleave with its waits.  A wake-up may show nothing new (the contract's
    "look again"): ZooKeeper's watch set by one check can fire for a change the watcher
    already read, during its next wait."""
    await store.create("/counter", b"")
    last_version = 30

    async def write(writer: Store) -> None:
        for version in range(last_version):
            await writer.set("/counter", str(version + 1).encode(), version)

    async with connect() as writer:
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(write, writer)
                seen = 0
                while seen < last_version:
                    await store.watch("/counter", seen)
                    version = await store.exists("/counter")
                    assert version is not None
                    assert version >= seen
                    seen = version
    assert (await store.get("/counter")).value == str(last_version).encode()


async def test_watch_children_returns_at_once_when_they_differ(store: Store) -> None:
    await store.create("/d", b"")
    await store.create("/d/x", b"")
    with anyio.fail_after(WAIT_S):
        await store.watch_children("/d", [])
        await store.watch_children("/d", ["x", "y"])
        await store.watch_children("/absent", [])


async def test_watch_children_wakes_on_add_remove_and_node_deletion(
    connect: Connect, store: Store
) -> None:
    await store.create("/d", b"")
    async with connect() as writer:
        await assert_woken_by(
            store, lambda: store.watch_children("/d", []), lambda: writer.create("/d/a", b"")
        )
        await assert_woken_by(
            store,
            lambda: store.watch_children("/d", ["a"]),
            lambda: writer.create("/d/b", b"", ephemeral=True),
        )
        await assert_woken_by(
            store, lambda: store.watch_children("/d", ["a", "b"]), lambda: writer.delete("/d/a")
        )
        await assert_woken_by(
            store,
            lambda: store.watch_children("/d", ["b"]),
            lambda: writer.commit([Delete("/d/b", ANY_VERSION), Delete("/d", ANY_VERSION)]),
        )


async def test_watch_children_ignores_data_changes(store: Store) -> None:
    await store.create("/d", b"")
    await store.create("/d/a", b"")
    await store.set("/d/a", b"changed", 0)
    await store.set("/d", b"changed", 0)
    with anyio.move_on_after(QUIET_S) as scope:
        await store.watch_children("/d", ["a"])
    assert scope.cancelled_caught


# --- sessions ---------------------------------------------------------------------------------


async def test_a_new_store_is_connected(store: Store) -> None:
    assert store.session_state is SessionState.CONNECTED


async def test_session_expiry_drops_ephemerals_and_reports_lost_then_connected(
    connect: Connect, store: Store
) -> None:
    await store.create("/mine", b"", ephemeral=True)
    await store.create("/kept", b"")
    events = store.session_events()
    old_session_id = store.session_id
    with anyio.fail_after(WAIT_S):
        await expire(store)
        seen: list[SessionState] = []
        async for state in events:
            if state is not SessionState.SUSPENDED:
                seen.append(state)
            if state is SessionState.CONNECTED:
                break
    assert seen == [SessionState.LOST, SessionState.CONNECTED]
    assert store.session_state is SessionState.CONNECTED
    assert store.session_id != old_session_id
    assert await store.exists("/mine") is None
    assert await store.exists("/kept") == 0
    async with connect() as other:
        assert await other.exists("/mine") is None
    await store.create("/mine", b"", ephemeral=True)


async def test_watch_survives_session_expiry(connect: Connect, store: Store) -> None:
    await store.create("/w", b"")
    woke = anyio.Event()

    async def wait() -> None:
        await store.watch("/w", 0)
        woke.set()

    async with connect() as writer:
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(wait)
                await settle(store)
                await expire(store)
                await settle(store)
                assert not woke.is_set()
                await writer.set("/w", b"after expiry", 0)
        assert woke.is_set()


async def test_a_watch_lost_with_the_session_wakes_for_a_node_created_again_meanwhile(
    connect: Connect, store: Store
) -> None:
    """While the session is gone the server fires no watch; the node deleted and created
    again then (a new leader's `leader` znode replacing the old leader's) is back at the
    version the watch waits on, and the watch must still return once it sees the node."""
    await store.create("/w", b"old leader")
    async with connect() as writer:

        async def replace() -> None:
            await writer.commit([Delete("/w", 0), Create("/w", b"new leader")])

        await assert_woken_by(store, lambda: store.watch("/w", 0), lambda: expire(store, replace))
    got = await store.get("/w")
    assert (got.value, got.version) == (b"new leader", 0)


async def test_a_children_watch_lost_with_the_session_wakes_for_a_child_created_again(
    connect: Connect, store: Store
) -> None:
    """The same for children: a child removed and added again while the session is gone (a
    bookie's registration) leaves the names as the watch last saw them."""
    await store.create("/d", b"")
    await store.create("/d/bookie-1", b"")
    async with connect() as writer:

        async def replace() -> None:
            await writer.commit([Delete("/d/bookie-1", 0), Create("/d/bookie-1", b"again")])

        await assert_woken_by(
            store,
            lambda: store.watch_children("/d", ["bookie-1"]),
            lambda: expire(store, replace),
        )


async def test_session_events_start_from_the_subscription(store: Store) -> None:
    before = store.session_events()
    await expire(store)
    after = store.session_events()
    await expire(store)
    with anyio.fail_after(WAIT_S):
        first_reader = [state async for state in _until_connected(before, count=2)]
        second_reader = [state async for state in _until_connected(after, count=1)]
    assert first_reader == [SessionState.LOST, SessionState.CONNECTED] * 2
    assert second_reader == [SessionState.LOST, SessionState.CONNECTED]


async def _until_connected(
    events: AsyncIterator[SessionState], count: int
) -> AsyncIterator[SessionState]:
    """The non-SUSPENDED states of `events` up to its `count`-th CONNECTED."""
    async for state in events:
        if state is SessionState.SUSPENDED:
            continue
        yield state
        if state is SessionState.CONNECTED:
            count -= 1
            if count == 0:
                return
