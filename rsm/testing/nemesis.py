"""Which fault to inject into a simulated replicated state machine, and when.

`RsmCluster` (rsm/testing/cluster.py) and `SimCluster` provide the fault
primitives; this module is the policy.  An `RsmNemesis` takes `steps` steps,
each after a random pause; a step either repairs one standing fault or
injects a new one of the kinds it was given:

* REPLICA_CRASH: `kill -9` a replica, the leader more often than not (its
  session expires a session timeout later); repaired by restarting it.
* BOOKIE_CRASH: power-cut a bookie (unsynced writes lost); repaired by
  restarting it from its disk.
* MACHINE_CRASH: power-cut a whole machine: replica-i and bookie-i together
  (a host of `kvstore up`'s layout), the leader's machine more often than
  not; the two are then down like a crashed replica and a crashed bookie,
  and repaired (restarted) one at a time like them.  Not in `ALL_FAULTS`
  (the default set): runs ask for it by name, so that every seed recorded
  before it existed still replays as it did.
* BOOKIE_LOSS: a bookie is lost for good (a power cut after which it never
  comes back, its disk gone), at most once per run; it counts against
  `bookies_down_max` to the end and `quiesce` leaves it down.  Not in
  `ALL_FAULTS` either: the runs that ask for it also run autorecovery, which
  must copy its share elsewhere (`rsm.testing.rsm_sim`, invariant 8).
* STALL, one of three shapes: one bookie (`bookie`), two bookies at once
  (`bookies`: more than Qw - Qa when both are in a write set, as with three
  bookies and E = Qw = 3, Qa = 2, so that nothing can be acknowledged
  meanwhile), or the leader (`leader`): the process is stopped (SIGSTOP) and
  resumes (SIGCONT) after a length drawn from three bands (`STALL_LENGTHS`):
  shorter than both the ledgers' add timeout and the host's session timeout,
  between the two, or longer than both (its session expires meanwhile).  Its
  sockets stay open; every link of it, the metadata service's included, is
  clogged both ways, held and not dropped (`RsmCluster.stall`).  It ends by
  itself, or earlier as a repair.  A stalled bookie counts against
  `bookies_down_max` and a stalled replica against `replicas_down_max`; a
  stalled host is not crashed while it is stalled.  Counted as "stall",
  "stall-<shape>" and "stall-<band>"; an early end as "stall-end".  Not in
  `ALL_FAULTS`: runs ask for it by name (as for MACHINE_CRASH).
* PARTITION, one of four shapes: a replica cut from the metadata service
  only (`zk`); a replica cut from every bookie only (`bookies`); the leader
  isolated from everything, network and metadata (`leader`); or a random
  minority of the hosts split from the majority, the metadata service staying
  with the majority (`split`).  A cut from the metadata service that outlasts
  the session timeout expires the session.  Repaired by healing everything.
* RESET: break every connection of one host (what is in flight is lost).
* SESSION_EXPIRY: the metadata service expires the session of the leader,
  of a follower or of a client; a leader may hear of it only a while later
  ("session-expiry-leader-unnoticed").
* TRANSFER: the leader is asked for a graceful handover, to a given replica
  or to anyone.
* LATENCY_SPIKE: every link gets much slower for a while.
* SLOW_DISK: one bookie's syncs take much longer for a while.

Bounds: at most `replicas_down_max` replicas and `bookies_down_max` bookies
are down (or stalled) at once.  `quiesce()` ends every fault at once (resume
what is stalled, heal, reconnect, restart everything that is down, normal
latency and disks) and stops the nemesis.  Every action is one trace line and
one count in the world's `stats`, named after the fault and its shape
("partition-leader", "session-expiry-follower", "stall-bookies", ...), so
tests can assert that it really happened.

Determinism: every choice comes from the `Random` given; hosts are taken from
lists in a fixed order.
"""

from __future__ import annotations

import enum
import functools
import random
from collections.abc import Callable, Mapping, Sequence

import anyio

from rsm.testing.cluster import RsmCluster, SimReplica, Stall


class RsmFault(enum.Enum):
    REPLICA_CRASH = "replica-crash"
    BOOKIE_CRASH = "bookie-crash"
    MACHINE_CRASH = "machine-crash"
    BOOKIE_LOSS = "bookie-loss"
    PARTITION = "partition"
    RESET = "reset"
    SESSION_EXPIRY = "session-expiry"
    TRANSFER = "transfer"
    LATENCY_SPIKE = "latency-spike"
    SLOW_DISK = "slow-disk"
    STALL = "stall"


