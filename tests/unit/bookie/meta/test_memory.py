"""The in-memory store's own behaviour: the synchronous core a simulation drives, and the
test hooks (suspend, resume, expire).  The shared MetadataStore contract is in
tests/conformance/test_metadata_store.py."""

from __future__ import annotations

import anyio
import pytest

from bookie.errors import MetadataUnavailable, NoNode
from bookie.meta.api import Create, SessionState
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore, MemorySession


def _recorder(session: MemorySession) -> list[SessionState]:
    seen: list[SessionState] = []
    session.add_session_listener(seen.append)
    return seen


# --- synchronous core -------------------------------------------------------------------------


def test_clients_of_one_server_share_the_tree() -> None:
    server = MemoryMetadataServer()
    first, second = server.session(), server.session()
    first.create("/a", b"x")
    assert second.get("/a").value == b"x"
    assert first.session_id != second.session_id


def test_session_ids_and_sequence_numbers_are_deterministic() -> None:
    def run() -> list[object]:
        server = MemoryMetadataServer()
        session = server.session()
        session.create("/q")
        created = [session.create("/q/n-", sequential=True) for _ in range(3)]
        session.expire_session()
        return [*created, session.session_id]

    assert run() == run() == ["/q/n-0000000000", "/q/n-0000000001", "/q/n-0000000002", 2]


def test_sequence_numbers_count_every_child_change_like_zookeeper() -> None:
    session = MemoryMetadataServer().session()
    session.create("/q")
    session.create("/q/plain")
    session.delete("/q/plain")
    assert session.create("/q/n-", sequential=True) == "/q/n-0000000002"


def test_watch_fires_once_after_the_operation_completes() -> None:
    session = MemoryMetadataServer().session()
    session.create("/a")
    fired: list[int | None] = []
    session.add_watch("/a", lambda: fired.append(session.exists("/a")))
    session.set("/a", b"1", 0)
    session.set("/a", b"2", 1)
    assert fired == [1], "one-shot, and it sees the completed change"


def test_callbacks_may_call_the_store_and_run_in_order() -> None:
    session = MemoryMetadataServer().session()
    session.create("/a")
    session.create("/b")
    order: list[str] = []

    def on_a() -> None:
        order.append("a")
        session.set("/b", b"from a", 0)
        order.append("a done")

    session.add_watch("/a", on_a)
    session.add_watch("/b", lambda: order.append("b"))
    session.add_children_watch("/", lambda: order.append("root children"))
    session.set("/a", b"1", 0)
    assert order == ["a", "a done", "b"]
    session.create("/c")
    assert order[-1] == "root children"


def test_cancelled_watch_never_fires() -> None:
    session = MemoryMetadataServer().session()
    fired: list[str] = []
    handle = session.add_watch("/a", lambda: fired.append("a"))
    handle.cancel()
    session.create("/a")
    assert fired == []


def test_children_watch_fires_on_child_changes_and_own_deletion_only() -> None:
    session = MemoryMetadataServer().session()
    session.create("/d")
    fired: list[str] = []
    session.add_children_watch("/d", lambda: fired.append("child"))
    session.set("/d", b"data", 0)
    assert fired == []
    session.create("/d/x")
    assert fired == ["child"]
    session.add_children_watch("/d", lambda: fired.append("deleted"))
    session.delete("/d/x")
    session.add_children_watch("/d", lambda: fired.append("gone"))
    session.delete("/d")
    assert fired == ["child", "deleted", "gone"]


def test_suspended_client_fails_fast_and_hears_changes_on_resume() -> None:
    server = MemoryMetadataServer()
    client, other = server.session(), server.session()
    client.create("/e", ephemeral=True)
    events = _recorder(client)
    fired: list[str] = []
    client.add_watch("/w", lambda: fired.append("w"))
    client.suspend()
    with pytest.raises(MetadataUnavailable):
        client.get("/e")
    with pytest.raises(MetadataUnavailable):
        client.create("/x")
    assert other.exists("/x") is None
    other.create("/w")
    assert fired == [], "held while suspended"
    assert other.exists("/e") == 0, "the session and its ephemerals live on"
    client.resume()
    assert fired == ["w"]
    assert events == [SessionState.SUSPENDED, SessionState.CONNECTED]
    assert client.get("/e").version == 0


