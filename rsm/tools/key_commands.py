"""`rsm diff` and `rsm blame`: where two states differ, and every command that changed a key
(docs/tools.md).

`key_history` and `query_at` are also what an application's own command
line builds on (`rsm.tools`; the key-value store's `kvstore history` and
`kvstore get --at`): the class and the replicas' settings are the caller's,
the source is `open_source`'s options.

`rsm diff --replica A --replica B` compares two replicas' own states, never
the log's idea of them: each replica's newest registered snapshot (taken
from that replica's memory).  When they are at different indexes, the older
one is brought to the newer one's index by replaying the log from it through
the class, as that replica itself would apply it; nothing is written.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rsm.config import ReplicaConfig
from rsm.core.commands import answer_query
from rsm.core.sessions import Outcome
from rsm.core.snapshot_manifest import Manifest
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, StatusError, Truncated
from rsm.host import aligned
from rsm.tools.arguments import key_bytes
from rsm.tools.key_changes import KeyChange, key_changes, key_digest
from rsm.tools.log_commands import DUMP_HEADER, record_row
from rsm.tools.options import (
    EXIT_OK,
    EXIT_PROBLEM,
    check_asked_range,
    load_class,
    outcome_plain,
    replica_config,
    resolve_index,
    resolve_readable,
    source_arguments,
)
from rsm.tools.output import Progress, dumps, reproduce, unknown_command_line
from rsm.tools.records import SCHEMA_VERSION, plain_value, record_plain, short_value
from rsm.tools.replay import Replay, advance, start
from rsm.tools.source import LogSource, open_source
from rsm.tools.state_diff import BY_KEYS, StateDiff, diff_states

_DIGEST_CHARS: Final = 16
"""Hex characters of a digest a table shows (JSON has all of them)."""
_VALUE_CHARS: Final = 40
_ABSENT: Final = "-"


def _short(digest: bytes | None) -> str:
    return _ABSENT if digest is None else digest.hex()[:_DIGEST_CHARS]


def _shown(text: str | None) -> str:
    return _ABSENT if text is None else short_value(text, _VALUE_CHARS)


def _hex(digest: bytes | None) -> str | None:
    return None if digest is None else digest.hex()


async def _range(source: LogSource, first: str | None, last: str | None) -> tuple[int, int]:
    """The inclusive index range `--from`/`--to` name (default: the whole log that can be
    replayed: a truncated one from just after its oldest snapshot that covers it)."""
    end = await source.end_index()
    default = source.log.first_index
    if first is None and default > 1:
        value = await source.snapshots()
        covering = [m.index for m in value.snapshots if default - 1 <= m.index <= end]
        if covering:
            default = min(covering) + 1
    low = await resolve_readable(source, first, default, end)
    high = await resolve_readable(source, last, end, end)
    check_asked_range(source, (first, last), low, high)
    return low, high


async def _state_at(
    source: LogSource, machine_class: type[StateMachine], config: ReplicaConfig, index: int
) -> Replay:
    """The replay at `index`, from the newest snapshot at or below it; `InvalidConfig` past the
    readable end, `Truncated` when neither the log nor a snapshot reaches back to it."""
    end = await source.end_index()
    if index > end:
        raise InvalidConfig(f"index {index} is past the log's readable end, index {end}")
    replay = await start(source, machine_class, config, to_index=index, from_snapshot=True)
    first = source.log.first_index
    if replay.index < index and replay.index + 1 < first:
        raise Truncated(
            f"the state at index {index} cannot be rebuilt from {source.description}: the log "
            f"starts at index {first} and no snapshot at or below index {index} covers what "
            "lies before"
        )
    await advance(source, replay, index)
    return replay


# --- rsm blame --------------------------------------------------------------------------------


async def blame(arguments: argparse.Namespace) -> int:
    machine_class = load_class(arguments, arguments.target)
    return await key_history(
        source_arguments(arguments),
        machine_class,
        replica_config(arguments),
        key=key_bytes(arguments.key),
        first=arguments.first,
        last=arguments.last,
        as_json=arguments.json,
    )


async def key_history(
    source_options: dict[str, Any],
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    *,
    key: bytes,
    first: str | None,
    last: str | None,
    as_json: bool,
) -> int:
    """Print every command that changed `key` in `first..last` (positions; default: the whole
    readable log): a table, or NDJSON, one object per change.  A key the state holds nowhere
    in the range is `InvalidConfig`."""
    key_digest(machine_class(), key)  # a class without per-key digests fails before reading
    async with open_source(**source_options) as source:
        low, high = await _range(source, first, last)
        replay = await _state_at(source, machine_class, config, low - 1)
        initial = key_digest(replay.machine, key)
        progress = Progress("blame", low - 1, high)
        changes: list[KeyChange] = []
        count = 0
        async with key_changes(source, replay, key, high, progress=progress) as found:
            async for change in found:
                count += 1
                if as_json:
                    print(dumps(_change_plain(key, change)), flush=True)
                else:
                    changes.append(change)
        progress.done()
    shown = repr(plain_value(key))
    if initial is None and not count:
        raise InvalidConfig(f"{source.app} holds no key {shown} at any index of {low}..{high}")
    if not as_json:
        print(
            _render_history(source.app, shown, low=low, high=high, initial=initial, changes=changes)
        )
    return EXIT_OK


def _change_plain(key: bytes, change: KeyChange) -> dict[str, Any]:
    """The JSON object of one change: the command's record and the key's digests."""
    return {
        **record_plain(change.record),
        "key": plain_value(key),
        "before": _hex(change.before),
        "after": _hex(change.after),
        "value": change.shown,
        "outcome": outcome_plain(change.outcome),
    }


def _render_history(
    app: str,
    shown: str,
    *,
    low: int,
    high: int,
    initial: bytes | None,
    changes: list[KeyChange],
) -> str:
    start_state = "absent" if initial is None else f"digest {_short(initial)}"
    count = f"{len(changes)} command{'' if len(changes) == 1 else 's'}"
    lines = [
        f"{app}: key {shown} in indexes {low}..{high}: {count} changed it ({start_state} "
        f"before index {low})"
    ]
    if not changes:
        return "\n".join(lines)
    values = any(change.shown is not None for change in changes)
    header = (*DUMP_HEADER, "DIGEST", *(("VALUE",) if values else ()))
    rows: list[tuple[str, ...]] = [header]
    for change in changes:
        value = (_shown(change.shown),) if values else ()
        rows.append((*record_row(change.record), _short(change.after), *value))
    return "\n".join(lines + aligned(rows))


# --- rsm diff ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Side:
    """One of the two states compared, and how it was obtained."""

    label: str
    index: int
    machine: StateMachine
    replica_id: str | None = None
    snapshot: int | None = None
    """The index of the snapshot it was loaded from (None: replayed from the start)."""
    unknown: Mapping[str, int] = field(default_factory=dict)
    """Commands the class does not know that its replay met (`Replay.unknown`)."""

    def plain(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "index": self.index,
            "replica_id": self.replica_id,
            "snapshot": self.snapshot,
            "state_hash": self.machine.state_hash().hex(),
        }


async def diff(arguments: argparse.Namespace) -> int:
    machine_class = load_class(arguments, arguments.target)
    config = replica_config(arguments)
    points, replicas = arguments.at or [], arguments.replicas or []
    if bool(points) == bool(replicas) or len(points or replicas) != 2:
        raise InvalidConfig(
            "give two points of the log (--at I --at J) or two replicas (--replica A --replica B)"
        )
    async with open_source(**source_arguments(arguments)) as source:
        if points:
            sides = [await _at_index(source, machine_class, config, point) for point in points]
        else:
            sides = await _of_replicas(source, machine_class, config, replicas)
    compared = diff_states(sides[0].machine, sides[1].machine)
    report = _diff_plain(source.app, sides, compared)
    unknown: dict[str, int] = {}
    for side in sides:
        for name, index in side.unknown.items():
            unknown[name] = min(index, unknown.get(name, index))
    report["unknown_commands"] = dict(sorted(unknown.items()))
    problem = not compared.equal or bool(unknown)
    if problem:
        report["reproduce"] = reproduce(arguments.argv)
    if arguments.json:
        print(dumps(report))
    else:
        print(_render_diff(report, arguments.target))
    return EXIT_PROBLEM if problem else EXIT_OK


async def _at_index(
    source: LogSource, machine_class: type[StateMachine], config: ReplicaConfig, point: str
) -> _Side:
    index = await resolve_index(source, point, 0)
    replay = await _state_at(source, machine_class, config, index)
    origin = replay.from_snapshot
    return _Side(
        f"index {index}",
        index,
        replay.machine,
        snapshot=None if origin is None else origin.index,
        unknown=replay.unknown,
    )


async def _of_replicas(
    source: LogSource,
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    replicas: Sequence[str],
) -> list[_Side]:
    """Each replica's newest snapshot, the older brought to the newer's index by replay (see
    the module docstring)."""
    value = await source.snapshots()
    taken = {m.replica_id: m for m in reversed(value.newest_first())}
    manifests: list[Manifest] = []
    for replica_id in replicas:
        manifest = taken.get(replica_id)
        if manifest is None:
            by = ", ".join(f"{m.replica_id} at {m.index}" for m in value.newest_first())
            raise InvalidConfig(
                f"replica {replica_id!r} has no registered snapshot of {source.app!r} "
                f"(snapshots: {by or 'none'}); if it is a replica of the application (`rsm "
                f"status` lists them), `rsm snapshot create --replica {replica_id}` takes one "
                "(it writes a snapshot ledger) once it has applied a command after the newest "
                "snapshot"
            )
        manifests.append(manifest)
    target = max(m.index for m in manifests)
    sides: list[_Side] = []
    for replica_id, manifest in zip(replicas, manifests, strict=True):
        restored = await source.restore(manifest, machine_class(), config)
        replay = Replay(machine_class, config)
        replay.applier.install(restored.machine, restored.sessions, restored.position, None)
        await advance(source, replay, target)
        label = f"{replica_id} (snapshot at index {manifest.index}"
        label += f", replayed to {target})" if manifest.index < target else ")"
        sides.append(
            _Side(label, target, replay.machine, replica_id, manifest.index, replay.unknown)
        )
    return sides


def _diff_plain(app: str, sides: list[_Side], compared: StateDiff) -> dict[str, Any]:
    stream = compared.stream
    return {
        "schema": SCHEMA_VERSION,
        "app": app,
        "first": sides[0].plain(),
        "second": sides[1].plain(),
        "by": compared.by,
        "equal": compared.equal,
        "keys_compared": compared.keys_compared,
        "keys": [
            {
                "key": plain_value(difference.key),
                "first": _hex(difference.first),
                "second": _hex(difference.second),
                "first_value": difference.first_shown,
                "second_value": difference.second_shown,
            }
            for difference in compared.keys
        ],
        "stream": None
        if stream is None
        else {
            "offset": stream.offset,
            "first_chunk": stream.first_chunk,
            "second_chunk": stream.second_chunk,
            "first_bytes": stream.first_bytes,
            "second_bytes": stream.second_bytes,
        },
    }


def _render_diff(report: dict[str, Any], target: str) -> str:
    first, second = report["first"]["label"], report["second"]["label"]
    app = report["app"]
    problems = [
        unknown_command_line(target, name, index)
        for name, index in sorted(report["unknown_commands"].items(), key=lambda pair: pair[1])
    ]
    if report["equal"]:
        what = (
            f"{report['keys_compared']} keys"
            if report["by"] == BY_KEYS
            else "snapshot streams byte for byte"
        )
        equal = (
            f"{app}: {first} and {second} are equal ({what}; state hash "
            f"{report['first']['state_hash']})"
        )
        return "\n".join([equal, *problems, report["reproduce"]] if problems else [equal])
    lines: list[str] = []
    if report["by"] == BY_KEYS:
        keys = report["keys"]
        lines.append(
            f"{app}: {first} and {second} differ at {len(keys)} of {report['keys_compared']} keys"
        )
        values = any(k["first_value"] is not None or k["second_value"] is not None for k in keys)
        rows: list[tuple[str, ...]] = [
            ("KEY", "DIGEST 1", "DIGEST 2", *(("VALUE 1", "VALUE 2") if values else ()))
        ]
        for difference in keys:
            shown = (
                (_shown(difference["first_value"]), _shown(difference["second_value"]))
                if values
                else ()
            )
            rows.append(
                (
                    short_value(difference["key"], _VALUE_CHARS),
                    _short_hex(difference["first"]),
                    _short_hex(difference["second"]),
                    *shown,
                )
            )
        lines += [f"  1: {first}", f"  2: {second}", *aligned(rows)]
    else:
        stream = report["stream"]
        lines += [
            f"{app}: {first} and {second} differ (the class offers no per-key digests: "
            "snapshot streams compared)",
            f"  1: {first}",
            f"  2: {second}",
            f"  first difference at byte {stream['offset']}: {_chunk(stream['first_chunk'])} "
            f"of 1 ({stream['first_bytes']} bytes), {_chunk(stream['second_chunk'])} of 2 "
            f"({stream['second_bytes']} bytes)",
        ]
    lines.append(f"  state hash 1 {report['first']['state_hash']}")
    lines.append(f"  state hash 2 {report['second']['state_hash']}")
    lines += problems
    lines.append(report["reproduce"])
    return "\n".join(lines)


def _short_hex(digest: str | None) -> str:
    return _ABSENT if digest is None else digest[:_DIGEST_CHARS]


def _chunk(number: int | None) -> str:
    return "past the end" if number is None else f"chunk {number}"


# --- a query at an index ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueryAt:
    """A query's outcome on the state at an index."""

    index: int
    from_snapshot: int | None
    outcome: Outcome


async def query_at(
    source_options: dict[str, Any],
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    *,
    at: str,
    name: str,
    args: Sequence[Any],
) -> QueryAt:
    """Replay to the index `at` names (from the newest snapshot at or below it) and answer the
    class's query `name` there, as a replica at that index would."""
    async with open_source(**source_options) as source:
        index = await resolve_index(source, at, 0)
        replay = await _state_at(source, machine_class, config, index)
    try:
        outcome = answer_query(replay.machine, name, args, {}, applied=replay.position)
    except StatusError as error:
        raise InvalidConfig(str(error)) from None
    origin = replay.from_snapshot
    return QueryAt(replay.index, None if origin is None else origin.index, outcome)
