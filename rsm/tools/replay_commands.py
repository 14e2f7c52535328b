"""`rsm replay` and `rsm snapshot verify`: the state at an index, through the real class
(docs/tools.md)."""

from __future__ import annotations

import argparse
import bdb
import code
import pdb
import time
from typing import Any

from bookie.errors import leaf_error
from rsm.config import ReplicaConfig
from rsm.core.commands import answer_query
from rsm.core.log_format import LeaderStart
from rsm.core.state_machine import StateMachine, commands_by_key
from rsm.errors import InvalidConfig, StatusError
from rsm.tools.arguments import parse_arguments
from rsm.tools.options import (
    EXIT_OK,
    EXIT_PROBLEM,
    load_class,
    outcome_plain,
    replica_config,
    resolve_readable,
    source_arguments,
    with_option,
)
from rsm.tools.output import Progress, dumps, reproduce, unknown_command_line, utc
from rsm.tools.records import SCHEMA_VERSION, Record, plain_value, records
from rsm.tools.replay import Replay, advance, replay_to, start, verify_snapshot
from rsm.tools.source import LogSource, entries, open_source


async def replay(arguments: argparse.Namespace) -> int:
    machine_class = load_class(arguments, arguments.target)
    config = replica_config(arguments)
    known = commands_by_key(machine_class)
    if arguments.break_on is not None and arguments.break_on not in known:
        raise InvalidConfig(
            f"--break-on {arguments.break_on!r}: {arguments.target} has no such command (its "
            f"commands, as logged: {', '.join(sorted(known))})"
        )
    began = time.monotonic()
    async with open_source(**source_arguments(arguments)) as source:
        end = await source.end_index()
        target = await resolve_readable(source, arguments.last, end, end)
        progress = Progress("replay", 0, target)
        breaking = arguments.break_at is not None or arguments.break_on is not None
        if breaking:
            break_at = (
                await resolve_readable(source, arguments.break_at, 0, end)
                if arguments.break_at
                else None
            )
            if break_at is not None and break_at > target:
                raise InvalidConfig(f"--break-at {break_at} is past --to {target}")
            try:
                replay = await _replay_with_breaks(
                    source,
                    machine_class=machine_class,
                    config=config,
                    arguments=arguments,
                    target=target,
                    break_at=break_at,
                )
            except Exception as error:  # BdbQuit, alone or in the task groups' wrapping
                if not isinstance(leaf_error(error), bdb.BdbQuit):
                    raise
                return EXIT_OK  # the debugger's `q`: the replay ends there, nothing to report
        else:
            replay = await replay_to(
                source,
                machine_class,
                config,
                to_index=target,
                from_snapshot=arguments.from_snapshot,
                progress=progress,
            )
        progress.done()
    seconds = time.monotonic() - began
    if arguments.query:
        return _answer(replay, arguments)
    if arguments.shell:
        _shell(replay)
        return EXIT_OK
    report = _replay_plain(source.app, replay, seconds)
    if arguments.json:
        print(dumps(report))
    else:
        origin = (
            "the start"
            if replay.from_snapshot is None
            else f"the snapshot at index {replay.from_snapshot.index}"
        )
        print(
            f"replayed {source.app} to index {replay.index} (epoch {replay.position.epoch}, "
            f"{utc(replay.position.time_ms)}) from {origin}: {replay.commands} commands "
            f"in {seconds:.2f} s"
        )
        print(f"class {arguments.target}, state hash {report['state_hash']}")
        print(f"sessions {report['sessions']}")
        for line in _unknown_lines(replay, arguments.target):
            print(line)
    if replay.unknown:
        if not arguments.json:
            print(reproduce(arguments.argv))
        return EXIT_PROBLEM
    return EXIT_OK


def _unknown_lines(replay: Replay, target: str) -> list[str]:
    return [
        unknown_command_line(target, name, index)
        for name, index in sorted(replay.unknown.items(), key=lambda pair: pair[1])
    ]


def _replay_plain(app: str, replay: Replay, seconds: float) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "app": app,
        "index": replay.index,
        "epoch": replay.position.epoch,
        "time_ms": replay.position.time_ms,
        "from_snapshot": None if replay.from_snapshot is None else replay.from_snapshot.index,
        "commands": replay.commands,
        "seconds": round(seconds, 3),
        "state_hash": replay.state_hash().hex(),
        "sessions": len(replay.applier.sessions.to_plain()["sessions"]),
        "unknown_commands": dict(sorted(replay.unknown.items())),
    }