ALL_FAULTS = tuple(
    kind
    for kind in RsmFault
    if kind not in (RsmFault.MACHINE_CRASH, RsmFault.BOOKIE_LOSS, RsmFault.STALL)
)
"""The default set of fault kinds (see MACHINE_CRASH, BOOKIE_LOSS and STALL in the module
docstring)."""

PARTITION_SHAPES = ("zk", "bookies", "leader", "split")

STALL_LENGTHS = ("short", "middle", "long")
"""The bands of a stall's length: below both the add and the session timeout, between
them, above both."""

_REPAIR_PROBABILITY = 0.4
"""Chance that a step repairs a standing fault rather than injecting a new one."""

_LEADER_PROBABILITY = 0.6
"""Chance that a fault aimed at one replica picks the leader (when there is one)."""

_SLOW_DISK_DELAYS_MS = (50.0, 300.0, 2_000.0)
_UNNOTICED_MS = (200.0, 1_000.0, 3_000.0)
"""How long a leader whose session expired may go on without hearing of it."""
_LATENCY_SPIKE_MS_MAX = (20.0, 100.0, 400.0)


def machine_bookie(replica: str) -> str:
    """The bookie on the machine of `replica`: bookie-i for replica-i."""
    return "bookie-" + replica.rpartition("-")[2]


