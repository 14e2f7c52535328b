"""The nemesis of a seeded simulation: which fault to inject into a `SimCluster`, and when.

`SimCluster` provides the fault primitives; this module is the policy.  A
`Nemesis` takes `steps` steps, each after a random pause; a step either
repairs one standing fault or injects a new one, chosen from the kinds it
was given, each as often as its weight says:

* CRASH: power-cut a bookie (unsynced mutations lost, a random number of
  them surviving); repaired by restarting it from its disk.
* PARTITION: clog the links between two sides: one bookie and one client
  (the others still reach it), one bookie and everyone, or a random split of
  the hosts; a client that opens meanwhile lands on a side, as a new host
  would.  Repaired by healing, which delivers what was held.
* RESET: break every connection of one host, losing what is in flight (the
  TCP "drop").
* SLOW_DISK: one bookie's syncs take hundreds of milliseconds to seconds
  longer (a slow bookie: its acknowledgements lag, adds time out).
* LATENCY_SPIKE: every link gets much slower for a while.
* SESSION_EXPIRY: the metadata service expires one component's session
  (a bookie's registration vanishes and is re-created; a client's watches
  carry on with a new session).
* METADATA_OUTAGE: one component is cut off from the metadata service (its
  calls fail with `MetadataUnavailable`) until repaired.

Bounds.  At most `crashed_max` bookies are down at once; a run that wants its
liveness checked passes what the ledger configuration survives.  `focus`
names the bookies that matter most now (the ledger's current ensemble): a
crash, a slow disk or an isolating partition picks among them more often than
not, and a crash often picks a bookie whose disk is slow (it holds the most
unsynced mutations), so faults land where they test something.

`quiesce()` ends every fault at once: heal, restore the latency, restart every
crashed bookie, speed disks up, reconnect every session.  Each action is one
trace line and one count in `cluster.stats` (named after the fault kind), so
tests can assert that a fault really happened.

Determinism: every choice comes from the `Random` given; hosts are taken from
lists in a fixed order.
"""

from __future__ import annotations

import enum
import functools
import random
from collections.abc import Callable, Mapping, Sequence

import anyio

from bookie.meta.api import SessionState
from bookie.meta.memory import MemoryMetadataStore
from bookie.testing.simcluster import SimCluster


class FaultKind(enum.Enum):
    CRASH = "crash"
    PARTITION = "partition"
    RESET = "reset"
    SLOW_DISK = "slow-disk"
    LATENCY_SPIKE = "latency-spike"
    SESSION_EXPIRY = "session-expiry"
    METADATA_OUTAGE = "metadata-outage"


ALL_FAULTS = tuple(FaultKind)

_REPAIR_PROBABILITY = 0.4
"""Chance that a step repairs a standing fault rather than injecting a new one."""

_FOCUS_PROBABILITY = 0.7
"""Chance that a fault aimed at one bookie picks it among `focus`."""

_SLOW_CRASH_PROBABILITY = 0.5
"""Chance that a crash picks a bookie whose disk is slow, when there is one."""

_SLOW_DISK_DELAYS_MS = (100.0, 500.0, 1_500.0, 4_000.0)
"""How much longer each sync of a slow disk takes: from a lag to far past the add timeouts."""

_LATENCY_SPIKE_MS_MAX = (50.0, 500.0, 2_000.0)
"""How slow every link may get in a spike: around the client timeouts, so they notice."""


