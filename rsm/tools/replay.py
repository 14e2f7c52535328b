"""Offline replay: the log applied to a fresh instance of the real class, as a replica does.

A `Replay` owns an `Applier` (rsm/runtime/applier.py), the very object a
replica applies with: the application's class, a `SessionTable` with the
replica's settings (the session settings of `ReplicaConfig`, which must be
the replicas'), the same `Context` per command (index, logged time, epoch,
seed), and the replica's state-hash schedule.  So the state, the results and
the recorded hashes equal a replica's at every index.

Two ways to apply an entry:

* `apply(entry)`: the whole batch through `Applier.apply`, which records the
  state hash when one is due; the hash the entry carries is then compared
  here (not by the applier, which would log an alarm line) and every
  comparison is kept in `checks`.
* `steps(entry, last_index)`: command by command, yielding `(record,
  outcome)` after each, so a caller can look at the state between two
  commands (hash it, diff it, stop in a debugger); it stops after
  `last_index`.  Each command runs through the same `apply_batch` on a batch
  of that one item, which is equivalent: sessions expire at the batch's time
  before its first item either way, and every other input is per item.  Once
  the whole batch is applied the position, cursor and due hash are exactly
  what `apply` leaves.

`replay_to` builds a `Replay` at an index: from the newest snapshot at or
below it (the way a restarting replica starts), or from the log's start,
then the log up to it.  `stepping` is the `steps` loop over a source:
every command with the state right after it.  Tools on top of it: verify,
bisect, determinism (this package); a key-level diff or a blame of one key
walks `stepping` and looks at the state after each command.

Invariants: the replay only moves forward, one index at a time; nothing here
reads a clock or writes anywhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

from rsm.config import ReplicaConfig
from rsm.core.commands import AppliedPosition, apply_batch
from rsm.core.log_format import Batch, CommandItem, Item, StateHash
from rsm.core.log_state import Cursor
from rsm.core.sessions import Outcome
from rsm.core.snapshot_manifest import Manifest
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, MalformedValue, RsmStatus, Truncated
from rsm.runtime.applier import Applier
from rsm.tools.records import LoggedEntry, Record, records
from rsm.tools.source import LogSource, entries

_UNKNOWN = RsmStatus.UNKNOWN_COMMAND
_NO_HASH = b"\xf6"

Progress = Callable[[int], None]
"""Told the index applied so far, after each entry."""


@dataclass(frozen=True, slots=True)
class HashCheck:
    """A state hash the log carries, compared with the replay's own at its index."""

    index: int
    logged: bytes
    replayed: bytes | None
    """None when the replay did not record one at that index (a different schedule, or the
    index lies before where the replay started)."""
    entry: LoggedEntry
    """The entry that carried it."""

    @property
    def matches(self) -> bool | None:
        """True, False, or None when there was nothing to compare with."""
        if self.replayed is None:
            return None
        return self.replayed == self.logged