class RsmNemesis:
    """Injects and repairs faults in one `RsmCluster`; see the module docstring."""

    def __init__(
        self,
        cluster: RsmCluster,
        rng: random.Random,
        *,
        kinds: Mapping[RsmFault, int],
        replicas_down_max: int,
        bookies_down_max: int,
        pause_ms_max: float,
    ) -> None:
        assert all(weight > 0 for weight in kinds.values())
        assert replicas_down_max >= 0
        assert bookies_down_max >= 0
        assert pause_ms_max > 0
        self._cluster = cluster
        self._world = cluster.world
        self._rng = rng
        self._kinds = dict(kinds)
        self._replicas_down_max = replicas_down_max
        self._bookies_down_max = bookies_down_max
        self._pause_ms_max = pause_ms_max
        self._replicas_down: list[str] = []
        self._bookies_down: list[str] = []
        self._bookies_lost: list[str] = []
        self._slow: list[str] = []
        self._partitioned = False
        self._latency_ms_max = self._world.network.latency_ms_max
        self._spiked = False
        self._quiesced = False

    async def run(self, steps: int) -> None:
        """Take `steps` steps, each after a random pause of up to `pause_ms_max`."""
        for _ in range(steps):
            await anyio.sleep(self._rng.uniform(0, self._pause_ms_max) / 1000)
            if self._quiesced:
                return
            self.step()

    def step(self) -> None:
        """Repair a standing fault or inject a new one."""
        repairs = self._repairs()
        if repairs and self._rng.random() < _REPAIR_PROBABILITY:
            self._rng.choice(repairs)()
            return
        injections = self._injections()
        if injections:
            self._rng.choice(injections)()
        elif repairs:
            self._rng.choice(repairs)()

    def quiesce(self) -> None:
        """End every fault now, and inject none after."""
        self._quiesced = True
        while self._cluster.stalls:
            self._resume(self._cluster.stalls[0])
        if self._partitioned or self._cluster.cut_hosts:
            self._heal()
        if self._spiked:
            self._end_spike()
        while self._bookies_down:
            self._restart_bookie(self._bookies_down[0])
        while self._replicas_down:
            self._restart_replica(self._replicas_down[0])
        while self._slow:
            self._speed_up(self._slow[0])

    # --- choices ------------------------------------------------------------------------------

    def _repairs(self) -> list[Callable[[], None]]:
        rng = self._rng
        repairs: list[Callable[[], None]] = []
        if self._replicas_down:
            repairs.append(lambda: self._restart_replica(rng.choice(self._replicas_down)))
        if self._bookies_down:
            repairs.append(lambda: self._restart_bookie(rng.choice(self._bookies_down)))
        if self._partitioned or self._cluster.cut_hosts:
            repairs.append(self._heal)
        if self._spiked:
            repairs.append(self._end_spike)
        if self._slow:
            repairs.append(lambda: self._speed_up(rng.choice(self._slow)))
        if self._cluster.stalls:
            repairs.append(lambda: self._resume(rng.choice(self._cluster.stalls)))
        return repairs

    def _injections(self) -> list[Callable[[], None]]:
        cluster = self._cluster
        world = self._world
        rng = self._rng
        stalled = cluster.stalled_hosts
        replicas_up = [replica.name for replica in self._running()]
        bookies_up = [
            bookie_id
            for bookie_id, bookie in world.bookies.items()
            if bookie.up and bookie_id not in stalled
        ]
        injections: list[Callable[[], None]] = []
        for kind, weight in self._kinds.items():
            before = len(injections)
            if kind is RsmFault.REPLICA_CRASH:
                if replicas_up and self._replicas_out < self._replicas_down_max:
                    injections.append(self._crash_replica)
            elif kind is RsmFault.BOOKIE_CRASH:
                if bookies_up and self._bookies_out < self._bookies_down_max:
                    injections.append(lambda: self._crash_bookie(rng.choice(bookies_up)))
            elif kind is RsmFault.BOOKIE_LOSS:
                if (
                    not self._bookies_lost
                    and bookies_up
                    and (self._bookies_out < self._bookies_down_max)
                ):
                    injections.append(lambda: self._lose_bookie(rng.choice(bookies_up)))
            elif kind is RsmFault.MACHINE_CRASH:
                machines = [name for name in replicas_up if machine_bookie(name) in bookies_up]
                if (
                    machines
                    and self._replicas_out < self._replicas_down_max
                    and self._bookies_out < self._bookies_down_max
                ):
                    injections.append(functools.partial(self._crash_machine, machines))
            elif kind is RsmFault.PARTITION:
                if not self._partitioned and not cluster.cut_hosts:
                    injections.append(self._partition)
            elif kind is RsmFault.RESET:
                injections.append(lambda: self._reset(rng.choice(cluster.hosts)))
            elif kind is RsmFault.SESSION_EXPIRY:
                if replicas_up:
                    injections.append(self._expire)
            elif kind is RsmFault.TRANSFER:
                if cluster.leader() is not None:
                    injections.append(self._transfer)
            elif kind is RsmFault.LATENCY_SPIKE:
                if not self._spiked:
                    injections.append(self._spike)
            elif kind is RsmFault.SLOW_DISK:
                fast = [bookie_id for bookie_id in bookies_up if bookie_id not in self._slow]
                if fast:
                    injections.append(functools.partial(self._slow_down_one_of, fast))
            elif kind is RsmFault.STALL:
                shapes = self._stall_shapes(bookies_up)
                if shapes:
                    injections.append(functools.partial(self._stall, shapes, bookies_up))
            # A kind of weight w is w times as likely to be picked as one of weight 1.
            injections += injections[before:] * (weight - 1)
        return injections

    @property
    def bookies_down(self) -> list[str]:
        return list(self._bookies_down)

    @property
    def bookies_lost(self) -> list[str]:
        """The bookies lost for good (BOOKIE_LOSS)."""
        return list(self._bookies_lost)

    @property
    def _bookies_out(self) -> int:
        """Bookies down, lost or stalled."""
        stalled = [host for host in self._cluster.stalled_hosts if host in self._world.bookies]
        return len(self._bookies_down) + len(self._bookies_lost) + len(stalled)

    @property
    def _replicas_out(self) -> int:
        """Replicas down or stalled."""
        stalled = [host for host in self._cluster.stalled_hosts if host in self._cluster.replicas]
        return len(self._replicas_down) + len(stalled)

    def _running(self) -> list[SimReplica]:
        """The replicas up and not stalled."""
        stalled = self._cluster.stalled_hosts
        return [replica for replica in self._cluster.up() if replica.name not in stalled]

    def end_transient_faults(self) -> None:
        """End every fault but crashes: resume stalls, heal partitions, normal latency and
        disks."""
        while self._cluster.stalls:
            self._resume(self._cluster.stalls[0])
        if self._partitioned or self._cluster.cut_hosts:
            self._heal()
        if self._spiked:
            self._end_spike()
        while self._slow:
            self._speed_up(self._slow[0])

    def _pick_replica(self) -> SimReplica:
        """A running replica, not stalled: the leader more often than not."""
        running = self._running()
        leader = self._cluster.leader()
        if leader in running and self._rng.random() < _LEADER_PROBABILITY:
            assert leader is not None
            return leader
        return self._rng.choice(running)

    def _record(self, kind: str, event: str) -> None:
        self._world.stats[kind] += 1
        self._world.trace.record("nemesis", event)

    # --- faults -------------------------------------------------------------------------------

    def _crash_replica(self) -> None:
        target = self._pick_replica()
        was_leader = target is self._cluster.leader()
        self._cluster.crash(target.name)
        self._replicas_down.append(target.name)
        self._record(RsmFault.REPLICA_CRASH.value, f"crash {target.label}")
        if was_leader:
            self._world.stats["replica-crash-leader"] += 1

    def _crash_machine(self, candidates: Sequence[str]) -> None:
        leader = self._cluster.leader()
        if (
            leader is not None
            and leader.name in candidates
            and self._rng.random() < (_LEADER_PROBABILITY)
        ):
            name = leader.name
        else:
            name = self._rng.choice(candidates)
        bookie_id = machine_bookie(name)
        self._cluster.crash(name)
        self._replicas_down.append(name)
        report = self._world.crash(bookie_id)
        self._bookies_down.append(bookie_id)
        if bookie_id in self._slow:
            self._slow.remove(bookie_id)
            self._world.bookies[bookie_id].disk_delay_ms = 0.0
        self._record(RsmFault.MACHINE_CRASH.value, f"crash the machine of {name} and {bookie_id}")
        if leader is not None and name == leader.name:
            self._world.stats["machine-crash-leader"] += 1
        if report.lost:
            self._world.stats["bookie-crash-lost-unsynced"] += 1

    def _restart_replica(self, name: str) -> None:
        self._replicas_down.remove(name)
        self._cluster.restart(name)
        self._record("replica-restart", f"restart {name}")

    def _crash_bookie(self, bookie_id: str) -> None:
        report = self._world.crash(bookie_id)
        self._bookies_down.append(bookie_id)
        if bookie_id in self._slow:
            self._slow.remove(bookie_id)
            self._world.bookies[bookie_id].disk_delay_ms = 0.0
        self._record(RsmFault.BOOKIE_CRASH.value, f"crash {bookie_id}")
        if report.lost:
            self._world.stats["bookie-crash-lost-unsynced"] += 1

    def _lose_bookie(self, bookie_id: str) -> None:
        self._crash_bookie(bookie_id)
        self._bookies_down.remove(bookie_id)
        self._bookies_lost.append(bookie_id)
        self._record(RsmFault.BOOKIE_LOSS.value, f"{bookie_id} is lost for good")

    def _restart_bookie(self, bookie_id: str) -> None:
        self._bookies_down.remove(bookie_id)
        self._world.restart(bookie_id)
        self._record("bookie-restart", f"restart {bookie_id}")

    def _partition(self) -> None:
        cluster = self._cluster
        network = self._world.network
        shape = self._rng.choice(PARTITION_SHAPES) if self._running() else "split"
        if shape == "split":
            hosts = cluster.hosts
            minority_size = self._rng.randint(1, max(1, (len(hosts) - 1) // 2))
            minority = sorted(self._rng.sample(hosts, minority_size), key=hosts.index)
            majority = [host for host in hosts if host not in minority]
            network.partition(minority, majority)
            # The metadata service stays with the majority.
            for host in minority:
                cluster.cut_off(host)
            self._partitioned = True
            self._record("partition-split", f"partition {minority} | {majority}")
            return
        target = self._pick_replica()
        if shape == "zk":
            cluster.cut_off(target.name)
            self._record("partition-zk", f"cut {target.label} off the metadata service")
            return
        if shape == "bookies":
            network.partition([target.name], self._world.bookie_ids)
            self._partitioned = True
            self._record("partition-bookies", f"cut {target.label} off every bookie")
            return
        others = [host for host in cluster.hosts if host != target.name]
        network.partition([target.name], others)
        cluster.cut_off(target.name)
        self._partitioned = True
        kind = "partition-leader" if target is cluster.leader() else "partition-replica"
        self._record(kind, f"isolate {target.label} from everything")

    def _heal(self) -> None:
        self._world.network.heal()
        for host in self._cluster.cut_hosts:
            self._cluster.reconnect(host)
        self._partitioned = False
        self._record("heal", "heal")

    def _reset(self, host: str) -> None:
        broken = self._world.network.reset_connections(host)
        self._record(RsmFault.RESET.value, f"reset {host}: {broken} connection ends broken")

    def _expire(self) -> None:
        cluster = self._cluster
        leader = cluster.leader()
        choices: Sequence[str] = [replica.name for replica in cluster.up()] + list(
            cluster.client_stores
        )
        unnoticed_ms = 0.0
        if leader is not None and self._rng.random() < 0.5:
            host = leader.name
            if self._rng.random() < 0.5:
                # The leader hears of it late, and serves as leader meanwhile: what
                # a successor's wait for the old leader's read lease is for.
                unnoticed_ms = self._rng.choice(_UNNOTICED_MS)
        else:
            host = self._rng.choice(choices)
        if not cluster.expire(host, unnoticed_ms=unnoticed_ms):
            return
        if host in cluster.replicas:
            what = "leader" if leader is not None and host == leader.name else "follower"
        else:
            what = "client"
        if unnoticed_ms:
            what += "-unnoticed"
        self._record(f"session-expiry-{what}", f"expire the session of {host}")

    def _transfer(self) -> None:
        cluster = self._cluster
        leader = cluster.leader()
        assert leader is not None
        others = [replica.name for replica in cluster.up() if replica is not leader]
        target = self._rng.choice(others) if others and self._rng.random() < 0.7 else None
        cluster.transfer(leader.name, target)
        self._record(RsmFault.TRANSFER.value, f"ask {leader.label} to hand over to {target}")

    def _spike(self) -> None:
        latency_ms_max = self._rng.choice(_LATENCY_SPIKE_MS_MAX)
        self._world.network.latency_ms_max = latency_ms_max
        self._spiked = True
        self._record(RsmFault.LATENCY_SPIKE.value, f"latency spike: up to {latency_ms_max} ms")

    def _end_spike(self) -> None:
        self._world.network.latency_ms_max = self._latency_ms_max
        self._spiked = False
        self._record("spike-end", "latency back to normal")

    def _slow_down_one_of(self, candidates: Sequence[str]) -> None:
        self._slow_down(self._rng.choice(candidates))

    def _slow_down(self, bookie_id: str) -> None:
        delay_ms = self._rng.choice(_SLOW_DISK_DELAYS_MS)
        self._world.bookies[bookie_id].disk_delay_ms = delay_ms
        self._slow.append(bookie_id)
        self._record(RsmFault.SLOW_DISK.value, f"slow disk {bookie_id}: +{delay_ms} ms per sync")

    def _speed_up(self, bookie_id: str) -> None:
        self._world.bookies[bookie_id].disk_delay_ms = 0.0
        self._slow.remove(bookie_id)
        self._record("speed-up", f"disk of {bookie_id} fast again")

    def _stall_shapes(self, bookies_up: Sequence[str]) -> list[str]:
        """The shapes of stall the bounds allow now (`bookies_up`: up and not stalled)."""
        shapes: list[str] = []
        room = self._bookies_down_max - self._bookies_out
        if bookies_up and room >= 1:
            shapes.append("bookie")
        if len(bookies_up) >= 2 and room >= 2:
            shapes.append("bookies")
        leader = self._cluster.leader()
        if leader in self._running() and self._replicas_out < self._replicas_down_max:
            shapes.append("leader")
        return shapes

    def _stall(self, shapes: Sequence[str], bookies_up: Sequence[str]) -> None:
        cluster = self._cluster
        shape = self._rng.choice(shapes)
        if shape == "leader":
            leader = cluster.leader()
            assert leader is not None
            hosts = [leader.name]
            session_timeout_ms = cluster.session_timeout_ms
        else:
            chosen = self._rng.sample(list(bookies_up), 1 if shape == "bookie" else 2)
            hosts = sorted(chosen, key=list(bookies_up).index)
            session_timeout_ms = self._world.config.bookie_session_timeout_ms
        band, length_ms = self._stall_length_ms(session_timeout_ms)
        cluster.stall(hosts, length_ms)
        self._record(RsmFault.STALL.value, f"stall {hosts} for {length_ms:.0f} ms ({band})")
        self._world.stats[f"stall-{shape}"] += 1
        self._world.stats[f"stall-{band}"] += 1

    def _stall_length_ms(self, session_timeout_ms: int) -> tuple[str, float]:
        """A band of `STALL_LENGTHS` and a length in it, against the ledgers' add timeout
        and `session_timeout_ms`."""
        low, high = sorted((float(self._cluster.ledger_config.add_timeout_ms), session_timeout_ms))
        band = self._rng.choice(STALL_LENGTHS)
        if band == "short":
            return band, self._rng.uniform(0.1, 0.9) * low
        if band == "middle":
            return band, self._rng.uniform(low, high)
        return band, self._rng.uniform(1.1, 3.0) * high

    def _resume(self, stall: Stall) -> None:
        self._cluster.resume(stall)
        self._record("stall-end", f"resume {list(stall.hosts)}")
