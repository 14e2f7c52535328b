"""The key-value store's Spark reducer (`KVStore.spark_reducer`): its state computed by key.

For logs of the commands `kvstore.store.reduction` accepts (each confined to
the keys it names), the state after an index is, key by key, what that
key's own commands make of it, applied in index order, and, for keys with
a TTL, what the active expiry of every command deletes from the front of
the expiry queue.

On executors (`summarize`), each task's commands, in index order:

* A **blind** command sets or deletes its keys whatever they held: a SET
  of exactly a key and a value, an MSET of pairs, a DEL or UNLINK that is
  not open (its outcome, a count, depends on the state), all of byte
  strings within the store's bounds, no keyword argument, fewer than
  2**POSITION_BITS of them.  The outcome of an open blind SET or MSET is
  the same whatever the state: the task applies it to an empty store.
  Every key a command that is not blind names is **kept** in the task, and
  so is every key of a blind command naming a kept key (until no more
  are): the task keeps, in order, every command naming a kept key.
* Every other key's blind ops (set or delete, ordered by `at`) become one
  run: their net effect, whatever the key held before (the last set's
  value and index, the first set after the last delete, the first delete
  after the last set, the first delete, how many deletes followed a set,
  and flags).  Runs leave the task as the columns of `Runs`.

On the driver (`combine`), in log order, over the starting state (a
snapshot's, whose keys come before the log's, in its orders): the runs of
keys no task kept are folded into one `Record` per key (value, version,
creation, tombstone).  Keys some task kept are reduced by applying: one
`KVStore` applies the kept commands, at their logged index, time and epoch,
and takes the runs of those keys from the other tasks as the set or delete
they amount to (within one task a key is kept or run, never both, and a
kept command's keys are all kept, so both touch disjoint keys and their
order within a task does not matter).  Kept commands give the outcomes the
session table keeps of commands that are not blind (every wanted index is
open in its task).

TTLs.  A key that a command may give a TTL (`gives_ttl`), or that has one
in the starting state, must never be a run: whether and when it expires
depends on every command's time.  So when one is a run in some task,
`combine` answers `Rerun` with those keys, and every task summarizes again
keeping them (all their commands kept, in order).  The store of kept keys
(`_Tracked`, which notes what it deletes and which TTLs it gives) then
takes, in index order, each kept command and, at the index and time of
every other command a replica applies (`CombineRequest.clocks`), the
active expiry that command runs (a PERSIST of a key no store holds).  The
keys active expiry deletes are numbered at positions below TICK_SLOTS, so
their tombstones come before those of the command's own keys, as in
replay.  Runs impose their set or delete only on keys that never have a
TTL, at time 0, where active expiry deletes nothing.

The state is then built: `values` and `versions` in the order replay
inserted them (by creation `at`), `expire_at_ms` in the order the TTLs
were given, `tombstones` by deletion `at` (with the expiry time of an
expired key); the derived indexes and the hash are rebuilt by
`_rebuild_derived`.  A command the reducer does not accept
fails with `NotReducible`, as do more deletions (the starting state's
tombstones included) than `limits.watch_tombstones_max`, past which replay
forgets tombstones in an order that depends on every key.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from kvstore import limits
from kvstore.state_machine import KVStore
from kvstore.store.reduction import EVERY_ARGUMENT, command_keys, gives_ttl
from rsm import StateMachine
from rsm.errors import InvalidConfig, NotReducible
from rsm.spark import (
    CombineRequest,
    LoggedCommand,
    Outcome,
    PartCommands,
    Reduced,
    Rerun,
    SparkReducer,
    apply_logged,
)

POSITION_BITS: Final = 20
"""An op's place in its key's order is `at` = index << POSITION_BITS | position (the key's
position among its command's keys); a blind command names fewer than 2**POSITION_BITS."""
NOWHERE: Final = -1
"""An `at` (or a time) that is not there."""
TICK_SLOTS: Final = limits.active_expiry_keys_max
"""The positions below which the keys a command's active expiry deletes are numbered, before
its own keys' (`at` = index << POSITION_BITS | TICK_SLOTS + position)."""
ENDS_SET: Final = 1
HAS_SET: Final = 2
HAS_DELETE: Final = 4
LEADING_DELETE: Final = 8
"""A run's flags: its last op sets; some op sets; some op deletes; its first op deletes."""

_SET: Final = "set"
_DELETE: Final = "del"
_MSET: Final = "mset"


@dataclass(slots=True)
class Runs:
    """Keys' runs, one per key, as columns (they pickle as a few arrays)."""

    keys: list[bytes] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    """The last set's value (None: no set)."""
    flags: array[int] = field(default_factory=lambda: array("q"))
    versions: array[int] = field(default_factory=lambda: array("q"))
    """The last set's index."""
    created: array[int] = field(default_factory=lambda: array("q"))
    """The first set after the last delete, or the first set (`at`)."""
    buried: array[int] = field(default_factory=lambda: array("q"))
    """The first delete after the last set (`at`)."""
    first_deletes: array[int] = field(default_factory=lambda: array("q"))
    deletions: array[int] = field(default_factory=lambda: array("q"))
    """Deletes that followed a set."""

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        """`(key, value, flags, version, created, buried, first delete, deletions)` per key."""
        return zip(
            self.keys,
            self.values,
            self.flags,
            self.versions,
            self.created,
            self.buried,
            self.first_deletes,
            self.deletions,
            strict=True,
        )


class Record(NamedTuple):
    """What a key ends as: a value (its version, creation and TTL), or a tombstone (`at`s)."""

    value: bytes | None
    version: int
    created: int
    tombstone: int
    expire_at: int = NOWHERE
    """Its TTL's time (ms)."""
    ttl_at: int = NOWHERE
    """When its TTL was given (`at`): the order of `expire_at_ms`."""
    expired_at: int = NOWHERE
    """For a tombstone of an expired key, its expiry time."""


@dataclass(frozen=True, slots=True)
class Summary:
    runs: Runs
    kept_keys: frozenset[bytes]
    kept: list[LoggedCommand]
    outcomes: dict[int, Outcome]
    """Of the open blind SETs and MSETs."""
    ttl_keys: frozenset[bytes]
    """Keys a command of the task may have given a TTL."""


Settings = tuple[int, int]
"""The store's `key_bytes_max` and `value_bytes_max`: they decide results (a SET of a longer
value fails), so the reducer takes those of the machine it reduces for."""

DEFAULT_SETTINGS: Final[Settings] = (limits.key_bytes_max_default, limits.value_bytes_max_default)


def settings(machine: StateMachine) -> Settings:
    """The bounds of `machine`, the machine reduced for (docs/spark.md, "Settings"): those
    the reduced commands are checked against, as its replicas check them."""
    if not isinstance(machine, KVStore):
        raise InvalidConfig(
            f"kvstore.spark_reducer reduces for KVStore and its subclasses, not for "
            f"{type(machine).__qualname__}"
        )
    return machine.key_bytes_max, machine.value_bytes_max


def _settings(given: Any) -> Settings:
    """`PartCommands.settings` or `CombineRequest.settings`: the defaults when not given."""
    if given is None:
        return DEFAULT_SETTINGS
    key_max, value_max = given
    return key_max, value_max


def _blind_args(
    name: str, args: list[Any], kwargs: dict[str, Any], key_max: int, value_max: int
) -> bool:
    """Whether a command not open is blind (see the module docstring)."""
    if kwargs or not args or len(args) >= (1 << POSITION_BITS) - TICK_SLOTS:
        return False
    if any(type(arg) is not bytes for arg in args):
        return False
    if name in EVERY_ARGUMENT:
        return True
    if name == _SET:
        pairs = len(args) == 2
    elif name == _MSET:
        pairs = len(args) % 2 == 0
    else:
        return False
    return (
        pairs
        and all(len(key) <= key_max for key in args[::2])
        and all(len(value) <= value_max for value in args[1::2])
    )


def summarize(part: PartCommands) -> Summary:
    """One task's summary (see the module docstring)."""
    open_indexes = part.open
    key_max, value_max = _settings(part.settings)
    runs: dict[bytes, list[Any]] = {}
    outcomes: dict[int, Outcome] = {}
    kept_keys: set[bytes] = set()
    kept_indexes: set[int] = set()
    ttl_keys: set[bytes] = set()
    multi_key: list[list[bytes]] = []
    for index, batch, item in part.commands():
        name, args = item.name, item.args
        if (
            name == _SET
            and len(args) == 2
            and not item.kwargs
            and type(key := args[0]) is bytes
            and type(value := args[1]) is bytes
            and len(key) <= key_max
            and len(value) <= value_max
        ):
            run = runs.get(key)
            if run is None:
                at = index << POSITION_BITS | TICK_SLOTS
                runs[key] = [ENDS_SET | HAS_SET, value, index, at, NOWHERE, NOWHERE, 0]
            else:  # `_op`'s set, inline: most commands are plain SETs
                flags = run[0]
                if not flags & ENDS_SET:
                    run[3] = index << POSITION_BITS | TICK_SLOTS
                run[0] = flags | ENDS_SET | HAS_SET
                run[1] = value
                run[2] = index
            if index in open_indexes:
                outcomes[index] = _alone(LoggedCommand.of(index, batch, item))
            continue
        deleting = name in EVERY_ARGUMENT
        if not _blind_args(name, args, item.kwargs, key_max, value_max) or (
            deleting and index in open_indexes
        ):
            named = command_keys(name, args, index)
            kept_keys.update(named)
            kept_indexes.add(index)
            if gives_ttl(name, args):
                ttl_keys.update(named)
            continue
        keys = _keys(name, args)
        if len(keys) > 1:
            multi_key.append(keys)
        for position, key in enumerate(keys):
            value = None if deleting else args[2 * position + 1]
            _op(runs, key, index << POSITION_BITS | TICK_SLOTS + position, index, value)
        if index in open_indexes:
            outcomes[index] = _alone(LoggedCommand.of(index, batch, item))
    kept_keys.update(part.keep & runs.keys())
    kept = _kept(part, kept_keys, kept_indexes, multi_key) if kept_keys else []
    for key in kept_keys:
        runs.pop(key, None)
    return Summary(_columns(runs), frozenset(kept_keys), kept, outcomes, frozenset(ttl_keys))


def _kept(
    part: PartCommands, kept_keys: set[bytes], kept_indexes: set[int], multi_key: list[list[bytes]]
) -> list[LoggedCommand]:
    """The commands naming a kept key, in order, once `kept_keys` has every key of a blind
    command naming one (added here)."""
    growing = True
    while growing:
        growing = False
        for keys in multi_key:
            if not kept_keys.issuperset(keys) and not kept_keys.isdisjoint(keys):
                kept_keys.update(keys)
                growing = True
    return [
        LoggedCommand.of(index, batch, item)
        for index, batch, item in part.commands()
        if index in kept_indexes or not kept_keys.isdisjoint(_keys(item.name, item.args))
    ]


def _keys(name: str, args: list[bytes]) -> list[bytes]:
    """The keys of a blind command."""
    return args if name in EVERY_ARGUMENT else args[::2]


def _alone(command: LoggedCommand) -> Outcome:
    """The outcome of blind SET or MSET `command`, which does not depend on the state."""
    return apply_logged(KVStore(), command)


def _op(runs: dict[bytes, list[Any]], key: bytes, at: int, index: int, value: bytes | None) -> None:
    """The next op on `key`: a set of `value` at `at`, or a delete (None).  A run is the list
    [flags, value, version, created, buried, first delete, deletions]."""
    run = runs.get(key)
    if value is not None:
        if run is None:
            runs[key] = [ENDS_SET | HAS_SET, value, index, at, NOWHERE, NOWHERE, 0]
            return
        flags = run[0]
        if not flags & ENDS_SET:
            run[3] = at
        run[0] = flags | ENDS_SET | HAS_SET
        run[1] = value
        run[2] = index
    elif run is None:
        runs[key] = [HAS_DELETE | LEADING_DELETE, None, 0, NOWHERE, NOWHERE, at, 0]
    else:
        flags = run[0]
        if flags & ENDS_SET:
            run[6] += 1
            run[4] = at
        if run[5] == NOWHERE:
            run[5] = at
        run[0] = (flags & ~ENDS_SET) | HAS_DELETE


def _columns(runs: dict[bytes, list[Any]]) -> Runs:
    columns = Runs()
    columns.keys.extend(runs)
    rows = runs.values()
    columns.values.extend([run[1] for run in rows])
    for column, field_number in (
        (columns.flags, 0),
        (columns.versions, 2),
        (columns.created, 3),
        (columns.buried, 4),
        (columns.first_deletes, 5),
        (columns.deletions, 6),
    ):
        column.extend([run[field_number] for run in rows])
    return columns


def after(prior: Record | None, run: tuple[Any, ...]) -> tuple[Record | None, int]:
    """What a key holding `prior` (None: never held anything) holds after `run` (a row of
    `Runs`), and how many deletions that made."""
    _key, value, flags, version, created, buried, first_delete, deletions = run
    exists = prior is not None and prior.value is not None
    if exists and flags & LEADING_DELETE:
        deletions += 1
    if flags & ENDS_SET:
        if exists and not flags & HAS_DELETE:
            assert prior is not None
            created = prior.created
        return Record(value, version, created, NOWHERE), deletions
    if flags & HAS_SET:
        return Record(None, 0, NOWHERE, buried), deletions
    if exists:
        return Record(None, 0, NOWHERE, first_delete), deletions
    return prior, deletions


class _Tracked(KVStore):
    """A store noting, in order, the keys it deletes (and their expiry time, for an expired
    one) and the keys it gives a TTL."""

    def __init__(self, bounds: Settings) -> None:
        super().__init__(key_bytes_max=bounds[0], value_bytes_max=bounds[1])
        self._deleted: list[tuple[bytes, int | None]] = []
        self._timed: list[bytes] = []

    def _delete(self, key: bytes, *, expired_at_ms: int | None = None) -> None:
        self._deleted.append((key, expired_at_ms))
        super()._delete(key, expired_at_ms=expired_at_ms)

    def _expire(self, key: bytes, expire_at_ms: int, now_ms: int) -> None:
        super()._expire(key, expire_at_ms, now_ms)
        if key in self.expire_at_ms:
            self._timed.append(key)


class _Applied:
    """The kept keys, reduced by applying commands to one store."""

    def __init__(self, wanted: frozenset[int], bounds: Settings) -> None:
        self.machine = _Tracked(bounds)
        self._no_key = b"\0" * (bounds[0] + 1)
        """A key the store cannot hold (every write checks the bound): PERSIST of it only
        runs active expiry."""
        self.wanted = wanted
        self.records: dict[bytes, Record] = {}
        """What each kept key holds, with its creation, TTL and tombstone."""
        self.outcomes: dict[int, Outcome] = {}
        self.deletions = 0

    def seed(self, key: bytes, record: Record) -> None:
        """`key` holds `record` in the starting state."""
        self.records[key] = record
        if record.value is not None:
            self._impose(_SET, [key, record.value], record.version)
            if record.expire_at != NOWHERE:
                self._impose("pexpireat", [key, b"%d" % record.expire_at], record.version)

    def command(self, command: LoggedCommand) -> None:
        """Apply kept `command`, its active expiry included."""
        machine, records = self.machine, self.records
        values = machine.values
        index = command.index
        mine: dict[bytes, int] = {}
        for position, key in enumerate(command_keys(command.name, command.args, index)):
            mine.setdefault(key, position)
        before = {key: key in values for key in mine}
        machine._deleted.clear()
        machine._timed.clear()
        outcome = apply_logged(machine, command)
        gone = self._buried(index)
        timed = set(machine._timed)
        for key, position in mine.items():
            if key not in values:
                continue
            at = index << POSITION_BITS | TICK_SLOTS + position
            prior = records.get(key)
            created = at if prior is None or not before[key] or key in gone else prior.created
            expire_at = machine.expire_at_ms.get(key, NOWHERE)
            ttl_at = NOWHERE
            if expire_at != NOWHERE:
                ttl_at = at if key in timed or prior is None else prior.ttl_at
            records[key] = Record(
                values[key],
                machine.versions[key],
                created,
                NOWHERE,
                expire_at,
                ttl_at,
            )
        if index in self.wanted:
            self.outcomes[index] = outcome

    def tick(self, index: int, time_ms: int) -> None:
        """The active expiry of command `index`, logged at `time_ms`, not kept here."""
        machine = self.machine
        if not machine.expire_at_ms:
            return
        machine._deleted.clear()
        apply_logged(machine, LoggedCommand(index, time_ms, 0, "persist", [self._no_key], {}))
        self._buried(index)

    def _buried(self, index: int) -> set[bytes]:
        """Tombstone records for what `machine` deleted at `index`, in order; those keys."""
        gone: set[bytes] = set()
        for slot, (key, expired_at) in enumerate(self.machine._deleted):
            gone.add(key)
            self.deletions += 1
            self.records[key] = Record(
                None,
                0,
                NOWHERE,
                index << POSITION_BITS | slot,
                expired_at=NOWHERE if expired_at is None else expired_at,
            )
        return gone

    def run(self, run: tuple[Any, ...]) -> None:
        """Impose `run` on its key (which never has a TTL), as the set or delete it amounts
        to."""
        key = run[0]
        prior = self.records.get(key)
        record, deletions = after(prior, run)
        self.deletions += deletions
        if record is None or record is prior:
            return
        self.records[key] = record
        if record.value is not None:
            self._impose(_SET, [key, record.value], record.version)
        else:
            index = record.tombstone >> POSITION_BITS
            if key not in self.machine.values:
                self._impose(_SET, [key, b""], index)
            self._impose(_DELETE, [key], index)

    def _impose(self, name: str, args: list[bytes], index: int) -> None:
        """Apply `name(*args)` as if at `index`, at time 0 (so its active expiry deletes
        nothing)."""
        outcome = apply_logged(self.machine, LoggedCommand(index, 0, 0, name, args, {}))
        assert outcome.ok, outcome


def combine(request: CombineRequest) -> Reduced | Rerun:
    """The state after `request.last_index` (see the module docstring)."""
    summaries: list[Summary] = list(request.summaries)
    bounds = _settings(request.settings)
    fresh = request.machine_class or KVStore
    start = fresh() if request.start is None else request.start
    assert isinstance(start, KVStore)
    ttl_keys = frozenset(start.expire_at_ms).union(*(summary.ttl_keys for summary in summaries))
    if ttl_keys and any(key in ttl_keys for summary in summaries for key in summary.runs.keys):
        return Rerun(request.keep | ttl_keys)
    kept_keys = frozenset[bytes]().union(*(summary.kept_keys for summary in summaries))
    wanted = request.wanted
    applied = _Applied(wanted, bounds)
    outcomes: dict[int, Outcome] = {}
    records = _records(start)
    for key in kept_keys & records.keys():
        applied.seed(key, records.pop(key))
    deletions = len(start.tombstones)
    clocks = request.clocks if ttl_keys else [()] * len(summaries)
    for summary, clock in zip(summaries, clocks, strict=True):
        for run in summary.runs:
            key = run[0]
            if key in kept_keys:
                applied.run(run)
                continue
            prior = records.get(key)
            if prior is None and run[2] & ENDS_SET:  # `after`, for the most common case
                records[key] = Record(run[1], run[3], run[4], NOWHERE)
                deletions += run[7]
                continue
            record, gone = after(prior, run)
            deletions += gone
            if record is not None:
                records[key] = record
        if ttl_keys:
            kept = {command.index: command for command in summary.kept}
            for index, time_ms in clock:
                command = kept.get(index)
                if command is None:
                    applied.tick(index, time_ms)
                else:
                    applied.command(command)
        else:
            for command in summary.kept:
                applied.command(command)
        outcomes.update(
            (index, outcome) for index, outcome in summary.outcomes.items() if index in wanted
        )
    deletions += applied.deletions
    if deletions > limits.watch_tombstones_max:
        raise NotReducible(
            f"{deletions} deletions, more than {limits.watch_tombstones_max}: the key-value "
            "store's reducer does not reduce the order in which WATCH forgets them (replay does)"
        )
    records.update(applied.records)
    outcomes.update(applied.outcomes)
    machine = fresh()
    assert isinstance(machine, KVStore)
    machine.key_bytes_max, machine.value_bytes_max = bounds
    return Reduced(_machine(records.items(), start, machine), outcomes)


def _records(start: KVStore) -> dict[bytes, Record]:
    """The keys of a starting state, as records whose creations, TTLs and tombstones come
    before any of the log's, in the state's orders (numbers below NOWHERE)."""
    records: dict[bytes, Record] = {}
    before = NOWHERE - len(start.values)
    ttl_before = NOWHERE - len(start.expire_at_ms)
    ttl_ranks = {key: rank for rank, key in enumerate(start.expire_at_ms)}
    for rank, (key, value) in enumerate(start.values.items()):
        expire_at = start.expire_at_ms.get(key)
        records[key] = Record(
            value,
            start.versions[key],
            before + rank,
            NOWHERE,
            NOWHERE if expire_at is None else expire_at,
            NOWHERE if expire_at is None else ttl_before + ttl_ranks[key],
        )
    before = NOWHERE - len(start.tombstones)
    for rank, key in enumerate(start.tombstones):
        records[key] = Record(None, 0, NOWHERE, before + rank)
    return records


def _machine(
    records: Collection[tuple[bytes, Record]], start: KVStore, machine: KVStore
) -> KVStore:
    """`machine` (fresh) made to hold `records` over `start`, in replay's insertion orders."""
    values = sorted(
        [
            (record.created, key, value, record.version)
            for key, record in records
            if (value := record.value) is not None
        ]
    )
    timed = sorted(
        [
            (record.ttl_at, key, record.expire_at)
            for key, record in records
            if record.value is not None and record.expire_at != NOWHERE
        ]
    )
    tombstones = sorted(
        [
            (record.tombstone, key, record.expired_at)
            for key, record in records
            if record.tombstone != NOWHERE
        ]
    )
    machine.values = {key: value for _created, key, value, _version in values}
    machine.versions = {key: version for _created, key, _value, version in values}
    machine.expire_at_ms = {key: expire_at for _at, key, expire_at in timed}
    machine.tombstones = {
        key: (at >> POSITION_BITS, None if expired_at == NOWHERE else expired_at)
        if at > NOWHERE
        else start.tombstones[key]
        for at, key, expired_at in tombstones
    }
    machine.tombstones_forgotten_index = start.tombstones_forgotten_index
    machine._rebuild_derived()
    return machine


REDUCER: Final = SparkReducer(summarize, combine, settings)
