"""`rsm verify`, `rsm bisect`, `rsm determinism`: where and why states part (docs/tools.md)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Final

import anyio

from bookie.net.tls_flags import bookie_tls_context
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, MalformedValue, RsmError, Truncated
from rsm.machines import add_app_dir, load_machine
from rsm.tools import determinism as determinism_engine
from rsm.tools.lockstep import Divergence, first_divergence
from rsm.tools.options import (
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_USAGE,
    load_class,
    outcome_plain,
    replica_config,
    resolve_readable,
    source_arguments,
    with_option,
)
from rsm.tools.output import Progress, dumps, reproduce, unknown_command_line
from rsm.tools.records import SCHEMA_VERSION, record_plain
from rsm.tools.replay import HashCheck, logged_hash_indexes, start
from rsm.tools.source import entries, open_source

_HASH_SEED_MAX: Final = 4_294_967_295
"""The largest PYTHONHASHSEED the interpreter takes (the range its documentation gives)."""


async def verify(arguments: argparse.Namespace) -> int:
    machine_class = load_class(arguments, arguments.target)
    config = replica_config(arguments)
    async with open_source(**source_arguments(arguments)) as source:
        end = await source.end_index()
        target = await resolve_readable(source, arguments.last, end, end)
        truncated = source.log.first_index > 1
        hash_at = None
        if arguments.state_hash_every is None:
            hash_at = await logged_hash_indexes(source, source.log.first_index)
        replay = await start(
            source,
            machine_class,
            config,
            to_index=target,
            from_snapshot=truncated,
            hash_at=hash_at,
        )
        progress = Progress("verify", replay.index, target)
        bad: HashCheck | None = None
        async with entries(source, replay.index + 1, target) as logged:
            async for entry in logged:
                replay.apply_through(entry, target)
                progress(replay.index)
                if replay.checks and replay.checks[-1].matches is False:
                    bad = replay.checks[-1]
                    break
                if replay.index >= target:
                    break
        progress.done()
        culprit = None
        if bad is not None and arguments.reference is not None:
            reference = load_machine(arguments.reference)
            result = await first_divergence(
                source, reference, machine_class, config, to_index=bad.index
            )
            culprit = result.divergence
    checks = replay.checks
    good = [check for check in checks if check.matches]
    unverified = [check for check in checks if check.matches is None]
    last_good = good[-1] if good else None
    report = {
        "schema": SCHEMA_VERSION,
        "app": source.app,
        "to": replay.index,
        "checked": len(good) + (bad is not None),
        "matched": len(good),
        "unverified": len(unverified),
        "last_good": None if last_good is None else _check_plain_hash(last_good),
        "first_bad": None if bad is None else _check_plain_hash(bad),
        "divergence": None if culprit is None else divergence_plain(culprit),
        "nondeterminism": None,
    }
    words = list(arguments.argv)
    if bad is not None:
        low = 1 if last_good is None else last_good.index + 1
        report["window"] = [low, bad.index]
        report["reproduce"] = reproduce(with_option(words, "--to", str(bad.index)))
        if culprit is None and arguments.reference is None:
            report["nondeterminism"] = await _window_determinism(arguments, low, bad.index)
    if arguments.json:
        print(dumps(report))
    else:
        print(_render_verify(report, arguments))
    if bad is not None:
        return EXIT_PROBLEM
    # Hashes logged but none comparable: the replay hashed on another schedule.
    return EXIT_USAGE if unverified and not good else EXIT_OK


_WINDOW_SEEDS: Final = (1, 2)


async def _window_determinism(
    arguments: argparse.Namespace, first: int, last: int
) -> dict[str, Any] | None:
    """Replay `first..last` in two processes with different hash seeds, hashing after every
    command: where they first differ, or None when they agree."""
    base = _child_words(arguments, last)
    seeds = [str(seed) for seed in _WINDOW_SEEDS]
    outputs = await _run_children([*base, "--from", str(first), "--per-command"], seeds)
    mismatch = determinism_engine.first_mismatch(*outputs)
    if mismatch is None:
        return None
    line = mismatch.first if mismatch.first.get("index") is not None else mismatch.second
    return {key: line.get(key) for key in ("index", "ledger_id", "entry_id", "slot")}


def _check_plain_hash(check: HashCheck) -> dict[str, Any]:
    return {
        "index": check.index,
        "logged": check.logged.hex(),
        "replayed": None if check.replayed is None else check.replayed.hex(),
        "carried_by": {"ledger_id": check.entry.ledger_id, "entry_id": check.entry.entry_id},
    }


def divergence_plain(divergence: Divergence) -> dict[str, Any]:
    return {
        "kind": divergence.kind,
        "record": record_plain(divergence.record),
        "old": outcome_plain(divergence.old),
        "new": outcome_plain(divergence.new),
        "old_hash": None if divergence.old_hash is None else divergence.old_hash.hex(),
        "new_hash": None if divergence.new_hash is None else divergence.new_hash.hex(),
    }


def _render_verify(report: dict[str, Any], arguments: argparse.Namespace) -> str:
    app = report["app"]
    bad = report["first_bad"]
    lines: list[str] = []
    if bad is None:
        if report["checked"] == 0:
            lines.append(
                f"{app}: no logged state hash could be checked up to index {report['to']} "
                f"({report['unverified']} logged at indexes this replay did not hash: is "
                f"--state-hash-every {arguments.state_hash_every} the replicas' setting?)"
                if report["unverified"]
                else f"{app}: the log carries no state hash up to index {report['to']}, so "
                "nothing was checked (replicas log one every "
                f"{limits.state_hash_every_commands_default:,} commands by default; "
                "`rsm run --state-hash-every N` logs them more often)"
            )
        else:
            lines.append(
                f"{app}: {report['matched']} state hashes match up to index {report['to']}"
                + (f" ({report['unverified']} not checked)" if report["unverified"] else "")
            )
        return "\n".join(lines)
    good = report["last_good"]
    lines.append(f"{app}: the state hash logged at index {bad['index']} does not match")
    lines.append(f"  logged    {bad['logged']}")
    lines.append(f"  replayed  {bad['replayed']}")
    lines.append(
        "last good: "
        + ("none (the first logged hash is bad)" if good is None else f"index {good['index']}")
    )
    lines.append(f"the states part within indexes {report['window'][0]}..{report['window'][1]}")
    divergence = report["divergence"]
    if divergence is not None:
        lines.extend(_render_divergence(divergence, "reference", "replayed"))
    elif arguments.reference is None:
        found = report["nondeterminism"]
        seeds = " and ".join(str(seed) for seed in _WINDOW_SEEDS)
        if found is None:
            lines.append(
                f"replayed twice over the window (PYTHONHASHSEED {seeds}) the class gives the "
                "same states: the log was written by other code; to name the command: "
                "--reference MODULE:CLASS (the code that wrote it)"
            )
        else:
            lines.append(
                f"the class is not deterministic: over the window, replays with PYTHONHASHSEED "
                f"{seeds} first differ at index {found['index']} (ledger {found['ledger_id']}, "
                f"entry {found['entry_id']}, slot {found['slot']})"
            )
    lines.append(report["reproduce"])
    return "\n".join(lines)


def _render_divergence(divergence: dict[str, Any], old: str, new: str) -> list[str]:
    record = divergence["record"]
    args = " ".join(dumps(arg) for arg in record["args"])
    lines = [
        f"first divergence ({divergence['kind']}) at index {record['index']} (ledger "
        f"{record['ledger_id']}, entry {record['entry_id']}, slot {record['slot']}): "
        f"{record['command']} {args}".rstrip(),
        f"  {old}: {dumps(divergence['old'])}",
        f"  {new}: {dumps(divergence['new'])}",
    ]
    if divergence["kind"] == "state":
        lines.append(f"  {old} state hash {divergence['old_hash']}")
        lines.append(f"  {new} state hash {divergence['new_hash']}")
    return lines


async def bisect(arguments: argparse.Namespace) -> int:
    add_app_dir(arguments.app_dir)
    old_class = load_machine(arguments.old)
    new_class = load_machine(arguments.new)
    config = replica_config(arguments)
    if arguments.logs and (arguments.app or arguments.zk):
        raise InvalidConfig("give either --log FILE ... or --app and --zk, not both")
    sources: list[str | None] = list(arguments.logs) if arguments.logs else [None]
    statuses: list[int] = []
    for log_file in sources:
        options = {**_source_options_bisect(arguments), "log_file": log_file}
        try:
            report = await _bisect_one(arguments, options, old_class, new_class, config)
        except (InvalidConfig, Truncated, MalformedValue) as error:
            if len(sources) == 1:
                raise
            # One report per log: a log that cannot be replayed says so, the others go on.
            report = {
                "schema": SCHEMA_VERSION,
                "source": f"--log {log_file}",
                "error": f"{type(error).__name__}: {error}",
            }
            usage = isinstance(error, InvalidConfig | Truncated)
            statuses.append(EXIT_USAGE if usage else EXIT_PROBLEM)
        else:
            problem = report["divergence"] is not None or any(report["unknown_commands"].values())
            statuses.append(EXIT_PROBLEM if problem else EXIT_OK)
        if arguments.json:
            print(dumps(report), flush=True)
        else:
            print(_render_bisect(report, arguments), flush=True)
    if EXIT_PROBLEM in statuses:
        return EXIT_PROBLEM
    return max(statuses)


async def _bisect_one(
    arguments: argparse.Namespace,
    options: dict[str, Any],
    old_class: type[StateMachine],
    new_class: type[StateMachine],
    config: ReplicaConfig,
) -> dict[str, Any]:
    async with open_source(**options) as source:
        end = await source.end_index()
        target = await resolve_readable(source, arguments.last, end, end)
        progress = Progress("bisect", 0, target)
        result = await first_divergence(
            source,
            old_class,
            new_class,
            config,
            to_index=target,
            compare_states=not arguments.results_only,
            progress=progress,
        )
        progress.done()
    old_unknown, new_unknown = result.unknown
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "source": source.description,
        "app": source.app,
        "commands": result.commands,
        "to": result.last_index,
        "divergence": None if result.divergence is None else divergence_plain(result.divergence),
        "unknown_commands": {"old": dict(old_unknown), "new": dict(new_unknown)},
    }
    at = None if result.divergence is None else result.divergence.record.index
    if at is None and (old_unknown or new_unknown):
        at = min([*old_unknown.values(), *new_unknown.values()])
    if at is not None:
        report["reproduce"] = reproduce(_bisect_words(arguments, source.description, at))
    return report


def _source_options_bisect(arguments: argparse.Namespace) -> dict[str, Any]:
    return {
        "app": arguments.app,
        "zk": arguments.zk,
        "ledger_root": arguments.ledger_root,
        "tls": bookie_tls_context(arguments),
    }


def _bisect_words(arguments: argparse.Namespace, description: str, index: int) -> list[str]:
    words = ["bisect", *description.split(), "--old", arguments.old, "--new", arguments.new]
    words += ["--to", str(index)]
    if arguments.app_dir != ".":
        words += ["--app-dir", arguments.app_dir]
    if arguments.results_only:
        words.append("--results-only")
    return words


def _render_bisect(report: dict[str, Any], arguments: argparse.Namespace) -> str:
    if "error" in report:
        return f"{report['source']}: error: {report['error']}"
    divergence = report["divergence"]
    unknown = report["unknown_commands"]
    lines = [
        unknown_command_line(arguments.old if side == "old" else arguments.new, name, index)
        for side in ("old", "new")
        for name, index in sorted(unknown[side].items(), key=lambda pair: pair[1])
    ]
    if divergence is None:
        lines.insert(
            0,
            f"{report['app']} ({report['source']}): {arguments.old} and {arguments.new} agree "
            f"on all {report['commands']} commands up to index {report['to']}",
        )
    else:
        lines.insert(
            0, f"{report['app']} ({report['source']}): {arguments.old} and {arguments.new} differ"
        )
        lines[1:1] = _render_divergence(divergence, f"old {arguments.old}", f"new {arguments.new}")
    if "reproduce" in report:
        lines.append(report["reproduce"])
    return "\n".join(lines)


# --- rsm determinism --------------------------------------------------------------------------


async def determinism(arguments: argparse.Namespace) -> int:
    machine_class = load_class(arguments, arguments.target)
    config = replica_config(arguments)
    if arguments.child:
        return await _determinism_child(arguments, machine_class, config)
    seeds = _hash_seeds(arguments.hash_seeds)
    async with open_source(**source_arguments(arguments)) as source:
        end = await source.end_index()
        target = await resolve_readable(source, arguments.last, end, end)
        app = source.app
    base = _child_words(arguments, target)
    outputs = await _run_children(base, seeds)
    mismatch = determinism_engine.first_mismatch(*outputs)
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "app": app,
        "to": target,
        "hash_seeds": [int(seed) for seed in seeds],
        "entries": len(outputs[0]),
        "divergence": None,
    }
    if mismatch is not None:
        window = _window(outputs[0], mismatch)
        narrow = await _run_children([*base, "--from", str(window[0]), "--per-command"], seeds)
        command = determinism_engine.first_mismatch(*narrow)
        at = command if command is not None else mismatch
        report["divergence"] = {
            "what": at.what,
            "window": list(window),
            "index": at.first.get("index") or at.second.get("index"),
            "ledger_id": at.first.get("ledger_id", at.second.get("ledger_id")),
            "entry_id": at.first.get("entry_id", at.second.get("entry_id")),
            "slot": at.first.get("slot", at.second.get("slot")),
            "first": at.first,
            "second": at.second,
        }
        words = with_option(list(arguments.argv), "--to", str(report["divergence"]["index"]))
        report["reproduce"] = reproduce(words)
    if arguments.json:
        print(dumps(report))
    else:
        print(_render_determinism(report, arguments))
    return EXIT_PROBLEM if mismatch is not None else EXIT_OK


def _hash_seeds(text: str) -> list[str]:
    """The two PYTHONHASHSEED values of `--hash-seeds`, as the interpreter reads them."""
    words = text.split(",")
    if len(words) == 2 and all(word.isascii() and word.isdigit() for word in words):
        seeds = [int(word) for word in words]
        if seeds[0] != seeds[1] and all(seed <= _HASH_SEED_MAX for seed in seeds):
            return [str(seed) for seed in seeds]
    raise InvalidConfig(
        f"--hash-seeds {text!r} is not two different numbers from 0 to {_HASH_SEED_MAX}"
    )


def _window(lines: list[dict[str, Any]], mismatch: determinism_engine.Mismatch) -> tuple[int, int]:
    """The indexes of the first differing entry: after the previous line's, up to its own."""
    index: int = mismatch.first.get("index") or mismatch.second["index"]
    previous = 0
    for line in lines:
        if line["index"] is not None and line["index"] >= index:
            break
        previous = line["index"]
    return previous + 1, index


