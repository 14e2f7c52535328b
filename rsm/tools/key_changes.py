"""Every command that changed one key: a replay stepped command by command, hashing that key.

For classes with per-key digests (`StateMachine.key_digests`,
docs/snapshots.md).  `key_changes` walks `rsm.tools.replay.stepping` from
where a `Replay` stands to an index, and after each command asks the state
for the digest of that one key (`key_digests(keys=[key])`, None when the key
is absent): a command changed the key exactly when the digest after it
differs from the digest before it (a key that appears or disappears
included).  Each change carries the record (both coordinates, time,
session, command and arguments), the command's outcome, both digests and,
when the class offers `show_key`, the key's content after it.  The cost per
command is one apply and one key's digest, whatever the size of the state.

Invariants: changes come in index order, each command at most once; the
`before` of a change is the `after` of the previous one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from rsm.core.sessions import Outcome
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig
from rsm.tools.records import Record
from rsm.tools.replay import Progress, Replay, stepping
from rsm.tools.source import LogSource


@dataclass(frozen=True, slots=True)
class KeyChange:
    """One command that changed the key's digest."""

    record: Record
    outcome: Outcome
    before: bytes | None
    after: bytes | None
    """The key's digest before and after the command (None: absent)."""
    shown: str | None
    """The key's content after it, as the class shows it (None: not offered)."""


def key_digest(machine: StateMachine, key: bytes) -> bytes | None:
    """The digest of one key (None: absent); `InvalidConfig` when the class has none."""
    found = machine.key_digests(keys=[key])
    if found is None:
        raise InvalidConfig(
            f"{type(machine).__qualname__} offers no per-key digests (StateMachine.key_digests): "
            "its history cannot be followed key by key"
        )
    for present, digest in found:
        if present == key:
            return digest
    return None


@contextlib.asynccontextmanager
async def key_changes(
    source: LogSource,
    replay: Replay,
    key: bytes,
    to_index: int,
    *,
    progress: Progress | None = None,
) -> AsyncIterator[AsyncIterator[KeyChange]]:
    """The changes of `key` from where `replay` stands up to `to_index` (inclusive), as they
    are found (see the module docstring)."""
    initial = key_digest(replay.machine, key)

    async def walk(steps: AsyncIterator[tuple[Record, Outcome]]) -> AsyncIterator[KeyChange]:
        before = initial
        async for record, outcome in steps:
            if progress is not None:
                progress(record.index)
            after = key_digest(replay.machine, key)
            if after != before:
                yield KeyChange(record, outcome, before, after, replay.machine.show_key(key))
                before = after

    async with stepping(source, replay, to_index) as steps:
        yield walk(steps)
