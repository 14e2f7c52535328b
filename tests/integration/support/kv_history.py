"""Concurrent redis-py clients of a real key-value store recording one history, for the
linearizability checker (rsm.testing's, with its key-value model).

`client_loop` runs GET, SET, INCR and DEL on a few shared keys (`KEYS` by default)
through one replica until told to stop, recording each call in a
`LockedRecorder` (a `HistoryRecorder` shared by threads).  TRYAGAIN means "not
applied" (a FAIL operation); anything else that is not an answer (TIMEOUT, a
dropped connection) is indeterminate (INFO): the command may have been
applied.  A thread whose replica is gone stops.  Clients must be made without
redis-py's own retries, so that a command is never sent twice behind the
test's back.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import redis
import redis.exceptions

from rsm.testing import HistoryRecorder
from rsm.testing.models import KV_ERROR
from tests.unit.kvstore.local_store import WAIT_S, Store

KEYS = ("x", "y", "z")


class Log(Protocol):
    """Where `client_loop` records its calls."""

    def run(self, process: str, kind: str, arguments: tuple[Any, ...], action: Any) -> None:
        """Record the call of `action()`, its answer or error (the error raised on)."""


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
    store: Store,
    name: str,
    number: int,
    stop: threading.Event,
    log: Log,
    *,
    keys: Callable[[], Sequence[str]] | None = None,
) -> None:
    """Calls through replica `name` until `stop`, each on a key of `keys()` (`KEYS` by
    default), recorded in `log`."""
    rng = random.Random(f"{name}-{number}")
    process = f"{name}/{number}"
    client = store.client(name, decode_responses=True, socket_timeout=WAIT_S)
    try:
        counter = 0
        while not stop.is_set():
            key = rng.choice(KEYS if keys is None else keys())
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