async def _replay_with_breaks(
    source: LogSource,
    *,
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    arguments: argparse.Namespace,
    target: int,
    break_at: int | None,
) -> Replay:
    """The replay, stopping in pdb before the chosen commands (see the module docstring)."""
    first_stop = target if break_at is None else min(break_at - 1, target)
    if arguments.break_on is not None:
        first_stop = 0
    replay = await start(
        source, machine_class, config, to_index=first_stop, from_snapshot=arguments.from_snapshot
    )
    await advance(source, replay, first_stop)
    async with entries(source, replay.index + 1, target) as logged:
        async for entry in logged:
            for record in records(entry):
                if record.index <= replay.index:
                    continue
                if record.index > target:
                    return replay
                if record.index == break_at or record.name == arguments.break_on:
                    _breakpoint(replay, record)
                for _step in replay.steps(entry, record.index):
                    pass
            if replay.index >= target:
                break
    return replay


def _breakpoint(replay: Replay, record: Record) -> None:
    """pdb, with `machine`, `replay` and `record` (the command about to apply) in scope."""
    machine = replay.machine
    print(f"stopped before {record.where}: {record.name} {plain_value(list(_args(record)))}")
    print(
        "in scope: machine (the state), record (the next command), replay; 'c' applies it, 'q' ends"
    )
    pdb.Pdb().set_trace()
    _ = (machine, record, replay)  # the debugger stops here; 'c' applies `record`


def _args(record: Record) -> list[Any]:
    return [] if isinstance(record.item, LeaderStart) else list(record.item.args)


def _answer(replay: Replay, arguments: argparse.Namespace) -> int:
    name, *words = arguments.query
    args, kwargs = parse_arguments(words, as_bytes=arguments.bytes)
    try:
        outcome = answer_query(replay.machine, name, args, kwargs, applied=replay.position)
    except StatusError as error:
        raise InvalidConfig(str(error)) from None
    if arguments.json:
        print(dumps({"schema": SCHEMA_VERSION, "index": replay.index, **outcome_plain(outcome)}))
    elif outcome.ok:
        print(dumps(plain_value(outcome.value)))
    else:
        print(f"error: {outcome_plain(outcome)['error']}")
    return EXIT_OK if outcome.ok else EXIT_PROBLEM


def _shell(replay: Replay) -> None:
    def query(name: str, *args: Any, **kwargs: Any) -> Any:
        return answer_query(replay.machine, name, args, kwargs, applied=replay.position).value

    scope = {"machine": replay.machine, "replay": replay, "query": query}
    banner = (
        f"state of {replay.machine_class.__qualname__} at index {replay.index}: "
        "machine, query(name, *args), replay"
    )
    code.interact(banner=banner, local=scope, exitmsg="")


async def snapshot_verify(arguments: argparse.Namespace) -> int:
    machine_class = load_class(arguments, arguments.target)
    config = replica_config(arguments)
    async with open_source(**source_arguments(arguments)) as source:
        value = await source.snapshots()
        manifest = value.newest if arguments.index is None else value.find(arguments.index)
        if manifest is None:
            raise InvalidConfig(
                f"{source.app!r} has no snapshot"
                if arguments.index is None
                else f"{source.app!r} has no snapshot at index {arguments.index}"
            )
        progress = Progress("snapshot verify", 0, manifest.index)
        checked = await verify_snapshot(source, machine_class, config, manifest, progress=progress)
        progress.done()
    origin = (
        "the start"
        if checked.replay.from_snapshot is None
        else f"the snapshot at index {checked.replay.from_snapshot.index}"
    )
    report = {
        "schema": SCHEMA_VERSION,
        "app": source.app,
        "index": manifest.index,
        "ledger_id": manifest.ledger_id,
        "replayed_from": None
        if checked.replay.from_snapshot is None
        else checked.replay.from_snapshot.index,
        "commands": checked.replay.commands,
        "snapshot_hash": checked.snapshot_hash.hex(),
        "replayed_hash": checked.replayed_hash.hex(),
        "sessions_equal": checked.sessions_equal,
        "equal": checked.equal,
    }
    if arguments.json:
        print(dumps(report))
    elif checked.equal:
        print(
            f"{source.app}: the snapshot at index {manifest.index} (ledger {manifest.ledger_id}) "
            f"equals replay from {origin} ({checked.replay.commands} commands): state hash "
            f"{report['snapshot_hash']}"
        )
    else:
        print(
            f"{source.app}: the snapshot at index {manifest.index} (ledger {manifest.ledger_id}) "
            f"DIFFERS from replay from {origin} ({checked.replay.commands} commands)"
        )
        print(f"  snapshot  {report['snapshot_hash']}")
        print(f"  replayed  {report['replayed_hash']}")
        if not checked.sessions_equal:
            print("  and the session tables differ")
        words = with_option(arguments.argv, "--index", str(manifest.index))
        print(reproduce(words))
    return EXIT_OK if checked.equal else EXIT_PROBLEM
