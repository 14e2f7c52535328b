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
import random
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import redis
import redis.exceptions

from bookie.local.zookeeper import LocalZooKeeper
from rsm.testing import HistoryRecorder, KvModel, check_per_key, kv_key
from rsm.testing.models import KV_ERROR
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

KEYS = ("x", "y", "z")
CLIENTS_PER_REPLICA = 2
OPERATIONS_AFTER_FAILOVER = 150


@pytest.fixture
def store(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: os.PathLike[str]) -> Iterator[Store]:
    with running_store(zookeeper, zk_root, tmp_path) as running:  # type: ignore[arg-type]
        yield running


class LockedRecorder:
    """A `HistoryRecorder` shared by threads: every event is recorded under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.recorder = HistoryRecorder(time.monotonic, fail_on=(redis.exceptions.TryAgainError,))
        self.completed = 0

    def run(self, process: str, kind: str, arguments: tuple[Any, ...], action: Any) -> None:
        with self.lock:
            call = self.recorder.invoke(process, kind, arguments)
        try:
            output = action()
        except redis.exceptions.ResponseError as error:
            if kind in ("incr",) and "not an integer" in str(error):
                with self.lock:
                    call.ok(KV_ERROR)
                    self.completed += 1
                return
            with self.lock:
                if isinstance(error, redis.exceptions.TryAgainError):
                    call.fail()
                else:
                    call.info()
            raise
        except redis.exceptions.ConnectionError:
            with self.lock:
                call.info()
            raise
        with self.lock:
            call.ok(output)
            self.completed += 1


OPERATIONS: dict[str, Callable[[redis.Redis, str], Any]] = {
    "get": redis.Redis.get,
    "incr": redis.Redis.incr,
    "del": redis.Redis.delete,
}


def set_ok(client: redis.Redis, key: str, value: str) -> str | None:
    """SET as the model sees it: "OK"."""
    return "OK" if client.set(key, value) else None


def client_loop(
    store: Store, name: str, number: int, stop: threading.Event, log: LockedRecorder
) -> None:
    rng = random.Random(f"{name}-{number}")
    process = f"{name}/{number}"
    client = store.client(name, decode_responses=True, socket_timeout=WAIT_S)
    try:
        counter = 0
        while not stop.is_set():
            key = rng.choice(KEYS)
            kind = rng.choice(("get", "get", "set", "incr", "del"))
            try:
                if kind == "set":
                    counter += 1
                    value = str(rng.randrange(1000) * 1000 + counter)
                    log.run(process, "set", (key, value), partial(set_ok, client, key, value))
                else:
                    log.run(process, kind, (key,), partial(OPERATIONS[kind], client, key))
            except (redis.exceptions.ConnectionError, redis.exceptions.ResponseError):
                # The client's replica was killed (or the command is uncertain):
                # recorded as such; a thread whose replica is gone stops.
                if stop.is_set():
                    return
                try:
                    client.ping()
                except redis.exceptions.ConnectionError:
                    return
    finally:
        client.close()


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
