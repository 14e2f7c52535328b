"""Faults on real processes under load, one after another, and the history checked.

Redis clients (redis-py, two per replica) run GET, SET, INCR and DEL on
shared keys through every replica and record what they saw
(`support.kv_history`), while a nemesis, seeded, injects one fault at a
time into the store's real processes:

    kill-replica   kill -9 of a replica (the leader half the time), restarted
                   after 0-2 s
    kill-bookie    kill -9 of a bookie (its unsynced writes are lost), restarted
                   after 0-3 s
    kill-machine   both at once, as when the machine running them is lost
    pause-replica  SIGSTOP of a replica (the leader half the time) for 0.2-3 s,
                   then SIGCONT: past its 1 s ZooKeeper session, a successor
                   takes over while it is frozen and it must step down when it
                   thaws, answering nothing from its old lease
    pause-bookie   SIGSTOP of a bookie for 0.2-3 s, then SIGCONT
    pause-bookies  the same for two bookies at once: with E = Qw = 3 and Qa = 2
                   nothing can be acknowledged meanwhile
    transfer       the leader hands over to another replica (admin API)

After each fault the store must be whole again (every replica caught up, a
leader serving) and the clients must complete more operations: the store
recovers by itself, each time.  The history is checked for linearizability
with the checker's key-value model (an acknowledged write lost or applied
twice, or a stale read, fails it) phase by phase (`PhasedLog`): every
`PHASE_S` the clients move to keys of their own and the phase that ended is
checked and forgotten, so a long run's memory and checks stay bounded.  At
the end the last phase's keys are read through the leader before its check,
and every replica's DEBUG DIGEST must be the same (they hold the same state).

The suite runs it for `CHAOS_S_DEFAULT` seconds; `make chaos` runs it longer
(`KV_CHAOS_SECONDS`, `KV_CHAOS_SEED`), docs/operations.md.
"""

from __future__ import annotations

import functools
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from rsm.testing import KvModel, check_per_key, kv_key
from rsm.testing.history import History
from tests.integration.support.kv_history import LockedRecorder, client_loop
from tests.integration.test_kvstore_failover import transfer
from tests.unit.kvstore.local_store import WAIT_S, Store, command, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

CHAOS_S_DEFAULT = 30.0
"""Seconds of faults in the suite's run."""
CLIENTS_PER_REPLICA = 2
KEYS_PER_PHASE = 12
"""Few enough that clients contend on each key, enough that no key's history grows
beyond what the checker decides quickly."""
PHASE_S = 60.0
"""How long the clients stay on one phase's keys."""
PROGRESS_OPERATIONS = 20
"""Operations the clients must complete after each fault healed."""


def phase_keys(phase: int) -> tuple[str, ...]:
    return tuple(f"p{phase}-key-{number}" for number in range(KEYS_PER_PHASE))


class PhasedLog:
    """The clients' history, one recorder per phase of keys.

    `next_phase` moves the clients to new keys and hands back the history of
    the phase that ended: the calls invoked on its keys until then, those not
    answered yet as indeterminate.  A call a client invokes on the old keys
    after that is not recorded: it began after every call the check judges,
    and no later read looks at those keys, so it cannot change the verdict.
    """

    def __init__(self) -> None:
        self.phase = 0
        self.keys = phase_keys(0)
        self._logs = {0: LockedRecorder()}
        self._completed_before = 0

    def current_keys(self) -> tuple[str, ...]:
        return self.keys

    @property
    def completed(self) -> int:
        return self._completed_before + sum(log.completed for log in list(self._logs.values()))

    def run(self, process: str, kind: str, arguments: tuple[Any, ...], action: Any) -> None:
        phase = int(str(arguments[0]).split("-", 1)[0].removeprefix("p"))
        log = self._logs.get(phase)
        if log is None:
            action()
        else:
            log.run(process, kind, arguments, action)

    def next_phase(self) -> History:
        ended = self.phase
        self._logs[ended + 1] = LockedRecorder()
        self.keys = phase_keys(ended + 1)
        self.phase = ended + 1
        log = self._logs.pop(ended)
        with log.lock:
            self._completed_before += log.completed
            return log.recorder.history()


class Checks:
    """The verdicts of the phases checked so far, and what their histories held."""

    def __init__(self) -> None:
        self.phases = 0
        self.outcomes: Counter[str] = Counter()

    def check(self, history: History) -> None:
        result = check_per_key(history, KvModel(), kv_key)
        assert result.linearizable, result.explain()
        self.phases += 1
        self.outcomes.update(operation.outcome.value for operation in history)


def progressed(log: PhasedLog, operations: int) -> bool:
    return log.completed >= operations


def reachable(store: Store, name: str) -> bool:
    if store.cluster.replica(name).process is None:
        return False
    try:
        with store.client(name, socket_timeout=1.0) as client:
            return bool(client.ping())
    except redis.ConnectionError:
        return False


def client_through_restarts(
    store: Store, name: str, number: int, stop: threading.Event, log: PhasedLog
) -> None:
    """`client_loop` through replica `name` on the current phase's keys, again under a new
    process label each time the replica comes back after a kill."""
    generation = 0
    while not stop.is_set():
        process = number + CLIENTS_PER_REPLICA * generation
        client_loop(store, name, process, stop, log, keys=log.current_keys)
        generation += 1
        while not stop.is_set() and not reachable(store, name):
            stop.wait(0.05)


