"""State hashes: every replica records one on the same schedule; the leader logs its own.

Pure.  Divergence (a non-deterministic command, different code on two
replicas, a bug) would otherwise go unnoticed until a client reads two
different answers.  So:

* Every replica records `StateMachine.state_hash()` after applying the batch
  that holds index k·N, for every k >= 1 (N = `every_commands`), labelled with
  that batch's last index.  Batches are the same on every replica, so the
  labels are too.
* The leader puts its newest recorded hash that the log does not carry yet
  into the `state_hash` field of the next batch it cuts (`unlogged`).
* Every replica compares each logged hash with its own at that index
  (`check`).  A difference is a `Divergence`: the shell raises the alarm (a
  counter, a log line, the replica's status) naming the index, and goes on
  applying: what to do is for people and tools (`rsm verify`, `rsm bisect`).

A replica that does not have its own hash at a logged index (it restored a
snapshot past it, or recorded it so long ago that it was forgotten) counts
the check as unverified.

Invariants: recorded indexes ascend; at most `kept_max` are kept; a hash is
offered to the log at most once per replica (`unlogged` then `logged`).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from rsm import limits
from rsm.core.log_format import StateHash


@dataclass(frozen=True, slots=True)
class Divergence:
    """This replica's state differs from the leader's at `index`."""

    index: int
    logged: bytes
    """The hash the log carries (the leader's)."""
    local: bytes


class StateHashes:
    """The recorded hashes of one replica, and the counts of checks."""

    __slots__ = (
        "every_commands",
        "_kept_max",
        "_recorded",
        "_logged_index",
        "verified",
        "unverified",
        "divergences",
        "first_divergence",
        "last_divergence",
        "failures",
    )

    def __init__(self, every_commands: int, kept_max: int = limits.state_hashes_kept_max) -> None:
        assert every_commands >= 0
        assert kept_max >= 1
        self.every_commands = every_commands
        self._kept_max = kept_max
        self._recorded: OrderedDict[int, bytes] = OrderedDict()
        self._logged_index = 0
        self.verified = 0
        self.unverified = 0
        self.divergences = 0
        self.first_divergence: Divergence | None = None
        self.last_divergence: Divergence | None = None
        self.failures = 0
        """State hashes that could not be computed (the state machine's `state_hash` raised)."""

    def due(self, first_index: int, last_index: int) -> int | None:
        """The label to record under after a batch holding indexes `first_index..last_index`
        (its last index), or None when no multiple of N lies in that range."""
        every = self.every_commands
        if not every or last_index < first_index:
            return None
        multiple = last_index - last_index % every
        return last_index if multiple >= max(first_index, 1) else None

    def record(self, index: int, digest: bytes) -> None:
        assert 1 <= len(digest) <= limits.state_hash_bytes_max
        recorded = self._recorded
        if recorded:
            assert index > next(reversed(recorded))
        recorded[index] = digest
        while len(recorded) > self._kept_max:
            recorded.popitem(last=False)

    @property
    def newest(self) -> StateHash | None:
        if not self._recorded:
            return None
        index = next(reversed(self._recorded))
        return StateHash(index, self._recorded[index])

    def recorded(self, index: int) -> bytes | None:
        """This replica's hash at `index`, if it recorded one and still keeps it."""
        return self._recorded.get(index)

    def unlogged(self) -> StateHash | None:
        """The newest recorded hash the log does not carry yet (for the leader's next batch)."""
        newest = self.newest
        if newest is None or newest.index <= self._logged_index:
            return None
        return newest

    def logged(self, index: int) -> None:
        """The log carries (or a batch about to be appended carries) a hash at `index`."""
        self._logged_index = max(self._logged_index, index)

    def check(self, logged: StateHash) -> Divergence | None:
        """Compare a hash the log carries with this replica's own; a divergence, or None."""
        self.logged(logged.index)
        local = self._recorded.get(logged.index)
        if local is None:
            self.unverified += 1
            return None
        if local == logged.digest:
            self.verified += 1
            return None
        divergence = Divergence(logged.index, logged.digest, local)
        self.divergences += 1
        if self.first_divergence is None:
            self.first_divergence = divergence
        self.last_divergence = divergence
        return divergence

    def status(self) -> dict[str, Any]:
        """For the replica's STATUS: the newest recorded hash and the checks so far."""
        newest = self.newest
        divergence = self.first_divergence
        return {
            "every_commands": self.every_commands,
            "newest_index": None if newest is None else newest.index,
            "newest": None if newest is None else newest.digest.hex(),
            "verified": self.verified,
            "unverified": self.unverified,
            "divergences": self.divergences,
            "diverged_at": None if divergence is None else divergence.index,
            "failures": self.failures,
        }