class Replay:
    """A state machine being replayed (see the module docstring)."""

    def __init__(
        self,
        machine_class: type[StateMachine],
        config: ReplicaConfig,
        *,
        hash_at: frozenset[int] | None = None,
    ) -> None:
        self.machine_class = machine_class
        self.config = config
        self.hash_at = hash_at
        """When given, the state is hashed after exactly the entries ending at these indexes
        (the indexes the log carries hashes for: `logged_hash_indexes`), instead of on the
        schedule of `config.state_hash_every_commands`."""
        if hash_at is not None:
            config = dataclasses.replace(config, state_hash_every_commands=0)
        self.applier = Applier(machine_class(), config)
        self.checks: list[HashCheck] = []
        self.commands = 0
        """Commands applied by this replay (not counting a snapshot's)."""
        self.from_snapshot: Manifest | None = None
        self.unknown: dict[str, int] = {}
        """Command names the class does not know -> the first index logged with one (an old
        log, or a renamed command: each applied as an `UnknownCommand` error, as a replica
        running this class would)."""

    @property
    def machine(self) -> StateMachine:
        return self.applier.machine

    @property
    def index(self) -> int:
        return self.applier.applied_index

    @property
    def position(self) -> AppliedPosition:
        return self.applier.position

    def _check_continues(self, entry: LoggedEntry) -> None:
        expected = self.index + 1
        if entry.batch.first_index != expected and entry.batch.items:
            raise MalformedValue(
                f"ledger {entry.ledger_id} entry {entry.entry_id} starts at index "
                f"{entry.batch.first_index}, but the replay is at {expected - 1}: the log has "
                "a gap or an overlap"
            )

    def apply(self, entry: LoggedEntry) -> list[Outcome]:
        """Apply a whole entry (see the module docstring); its outcomes, one per command."""
        batch = entry.batch
        if batch.first_index <= self.index and batch.items:
            # A snapshot this replay started from holds some of it already.
            return [outcome for _record, outcome in self.steps(entry)]
        self._check_continues(entry)
        unhashed = (
            batch if batch.state_hash is None else dataclasses.replace(batch, state_hash=None)
        )
        outcomes = self.applier.apply(unhashed, entry.ledger_id, entry.entry_id) or []
        self.commands += len(outcomes)
        if self.hash_at is not None and batch.items and entry.last_index in self.hash_at:
            self._record(entry.last_index)
        for slot, outcome in enumerate(outcomes):
            if outcome.status == _UNKNOWN:
                self._unknown(batch.first_index + slot, batch.items[slot])
        if batch.state_hash is not None:
            self._check(batch.state_hash, entry)
        return outcomes

    def apply_through(self, entry: LoggedEntry, last_index: int) -> None:
        """Apply the entry's commands up to `last_index` (inclusive): the whole entry when it
        ends there or before, else command by command."""
        if entry.last_index <= last_index:
            self.apply(entry)
            return
        for _step in self.steps(entry, last_index):
            pass

    def steps(
        self, entry: LoggedEntry, last_index: int | None = None
    ) -> Iterator[tuple[Record, Outcome]]:
        """Apply the entry's commands one at a time up to `last_index` (inclusive; None: all),
        yielding each record and its outcome after it is applied."""
        batch = entry.batch
        applier = self.applier
        for record in records(entry):
            if record.index <= self.index:
                continue
            if last_index is not None and record.index > last_index:
                return
            if record.index != self.index + 1:
                raise MalformedValue(
                    f"{record.where} follows index {self.index}: the log has a gap or an overlap"
                )
            single = Batch(
                batch.epoch, record.index, batch.timestamp_ms, batch.seed, (record.item,)
            )
            [outcome] = apply_batch(applier.machine, single, applier.sessions)
            self.commands += 1
            if outcome.status == _UNKNOWN:
                self._unknown(record.index, record.item)
            applier.position = AppliedPosition(record.index, batch.timestamp_ms, batch.epoch)
            if record.index == entry.last_index:
                self._finish_entry(entry)
            yield record, outcome
        if not batch.items:
            self._finish_entry(entry)

    def _unknown(self, index: int, item: Item) -> None:
        if isinstance(item, CommandItem):
            self.unknown.setdefault(item.name, index)

    def _finish_entry(self, entry: LoggedEntry) -> None:
        """What `Applier.apply` does after a whole batch: position, cursor, due hash, check."""
        applier = self.applier
        batch = entry.batch
        applier.position = AppliedPosition.after(batch)
        applier.cursor = Cursor(entry.ledger_id, entry.entry_id)
        if batch.items:
            if self.hash_at is not None:
                label = entry.last_index if entry.last_index in self.hash_at else None
            else:
                label = applier.hashes.due(batch.first_index, entry.last_index)
            if label is not None:
                self._record(label)
        if batch.state_hash is not None:
            self._check(batch.state_hash, entry)

    def _record(self, index: int) -> None:
        self.applier.hashes.record(index, self.applier.machine.state_hash())

    def _check(self, logged: StateHash, entry: LoggedEntry) -> None:
        hashes = self.applier.hashes
        hashes.check(logged)
        replayed = hashes.recorded(logged.index)
        self.checks.append(HashCheck(logged.index, logged.digest, replayed, entry))

    def state_hash(self) -> bytes:
        return self.machine.state_hash()


async def logged_hash_indexes(source: LogSource, first_index: int) -> frozenset[int]:
    """The indexes the log carries state hashes for, from the entry holding `first_index` to
    the readable end: where a replay must hash to check them, whatever schedule the replicas
    had.  Only entries whose payload does not end with CBOR null are decoded (0xf6: no hash,
    the batch's last field, rsm/core/log_format.py)."""
    found: set[int] = set()
    async with source.raw_entries(first_index) as raw:
        async for read in raw:
            if read.payload[-1:] != _NO_HASH:
                logged = read.decode().batch.state_hash
                if logged is not None:
                    found.add(logged.index)
    return frozenset(found)


