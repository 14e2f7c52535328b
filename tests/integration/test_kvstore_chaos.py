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
    cut-zookeeper  a replica's connection to ZooKeeper (through a proxy) cut
                   for 0.2-3 s, the leader half the time: it goes on running
                   and reaching the bookies and the other replicas; past its
                   session a successor fences its ledger
    cut-zookeepers the same for every replica at once: ZooKeeper gone, as the
                   replicas see it, while the bookies still reach it
    kill-zookeeper kill -9 of ZooKeeper (a server of the test's own),
                   restarted after 0-3 s on its data: every session may expire
    pause-zookeeper
                   SIGSTOP of ZooKeeper for 0.2-3 s, then SIGCONT
    transfer       the leader hands over to another replica (admin API)

After each fault the store must be whole again (every bookie running, every
replica caught up, a leader serving) and the clients must complete more
operations: the store
recovers by itself, each time.  The history is checked for linearizability
with the checker's key-value model (an acknowledged write lost or applied
twice, or a stale read, fails it) phase by phase (`PhasedLog`): every
`PHASE_S` the clients move to keys of their own and the phase that ended is
checked and forgotten, so a long run's memory and checks stay bounded.  At
the end the last phase's keys are read through the leader before its check,
and every replica's DEBUG DIGEST must be the same (they hold the same state).

The suite runs it for `CHAOS_S_DEFAULT` seconds; `make chaos` runs it longer
(`KV_CHAOS_SECONDS`, `KV_CHAOS_SEED`; `KV_CHAOS_FAULTS`, a comma-separated list,
keeps to those faults), docs/operations.md.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.from_thread
import pytest
import redis

from bookie.local.cluster import last_failure
from bookie.local.zookeeper import LocalZooKeeper
from rsm.testing import KvModel, check_per_key, kv_key
from rsm.testing.history import History
from tests.integration.conftest import COMMAND_TIMEOUT_MS
from tests.integration.support.kv_history import LockedRecorder, client_loop
from tests.integration.support.rsm_processes import ZkProxy
from tests.integration.support.zookeeper_outage import (
    kill_zookeeper,
    own_zookeeper,
    pause_zookeeper,
    restart_zookeeper,
)
from tests.integration.test_kvstore_failover import transfer
from tests.unit.kvstore.local_store import WAIT_S, Store, command, running_store, wait_for

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


REPLICAS = ("kv-1", "kv-2", "kv-3")
"""The replicas' names, as the launcher gives them."""


class CuttableStore:
    """A store on a ZooKeeper of its own, each replica reaching it through its own proxy."""

    def __init__(
        self,
        store: Store,
        zookeeper: LocalZooKeeper,
        proxies: dict[str, ZkProxy],
        portal: anyio.from_thread.BlockingPortal,
    ) -> None:
        self.store = store
        self.zookeeper = zookeeper
        self.proxies = proxies
        self.portal = portal

    def cut(self, names: list[str]) -> None:
        for name in names:
            self.portal.call(self.proxies[name].cut)

    def heal(self, names: list[str]) -> None:
        for name in names:
            self.portal.call(self.proxies[name].heal)


