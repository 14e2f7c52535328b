"""Quorum arithmetic of a ledger: write sets, ack sets, coverage and absence.

Pure and allocation-free on the hot path: every per-entry question is answered
from tables computed once per (E, Qw, Qa) and from bit masks over ensemble
*indices* (bit i set = the bookie at ensemble position i).  Callers map bookie
ids to indices with `ensemble_indices`.

Vocabulary: E is the ensemble size, Qw the write quorum, Qa the ack quorum,
with E >= Qw >= Qa >= 1.  The rules, which every other core builds on
(docs/ledgers.md, "Writing" and "Recovery, step by step"):

1. Write set.  Entry e is stored on the ensemble indices (e + i) mod E for
   i = 0 .. Qw-1.  There are only E distinct write sets; the one of entry e is
   number e mod E.
2. Ack set.  An add is *complete* once Qa members of its write set acknowledged
   it.  It has *failed* (can no longer complete on these bookies) once more
   than Qw - Qa members failed, since fewer than Qa members are left.
3. Coverage.  A set of bookies that gave a valid answer *covers* the ensemble
   when, in every write set, fewer than Qa members are unknown (did not give a
   valid answer); equivalently each write set has at least Qw - Qa + 1 valid
   answers.  Then every group of Qa bookies that could have acknowledged an
   entry contains one that answered, so nothing acknowledged is missed, and
   when the answers were fencing reads no write set can gather Qa acks again.
4. Absence.  An entry is *absent* once Qw - Qa + 1 members of its write set
   explicitly answered that they do not hold it: at most Qa - 1 members can
   then hold it, so it was never acknowledged.  Errors and timeouts never count
   towards absence.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bookie import limits
from bookie.errors import InvalidLedgerConfig


def check_quorum(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """Raise `InvalidLedgerConfig` unless E_max >= E >= Qw >= Qa >= 1."""
    if not limits.ensemble_size_max >= ensemble_size >= write_quorum >= ack_quorum >= 1:
        raise InvalidLedgerConfig(
            f"need {limits.ensemble_size_max} >= ensemble ({ensemble_size}) >= "
            f"write quorum ({write_quorum}) >= ack quorum ({ack_quorum}) >= 1"
        )


@dataclass(frozen=True, slots=True)
class Quorum:
    """The quorum rules of one ledger, with its E write sets precomputed.

    Construction validates the sizes (`InvalidLedgerConfig`); after that every
    method is a table lookup or a few integer operations.
    """

    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    write_sets: tuple[tuple[int, ...], ...] = field(init=False, repr=False, compare=False)
    """Write set number k (of entries e with e mod E == k), as ensemble indices in order."""
    write_masks: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """The same write sets as bit masks over ensemble indices."""

    def __post_init__(self) -> None:
        check_quorum(self.ensemble_size, self.write_quorum, self.ack_quorum)
        e, qw = self.ensemble_size, self.write_quorum
        sets = tuple(tuple((k + i) % e for i in range(qw)) for k in range(e))
        masks = tuple(sum(1 << index for index in members) for members in sets)
        # The dataclass is frozen so that a Quorum can be shared freely; the
        # derived tables are set once, here, and never again.
        object.__setattr__(self, "write_sets", sets)
        object.__setattr__(self, "write_masks", masks)
        assert len(sets) == e
        assert all(mask.bit_count() == qw for mask in masks)

    # --- rule 1: write sets -------------------------------------------------------------------

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        """Ensemble indices that store `entry_id`, in the order a reader tries them."""
        assert entry_id >= 0
        return self.write_sets[entry_id % self.ensemble_size]

    def write_mask(self, entry_id: int) -> int:
        """`write_set(entry_id)` as a bit mask over ensemble indices."""
        assert entry_id >= 0
        return self.write_masks[entry_id % self.ensemble_size]

    # --- rule 2: ack sets ---------------------------------------------------------------------

    def ack_complete(self, ack_count: int) -> bool:
        """An add acknowledged by `ack_count` distinct write-set members is complete."""
        return ack_count >= self.ack_quorum

    def ack_failed(self, failure_count: int) -> bool:
        """An add whose write set has `failure_count` failed members can no longer complete."""
        return failure_count > self.write_quorum - self.ack_quorum

    # --- rule 3: coverage ---------------------------------------------------------------------

    def covered(self, valid_mask: int) -> bool:
        """Whether the bookies in `valid_mask` (valid answers) cover every write set."""
        needed = self.write_quorum - self.ack_quorum + 1
        return all((mask & valid_mask).bit_count() >= needed for mask in self.write_masks)

    # --- rule 4: absence ----------------------------------------------------------------------

    def absent(self, no_entry_count: int) -> bool:
        """Whether `no_entry_count` explicit no-entry answers prove the entry was never acked."""
        return no_entry_count >= self.write_quorum - self.ack_quorum + 1

    # --- rule 5: the writer still owns its ledger ----------------------------------------------

    def writer_confirmed(self, not_fenced_mask: int) -> bool:
        """Whether "not fenced" answers from the bookies in `not_fenced_mask` prove that no
        recovery had completed its fencing when the earliest of them was given.

        A recovery completes fencing only once every write set has at least
        Qw - Qa + 1 fenced members (rule 3).  Fencing is never undone, so if Qa
        members of one write set all answered "not fenced", then at the earliest
        of those answers that write set had at most Qw - Qa fenced members and
        no recovery had completed.  Nothing a successor writes can be
        acknowledged before its fencing completes, so the writer's state at
        that instant is the ledger's latest: the linearization point of a read
        answered from it (docs/ledgers.md, "Confirming the writer").
        """
        return any(
            (mask & not_fenced_mask).bit_count() >= self.ack_quorum for mask in self.write_masks
        )


# --- bookie id <-> ensemble index -------------------------------------------------------------


def ensemble_indices(ensemble: Sequence[str]) -> dict[str, int]:
    """Map each bookie id of an ensemble to its index (bookies of an ensemble are distinct)."""
    indices = {bookie_id: index for index, bookie_id in enumerate(ensemble)}
    assert len(indices) == len(ensemble), "bookies of an ensemble are distinct"
    return indices


def index_mask(indices: Mapping[int, object] | Sequence[int]) -> int:
    """Bit mask of a collection of ensemble indices (a mapping contributes its keys)."""
    mask = 0
    for index in indices:
        assert index >= 0
        mask |= 1 << index
    return mask


def changed_indices(source: Sequence[str], target: Sequence[str]) -> dict[int, str]:
    """Indices whose bookie differs between two ensembles of one ledger, with the new bookie."""
    assert len(source) == len(target)
    return {
        index: bookie
        for index, (old, bookie) in enumerate(zip(source, target, strict=True))
        if old != bookie
    }
