"""ZooKeeper taken away from a key-value store that serves writes, and brought back.

The store runs on a ZooKeeper of the test's own (`own_zookeeper`), which is
killed with `kill -9` and restarted on the same port and data directory, or
SIGSTOPped and SIGCONTed, for longer than every session's timeout (the
replicas' 1 s, the bookies' `BOOKIE_SESSION_TIMEOUT_MS`).  Meanwhile Redis
clients of the leader and of a follower keep writing, and every write is
answered at once: the write path needs the bookies, not ZooKeeper.  After it
the store recovers by itself: every process says in one line that its session
is back (`rsm.session` / `bookie.session` "connected", with `down_ms`), having
logged each of kazoo's reconnect warnings once, not once per attempt; a
bookie whose session expired says it registered again (`bookie.reregistered`)
and is listed writable, a leader serves, and every acknowledged write is read
back from every replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import list_bookies
from bookie.meta.zk import ZkMetadataStore
from tests.integration.support.rsm_processes import ZkProxy
from tests.integration.support.zookeeper_outage import (
    LogFile,
    kill_zookeeper,
    own_zookeeper,
    pause_zookeeper,
    restart_zookeeper,
)
from tests.unit.kvstore.local_store import Store, command, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BOOKIE_SESSION_TIMEOUT_MS = 2_000
OUTAGE_S = 2.5 * BOOKIE_SESSION_TIMEOUT_MS / 1000
"""How long ZooKeeper stays away: past every session's timeout (the replicas' is 1 s)."""
CLIENT_TIMEOUT_S = 10.0
"""A Redis call that takes longer than this during the outage hangs: a failure."""
ZK_ROOT = "/kv"
WRITES_PER_ROUND = 50


@pytest.fixture
def zookeeper_of_the_test(tmp_path: Path) -> Iterator[LocalZooKeeper]:
    with own_zookeeper(tmp_path / "zookeeper") as server:
        yield server


@pytest.fixture
def store(zookeeper_of_the_test: LocalZooKeeper, tmp_path: Path) -> Iterator[Store]:
    with running_store(
        zookeeper_of_the_test,
        ZK_ROOT,
        tmp_path / "store",
        bookie_config={"zk_session_timeout_ms": BOOKIE_SESSION_TIMEOUT_MS},
    ) as running:
        yield running


class Writes:
    """Every SET a replica acknowledged, by key."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.acknowledged: dict[str, str] = {}
        self._count = 0

    def through(self, name: str, count: int = WRITES_PER_ROUND) -> None:
        """`count` SETs through replica `name`; each must be acknowledged in time."""
        with self._store.client(name, socket_timeout=CLIENT_TIMEOUT_S) as client:
            for _ in range(count):
                self._count += 1
                key, value = f"key:{self._count}", f"{name}:{self._count}"
                assert client.set(key, value), f"{name} refused SET {key}"
                self.acknowledged[key] = value

    def check_everywhere(self) -> None:
        """Every acknowledged write is on every replica, once they have all applied the
        same log."""
        store = self._store
        wait_for(lambda: len({store.applied(name) for name in store.names}) == 1)
        keys = list(self.acknowledged)
        for name in store.names:
            with store.client(name) as client:
                command(client, "READONLY")
                values = client.mget(keys)
            lost = [
                key
                for key, value in zip(keys, values, strict=True)
                if value != self.acknowledged[key].encode()
            ]
            assert not lost, f"{len(lost)} acknowledged writes missing on {name}: {lost[:5]}"


def replica_logs(store: Store) -> list[LogFile]:
    return [LogFile(replica.log_file) for replica in store.cluster.replicas]


def bookie_logs(store: Store) -> list[LogFile]:
    return [LogFile(bookie.log_file) for bookie in store.cluster.bookies.bookies]


def session_logs(store: Store) -> list[tuple[LogFile, str]]:
    """Each process's log with the name of its session events."""
    logs = [(log, "rsm.session") for log in replica_logs(store)]
    return logs + [(log, "bookie.session") for log in bookie_logs(store)]


def kazoo_warnings(events: list[dict[str, Any]]) -> list[str]:
    """The warnings kazoo logged among `events`: each kind once per outage, not one per
    reconnect attempt."""
    return [
        event["event"]
        for event in events
        if event.get("logger") == "kazoo.client" and event["level"] == "warning"
    ]


def follower_reads(store: Store, follower: str, key: str, value: str) -> None:
    with store.client(follower, socket_timeout=CLIENT_TIMEOUT_S) as client:
        command(client, "READONLY")
        assert client.get(key) == value.encode()