async def start(
    source: LogSource,
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    *,
    to_index: int,
    from_snapshot: bool,
    hash_at: frozenset[int] | None = None,
) -> Replay:
    """A replay positioned to go on from: the newest snapshot at or below `to_index` when
    `from_snapshot` (and there is one), else nothing applied.  Raises what loading raises."""
    replay = Replay(machine_class, config, hash_at=hash_at)
    if not from_snapshot:
        return replay
    value = await source.snapshots()
    usable = [m for m in value.newest_first() if m.index <= to_index]
    if not usable:
        return replay
    manifest = usable[0]
    restored = await source.restore(manifest, machine_class(), config)
    replay.applier.install(restored.machine, restored.sessions, restored.position, None)
    replay.from_snapshot = manifest
    return replay


async def replay_to(
    source: LogSource,
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    *,
    to_index: int | None,
    from_snapshot: bool = True,
    progress: Progress | None = None,
) -> Replay:
    """The replay at `to_index` (None: the readable end); see the module docstring.

    Raises `InvalidConfig` for an index past the readable end, `Truncated`
    when the log no longer holds what must be replayed and no snapshot covers
    it, `MalformedValue` for a corrupt entry.
    """
    end = await source.end_index()
    target = end if to_index is None else to_index
    if target > end:
        raise InvalidConfig(f"index {target} is past the log's readable end, index {end}")
    replay = await start(
        source, machine_class, config, to_index=target, from_snapshot=from_snapshot
    )
    await advance(source, replay, target, progress=progress)
    return replay


async def advance(
    source: LogSource, replay: Replay, to_index: int, *, progress: Progress | None = None
) -> None:
    """Apply the log from where `replay` stands up to `to_index` (inclusive)."""
    if replay.index >= to_index:
        return
    async with entries(source, replay.index + 1, to_index) as logged:
        async for entry in logged:
            replay.apply_through(entry, to_index)
            if progress is not None:
                progress(replay.index)
            if replay.index >= to_index:
                return


@contextlib.asynccontextmanager
async def stepping(
    source: LogSource, replay: Replay, to_index: int
) -> AsyncIterator[AsyncIterator[tuple[Record, Outcome]]]:
    """The commands from where `replay` stands up to `to_index`, applied one at a time: each
    `(record, outcome)` comes once it is applied, so the caller sees the state between two
    commands (to hash it, diff it, or find the commands that changed a key)."""

    async def walk(logged: AsyncIterator[LoggedEntry]) -> AsyncIterator[tuple[Record, Outcome]]:
        async for entry in logged:
            for step in replay.steps(entry, to_index):
                yield step
            if replay.index >= to_index:
                return

    async with entries(source, replay.index + 1, to_index) as logged:
        yield walk(logged)


@dataclass(frozen=True, slots=True)
class SnapshotCheck:
    """A snapshot's state against replay of the log up to its index."""

    manifest: Manifest
    snapshot_hash: bytes
    replayed_hash: bytes
    sessions_equal: bool
    replay: Replay

    @property
    def equal(self) -> bool:
        return self.snapshot_hash == self.replayed_hash and self.sessions_equal


async def verify_snapshot(
    source: LogSource,
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    manifest: Manifest,
    *,
    progress: Progress | None = None,
) -> SnapshotCheck:
    """Load the snapshot (checked as a replica checks it) and replay the log up to its index,
    from the start, or from the newest older snapshot when the log was truncated below it;
    compare the two states' hashes and session tables."""
    restored = await source.restore(manifest, machine_class(), config)
    replay = Replay(machine_class, config)
    if source.log.first_index > 1:
        value = await source.snapshots()
        older = [
            m
            for m in value.newest_first()
            if source.log.first_index - 1 <= m.index < manifest.index
        ]
        if not older:
            raise Truncated(
                f"the log of {source.app!r} starts at index {source.log.first_index} and no "
                f"older snapshot covers what lies before: the snapshot at index "
                f"{manifest.index} cannot be checked against a replay"
            )
        earlier = await source.restore(older[0], machine_class(), config)
        replay.applier.install(earlier.machine, earlier.sessions, earlier.position, None)
        replay.from_snapshot = older[0]
    await advance(source, replay, manifest.index, progress=progress)
    return SnapshotCheck(
        manifest=manifest,
        snapshot_hash=restored.machine.state_hash(),
        replayed_hash=replay.state_hash(),
        sessions_equal=restored.sessions.to_plain() == replay.applier.sessions.to_plain(),
        replay=replay,
    )
