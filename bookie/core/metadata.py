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

Transitions (pure functions returning a new record; the table is the whole
law, anything else raises):

    transition         OPEN          IN_RECOVERY     CLOSED
    start_recovery     IN_RECOVERY   unchanged       LedgerClosed
    close              CLOSED        CLOSED          LedgerClosed
    replace_bookies    OPEN          IN_RECOVERY     LedgerClosed

`close` never leaves a segment that starts past `last_entry_id + 1`, and
`replace_bookies` only touches the last segment (or appends one), so entries
already confirmed keep the ensemble they were written to.

Every change reaches the store by compare-and-set in a re-read-and-retry loop
(`bookie/meta/ledgers.py`).  The loop's decision, given the record it just
read, is one of the `*_transform` functions below: they return the record to
write, None when the record read already is the outcome (write nothing), or
raise when the goal can no longer be reached.  They are pure, so the same
re-read always gives the same decision.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from bookie import limits
from bookie.core.quorum import Quorum, check_quorum
from bookie.errors import (
    InvalidLedgerConfig,
    LedgerClosed,
    LedgerFenced,
    UnexpectedMetadataChange,
)
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

    @property
    def quorum(self) -> Quorum:
        """The quorum rules of this ledger (shared: one per (E, Qw, Qa) in the process)."""
        return _quorum(self.ensemble_size, self.write_quorum, self.ack_quorum)


@functools.cache
def _quorum(ensemble_size: int, write_quorum: int, ack_quorum: int) -> Quorum:
    # At most 32 * 32 * 32 distinct sizes exist (E <= limits.ensemble_size_max),
    # so the cache is bounded; readers and recovery ask for it per entry.
    return Quorum(ensemble_size, write_quorum, ack_quorum)


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


# --- creation ---------------------------------------------------------------------------------


def new_ledger(
    ledger_id: int,
    ensemble: Sequence[str],
    *,
    write_quorum: int,
    ack_quorum: int,
    digest_type: DigestType,
    password_hash: bytes,
    ctime_ms: int,
    custom: Mapping[str, bytes] | None = None,
) -> LedgerMetadata:
    """The OPEN record of a ledger about to be created on `ensemble` (E = its length).

    Raises `InvalidLedgerConfig` unless E >= Qw >= Qa >= 1 and the bookies are distinct.
    """
    check_quorum(len(ensemble), write_quorum, ack_quorum)
    if len(set(ensemble)) != len(ensemble):
        raise InvalidLedgerConfig(f"ensemble {list(ensemble)} names a bookie twice")
    metadata = LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=len(ensemble),
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        digest_type=digest_type,
        password_hash=password_hash,
        ensembles=((0, tuple(ensemble)),),
        ctime_ms=ctime_ms,
        custom=dict(custom or {}),
    )
    check_invariants(metadata)
    return metadata


# --- transitions ------------------------------------------------------------------------------


def _refuse_closed(metadata: LedgerMetadata, action: str) -> None:
    if metadata.state is LedgerState.CLOSED:
        raise LedgerClosed(
            f"cannot {action}: ledger {metadata.ledger_id} is closed at entry "
            f"{metadata.last_entry_id}"
        )


def start_recovery(metadata: LedgerMetadata) -> LedgerMetadata:
    """OPEN -> IN_RECOVERY: from now on the writer can change nothing in the record.

    IN_RECOVERY stays as it is (a second recoverer joins the first); CLOSED
    raises `LedgerClosed`.
    """
    _refuse_closed(metadata, "start recovery")
    if metadata.state is LedgerState.IN_RECOVERY:
        return metadata
    result = replace(metadata, state=LedgerState.IN_RECOVERY)
    check_invariants(result)
    return result


def close(metadata: LedgerMetadata, last_entry_id: int, length: int) -> LedgerMetadata:
    """OPEN or IN_RECOVERY -> CLOSED at `last_entry_id` with the ledger's total `length`.

    CLOSED raises `LedgerClosed`.  The end may not lie before the start of the
    last segment minus one: a segment only exists because entries from its
    first entry on were (about to be) written, and the writer starts one at
    its last add confirmed + 1.
    """
    _refuse_closed(metadata, "close")
    assert last_entry_id >= -1
    assert length >= 0
    if last_entry_id == -1:
        assert length == 0, "an empty ledger has no length"
    assert metadata.ensembles[-1][0] <= last_entry_id + 1, "last segment starts past the end"
    result = replace(metadata, state=LedgerState.CLOSED, last_entry_id=last_entry_id, length=length)
    check_invariants(result)
    return result


