"""Two classes replayed in lockstep over one log: the first command where they part.

`first_divergence` applies each entry to an *old* and a *new* replay
(rsm/tools/replay.py) command by command, and compares after every command
the two outcomes (a result, or a deterministic error: type and message), and
after every entry the two states' `state_hash()`.  When the states differ
after an entry whose results all agreed, the entry is replayed again, both
sides from the start, hashing after each of its commands, which names the
command where the states part.  `rsm bisect` is this over one or many logs;
`rsm verify --reference` runs it over the window where a logged hash stopped
matching.

A truncated log starts both sides from the newest snapshot below the range
(written by whichever code ran then: upgrades load old snapshots too).

The state digests of the two classes are comparable when both hash the same
state the same way (the default `state_hash`, the SHA-256 of the public
attributes, is; an application that changes its state's layout on purpose
compares results only, `compare_states=False`).

Invariants: both sides see exactly the same entries; a `Divergence` names
the first differing command in log order (results before states within a
command).
"""

from __future__ import annotations

from dataclasses import dataclass

from rsm.config import ReplicaConfig
from rsm.core.sessions import Outcome
from rsm.core.state_machine import StateMachine
from rsm.tools.records import LoggedEntry, Record
from rsm.tools.replay import Progress, Replay, start
from rsm.tools.source import LogSource, entries


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where the old and the new class first disagree."""

    record: Record
    kind: str
    """"result" (the outcomes differ) or "state" (the states' hashes differ)."""
    old: Outcome
    new: Outcome
    old_hash: bytes | None
    new_hash: bytes | None


@dataclass(frozen=True, slots=True)
class LockstepResult:
    divergence: Divergence | None
    commands: int
    """Commands both sides applied (up to and including a divergent one)."""
    last_index: int
    unknown: tuple[dict[str, int], dict[str, int]] = ({}, {})
    """Per side (old, new): the command names its class does not know -> the first index
    logged with one (`Replay.unknown`); both sides applying them as the same error agree."""


async def first_divergence(
    source: LogSource,
    old_class: type[StateMachine],
    new_class: type[StateMachine],
    config: ReplicaConfig,
    *,
    to_index: int | None = None,
    compare_states: bool = True,
    progress: Progress | None = None,
) -> LockstepResult:
    """Replay `source` through both classes from its start (see the module docstring)."""
    end = await source.end_index() if to_index is None else to_index
    truncated = source.log.first_index > 1
    old = await start(source, old_class, config, to_index=end, from_snapshot=truncated)
    new = await start(source, new_class, config, to_index=end, from_snapshot=truncated)
    async with entries(source, new.index + 1, end) as logged:
        async for entry in logged:
            found = _compare_entry(old, new, entry, end, hash_each=False)
            if found is None and compare_states and old.state_hash() != new.state_hash():
                found = await _locate_in_entry(
                    source,
                    old_class=old_class,
                    new_class=new_class,
                    config=config,
                    entry=entry,
                    end=end,
                )
            if found is not None:
                return LockstepResult(
                    found, new.commands, found.record.index, (old.unknown, new.unknown)
                )
            if progress is not None:
                progress(new.index)
            if new.index >= end:
                break
    return LockstepResult(None, new.commands, new.index, (old.unknown, new.unknown))


def _compare_entry(
    old: Replay, new: Replay, entry: LoggedEntry, end: int, *, hash_each: bool
) -> Divergence | None:
    for (record, old_outcome), (_record, new_outcome) in zip(
        old.steps(entry, end), new.steps(entry, end), strict=True
    ):
        if not same_outcome(old_outcome, new_outcome):
            return Divergence(record, "result", old_outcome, new_outcome, None, None)
        if hash_each:
            old_hash, new_hash = old.state_hash(), new.state_hash()
            if old_hash != new_hash:
                return Divergence(record, "state", old_outcome, new_outcome, old_hash, new_hash)
    return None


async def _locate_in_entry(
    source: LogSource,
    *,
    old_class: type[StateMachine],
    new_class: type[StateMachine],
    config: ReplicaConfig,
    entry: LoggedEntry,
    end: int,
) -> Divergence | None:
    """Replay both sides again up to `entry`, then through it hashing after every command."""
    before = entry.batch.first_index - 1
    truncated = source.log.first_index > 1
    old = await start(source, old_class, config, to_index=before, from_snapshot=truncated)
    new = await start(source, new_class, config, to_index=before, from_snapshot=truncated)
    async with entries(source, new.index + 1, entry.last_index) as logged:
        async for again in logged:
            if again.last_index < entry.batch.first_index:
                old.apply(again)
                new.apply(again)
                continue
            return _compare_entry(old, new, again, end, hash_each=True)
    return None


def same_outcome(old: Outcome, new: Outcome) -> bool:
    """Equal status, value and error (the fields a client sees)."""
    return tuple(old) == tuple(new)