class Nemesis:
    """Injects and repairs faults in one `SimCluster`; see the module docstring."""

    def __init__(
        self,
        cluster: SimCluster,
        rng: random.Random,
        *,
        kinds: Mapping[FaultKind, int],
        crashed_max: int,
        pause_ms_max: float,
        focus: Callable[[], Sequence[str]] = list,
    ) -> None:
        assert crashed_max >= 0
        assert pause_ms_max > 0
        self._cluster = cluster
        self._rng = rng
        assert all(weight > 0 for weight in kinds.values())
        self._kinds = dict(kinds)
        self._crashed_max = crashed_max
        self._pause_ms_max = pause_ms_max
        self._focus = focus
        self._down: list[str] = []
        self._slow: list[str] = []
        self._suspended: list[tuple[str, MemoryMetadataStore]] = []
        self._partition_sides: tuple[list[str], list[str]] | None = None
        """The standing partition, unless it cuts one link only (it then ignores newcomers)."""
        self._partitioned = False
        self._latency_ms_max = cluster.network.latency_ms_max
        self._spiked = False
        self._quiesced = False
        cluster.client_hooks.append(self._place_newcomer)

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
        if repairs and (not self._kinds or self._rng.random() < _REPAIR_PROBABILITY):
            self._rng.choice(repairs)()
            return
        injections = self._injections()
        if injections:
            self._rng.choice(injections)()
        elif repairs:
            self._rng.choice(repairs)()

    async def reset_later(self, host: str, delay_ms: float, peer: str | None = None) -> None:
        """Break `host`'s connections (only those to `peer`, when given) `delay_ms` from
        now, unless the faults stopped by then.

        For a workload that wants a fault at a precise moment: a recovery whose
        fencing requests are lost in flight, say; with `peer`, the request to one
        bookie is lost while the others arrive.
        """
        if FaultKind.RESET not in self._kinds:
            return
        await anyio.sleep(delay_ms / 1000)
        if self._quiesced:
            return
        if peer is None:
            self._reset(host)
        else:
            broken = self._cluster.network.reset_link(host, peer)
            self._record(FaultKind.RESET.value, f"reset {host}-{peer}: {broken} ends broken")
            if broken:
                self._cluster.stats["reset-link-broke-connections"] += 1

    def quiesce(self) -> None:
        """End every fault now, and inject none after (see the module docstring)."""
        self._quiesced = True
        if self._partitioned:
            self._heal()
        if self._spiked:
            self._end_spike()
        while self._down:
            self._restart(self._down[0])
        while self._slow:
            self._speed_up(self._slow[0])
        while self._suspended:
            self._reconnect(0)

    # --- choices ------------------------------------------------------------------------------

    def _repairs(self) -> list[Callable[[], None]]:
        repairs: list[Callable[[], None]] = []
        if self._down:
            repairs.append(lambda: self._restart(self._rng.choice(self._down)))
        if self._partitioned:
            repairs.append(self._heal)
        if self._slow:
            repairs.append(lambda: self._speed_up(self._rng.choice(self._slow)))
        if self._spiked:
            repairs.append(self._end_spike)
        if self._suspended:
            repairs.append(lambda: self._reconnect(self._rng.randrange(len(self._suspended))))
        return repairs

    def _injections(self) -> list[Callable[[], None]]:
        cluster = self._cluster
        up = [bookie_id for bookie_id, bookie in cluster.bookies.items() if bookie.up]
        injections: list[Callable[[], None]] = []
        for kind, weight in self._kinds.items():
            before = len(injections)
            if kind is FaultKind.CRASH and up and len(self._down) < self._crashed_max:
                injections.append(lambda: self._crash(self._pick_crash(up)))
            elif kind is FaultKind.PARTITION and not self._partitioned:
                injections.append(self._partition)
            elif kind is FaultKind.RESET:
                injections.append(lambda: self._reset(self._rng.choice(self._hosts())))
            elif kind is FaultKind.SLOW_DISK:
                fast = [bookie_id for bookie_id in up if bookie_id not in self._slow]
                if fast:
                    injections.append(functools.partial(self._slow_down_one_of, fast))
            elif kind is FaultKind.LATENCY_SPIKE and not self._spiked:
                injections.append(self._spike)
            elif kind is FaultKind.SESSION_EXPIRY and self._stores():
                injections.append(self._expire)
            elif kind is FaultKind.METADATA_OUTAGE and self._connected_stores():
                injections.append(self._cut_off)
            # A kind of weight w is w times as likely to be picked as one of weight 1.
            injections += injections[before:] * (weight - 1)
        return injections

    def _pick_bookie(self, candidates: Sequence[str]) -> str:
        focused = [bookie_id for bookie_id in self._focus() if bookie_id in candidates]
        if focused and self._rng.random() < _FOCUS_PROBABILITY:
            return self._rng.choice(focused)
        return self._rng.choice(candidates)

    def _pick_crash(self, up: Sequence[str]) -> str:
        # A slow disk holds many unsynced mutations: crashing it is what loses data.
        slow = [bookie_id for bookie_id in up if bookie_id in self._slow]
        if slow and self._rng.random() < _SLOW_CRASH_PROBABILITY:
            return self._rng.choice(slow)
        return self._pick_bookie(up)

    def _hosts(self) -> list[str]:
        return self._cluster.bookie_ids + list(self._cluster.clients)

    def _stores(self) -> list[tuple[str, MemoryMetadataStore]]:
        """Every open metadata session but the ones cut off by this nemesis."""
        cluster = self._cluster
        stores = [
            (bookie_id, bookie.store)
            for bookie_id, bookie in cluster.bookies.items()
            if bookie.store is not None
        ]
        stores += list(cluster.clients.items())
        suspended = [store for _, store in self._suspended]
        return [(name, store) for name, store in stores if store not in suspended]

    def _connected_stores(self) -> list[tuple[str, MemoryMetadataStore]]:
        return [
            (name, store)
            for name, store in self._stores()
            if store.session_state is SessionState.CONNECTED
        ]

    def _record(self, kind: str, event: str) -> None:
        self._cluster.stats[kind] += 1
        self._cluster.trace.record("nemesis", event)

    # --- faults -------------------------------------------------------------------------------

    def _crash(self, bookie_id: str) -> None:
        report = self._cluster.crash(bookie_id)
        self._down.append(bookie_id)
        if bookie_id in self._slow:
            self._slow.remove(bookie_id)
            self._cluster.bookies[bookie_id].disk_delay_ms = 0.0
        self._record(FaultKind.CRASH.value, f"crash {bookie_id}")
        if report.lost:
            self._cluster.stats["crash-lost-unsynced"] += 1

    def _restart(self, bookie_id: str) -> None:
        self._down.remove(bookie_id)
        self._cluster.restart(bookie_id)
        self._record("restart", f"restart {bookie_id}")

    def _partition(self) -> None:
        hosts = self._hosts()
        clients = list(self._cluster.clients)
        shape = self._rng.random()
        one_link = shape < 0.35 and bool(clients)
        if one_link:
            # One link: a client loses one bookie (of the ensemble, more often than
            # not) while everyone else still reaches it, so they disagree about it.
            side_a = [self._pick_bookie(self._cluster.bookie_ids)]
            side_b = [self._rng.choice(clients)]
        elif shape < 0.7:
            side_a = [self._pick_bookie(self._cluster.bookie_ids)]
            side_b = [host for host in hosts if host not in side_a]
        else:
            side_a = [host for host in hosts if self._rng.random() < 0.5]
            side_b = [host for host in hosts if host not in side_a]
        if not side_a or not side_b:
            return
        self._cluster.network.partition(side_a, side_b)
        self._partition_sides = None if one_link else (side_a, side_b)
        self._partitioned = True
        self._record(FaultKind.PARTITION.value, f"partition {side_a} | {side_b}")

    def _place_newcomer(self, client: str) -> None:
        """A client opened during a partition lands on one side of it, as a new host would."""
        sides = self._partition_sides
        if sides is None:
            return
        side_a, side_b = sides
        # An isolated host stays isolated; otherwise the newcomer joins a random side.
        joins_b = len(side_a) == 1 or self._rng.random() < 0.5
        (side_b if joins_b else side_a).append(client)
        self._cluster.network.partition([client], side_a if joins_b else side_b)

    def _heal(self) -> None:
        self._cluster.network.heal()
        self._partition_sides = None
        self._partitioned = False
        self._record("heal", "heal")

    def _reset(self, host: str) -> None:
        broken = self._cluster.network.reset_connections(host)
        self._record(FaultKind.RESET.value, f"reset {host}: {broken} connection ends broken")
        if broken:
            self._cluster.stats["reset-broke-connections"] += 1

    def _slow_down_one_of(self, candidates: Sequence[str]) -> None:
        self._slow_down(self._pick_bookie(candidates))

    def _slow_down(self, bookie_id: str) -> None:
        delay_ms = self._rng.choice(_SLOW_DISK_DELAYS_MS)
        self._cluster.bookies[bookie_id].disk_delay_ms = delay_ms
        self._slow.append(bookie_id)
        self._record(FaultKind.SLOW_DISK.value, f"slow disk {bookie_id}: +{delay_ms} ms per sync")

    def _speed_up(self, bookie_id: str) -> None:
        self._cluster.bookies[bookie_id].disk_delay_ms = 0.0
        self._slow.remove(bookie_id)
        self._record("speed-up", f"disk of {bookie_id} fast again")

    def _spike(self) -> None:
        latency_ms_max = self._rng.choice(_LATENCY_SPIKE_MS_MAX)
        self._cluster.network.latency_ms_max = latency_ms_max
        self._spiked = True
        self._record(FaultKind.LATENCY_SPIKE.value, f"latency spike: up to {latency_ms_max} ms")

    def _end_spike(self) -> None:
        self._cluster.network.latency_ms_max = self._latency_ms_max
        self._spiked = False
        self._record("spike-end", "latency back to normal")

    def _expire(self) -> None:
        name, store = self._rng.choice(self._stores())
        store.expire_session()
        what = "bookie" if name in self._cluster.bookies else "client"
        self._record(FaultKind.SESSION_EXPIRY.value, f"expire the session of {name}")
        self._cluster.stats[f"session-expiry-{what}"] += 1

    def _cut_off(self) -> None:
        name, store = self._rng.choice(self._connected_stores())
        store.suspend()
        self._suspended.append((name, store))
        self._record(FaultKind.METADATA_OUTAGE.value, f"cut {name} off the metadata service")

    def _reconnect(self, index: int) -> None:
        name, store = self._suspended.pop(index)
        # A session closed meanwhile (its client or bookie is gone) has nothing to resume.
        if store.session_state is SessionState.SUSPENDED and self._is_open(store):
            store.resume()
        self._record("reconnect", f"reconnect {name} to the metadata service")

    def _is_open(self, store: MemoryMetadataStore) -> bool:
        cluster = self._cluster
        return store in cluster.clients.values() or any(
            bookie.store is store for bookie in cluster.bookies.values()
        )