def writable_bookies(zookeeper: LocalZooKeeper) -> set[str]:
    async def listed() -> set[str]:
        async with ZkMetadataStore.connect(zookeeper.connect_string) as metadata:
            bookies = await list_bookies(metadata, root=f"{ZK_ROOT}/ledgers")
        return set(bookies.writable)

    return anyio.run(listed)


def write_for(writes: Writes, names: list[str], seconds: float) -> None:
    """Keep writing through `names` in turn for `seconds` (the length of the outage)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for name in names:
            writes.through(name, count=10)


def test_zookeeper_killed_and_restarted_costs_the_store_nothing(
    store: Store, zookeeper_of_the_test: LocalZooKeeper
) -> None:
    zookeeper = zookeeper_of_the_test
    leader = store.leader()
    follower = next(name for name in store.names if name != leader)
    writes = Writes(store)
    writes.through(leader)
    logs = session_logs(store)
    marks = [log.count() for log, _event in logs]

    kill_zookeeper(zookeeper)
    write_for(writes, [leader, follower], OUTAGE_S)
    follower_reads(store, follower, *next(iter(writes.acknowledged.items())))
    restart_zookeeper(zookeeper)

    for (log, event), mark in zip(logs, marks, strict=True):
        back = log.wait_event(event, since=mark, state="connected")
        assert back["down_ms"] >= OUTAGE_S * 1000, f"{log.path}: {back}"
        warnings = kazoo_warnings(log.events()[mark : log.events().index(back)])
        assert len(warnings) == len(set(warnings)), f"{log.path}: kazoo repeats {warnings}"
    assert len(writable_bookies(zookeeper)) == len(store.cluster.bookies.bookies)
    for name in store.names:
        writes.through(name)
    writes.check_everywhere()


def test_zookeeper_stopped_and_continued_costs_the_store_nothing(
    store: Store, zookeeper_of_the_test: LocalZooKeeper
) -> None:
    """Whether the sessions outlive the pause is a race at SIGCONT (ZooKeeper's expiry
    against the clients' reconnections): either way the store goes on by itself."""
    leader = store.leader()
    follower = next(name for name in store.names if name != leader)
    writes = Writes(store)
    writes.through(leader)
    logs = replica_logs(store)
    marks = [log.count() for log in logs]

    with pause_zookeeper(zookeeper_of_the_test):
        write_for(writes, [leader, follower], OUTAGE_S)
        follower_reads(store, follower, *next(iter(writes.acknowledged.items())))

    for log, mark in zip(logs, marks, strict=True):
        log.wait_event("rsm.session", since=mark, state="connected")
    registered = {bookie.bookie_id for bookie in store.cluster.bookies.bookies}
    wait_for(lambda: writable_bookies(zookeeper_of_the_test) == registered)
    store.leader()
    for name in store.names:
        writes.through(name)
    writes.check_everywhere()


def test_every_session_expired_the_store_recovers_by_itself(
    tmp_path: Path, zookeeper_of_the_test: LocalZooKeeper
) -> None:
    """Every process reaches ZooKeeper through a proxy that is cut until ZooKeeper has
    expired every session (the bookies' registrations are gone), then healed."""
    zookeeper = zookeeper_of_the_test
    with anyio.from_thread.start_blocking_portal() as portal:
        proxy = ZkProxy(zookeeper)
        with portal.wrap_async_context_manager(proxy.running()):
            through_proxy = LocalZooKeeper(tmp_path / "proxy", port=proxy.port)
            with running_store(
                through_proxy,
                ZK_ROOT,
                tmp_path / "store",
                bookie_config={"zk_session_timeout_ms": BOOKIE_SESSION_TIMEOUT_MS},
            ) as store:
                leader = store.leader()
                follower = next(name for name in store.names if name != leader)
                writes = Writes(store)
                writes.through(leader)
                logs = session_logs(store)
                marks = [log.count() for log, _event in logs]

                portal.call(proxy.cut)

                def every_session_expired() -> bool:
                    writes.through(leader, count=10)
                    writes.through(follower, count=10)
                    return not writable_bookies(zookeeper)

                wait_for(every_session_expired)
                portal.call(proxy.heal)

                for (log, event), mark in zip(logs, marks, strict=True):
                    log.wait_event(event, since=mark, state="lost")
                    log.wait_event(event, since=mark, state="connected")
                    if event == "bookie.session":
                        log.wait_event("bookie.reregistered", since=mark)
                registered = {bookie.bookie_id for bookie in store.cluster.bookies.bookies}
                wait_for(lambda: writable_bookies(zookeeper) == registered)
                store.leader()
                for name in store.names:
                    writes.through(name)
                writes.check_everywhere()
