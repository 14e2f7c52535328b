"""Placement: which bookies hold a new ledger, and which one replaces a failed bookie.

Pure.  Randomness comes from the `random.Random` the caller passes, so a seeded
simulation places ledgers the same way on every run; candidates are sorted
before they are shuffled, so the order in which the caller lists them does not
matter either.

The caller passes the writable bookies it knows (`available`: bookie id ->
rack, None when the bookie registered no rack) and the bookies it must not use
(`excluded`: known bad, quarantined).  Read-only bookies are never passed in.

Rules:

1. An ensemble is E distinct bookies drawn from `available` minus `excluded`;
   fewer than E such bookies raise `NotEnoughBookies`.
2. Rack awareness.  Two ensemble positions share a write set when their
   cyclic distance is below Qw.  Each position is filled, in order, from the
   rack that the positions it shares a write set with use least, then from
   the rack the whole ensemble uses least, then at random.  So a write set
   spans as many racks as there are (all Qw when there are at least 2*Qw - 1
   racks with bookies to spare), and with one write set (E = Qw) the ensemble
   spans min(E, racks) racks.  Bookies without a rack form one rack of their
   own, so placement with no rack information is uniformly random.
3. A replacement for position i is a bookie in `available`, not in the
   current ensemble (a bookie holds one position), not excluded, chosen by
   rule 2 against the positions that share a write set with i.
4. Degraded ledgers (`ledger_sizes`, only when the caller allows them).  With
   fewer than E usable bookies but at least Qa, a new ledger is sized to the
   bookies there are: E' = the usable count, Qw' = min(Qw, E'), Qa unchanged.
   Every entry it acknowledges is still on Qa bookies; what it lacks is the
   copies past Qa.  Fewer than Qa usable bookies raise `NotEnoughBookies`.
   A degraded ledger carries the sizes that were asked for in its custom
   metadata under `REQUESTED_SIZES_KEY`, as ASCII "E/Qw/Qa" (e.g. b"3/3/2").
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Mapping, Sequence

from bookie.errors import NotEnoughBookies

Rack = str | None

REQUESTED_SIZES_KEY = "bookie.requested"
"""Custom metadata key of a degraded ledger: the sizes asked for (rule 4)."""


def _rack_order(rack: Rack) -> tuple[bool, str]:
    # Racks are sorted before any random choice, so that a choice depends on
    # the seed only; None (no rack) sorts last.
    return (rack is None, rack or "")


def _shares_write_set(position: int, other: int, ensemble_size: int, write_quorum: int) -> bool:
    distance = abs(position - other)
    return min(distance, ensemble_size - distance) < write_quorum


class _RackPools:
    """The candidate bookies grouped by rack, each group in a seeded random order."""

    __slots__ = ("_pools", "_racks", "_rng")

    def __init__(self, candidates: Mapping[str, Rack], rng: random.Random) -> None:
        pools: dict[Rack, list[str]] = {}
        for bookie_id in sorted(candidates):
            pools.setdefault(candidates[bookie_id], []).append(bookie_id)
        for pool in pools.values():
            rng.shuffle(pool)
        self._pools = pools
        self._racks = sorted(pools, key=_rack_order)
        self._rng = rng

    def take(self, neighbour_racks: Counter[Rack], used_racks: Counter[Rack]) -> tuple[str, Rack]:
        """A bookie from the best rack by rule 2; the pools must not be empty."""
        best: list[Rack] = []
        best_score: tuple[int, int] | None = None
        for rack in self._racks:
            if not self._pools[rack]:
                continue
            score = (neighbour_racks[rack], used_racks[rack])
            if best_score is None or score < best_score:
                best, best_score = [rack], score
            elif score == best_score:
                best.append(rack)
        assert best, "take() from empty pools"
        rack = best[self._rng.randrange(len(best))]
        return self._pools[rack].pop(), rack


def ledger_sizes(
    usable: int, *, ensemble_size: int, write_quorum: int, ack_quorum: int
) -> tuple[int, int]:
    """(E', Qw') for a new ledger when `usable` bookies may hold it (rule 4).

    (E, Qw) themselves when there are enough; raises `NotEnoughBookies` below Qa.
    """
    assert ensemble_size >= write_quorum >= ack_quorum >= 1
    if usable >= ensemble_size:
        return ensemble_size, write_quorum
    if usable < ack_quorum:
        raise NotEnoughBookies(
            f"need at least {ack_quorum} writable bookies (the ack quorum) for a ledger of "
            f"{ensemble_size} (degraded to the bookies there are), have {usable}"
        )
    return usable, min(write_quorum, usable)


def requested_sizes(ensemble_size: int, write_quorum: int, ack_quorum: int) -> bytes:
    """The value of `REQUESTED_SIZES_KEY` (rule 4)."""
    return f"{ensemble_size}/{write_quorum}/{ack_quorum}".encode("ascii")


def choose_ensemble(
    available: Mapping[str, Rack],
    *,
    ensemble_size: int,
    write_quorum: int,
    rng: random.Random,
    excluded: Collection[str] = (),
) -> tuple[str, ...]:
    """E distinct bookies for a new ledger (rules 1 and 2), position by position."""
    assert ensemble_size >= write_quorum >= 1
    candidates = {b: rack for b, rack in available.items() if b not in excluded}
    if len(candidates) < ensemble_size:
        raise NotEnoughBookies(
            f"need {ensemble_size} writable bookies, have {len(candidates)} "
            f"({len(available)} available, {len(excluded)} excluded)"
        )
    pools = _RackPools(candidates, rng)
    chosen: list[str] = []
    racks: list[Rack] = []
    used: Counter[Rack] = Counter()
    for position in range(ensemble_size):
        neighbours = Counter(
            racks[other]
            for other in range(position)
            if _shares_write_set(position, other, ensemble_size, write_quorum)
        )
        bookie_id, rack = pools.take(neighbours, used)
        chosen.append(bookie_id)
        racks.append(rack)
        used[rack] += 1
    assert len(set(chosen)) == ensemble_size
    return tuple(chosen)


def choose_replacements(
    available: Mapping[str, Rack],
    ensemble: Sequence[str],
    indices: Collection[int],
    *,
    write_quorum: int,
    rng: random.Random,
    excluded: Collection[str] = (),
) -> dict[int, str]:
    """A new bookie for each of the ensemble `indices` (rule 3), in index order.

    The bookies being replaced count as excluded: they failed.  Raises
    `NotEnoughBookies` when there are fewer candidates than indices.
    """
    ensemble_size = len(ensemble)
    assert indices
    assert all(0 <= index < ensemble_size for index in indices)
    unusable = set(ensemble) | set(excluded)
    candidates = {b: rack for b, rack in available.items() if b not in unusable}
    if len(candidates) < len(indices):
        raise NotEnoughBookies(
            f"need {len(indices)} replacement bookies outside the ensemble, "
            f"have {len(candidates)} ({len(available)} available, {len(excluded)} excluded)"
        )
    pools = _RackPools(candidates, rng)
    replaced = set(indices)
    # A rack is only known for the bookies still offered; a failed bookie that
    # is gone from `available` counts as rackless for the neighbour rule.
    racks: list[Rack] = [available.get(bookie_id) for bookie_id in ensemble]
    result: dict[int, str] = {}
    for index in sorted(replaced):
        neighbours = Counter(
            racks[other]
            for other in range(ensemble_size)
            if other != index
            and (other not in replaced or other in result)
            and _shares_write_set(index, other, ensemble_size, write_quorum)
        )
        used = Counter(
            racks[other]
            for other in range(ensemble_size)
            if other not in replaced or other in result
        )
        bookie_id, rack = pools.take(neighbours, used)
        result[index] = bookie_id
        racks[index] = rack
    assert len(set(result.values())) == len(result)
    assert not set(result.values()) & unusable
    return result