def _child_words(arguments: argparse.Namespace, target: int) -> list[str]:
    words = [sys.executable, "-m", "rsm.tools.cli", "determinism", "--child"]
    if arguments.log_file is not None:
        words += ["--log", arguments.log_file]
    else:
        words += ["--app", arguments.app, "--zk", arguments.zk]
        words += ["--ledger-root", arguments.ledger_root]
    words += ["--class", arguments.target, "--app-dir", os.path.abspath(arguments.app_dir)]
    words += ["--to", str(target)]
    if arguments.state_hash_every is not None:
        words += ["--state-hash-every", str(arguments.state_hash_every)]
    for name in ("session_ttl_ms", "sessions_max", "session_evict_idle_ms", "session_results_max"):
        words += ["--" + name.replace("_", "-"), str(getattr(arguments, name))]
    return words


async def _run_children(words: list[str], seeds: list[str]) -> list[list[dict[str, Any]]]:
    outputs: dict[int, bytes] = {}
    failures: list[RsmError] = []

    async def child(position: int, seed: str) -> None:
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        process = await anyio.run_process(words, env=environment, check=False)
        if process.returncode != 0:
            lines = process.stderr.decode(errors="replace").strip().splitlines()
            said = lines[-1].removeprefix("error: ") if lines else f"status {process.returncode}"
            if process.returncode == EXIT_USAGE:
                # What the replay was asked cannot be done (a truncated range, say):
                # the same for either seed, and the caller's to fix.
                kind, _, text = said.partition(": ")
                failures.append(Truncated(text) if kind == "Truncated" else InvalidConfig(said))
            else:
                failures.append(RsmError(f"the replay with PYTHONHASHSEED={seed} failed: {said}"))
            task_group.cancel_scope.cancel()
            return
        outputs[position] = process.stdout

    async with anyio.create_task_group() as task_group:
        for position, seed in enumerate(seeds):
            task_group.start_soon(child, position, seed)
    if failures:
        raise failures[0]
    return [determinism_engine.parse_lines(outputs[position]) for position in range(2)]


