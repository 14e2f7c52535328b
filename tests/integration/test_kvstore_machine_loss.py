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

With a fourth bookie to spare, a bookie lost for good is a non-event: the
writer replaces it in the open segment, the bookies' autorecovery copies its
fragments of every other ledger (closed ones written beside the store, and the
open segment's sealed first part) to the spare, every copy is read back with
its digest checked, and no write of the load fails meanwhile.
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
from bookie.core.metadata import LedgerMetadata
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
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
AUTORECOVERY = {
    "autorecovery_grace_ms": 1_000,
    "autorecovery_poll_interval_ms": 100,
    "zk_session_timeout_ms": 3_000,
}
"""A second's grace before a bookie gone from ZooKeeper counts as lost (default 30 s), and a
killed bookie gone from ZooKeeper 3 s after its last heartbeat (default 10 s)."""
CLOSED_LEDGERS = 3
CLOSED_ENTRIES = 40


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

    def failed_writes(self) -> list[str]:
        with self.log.lock:
            history = self.log.recorder.history()
        return [
            f"{op.kind} {op.arguments}: {op.outcome.value}"
            for op in history
            if op.kind in WRITES and op.outcome is not Outcome.OK
        ]

    def check_linearizable(self) -> None:
        result = check_per_key(self.log.recorder.history(), KvModel(), kv_key)
        assert result.linearizable, result.explain()


@pytest.fixture(params=[False, True], ids=["plain", "tls"])
def store_with_spare(
    request: pytest.FixtureRequest,
    zookeeper: LocalZooKeeper,
    zk_root: str,
    tmp_path: os.PathLike[str],
) -> Iterator[Store]:
    """`store` with four bookies for three-bookie ensembles, and a short autorecovery grace;
    plain, and on mutual TLS as `kvstore up --tls` runs it (the bookies' autorecovery then
    copies over TLS too)."""
    with running_store(
        zookeeper,
        zk_root,
        tmp_path,  # type: ignore[arg-type]
        bookies=4,
        bookie_config=AUTORECOVERY,
        tls=request.param,
    ) as running:
        yield running


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


def test_two_bookies_lost_refuse_writes_and_lose_nothing(impatient_store: Store) -> None:
    store = impatient_store
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


@contextmanager
def ledgers_of(store: Store) -> Iterator[tuple[ZkMetadataStore, LedgerClient]]:
    hosts, chroot = split_zk(store.cluster.zk)
    with (
        store.portal.wrap_async_context_manager(
            ZkMetadataStore.connect(hosts, root=chroot)
        ) as metadata_store,
        store.portal.wrap_async_context_manager(
            LedgerClient.open(metadata_store, root=store.cluster.ledger_root)
        ) as ledgers,
    ):
        yield metadata_store, ledgers


def closed_entry(number: int) -> bytes:
    return f"closed entry {number}".encode() * 8


async def write_closed_ledgers(ledgers: LedgerClient) -> list[int]:
    """Ledgers beside the store's, under its password so that autorecovery may copy them."""
    ledger_ids = []
    for _ in range(CLOSED_LEDGERS):
        password = ReplicaConfig().ledger_password
        async with await ledgers.create_ledger(3, 3, 2, password=password) as ledger:
            for number in range(CLOSED_ENTRIES):
                await ledger.wait_for_capacity()
                ledger.append_nowait(closed_entry(number))
            ledger_ids.append(ledger.ledger_id)
    return ledger_ids


async def all_metadata(metadata_store: ZkMetadataStore, root: str) -> dict[int, LedgerMetadata]:
    manager = LedgerManager(metadata_store, root)
    return {
        ledger_id: (await manager.read(ledger_id))[0] for ledger_id in await manager.list_ledgers()
    }


async def healed(metadata_store: ZkMetadataStore, root: str, lost: str) -> bool:
    """No ledger marked under-replicated, and none whose ensembles still name `lost`."""
    if await UnderReplication(metadata_store, root).list_marks():
        return False
    return not any(
        lost in ensemble
        for metadata in (await all_metadata(metadata_store, root)).values()
        for _, ensemble in metadata.ensembles
    )


async def check_every_copy(ledgers: LedgerClient, ledger_ids: list[int], closed: list[int]) -> int:
    """Read every entry of `ledger_ids` (a closed one to its end, an open one to its LAC) from
    each bookie of its write set, digests checked; `closed` ones' payloads compared too."""
    password = ReplicaConfig().ledger_password
    checked = 0
    for ledger_id in ledger_ids:
        handle = await ledgers.open_ledger(ledger_id, password, recovery=False)
        metadata = handle.metadata
        last = metadata.last_entry_id if metadata.is_closed else handle.last_add_confirmed
        async with CopyReader.open(metadata, password, ledgers.bookie_address) as reader:
            for entry_id in range(last + 1):
                copies = await reader.read(entry_id)
                assert len(copies) == metadata.write_quorum
                for copy in copies:
                    assert copy.state is CopyState.OK, (ledger_id, entry_id, copy)
                    if ledger_id in closed:
                        assert copy.payload == closed_entry(entry_id)
                checked += 1
    return checked


def test_a_bookie_lost_for_good_is_re_replicated_while_the_store_takes_writes(
    store_with_spare: Store,
) -> None:
    store = store_with_spare
    root = store.cluster.ledger_root
    with ledgers_of(store) as (metadata_store, ledgers):
        closed = store.portal.call(write_closed_ledgers, ledgers)
        with load_on(store) as load:
            load.wait_writes_after(0.0)
            before = store.portal.call(all_metadata, metadata_store, root)
            log, _version = store.portal.call(
                LogStore(metadata_store, AppLayout.of(DEFAULT_APP)).read
            )
            open_segment = log.open_segment
            assert open_segment is not None
            # The victim holds the store's open segment and as many closed ledgers as any.
            in_segment = before[open_segment.ledger_id].ensembles[-1][1]
            lost = max(
                in_segment,
                key=lambda bookie_id: sum(
                    bookie_id in before[ledger_id].ensembles[0][1] for ledger_id in closed
                ),
            )
            held = [
                ledger_id
                for ledger_id, metadata in before.items()
                if any(lost in ensemble for _, ensemble in metadata.ensembles)
            ]
            assert open_segment.ledger_id in held
            assert set(held) & set(closed)
            victim = next(b.name for b in store.cluster.bookies.bookies if b.bookie_id == lost)
            kill_bookie(store, victim)
            killed_s = time.monotonic()
            wait_for(lambda: store.portal.call(healed, metadata_store, root, lost))
            healed_s = time.monotonic()
            load.wait_writes_after(killed_s)
            load.wait_writes_after(healed_s)
        assert load.failed_writes() == [], "no write failed while the bookie was lost"
        after = store.portal.call(all_metadata, metadata_store, root)
        for ledger_id in held:
            assert all(lost not in ensemble for _, ensemble in after[ledger_id].ensembles)
        assert store.portal.call(check_every_copy, ledgers, held, closed) > CLOSED_ENTRIES
    load.check_linearizable()


@pytest.fixture
def store_with_autorecovery(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: os.PathLike[str]
) -> Iterator[Store]:
    """`store` (three bookies: none to spare) with a short autorecovery grace."""
    with running_store(
        zookeeper,
        zk_root,
        tmp_path,  # type: ignore[arg-type]
        bookie_config=AUTORECOVERY,
    ) as running:
        yield running


async def no_marks(metadata_store: ZkMetadataStore, root: str) -> bool:
    return not await UnderReplication(metadata_store, root).list_marks()


def test_with_no_spare_a_returning_bookie_gets_back_what_was_written_without_it(
    store_with_autorecovery: Store,
) -> None:
    """A bookie killed under load: with no bookie free the writer goes on without it, and
    autorecovery marks its ledgers.  Once it is back and the leader has rolled over, the
    entries it missed are copied back to it (no replacement exists): no mark is left, no
    ensemble changed, and every entry of every ledger is on its whole write set."""
    store = store_with_autorecovery
    root = store.cluster.ledger_root
    with ledgers_of(store) as (metadata_store, ledgers):
        with load_on(store) as load:
            load.wait_writes_after(0.0)
            before = store.portal.call(all_metadata, metadata_store, root)
            kill_bookie(store, "bookie-3")
            killed_s = time.monotonic()
            load.wait_writes_after(killed_s)
            wait_for(lambda: not store.portal.call(no_marks, metadata_store, root))
            restart_bookie(store, "bookie-3")
            wait_for(lambda: fully_replicated(store))
            load.wait_writes_after(time.monotonic())
        load.check_linearizable()
        wait_for(lambda: store.portal.call(no_marks, metadata_store, root))
        after = store.portal.call(all_metadata, metadata_store, root)
        for ledger_id, metadata in before.items():
            assert after[ledger_id].ensembles[0] == metadata.ensembles[0], "nothing moved"
        assert store.portal.call(check_every_copy, ledgers, sorted(after), []) > 0


async def marked(metadata_store: ZkMetadataStore, root: str) -> list[int]:
    return await UnderReplication(metadata_store, root).list_marks()


def away_and_back(store: Store, metadata_store: ZkMetadataStore, name: str) -> int:
    """Kill bookie `name` while the store is idle, wait for autorecovery to mark the open
    segment's ledger, restart the bookie and wait for no mark to be left: that ledger."""
    root = store.cluster.ledger_root
    log, _version = store.portal.call(LogStore(metadata_store, AppLayout.of(DEFAULT_APP)).read)
    assert log.open_segment is not None
    ledger_id = log.open_segment.ledger_id
    kill_bookie(store, name)
    wait_for(lambda: ledger_id in store.portal.call(marked, metadata_store, root))
    restart_bookie(store, name)
    wait_for(lambda: store.portal.call(no_marks, metadata_store, root))
    return ledger_id


def test_a_bookie_away_while_nothing_was_written_leaves_no_mark_once_back(
    store_with_autorecovery: Store,
) -> None:
    """A bookie killed while the store is idle: autorecovery marks its ledgers, the open
    segment's too, although the writer never failed it.  Once it is back, the leader rolls
    over (the segment it was away from is closed) and autorecovery finds the bookie whole:
    no mark is left, no ensemble changed, and every value written is there.  The same
    again before the new segment's first entry: the leader rolls over from the empty
    segment too, so the mark does not wait for the next write."""
    store = store_with_autorecovery
    root = store.cluster.ledger_root
    leader = store.client(store.leader())
    values = {f"idle-{number}": f"value-{number}" for number in range(20)}
    for key, value in values.items():
        assert leader.set(key, value)
    with ledgers_of(store) as (metadata_store, ledgers):
        before = store.portal.call(all_metadata, metadata_store, root)
        written = away_and_back(store, metadata_store, "bookie-3")
        empty = away_and_back(store, metadata_store, "bookie-3")
        after = store.portal.call(all_metadata, metadata_store, root)
        assert after[written].is_closed, "the leader rolled over"
        assert after[written].last_entry_id >= 0
        assert after[empty].is_closed, "the leader rolled over from the empty segment"
        assert after[empty].last_entry_id == -1
        for ledger_id, metadata in before.items():
            assert after[ledger_id].ensembles == metadata.ensembles, "nothing moved"
        assert store.portal.call(check_every_copy, ledgers, sorted(after), []) > 0
    assert leader.set("after", "value")
    values["after"] = "value"
    assert {key: leader.get(key) for key in values} == {
        key: value.encode() for key, value in values.items()
    }