@pytest.fixture
def cuttable_store(zk_root: str, tmp_path: Path) -> Iterator[CuttableStore]:
    """`impatient_store`'s store on a ZooKeeper of its own, each replica reaching it through
    its own proxy."""
    with contextlib.ExitStack() as stack:
        zookeeper = stack.enter_context(own_zookeeper(tmp_path / "zookeeper"))
        proxies = {name: ZkProxy(zookeeper) for name in REPLICAS}
        portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
        for proxy in proxies.values():
            stack.enter_context(portal.wrap_async_context_manager(proxy.running()))
        store = stack.enter_context(
            running_store(
                zookeeper,
                zk_root,
                tmp_path / "store",
                replicas=len(REPLICAS),
                command_timeout_ms=COMMAND_TIMEOUT_MS,
                replica_zk={name: proxy.address + zk_root for name, proxy in proxies.items()},
            )
        )
        assert store.names == list(REPLICAS)
        assert all(proxy.forwarded for proxy in proxies.values()), "a replica bypassed its proxy"
        yield CuttableStore(store, zookeeper, proxies, portal)


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
    """Whether replica `name` answers PING within a second (not while it is dead, or
    paused by the next fault)."""
    if store.cluster.replica(name).process is None:
        return False
    try:
        with store.client(name, socket_timeout=1.0) as client:
            return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError):
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

    def __init__(self, cuttable: CuttableStore, rng: random.Random) -> None:
        self.cuttable = cuttable
        self.store = cuttable.store
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

    def cut_zookeeper(self, every_replica: bool) -> None:
        """Cut replicas from ZooKeeper (one, the leader half the time, or all of them)."""
        names = list(self.store.names) if every_replica else [self.victim_replica()]
        self.cuttable.cut(names)
        try:
            self.hold(0.2, 3.0)
        finally:
            self.cuttable.heal(names)

    def kill_zookeeper(self) -> None:
        zookeeper = self.cuttable.zookeeper
        kill_zookeeper(zookeeper)
        self.hold(0.0, 3.0)
        restart_zookeeper(zookeeper)

    def pause_zookeeper(self) -> None:
        with pause_zookeeper(self.cuttable.zookeeper):
            self.hold(0.2, 3.0)

    def transfer(self) -> None:
        """The leader hands over to another replica (refused until that one caught up)."""
        leader = self.store.leader()
        target = self.rng.choice([name for name in self.store.names if name != leader])
        wait_for(functools.partial(transfer, self.store, leader, target))

    def check_bookies_run(self) -> None:
        """No bookie exited by itself (a killed one was restarted and registered again)."""
        for bookie in self.store.cluster.bookies.bookies:
            process = bookie.process
            assert process is not None, f"{bookie.name} was not restarted"
            assert process.returncode is None, (
                f"{bookie.name} exited: {last_failure(bookie.log_file)}"
            )

    def hold(self, low_s: float, high_s: float) -> None:
        """Keep the fault on for a random time: its length, not a wait for anything."""
        time.sleep(self.rng.uniform(low_s, high_s))

    def faults(self) -> dict[str, Callable[[], None]]:
        return {
            "kill-replica": self.kill_replica,
            "kill-bookie": self.kill_bookie,
            "kill-machine": self.kill_machine,
            "pause-replica": self.pause_replica,
            "pause-bookie": functools.partial(self.pause_bookies, 1),
            "pause-bookies": functools.partial(self.pause_bookies, 2),
            "cut-zookeeper": functools.partial(self.cut_zookeeper, False),
            "cut-zookeepers": functools.partial(self.cut_zookeeper, True),
            "kill-zookeeper": self.kill_zookeeper,
            "pause-zookeeper": self.pause_zookeeper,
            "transfer": self.transfer,
        }

    def run(self, log: PhasedLog, checks: Checks, seconds: float, kinds: list[str]) -> None:
        faults = self.faults()
        ends_s = time.monotonic() + seconds
        phase_ends_s = time.monotonic() + PHASE_S
        while time.monotonic() < ends_s:
            if time.monotonic() >= phase_ends_s:
                checks.check(log.next_phase())
                phase_ends_s = time.monotonic() + PHASE_S
            kind = self.rng.choice(kinds)
            faults[kind]()
            self.done[kind] += 1
            # Whole again by itself: every bookie running, every replica caught up, a
            # leader serving, and the clients getting answers.
            self.check_bookies_run()
            self.store.wait_ready()
            wait_for(functools.partial(progressed, log, log.completed + PROGRESS_OPERATIONS))
            self.hold(0.2, 1.5)


def test_faults_one_after_another_leave_a_linearizable_history_and_equal_replicas(
    cuttable_store: CuttableStore,
) -> None:
    store = cuttable_store.store
    seconds = float(os.environ.get("KV_CHAOS_SECONDS", CHAOS_S_DEFAULT))
    seed = int(os.environ.get("KV_CHAOS_SEED", "1"))
    nemesis = Nemesis(cuttable_store, random.Random(seed))
    kinds = sorted(nemesis.faults())
    chosen = os.environ.get("KV_CHAOS_FAULTS")
    if chosen:
        unknown = sorted(set(chosen.split(",")) - set(kinds))
        assert not unknown, f"KV_CHAOS_FAULTS: no fault {unknown}; the faults are {kinds}"
        kinds = sorted(set(chosen.split(",")))
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
    try:
        wait_for(lambda: log.completed >= PROGRESS_OPERATIONS)
        nemesis.run(log, checks, seconds, kinds)
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
