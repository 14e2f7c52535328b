"""Ledger metadata as a value, and the only transitions it may go through.

Pure.  The record lives in one znode per ledger (encoding in
`bookie/meta/ledger_format.py`) and is only ever replaced by compare-and-set;
this module decides what a legal replacement is.

Invariants (checked by `check_invariants`, asserted on every transition):

* E >= Qw >= Qa >= 1 and E <= limits.ensemble_size_max.
* `ensembles` is non-empty, its first segment starts at entry 0, first entry
  ids strictly increase, every ensemble has exactly E distinct bookies.
* State moves OPEN -> IN_RECOVERY -> CLOSED or OPEN -> CLOSED, never back.
* `last_entry_id` and `length` are final only in CLOSED; before that they are
  -1 and 0.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from bookie import limits
from bookie.wire.packet import DigestType

FORMAT_VERSION = 1


class LedgerState(enum.IntEnum):
    """Stored as its int value; never renumber."""

    OPEN = 1
    IN_RECOVERY = 2
    CLOSED = 3


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    digest_type: DigestType
    password_hash: bytes
    """SHA-256 of b"password" + password: lets open() refuse a wrong password early."""
    ensembles: tuple[tuple[int, tuple[str, ...]], ...]
    """(first_entry_id, bookie ids) segments, ascending by first entry id."""
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    length: int = 0
    ctime_ms: int = 0
    custom: Mapping[str, bytes] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def ensemble_at(self, entry_id: int) -> tuple[str, ...]:
        """The ensemble that holds `entry_id` (the last segment starting at or before it)."""
        assert entry_id >= 0
        chosen = self.ensembles[0][1]
        for first_entry_id, ensemble in self.ensembles:
            if first_entry_id > entry_id:
                break
            chosen = ensemble
        return chosen

    @property
    def current_ensemble(self) -> tuple[str, ...]:
        return self.ensembles[-1][1]

    @property
    def is_closed(self) -> bool:
        return self.state is LedgerState.CLOSED


def check_invariants(metadata: LedgerMetadata) -> None:
    """Assert every invariant of the module docstring (programmer errors, not input errors)."""
    e, qw, qa = metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum
    assert limits.ensemble_size_max >= e >= qw >= qa >= 1, (e, qw, qa)
    assert metadata.ensembles, "no ensemble"
    assert metadata.ensembles[0][0] == 0, "first segment must start at entry 0"
    previous = -1
    for first_entry_id, ensemble in metadata.ensembles:
        assert first_entry_id > previous, "segment first entry ids must strictly increase"
        assert len(ensemble) == e, "every ensemble has exactly E bookies"
        assert len(set(ensemble)) == e, "bookies of an ensemble are distinct"
        previous = first_entry_id
    if metadata.state is not LedgerState.CLOSED:
        assert metadata.last_entry_id == -1
        assert metadata.length == 0
    else:
        assert metadata.last_entry_id >= -1
        assert metadata.length >= 0
