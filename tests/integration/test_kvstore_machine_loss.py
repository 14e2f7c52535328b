"""One machine of three lost (its bookie and its replica, kill -9) under load: the store
keeps serving on a degraded segment, and returns to full replication when the bookie does.

The store is `kvstore up`'s layout: three bookies, three replicas, E = Qw = 3,
Qa = 2.  Concurrent redis-py clients on every replica run GET, SET, INCR and
DEL on a few shared keys (the linearizability test's workload) while a bookie
and a replica are killed.  Each test then checks, in order:

* writes resume: writes invoked after the kills are acknowledged;
* `kvstore status` shows the open segment under-replicated: degraded (E=2 Qw=2
  Qa=2, configured E=3 Qw=3) when it was created after the dead bookie's
  registration expired, or a full-size ledger whose writer found no
  replacement for the dead bookie;
* once the bookie is back, the leader rolls over to a full-size ledger
  (status no longer degraded) and the clients keep being served;
* every entry of that new segment is on E bookies, each copy read back and
  its digest checked (`bookie.client.copies.CopyReader`);
* the whole history is linearizable.

With two bookies of three lost no segment can acknowledge anything (Qa = 2):
writes fail with an error, never hang past the client's timeout, and come
back by themselves once a bookie returns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis
import redis.exceptions
from kvstore.runtime.node import DEFAULT_APP

from bookie.client.copies import CopyReader
from bookie.client.ledger_client import LedgerClient
from bookie.core.copies import CopyState
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.host import split_zk
from rsm.runtime.log import LogStore
from rsm.testing import check_per_key, kv_key
from rsm.testing.history import Outcome
from rsm.testing.models import KvModel
from tests.integration.support.kv_history import LockedRecorder, client_loop
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

CLIENTS_PER_REPLICA = 2
OPERATIONS_PER_PHASE = 100
WRITES = frozenset({"set", "incr", "del"})


@pytest.fixture
def store(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: os.PathLike[str]) -> Iterator[Store]:
    with running_store(zookeeper, zk_root, tmp_path) as running:  # type: ignore[arg-type]
        yield running


class Load:
    """The linearizability test's clients on every running replica, recording one history."""

    def __init__(self, store: Store) -> None:
        self.log = LockedRecorder()
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=client_loop, args=(store, name, number, self.stop, self.log))
            for name in store.running()
            for number in range(CLIENTS_PER_REPLICA)
        ]

    def writes_acknowledged_after(self, since_s: float) -> int:
        with self.log.lock:
            history = self.log.recorder.history()
        return sum(
            1
            for op in history
            if op.kind in WRITES and op.outcome is Outcome.OK and op.invoke_time > since_s
        )

    def wait_writes_after(self, since_s: float, count: int = OPERATIONS_PER_PHASE) -> None:
        wait_for(lambda: self.writes_acknowledged_after(since_s) >= count)

    def check_linearizable(self) -> None:
        result = check_per_key(self.log.recorder.history(), KvModel(), kv_key)
        assert result.linearizable, result.explain()


@contextmanager
def load_on(store: Store) -> Iterator[Load]:
    load = Load(store)
    for thread in load.threads:
        thread.start()
    try:
        yield load
    finally:
        load.stop.set()
        for thread in load.threads:
            thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in load.threads)


def status(store: Store) -> dict[str, Any]:
    """`kvstore status --json`, as a user runs it."""
    completed = subprocess.run(
        [sys.executable, "-m", "kvstore.tools.cli", "status", "--zk", store.cluster.zk, "--json"],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=True,
    )
    report: dict[str, Any] = json.loads(completed.stdout)
    return report


def replication(store: Store) -> dict[str, Any] | None:
    replication: dict[str, Any] | None = status(store)["replication"]
    return replication


def under_replicated(store: Store) -> bool:
    found = replication(store)
    return found is not None and not found["full"]


def fully_replicated(store: Store) -> bool:
    found = replication(store)
    return found is not None and found["full"]


def kill_bookie(store: Store, name: str) -> None:
    store.cluster.bookies.kill(name)


def restart_bookie(store: Store, name: str) -> None:
    store.portal.call(store.cluster.bookies.restart, name)