def replace_bookies(
    metadata: LedgerMetadata, first_entry_id: int, replacements: Mapping[int, str]
) -> LedgerMetadata:
    """The record with the bookies at the given ensemble indices replaced from `first_entry_id`.

    Adds a segment starting at `first_entry_id` (the writer's last add
    confirmed + 1), or rewrites the last segment when it already starts there,
    so that entries before it keep the ensemble they were written to.  OPEN
    and IN_RECOVERY only (recovery replaces bookies too); CLOSED raises
    `LedgerClosed`.
    """
    _refuse_closed(metadata, "replace bookies")
    last_first_entry_id, last_ensemble = metadata.ensembles[-1]
    assert replacements, "nothing to replace"
    assert first_entry_id >= last_first_entry_id, "segments only grow at the end"
    ensemble = list(last_ensemble)
    for index, bookie_id in replacements.items():
        assert 0 <= index < metadata.ensemble_size
        assert ensemble[index] != bookie_id, "a replacement is another bookie"
        ensemble[index] = bookie_id
    segment = (first_entry_id, tuple(ensemble))
    if first_entry_id == last_first_entry_id:
        ensembles = (*metadata.ensembles[:-1], segment)
    else:
        ensembles = (*metadata.ensembles, segment)
    result = replace(metadata, ensembles=ensembles)
    check_invariants(result)
    return result


# --- compare-and-set loop decisions -----------------------------------------------------------


def mark_in_recovery_transform(current: LedgerMetadata) -> LedgerMetadata | None:
    """Recovery step 1: OPEN -> IN_RECOVERY.

    None when the record is IN_RECOVERY already (another recoverer, or an
    earlier attempt whose reply was lost, marked it: recovery proceeds) or
    CLOSED (nothing to recover: the end is in the record).
    """
    if current.state is LedgerState.OPEN:
        return start_recovery(current)
    return None


def writer_close_transform(
    current: LedgerMetadata, last_entry_id: int, length: int
) -> LedgerMetadata | None:
    """The writer's close: OPEN -> CLOSED at its last add confirmed.

    IN_RECOVERY raises `LedgerFenced` (a recovery owns the end now).  CLOSED at
    the same end and length is None: our own earlier attempt succeeded and its
    reply was lost.  CLOSED anywhere else raises `LedgerClosed`.
    """
    if current.state is LedgerState.OPEN:
        return close(current, last_entry_id, length)
    if current.state is LedgerState.IN_RECOVERY:
        raise LedgerFenced(f"ledger {current.ledger_id} is being recovered by another client")
    if current.last_entry_id == last_entry_id and current.length == length:
        return None
    raise LedgerClosed(
        f"ledger {current.ledger_id} was closed by another client at entry "
        f"{current.last_entry_id} (length {current.length}), not {last_entry_id} ({length})"
    )


def writer_ensemble_change_transform(
    current: LedgerMetadata,
    ensemble: Sequence[str],
    first_entry_id: int,
    replacements: Mapping[int, str],
) -> LedgerMetadata | None:
    """The writer's ensemble change: replace bookies of `ensemble` from `first_entry_id`.

    `ensemble` is the last ensemble as the writer knows it.  A record no
    longer OPEN raises `LedgerFenced`: IN_RECOVERY and CLOSED both mean a
    recovery took the ledger from this writer.  A last segment that already
    is the outcome (our earlier attempt succeeded, its reply was lost) is None.
    A last segment changed by anyone else raises `UnexpectedMetadataChange`.
    """
    if current.state is not LedgerState.OPEN:
        raise LedgerFenced(
            f"ledger {current.ledger_id} is {current.state.name}: a recovery took it over"
        )
    last_first_entry_id, last_ensemble = current.ensembles[-1]
    if last_ensemble == tuple(ensemble) and last_first_entry_id <= first_entry_id:
        return replace_bookies(current, first_entry_id, replacements)
    target = list(ensemble)
    for index, bookie_id in replacements.items():
        target[index] = bookie_id
    if last_ensemble == tuple(target) and last_first_entry_id == first_entry_id:
        return None
    raise UnexpectedMetadataChange(
        f"ledger {current.ledger_id}: last segment is {last_first_entry_id}: "
        f"{list(last_ensemble)}, expected {list(ensemble)} before entry {first_entry_id}"
    )


def recovery_close_transform(
    current: LedgerMetadata,
    started_ensembles: tuple[tuple[int, tuple[str, ...]], ...],
    recovered_ensembles: tuple[tuple[int, tuple[str, ...]], ...],
    last_entry_id: int,
    length: int,
) -> LedgerMetadata | None:
    """Recovery's last step: IN_RECOVERY -> CLOSED, with the ensembles recovery changed.

    `started_ensembles` are the ensembles recovery read the ledger with,
    `recovered_ensembles` the same after the bookies it replaced while
    re-adding entries.  CLOSED is None: a concurrent recoverer won the race
    and its end stands, since every recovery ends at or after every
    acknowledged entry and agreement needs one answer.  When recovery changed
    ensembles, the record's ensembles must still be the ones it started from,
    else `UnexpectedMetadataChange`.  OPEN cannot follow IN_RECOVERY and
    raises `UnexpectedMetadataChange` too.
    """
    if current.state is LedgerState.CLOSED:
        return None
    if current.state is LedgerState.OPEN:
        raise UnexpectedMetadataChange(f"ledger {current.ledger_id} is OPEN during recovery")
    if recovered_ensembles == started_ensembles:
        return close(current, last_entry_id, length)
    if current.ensembles != started_ensembles:
        raise UnexpectedMetadataChange(
            f"ledger {current.ledger_id}: ensembles changed by another client during recovery"
        )
    return close(replace(current, ensembles=recovered_ensembles), last_entry_id, length)