def test_expiry_while_suspended_is_heard_on_resume() -> None:
    server = MemoryMetadataServer()
    client, other = server.session(), server.session()
    client.create("/e", ephemeral=True)
    old_session_id = client.session_id
    events = _recorder(client)
    client.suspend()
    client.expire_session()
    assert other.exists("/e") is None, "the server dropped the ephemerals at once"
    assert events == [SessionState.SUSPENDED]
    client.resume()
    assert events == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]
    assert client.session_id != old_session_id


def test_expiry_of_a_connected_client() -> None:
    server = MemoryMetadataServer()
    client = server.session()
    events = _recorder(client)
    client.create("/e", ephemeral=True)
    server.expire(client.session_id)
    assert events == [SessionState.LOST, SessionState.CONNECTED]
    assert client.exists("/e") is None
    client.create("/e", ephemeral=True)
    assert client.exists("/e") == 0


def test_close_drops_ephemerals_watches_and_listeners() -> None:
    server = MemoryMetadataServer()
    client, other = server.session(), server.session()
    client.create("/e", ephemeral=True)
    fired: list[str] = []
    client.add_watch("/w", lambda: fired.append("w"))
    client.close()
    other.create("/w")
    assert fired == []
    assert other.exists("/e") is None


def test_failed_commit_leaves_no_trace_and_fires_nothing() -> None:
    session = MemoryMetadataServer().session()
    fired: list[str] = []
    session.add_children_watch("/", lambda: fired.append("root"))
    with pytest.raises(NoNode):
        session.commit([Create("/x", b""), Create("/x/y", b""), Create("/missing/z", b"")])
    assert session.children("/") == []
    assert fired == []
    session.create("/x")
    assert fired == ["root"]


# --- async facade hooks -----------------------------------------------------------------------


@pytest.mark.anyio
async def test_store_reports_suspension_and_resumption() -> None:
    async with MemoryMetadataStore() as store:
        events = store.session_events()
        store.suspend()
        assert store.session_state is SessionState.SUSPENDED
        with pytest.raises(MetadataUnavailable):
            await store.exists("/")
        store.resume()
        with anyio.fail_after(1):
            assert [await anext(events), await anext(events)] == [
                SessionState.SUSPENDED,
                SessionState.CONNECTED,
            ]


@pytest.mark.anyio
async def test_watch_waits_through_a_suspension() -> None:
    server = MemoryMetadataServer()
    async with server.client() as store, server.client() as writer:
        await store.create("/w")
        woke = anyio.Event()

        async def wait() -> None:
            await store.watch("/w", 0)
            woke.set()

        with anyio.fail_after(1):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(wait)
                await anyio.wait_all_tasks_blocked()
                store.suspend()
                await writer.set("/w", b"1", 0)
                await anyio.wait_all_tasks_blocked()
                assert not woke.is_set()
                store.resume()
        assert woke.is_set()


@pytest.mark.anyio
async def test_held_session_events_are_heard_in_order_once_released() -> None:
    async with MemoryMetadataStore() as store:
        events = store.session_events()
        heard: list[SessionState] = []

        async def listen() -> None:
            async for state in events:
                heard.append(state)

        with anyio.fail_after(1):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(listen)
                store.hold_session_events()
                store.suspend()
                store.expire_session()
                store.resume()
                assert store.session_state is SessionState.CONNECTED
                await anyio.wait_all_tasks_blocked()
                assert heard == [], "nothing is heard while held"
                store.release_session_events()
                await anyio.wait_all_tasks_blocked()
                task_group.cancel_scope.cancel()
        assert heard == [SessionState.SUSPENDED, SessionState.LOST, SessionState.CONNECTED]


@pytest.mark.anyio
async def test_transitions_held_when_the_store_closes_are_dropped() -> None:
    store = MemoryMetadataStore()
    events = store.session_events()
    store.hold_session_events()
    store.suspend()
    await store.aclose()
    store.release_session_events()
    assert [state async for state in events] == []


@pytest.mark.anyio
async def test_closing_the_store_ends_session_event_readers() -> None:
    store = MemoryMetadataStore()
    events = store.session_events()
    await store.aclose()
    assert [state async for state in events] == []