async def open_segment_copies(store: Store) -> tuple[int, list[list[CopyState]]]:
    """The open segment's ledger: its ensemble size and, for every entry up to its LAC, the
    state of each copy on its write set."""
    hosts, chroot = split_zk(store.cluster.zk)
    async with (
        ZkMetadataStore.connect(hosts, root=chroot) as metadata_store,
        LedgerClient.open(metadata_store, root=store.cluster.ledger_root) as ledgers,
    ):
        log, _version = await LogStore(metadata_store, AppLayout.of(DEFAULT_APP)).read()
        segment = log.open_segment
        assert segment is not None
        password = ReplicaConfig().ledger_password
        handle = await ledgers.open_ledger(segment.ledger_id, password, recovery=False)
        metadata = handle.metadata
        async with CopyReader.open(metadata, password, ledgers.bookie_address) as reader:
            copies = [
                [copy.state for copy in await reader.read(entry_id)]
                for entry_id in range(handle.last_add_confirmed + 1)
            ]
        return metadata.ensemble_size, copies


def check_fully_replicated(store: Store) -> None:
    ensemble_size, copies = store.portal.call(open_segment_copies, store)
    assert ensemble_size == 3
    assert copies, "the new segment holds entries"
    for entry_id, states in enumerate(copies):
        assert states == [CopyState.OK] * 3, f"entry {entry_id}: {states}"


def machine_loss(
    store: Store, kill: Callable[[Load], None], victim_bookie: str, *, degraded: bool = False
) -> None:
    """Load, `kill`, writes resume under-replicated (on a `degraded` segment, or on one whose
    writer deferred replacing the dead bookie), the bookie returns, full replication again."""
    with load_on(store) as load:
        load.wait_writes_after(0.0)
        kill(load)
        killed_s = time.monotonic()
        load.wait_writes_after(killed_s)
        wait_for(lambda: under_replicated(store))
        report = status(store)
        found = report["replication"]
        assert found["configured_ensemble_size"] == 3
        assert found["degraded"] or found["ensemble_change_deferred"]
        if degraded:
            assert found["degraded"]
            assert (found["ensemble_size"], found["write_quorum"], found["ack_quorum"]) == (2, 2, 2)
        restart_bookie(store, victim_bookie)
        wait_for(lambda: fully_replicated(store))
        restored_s = time.monotonic()
        load.wait_writes_after(restored_s)
    check_fully_replicated(store)
    load.check_linearizable()


def test_a_bookie_and_the_leader_killed_together(store: Store) -> None:
    leader = store.leader()

    def kill(_load: Load) -> None:
        kill_bookie(store, "bookie-1")
        store.kill(leader)

    machine_loss(store, kill, "bookie-1")
    assert store.leader() != leader


def test_a_bookie_killed_first_and_the_leader_later(store: Store) -> None:
    """The leader is killed once the dead bookie's registration has expired, so its
    successor finds two writable bookies: its segment is a degraded E=2 Qw=2 ledger."""
    leader = store.leader()

    def kill(load: Load) -> None:
        kill_bookie(store, "bookie-2")
        load.wait_writes_after(time.monotonic(), count=50)
        bookie_id = store.cluster.bookies.bookie("bookie-2").bookie_id
        wait_for(lambda: status(store)["bookies"]["down"] == [bookie_id])
        store.kill(leader)

    machine_loss(store, kill, "bookie-2", degraded=True)


def test_a_bookie_and_a_follower_killed_together(store: Store) -> None:
    leader = store.leader()
    follower = next(name for name in store.running() if name != leader)

    def kill(_load: Load) -> None:
        kill_bookie(store, "bookie-3")
        store.kill(follower)

    machine_loss(store, kill, "bookie-3")
    assert store.leader() == leader, "losing a follower and a bookie moves no leadership"


def test_two_bookies_lost_refuse_writes_and_lose_nothing(store: Store) -> None:
    leader = store.leader()
    client = store.client(leader, socket_timeout=WAIT_S)
    for number in range(50):
        assert client.set(f"before:{number}", str(number))
    kill_bookie(store, "bookie-1")
    kill_bookie(store, "bookie-2")

    def refused() -> bool:
        started_s = time.monotonic()
        try:
            client.set("during", "x")
        except (redis.exceptions.ResponseError, redis.exceptions.ConnectionError):
            assert time.monotonic() - started_s < WAIT_S, "refused, not hung"
            return True
        return False

    wait_for(refused)
    restart_bookie(store, "bookie-1")
    survivor = store.leader()
    with store.client(survivor, socket_timeout=WAIT_S) as again:
        wait_for(lambda: _set(again, "after", "y"))
        assert again.mget([f"before:{n}" for n in range(50)]) == [
            str(n).encode() for n in range(50)
        ]
    client.close()


def _set(client: redis.Redis, key: str, value: str) -> bool:
    try:
        return bool(client.set(key, value))
    except redis.exceptions.ResponseError:
        return False
