"""Bookies that stall (SIGSTOP: sockets open, nothing answered) under a write load of redis
clients, then resume: the key-value store of `kvstore up` (three bookies, three replicas,
E = Qw = 3, Qa = 2).

* One bookie stalled past the ledger client's add timeout, but not past its ZooKeeper
  session timeout: the leader's writer gives up on it and, with no bookie to spare, goes
  on with the two left (under-replicated, every write still on Qa = 2 disks; no client
  sees an error).  The bookie never leaves the registry, so it never registers anew;
  once it answers again the leader rolls over to a full-size ledger by itself, and every
  entry of that segment is on the three bookies.  (Before the write handle probed its
  failed bookies, the store stayed under-replicated until the segment aged out, an hour
  by default.)
* Two bookies stalled: nothing can be acknowledged; a write through the leader gets an
  error (TRYAGAIN or TIMEOUT, once the replicas' command timeout ran out: 8 s here)
  instead of hanging, writes resume by themselves once the bookies do, and every write
  acknowledged before the stall is still there.

The replicas run with that shorter command timeout (30 s by default); the leader's
writer gives up on a stalled bookie after its add timeout (5 s), well within it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

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
from tests.integration.conftest import COMMAND_TIMEOUT_MS
from tests.integration.support.stalls import stopped
from tests.integration.test_kvstore_machine_loss import (
    check_fully_replicated,
    fully_replicated,
    load_on,
    replication,
)
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

BOOKIE_SESSION_TIMEOUT_MS = 60_000
"""Far longer than any stall here: a stalled bookie keeps its registration throughout."""


@pytest.fixture
def store(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: os.PathLike[str]) -> Iterator[Store]:
    with running_store(
        zookeeper,
        zk_root,
        tmp_path,  # type: ignore[arg-type]
        bookie_config={"zk_session_timeout_ms": BOOKIE_SESSION_TIMEOUT_MS},
        command_timeout_ms=COMMAND_TIMEOUT_MS,
    ) as running:
        yield running


def bookie_pid(store: Store, name: str) -> int:
    process = store.cluster.bookies.bookie(name).process
    assert process is not None
    return process.pid


def writer_gave_up_on_a_bookie(store: Store) -> bool:
    found = replication(store)
    return found is not None and found["ensemble_change_deferred"]


def registrations(store: Store, name: str) -> int:
    """How many times bookie `name` registered (`bookie.ready` lines in its log)."""
    log_file = store.cluster.bookies.bookie(name).directory / "bookie.log"
    return log_file.read_text().count('"event": "bookie.ready"')


async def closed_segments_short_of_copies(store: Store) -> list[str]:
    """Each entry of a closed segment's ledger that is not on all of its write set, as
    `ledger:entry [states]`."""
    password = ReplicaConfig().ledger_password
    short: list[str] = []
    hosts, chroot = split_zk(store.cluster.zk)
    async with (
        ZkMetadataStore.connect(hosts, root=chroot) as metadata_store,
        LedgerClient.open(metadata_store, root=store.cluster.ledger_root) as ledgers,
    ):
        log, _version = await LogStore(metadata_store, AppLayout.of(DEFAULT_APP)).read()
        for segment in log.segments:
            if segment.is_open:
                continue
            handle = await ledgers.open_ledger(segment.ledger_id, password, recovery=False)
            async with CopyReader.open(handle.metadata, password, ledgers.bookie_address) as reader:
                for entry_id in range(handle.last_add_confirmed + 1):
                    states = [copy.state for copy in await reader.read(entry_id)]
                    if states != [CopyState.OK] * len(states):
                        short.append(f"{segment.ledger_id}:{entry_id} {states}")
    return short


def test_a_stalled_bookie_that_resumes_gets_full_replication_back(store: Store) -> None:
    with load_on(store) as load:
        load.wait_writes_after(0.0)
        with stopped([bookie_pid(store, "bookie-1")]):
            stalled_s = time.monotonic()
            wait_for(lambda: writer_gave_up_on_a_bookie(store))
            load.wait_writes_after(stalled_s)
        resumed_s = time.monotonic()
        wait_for(lambda: fully_replicated(store))
        load.wait_writes_after(resumed_s)
    assert registrations(store, "bookie-1") == 1, "a stall, not a new registration"
    assert not load.failed_writes(), "one bookie of three stalled: writes go on at Qa"
    check_fully_replicated(store)
    wait_for(lambda: not store.portal.call(closed_segments_short_of_copies, store))
    load.check_linearizable()


def test_two_stalled_bookies_refuse_writes_in_time_and_lose_nothing(store: Store) -> None:
    leader = store.leader()
    client = store.client(leader, socket_timeout=WAIT_S)
    for number in range(50):
        assert client.set(f"before:{number}", str(number))

    refusals: list[str] = []

    def refused() -> bool:
        started_s = time.monotonic()
        try:
            client.set("during", "x")
        except redis.exceptions.ResponseError as error:
            refusals.append(str(error))
            assert time.monotonic() - started_s < WAIT_S, "refused, not hung"
            return True
        return False

    with stopped([bookie_pid(store, "bookie-1"), bookie_pid(store, "bookie-2")]):
        wait_for(refused)
    assert refusals[0].startswith(("TRYAGAIN", "TIMEOUT")), refusals

    def written() -> bool:
        try:
            with store.client(store.leader(), socket_timeout=WAIT_S) as again:
                return bool(again.set("after", "y"))
        except (redis.exceptions.ResponseError, redis.exceptions.ConnectionError):
            return False

    wait_for(written)
    with store.client(store.leader(), socket_timeout=WAIT_S) as again:
        assert again.mget([f"before:{n}" for n in range(50)]) == [
            str(n).encode() for n in range(50)
        ]
    client.close()
