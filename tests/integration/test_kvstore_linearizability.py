"""Concurrent redis-py clients on every replica, a leader kill in the middle, and the history
checked for linearizability (rsm.testing's checker with its key-value model).

Each client thread runs GET, SET, INCR and DEL on a few shared keys through
its replica and records what it saw.  TRYAGAIN means "not applied" (a FAIL
operation); anything else that is not an answer (TIMEOUT, a dropped
connection) is indeterminate (INFO): the command may have been applied.
redis-py's own retries are off, so a command is never sent twice behind the
test's back.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from rsm.testing import KvModel, check_per_key, kv_key
from tests.integration.support.kv_history import LockedRecorder, client_loop
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

CLIENTS_PER_REPLICA = 2
OPERATIONS_AFTER_FAILOVER = 150


@pytest.fixture
def store(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: os.PathLike[str]) -> Iterator[Store]:
    with running_store(zookeeper, zk_root, tmp_path) as running:  # type: ignore[arg-type]
        yield running


def test_histories_with_a_leader_kill_are_linearizable(store: Store) -> None:
    leader = store.leader()
    log = LockedRecorder()
    stop = threading.Event()
    threads = [
        threading.Thread(target=client_loop, args=(store, name, number, stop, log))
        for name in store.running()
        for number in range(CLIENTS_PER_REPLICA)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: log.completed >= 150)
    store.kill(leader)
    killed_at = log.completed
    assert store.leader() != leader
    wait_for(lambda: log.completed >= killed_at + OPERATIONS_AFTER_FAILOVER)
    stop.set()
    for thread in threads:
        thread.join(WAIT_S)
        assert not thread.is_alive()
    history = log.recorder.history()
    result = check_per_key(history, KvModel(), kv_key)
    assert result.linearizable, result.explain()
    assert result.operations >= 300