class Nemesis:
    """One fault at a time on the store's processes, chosen by a seeded generator."""

    def __init__(self, store: Store, rng: random.Random) -> None:
        self.store = store
        self.rng = rng
        self.done: Counter[str] = Counter()

    def victim_replica(self) -> str:
        if self.rng.random() < 0.5:
            return self.store.leader()
        return self.rng.choice(self.store.names)

    def kill_replica(self) -> None:
        name = self.victim_replica()
        self.store.kill(name)
        self.hold(0.0, 2.0)
        self.store.start(name)

    def kill_bookie(self) -> None:
        bookies = self.store.cluster.bookies
        name = self.rng.choice([bookie.name for bookie in bookies.bookies])
        bookies.kill(name)
        self.hold(0.0, 3.0)
        self.store.portal.call(bookies.restart, name)

    def kill_machine(self) -> None:
        """A replica and a bookie at once, as when the machine running both is lost."""
        name = self.victim_replica()
        bookies = self.store.cluster.bookies
        bookie = self.rng.choice([bookie.name for bookie in bookies.bookies])
        self.store.kill(name)
        bookies.kill(bookie)
        self.hold(0.0, 3.0)
        self.store.portal.call(bookies.restart, bookie)
        self.store.start(name)

    def pause_replica(self) -> None:
        process = self.store.cluster.replica(self.victim_replica()).process
        assert process is not None
        self.pause([process.pid])

    def pause_bookies(self, count: int) -> None:
        """`count` bookies at once; with two of three nothing can be acknowledged meanwhile."""
        chosen = self.rng.sample(self.store.cluster.bookies.bookies, count)
        pids = []
        for bookie in chosen:
            assert bookie.process is not None
            pids.append(bookie.process.pid)
        self.pause(pids)

    def pause(self, pids: list[int]) -> None:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            self.hold(0.2, 3.0)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)

    def transfer(self) -> None:
        """The leader hands over to another replica (refused until that one caught up)."""
        leader = self.store.leader()
        target = self.rng.choice([name for name in self.store.names if name != leader])
        wait_for(functools.partial(transfer, self.store, leader, target))

    def hold(self, low_s: float, high_s: float) -> None:
        """Keep the fault on for a random time: its length, not a wait for anything."""
        time.sleep(self.rng.uniform(low_s, high_s))

    def run(self, log: PhasedLog, checks: Checks, seconds: float) -> None:
        faults: dict[str, Callable[[], None]] = {
            "kill-replica": self.kill_replica,
            "kill-bookie": self.kill_bookie,
            "kill-machine": self.kill_machine,
            "pause-replica": self.pause_replica,
            "pause-bookie": functools.partial(self.pause_bookies, 1),
            "pause-bookies": functools.partial(self.pause_bookies, 2),
            "transfer": self.transfer,
        }
        ends_s = time.monotonic() + seconds
        phase_ends_s = time.monotonic() + PHASE_S
        while time.monotonic() < ends_s:
            if time.monotonic() >= phase_ends_s:
                checks.check(log.next_phase())
                phase_ends_s = time.monotonic() + PHASE_S
            kind = self.rng.choice(sorted(faults))
            faults[kind]()
            self.done[kind] += 1
            # Whole again by itself: every replica caught up, a leader serving, and the
            # clients getting answers.
            self.store.wait_ready()
            wait_for(functools.partial(progressed, log, log.completed + PROGRESS_OPERATIONS))
            self.hold(0.2, 1.5)


def test_faults_one_after_another_leave_a_linearizable_history_and_equal_replicas(
    impatient_store: Store,
) -> None:
    store = impatient_store
    seconds = float(os.environ.get("KV_CHAOS_SECONDS", CHAOS_S_DEFAULT))
    seed = int(os.environ.get("KV_CHAOS_SEED", "1"))
    log = PhasedLog()
    checks = Checks()
    stop = threading.Event()
    threads = [
        threading.Thread(target=client_through_restarts, args=(store, name, number, stop, log))
        for name in store.names
        for number in range(CLIENTS_PER_REPLICA)
    ]
    for thread in threads:
        thread.start()
    nemesis = Nemesis(store, random.Random(seed))
    try:
        wait_for(lambda: log.completed >= PROGRESS_OPERATIONS)
        nemesis.run(log, checks, seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in threads)

    leader = store.leader()
    with store.client(leader, decode_responses=True) as client:
        for key in log.keys:
            log.run("final", "get", (key,), functools.partial(client.get, key))
    checks.check(log.next_phase())
    print(
        json.dumps(
            {
                "test": "kvstore-chaos",
                "seed": seed,
                "seconds": seconds,
                "faults": dict(sorted(nemesis.done.items())),
                "phases_checked": checks.phases,
                "operations": dict(sorted(checks.outcomes.items())),
                "verdict": "linearizable",
            }
        )
    )
    assert sum(nemesis.done.values()) >= 1

    wait_for(lambda: len({store.applied(name) for name in store.names}) == 1)
    digests = {}
    for name in store.names:
        with store.client(name, decode_responses=True) as client:
            digests[name] = command(client, "DEBUG", "DIGEST")
    assert len(set(digests.values())) == 1, digests