async def _determinism_child(
    arguments: argparse.Namespace, machine_class: type[StateMachine], config: ReplicaConfig
) -> int:
    async with open_source(**source_arguments(arguments)) as source:
        end = await source.end_index()
        target = await resolve_readable(source, arguments.last, end, end)
        first = (
            None
            if arguments.first is None
            else await resolve_readable(source, arguments.first, 1, end)
        )
        lines = determinism_engine.digest_lines(
            source,
            machine_class,
            config,
            from_index=first,
            to_index=target,
            per_command=arguments.per_command,
        )
        async for line in lines:
            print(dumps(line))
    return EXIT_OK


def _render_determinism(report: dict[str, Any], arguments: argparse.Namespace) -> str:
    seeds = report["hash_seeds"]
    if report["divergence"] is None:
        return (
            f"{report['app']}: {arguments.target} replayed the same with PYTHONHASHSEED "
            f"{seeds[0]} and {seeds[1]} ({report['entries']} entries up to index "
            f"{report['to']})"
        )
    divergence = report["divergence"]
    lines = [
        f"{report['app']}: {arguments.target} is not deterministic: the "
        f"{'results' if divergence['what'] == 'results' else 'states'} differ with "
        f"PYTHONHASHSEED {seeds[0]} and {seeds[1]}",
        f"first at index {divergence['index']} (ledger {divergence['ledger_id']}, entry "
        f"{divergence['entry_id']}, slot {divergence['slot']}), within the entry holding "
        f"{divergence['window'][0]}..{divergence['window'][1]}",
        f"  seed {seeds[0]}: state {divergence['first'].get('state')}",
        f"  seed {seeds[1]}: state {divergence['second'].get('state')}",
        report["reproduce"],
    ]
    return "\n".join(lines)
