"""The investigation commands of `rsm`: log dump/export/check, replay, verify, bisect,
determinism.

    rsm log dump   SOURCE [--from I] [--to I] [--last N] [--limit N] [--command NAME]
                   [--session HEX] [--follow] [--stats] [--json]
    rsm log export SOURCE --to FILE [--from I] [--through I] [--json]
    rsm log check  SOURCE [--keep-going] [--all-bookies] [--json]
    rsm replay     SOURCE --class MODULE:CLASS [--to I] [--from-snapshot | --from-start]
                   [--query NAME [ARG ...]] [--shell] [--break-at I] [--break-on COMMAND]
    rsm verify     SOURCE --class MODULE:CLASS [--to I] [--reference MODULE:CLASS]
    rsm bisect     SOURCE... --old MODULE:CLASS --new MODULE:CLASS [--to I] [--results-only]
    rsm determinism SOURCE --class MODULE:CLASS [--to I] [--hash-seeds A,B]
    rsm snapshot verify SOURCE --class MODULE:CLASS [--index I]

SOURCE is `--app NAME --zk HOSTS [--ledger-root PATH]` (a cluster, read
without fencing and without writing) or `--log FILE` (an exported log; `rsm
bisect` takes `--log` many times).  Positions (`--from`, `--to`,
`--break-at`) are an index or `LEDGER:ENTRY[:SLOT]`; ranges are inclusive.
Commands that replay take `--app-dir`, `--state-hash-every` and the session
settings, which must be the replicas' (`rsm run` has the same options and
defaults), so that the replay's state and hashes equal a replica's.

Output is a table, or JSON with `--json` (NDJSON for the records of `log
dump`).  Exit status: 0 clean, 1 a problem found (a divergence, a corrupt
entry, a gap), 2 a usage error, an application or range that does not exist,
or a cluster that cannot be reached.  A problem report's last line is the
command that reproduces it.  Progress goes to stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import code
import contextlib
import logging
import os
import pdb
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

import anyio

from bookie import limits as bookie_limits
from bookie.clock import system_wall_clock_ms
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    ClientError,
    ClientTimeout,
    MetadataUnavailable,
    NoSuchLedgerError,
    NotEnoughBookies,
)
from bookie.runtime_tuning import tune_for_throughput
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core.commands import answer_query
from rsm.core.log_format import LeaderStart, encode_item
from rsm.core.sessions import Outcome
from rsm.core.state_machine import StateMachine
from rsm.errors import (
    InvalidConfig,
    MalformedValue,
    RsmError,
    RsmStatus,
    StatusError,
    Truncated,
)
from rsm.host import aligned
from rsm.tools import copies
from rsm.tools import determinism as determinism_engine
from rsm.tools.arguments import parse_arguments
from rsm.tools.check import CheckReport, check_log
from rsm.tools.export_format import ExportedEntry, ExportHeader, ExportWriter
from rsm.tools.lockstep import Divergence, first_divergence
from rsm.tools.machines import add_app_dir, load_machine
from rsm.tools.output import Progress, dumps, reproduce, utc
from rsm.tools.records import (
    SCHEMA_VERSION,
    Coordinate,
    Record,
    plain_value,
    record_plain,
    records,
    short_value,
)
from rsm.tools.replay import (
    HashCheck,
    Replay,
    advance,
    logged_hash_indexes,
    replay_to,
    start,
    verify_snapshot,
)
from rsm.tools.source import ClusterSource, LogSource, entries, open_source

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1
EXIT_USAGE: Final = 2

Handler = Callable[[argparse.Namespace], Awaitable[int]]


# --- parsers ----------------------------------------------------------------------------------


def add_parsers(commands: Any) -> None:
    """Add `log`, `replay`, `verify`, `bisect` and `determinism` to the `rsm` parser."""
    log = commands.add_parser("log", help="dump, export and check an application's log")
    log_commands = log.add_subparsers(dest="log_command", required=True)

    dump = log_commands.add_parser("dump", help="the decoded commands of the log")
    _source(dump)
    dump.add_argument("--from", dest="first", help="first index or LEDGER:ENTRY[:SLOT]")
    dump.add_argument("--to", dest="last", help="last index or LEDGER:ENTRY[:SLOT] (inclusive)")
    dump.add_argument("--last", dest="tail", type=int, help="only the last N commands")
    dump.add_argument("--limit", type=int, help="print at most N records")
    dump.add_argument("--command", dest="command_name", help="only commands of this name")
    dump.add_argument("--session", help="only commands of this client id (hex)")
    dump.add_argument("--follow", action="store_true", help="keep printing as the log grows")
    dump.add_argument("--stats", action="store_true", help="counts and bytes, not records")
    dump.set_defaults(handler=_dump)

    export = log_commands.add_parser("export", help="write the log to a self-contained file")
    _source(export)
    export.add_argument("--to", dest="output", required=True, help="the file to write")
    export.add_argument("--from", dest="first", help="first index (default: the log's first)")
    export.add_argument("--through", dest="last", help="last index (default: the readable end)")
    export.set_defaults(handler=_export)

    check = log_commands.add_parser("check", help="find gaps, corrupt entries, open segments")
    _source(check)
    check.add_argument(
        "--keep-going", action="store_true", help="go on past unreadable or corrupt entries"
    )
    check.add_argument(
        "--all-bookies",
        action="store_true",
        help="read every entry from every bookie of its write set; name the one that differs",
    )
    check.set_defaults(handler=_check)

    replay = commands.add_parser("replay", help="the state at an index, through the real class")
    _source(replay)
    _machine(replay, "--class", dest="target")
    replay.add_argument("--to", dest="last", help="the index (default: the readable end)")
    start_from = replay.add_mutually_exclusive_group()
    start_from.add_argument(
        "--from-snapshot",
        dest="from_snapshot",
        action="store_true",
        default=True,
        help="start from the newest snapshot at or below the index (the default)",
    )
    start_from.add_argument(
        "--from-start", dest="from_snapshot", action="store_false", help="replay every command"
    )
    replay.add_argument(
        "--query", nargs="+", metavar=("NAME", "ARG"), help="run the class's @query on the state"
    )
    replay.add_argument("--shell", action="store_true", help="a Python shell with the state")
    replay.add_argument("--break-at", help="stop in pdb just before this command applies")
    replay.add_argument("--break-on", help="stop in pdb before every command of this name")
    replay.set_defaults(handler=_replay)

    verify = commands.add_parser("verify", help="replay and check every logged state hash")
    _source(verify)
    _machine(verify, "--class", dest="target")
    verify.add_argument("--to", dest="last", help="the last index to verify (default: the end)")
    verify.add_argument(
        "--reference", help="MODULE:CLASS that wrote the log, to name the divergent command"
    )
    verify.set_defaults(handler=_verify)

    bisect = commands.add_parser("bisect", help="the first command where two versions differ")
    _source(bisect, many_logs=True)
    _machine(bisect, "--old", dest="old")
    bisect.add_argument("--new", required=True, help="MODULE:CLASS of the new version")
    bisect.add_argument("--to", dest="last", help="the last index (default: the end)")
    bisect.add_argument(
        "--results-only", action="store_true", help="compare results, not state hashes"
    )
    bisect.set_defaults(handler=_bisect)

    determinism = commands.add_parser(
        "determinism", help="replay twice with different hash seeds and compare"
    )
    _source(determinism)
    _machine(determinism, "--class", dest="target")
    determinism.add_argument("--to", dest="last", help="the last index (default: the end)")
    determinism.add_argument("--hash-seeds", default="1,2", help="two PYTHONHASHSEED values")
    determinism.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    determinism.add_argument("--from", dest="first", help=argparse.SUPPRESS)
    determinism.add_argument("--per-command", action="store_true", help=argparse.SUPPRESS)
    determinism.set_defaults(handler=_determinism)


def add_snapshot_verify(snapshot_commands: Any) -> None:
    """`rsm snapshot verify`: a snapshot's state equals replay of the log to its index."""
    verify = snapshot_commands.add_parser(
        "verify", help="check a snapshot's state against replay of the log to its index"
    )
    _source(verify)
    _machine(verify, "--class", dest="target")
    verify.add_argument("--index", type=int, help="the snapshot's index (default: newest)")
    verify.set_defaults(handler=_snapshot_verify)


def _source(
    parser: argparse.ArgumentParser, *, output: bool = True, many_logs: bool = False
) -> None:
    parser.add_argument("--app", help="the application's name (with --zk)")
    parser.add_argument("--zk", help="ZooKeeper HOST:PORT[,...][/chroot]")
    parser.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)
    if many_logs:
        parser.add_argument(
            "--log", dest="logs", action="append", help="an exported log file (repeatable)"
        )
    else:
        parser.add_argument("--log", dest="log_file", help="an exported log file")
    if output:
        parser.add_argument("--json", action="store_true", help="JSON output")


def _machine(parser: argparse.ArgumentParser, flag: str, *, dest: str) -> None:
    parser.add_argument(flag, dest=dest, required=True, help="MODULE:CLASS of the state machine")
    parser.add_argument("--app-dir", default=".", help="put first on the import path")
    parser.add_argument(
        "--state-hash-every",
        type=int,
        help="the replicas' --state-hash-every (verify: default, hash where the log has hashes)",
    )
    parser.add_argument("--session-ttl-ms", type=int, default=limits.session_ttl_ms_default)
    parser.add_argument("--sessions-max", type=int, default=limits.sessions_max_default)
    parser.add_argument(
        "--session-evict-idle-ms", type=int, default=limits.session_evict_idle_ms_default
    )
    parser.add_argument(
        "--session-results-max", type=int, default=limits.session_results_max_default
    )


def _config(arguments: argparse.Namespace) -> ReplicaConfig:
    every = arguments.state_hash_every
    return ReplicaConfig(
        state_hash_every_commands=limits.state_hash_every_commands_default
        if every is None
        else every,
        session_ttl_ms=arguments.session_ttl_ms,
        sessions_max=arguments.sessions_max,
        session_evict_idle_ms=arguments.session_evict_idle_ms,
        session_results_max=arguments.session_results_max,
    )


def _machine_class(arguments: argparse.Namespace, target: str) -> type[StateMachine]:
    add_app_dir(arguments.app_dir)
    return load_machine(target)


# --- running a command ------------------------------------------------------------------------


def run(arguments: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the command `arguments` names; its exit status (see the module docstring)."""
    arguments.argv = list(argv)
    # Only this command's own messages reach stderr (the libraries log to the root logger).
    logging.getLogger().addHandler(logging.NullHandler())
    tune_for_throughput()
    try:
        result: int = anyio.run(arguments.handler, arguments)
        return result
    except BaseException as raised:  # groups from task groups are unwrapped first
        error = _single(raised)
        if isinstance(error, KeyboardInterrupt | SystemExit) or not isinstance(error, Exception):
            raise
        code, message = _classify(error)
        if code is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        return code


def _single(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def _classify(error: Exception) -> tuple[int | None, str]:
    """The exit status and message of an error, or None for a bug (let the traceback show)."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(error, InvalidConfig | Truncated | MetadataUnavailable | NoSuchLedgerError):
        return EXIT_USAGE, text
    if isinstance(error, ClientError) and not isinstance(error, NoSuchLedgerError):
        return EXIT_USAGE if _unreachable(error) else EXIT_PROBLEM, text
    if isinstance(error, MalformedValue | RsmError | BookieError):
        return EXIT_PROBLEM, text
    return None, text


def _unreachable(error: ClientError) -> bool:
    return isinstance(error, BookieUnavailable | ClientTimeout | NotEnoughBookies)


def _source_options(arguments: argparse.Namespace) -> dict[str, Any]:
    return {
        "log_file": arguments.log_file,
        "app": arguments.app,
        "zk": arguments.zk,
        "ledger_root": arguments.ledger_root,
    }


async def _index(source: LogSource, text: str | None, default: int) -> int:
    """An index given as an index or a position (the index of that command)."""
    if text is None:
        return default
    coordinate = Coordinate.parse(text)
    if coordinate.index is not None:
        return coordinate.index
    for segment in source.log.segments:
        if segment.ledger_id != coordinate.ledger_id:
            continue
        async with source.raw_entries(max(segment.first_index, source.log.first_index)) as raw:
            async for read in raw:
                if read.segment.ledger_id != segment.ledger_id:
                    break
                if read.entry_id == coordinate.entry_id:
                    batch = read.decode().batch
                    if coordinate.slot >= len(batch.items):
                        raise InvalidConfig(
                            f"entry {coordinate.entry_id} of ledger {coordinate.ledger_id} holds "
                            f"{len(batch.items)} commands; there is no slot {coordinate.slot}"
                        )
                    return batch.first_index + coordinate.slot
        raise InvalidConfig(
            f"ledger {coordinate.ledger_id} of the log has no entry {coordinate.entry_id}"
        )
    raise InvalidConfig(f"ledger {coordinate.ledger_id} is not a segment of the log")


# --- rsm log dump -----------------------------------------------------------------------------

_DUMP_HEADER: Final = ("INDEX", "EPOCH", "LEDGER:ENTRY:SLOT", "TIME", "SESSION", "COMMAND", "ARGS")


def _matches(record: Record, arguments: argparse.Namespace) -> bool:
    if arguments.command_name is not None and record.name != arguments.command_name:
        return False
    if arguments.session is not None:
        client_id = record.client_id
        return client_id is not None and client_id.hex() == arguments.session.lower()
    return True


def _row(record: Record) -> tuple[str, ...]:
    item = record.item
    if isinstance(item, LeaderStart):
        session, args = "-", item.replica_id
    else:
        session = "-" if item.client_id is None else f"{item.client_id.hex()[:8]}:{item.seq}"
        shown = [short_value(arg, 24) for arg in item.args]
        shown += [f"{key}={short_value(value, 24)}" for key, value in item.kwargs.items()]
        args = " ".join(shown)
    return (
        str(record.index),
        str(record.epoch),
        f"{record.ledger_id}:{record.entry_id}:{record.slot}",
        utc(record.time_ms),
        session,
        record.name,
        args,
    )


def _hash_line(record: Record) -> str | None:
    logged = record.state_hash
    if logged is None:
        return None
    return f"  state hash at index {logged.index}: {logged.digest.hex()}"


async def _dump(arguments: argparse.Namespace) -> int:
    async with open_source(**_source_options(arguments)) as source:
        end = await source.end_index()
        first = await _index(source, arguments.first, source.log.first_index)
        last = await _index(source, arguments.last, end)
        if arguments.tail is not None:
            first = max(first, last - arguments.tail + 1)
        if arguments.follow and (arguments.last is not None or arguments.stats):
            raise InvalidConfig("--follow goes on past the end: no --to, no --stats")
        if arguments.stats:
            return await _dump_stats(arguments, source, first, last)
        if arguments.follow and arguments.first is None and arguments.tail is None:
            first = end + 1  # only what is logged from now on, unless asked for more
        printed = 0
        rows: list[tuple[str, ...]] = [_DUMP_HEADER]
        extra: dict[int, str] = {}
        if first <= last:
            async with entries(source, first, last) as logged:
                async for entry in logged:
                    for record in records(entry):
                        if record.index < first or record.index > last:
                            continue
                        if not _matches(record, arguments):
                            continue
                        if arguments.limit is not None and printed >= arguments.limit:
                            break
                        printed += 1
                        if arguments.json or arguments.follow:
                            _print_record(record, arguments.json)
                        else:
                            rows.append(_row(record))
                            line = _hash_line(record)
                            if line is not None:
                                extra[len(rows) - 1] = line
                    if arguments.limit is not None and printed >= arguments.limit:
                        break
                    if entry.last_index >= last:
                        break
        if arguments.follow and (arguments.limit is None or printed < arguments.limit):
            await _follow(source, arguments, printed, last + 1)
    if not (arguments.json or arguments.follow):
        for position, line in enumerate(aligned(rows)):
            print(line)
            if position in extra:
                print(extra[position])
    return EXIT_OK


def _print_record(record: Record, as_json: bool) -> None:
    if as_json:
        print(dumps(record_plain(record)), flush=True)
        return
    print("  ".join(_row(record)), flush=True)
    line = _hash_line(record)
    if line is not None:
        print(line, flush=True)


async def _follow(
    source: LogSource, arguments: argparse.Namespace, printed: int, next_index: int
) -> None:
    """Print the commands logged from `next_index` on, until interrupted or `--limit`
    records were printed in all (a cluster only)."""
    if not isinstance(source, ClusterSource):
        raise InvalidConfig("--follow needs a cluster (--app, --zk), not a file")
    following = source.follow(next_index)
    async with contextlib.aclosing(following):
        async for entry in following:
            for record in records(entry):
                if record.index >= next_index and _matches(record, arguments):
                    _print_record(record, arguments.json)
                    printed += 1
                    if arguments.limit is not None and printed >= arguments.limit:
                        return


async def _dump_stats(
    arguments: argparse.Namespace, source: LogSource, first: int, last: int
) -> int:
    by_command: Counter[str] = Counter()
    command_bytes: Counter[str] = Counter()
    by_epoch: dict[int, list[int]] = {}
    hashes = 0
    async with entries(source, first, last) as logged:
        async for entry in logged:
            epoch = by_epoch.setdefault(entry.batch.epoch, [0, 0, 0])
            epoch[0] += 1
            epoch[2] += entry.size_bytes
            hashes += entry.batch.state_hash is not None
            for record in records(entry):
                if not first <= record.index <= last or not _matches(record, arguments):
                    continue
                by_command[record.name] += 1
                command_bytes[record.name] += len(encode_item(record.item))
                epoch[1] += 1
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "app": source.app,
        "from": first,
        "to": last,
        "commands": sum(by_command.values()),
        "state_hashes": hashes,
        "by_command": {
            name: {"count": count, "bytes": command_bytes[name]}
            for name, count in sorted(by_command.items())
        },
        "by_epoch": {
            str(epoch): {"entries": e, "commands": c, "bytes": b}
            for epoch, (e, c, b) in sorted(by_epoch.items())
        },
    }
    if arguments.json:
        print(dumps(report))
        return EXIT_OK
    print(
        f"{source.app}: indexes {first}..{last}, {report['commands']} commands, "
        f"{hashes} state hashes"
    )
    print()
    rows: list[tuple[str, ...]] = [("COMMAND", "COUNT", "BYTES")]
    rows += [(n, str(v["count"]), str(v["bytes"])) for n, v in report["by_command"].items()]
    print("\n".join(aligned(rows)))
    print()
    rows = [("EPOCH", "ENTRIES", "COMMANDS", "BYTES")]
    rows += [
        (e, str(v["entries"]), str(v["commands"]), str(v["bytes"]))
        for e, v in report["by_epoch"].items()
    ]
    print("\n".join(aligned(rows)))
    return EXIT_OK


# --- rsm log export ---------------------------------------------------------------------------


async def _export(arguments: argparse.Namespace) -> int:
    path = Path(arguments.output)
    async with open_source(**_source_options(arguments)) as source:
        end = await source.end_index()
        first = await _index(source, arguments.first, source.log.first_index)
        last = await _index(source, arguments.last, end)
        if last > end:
            raise InvalidConfig(f"index {last} is past the log's readable end, index {end}")
        header = ExportHeader(
            app=source.app,
            segments=source.log.segments,
            first_index=first,
            last_index=last,
            exported_ms=system_wall_clock_ms(),
            source=source.description,
        )
        progress = Progress("export", first, last)
        partial = path.with_name(path.name + ".partial")
        try:
            with partial.open("wb") as stream:
                writer = ExportWriter(stream, header)
                if last >= first:
                    async with source.raw_entries(first, last) as raw:
                        async for read in raw:
                            entry = read.decode()
                            if entry.batch.first_index > last and entry.batch.items:
                                break
                            writer.add(
                                ExportedEntry(
                                    entry.ledger_id,
                                    entry.entry_id,
                                    entry.batch.first_index,
                                    len(entry.batch.items),
                                    read.payload,
                                )
                            )
                            progress(entry.last_index)
                            if entry.last_index >= last:
                                break
                summary = writer.finish()
        except OSError as error:
            raise InvalidConfig(f"cannot write {path}: {error.strerror}") from None
        progress.done()
        os.replace(partial, path)
    if arguments.json:
        report = {
            "schema": SCHEMA_VERSION,
            "app": source.app,
            "from": first,
            "to": last,
            "entries": summary.entries,
            "payload_bytes": summary.payload_bytes,
            "file": str(path),
        }
        print(dumps(report))
        return EXIT_OK
    print(
        f"exported {source.app} indexes {first}..{last}: {summary.entries} entries, "
        f"{summary.payload_bytes} bytes of payload, to {path}"
    )
    return EXIT_OK


# --- rsm log check ----------------------------------------------------------------------------


async def _check(arguments: argparse.Namespace) -> int:
    async with open_source(**_source_options(arguments)) as source:
        progress = Progress("check", source.log.first_index, await source.end_index())
        report = await check_log(source, keep_going=arguments.keep_going, progress=progress)
        progress.done()
        if arguments.all_bookies and (arguments.keep_going or not report.problems):
            if not isinstance(source, ClusterSource):
                raise InvalidConfig("--all-bookies needs a cluster (--app, --zk), not a file")
            async with copies.bookies(source) as pool:
                for segment in source.log.segments:
                    found = await copies.compare_segment(source, pool, segment, source.password)
                    report.problems += found
    if arguments.json:
        print(dumps(_check_plain(report)))
    else:
        print(_render_check(report, arguments.argv))
    return EXIT_PROBLEM if report.problems else EXIT_OK


def _check_plain(report: CheckReport) -> dict[str, Any]:
    return {
        "schema": SCHEMA_VERSION,
        "app": report.app,
        "segments": report.segments,
        "open_segments": report.open_segments,
        "entries": report.entries,
        "commands": report.commands,
        "payload_bytes": report.payload_bytes,
        "end_index": report.end_index,
        "ok_up_to": report.ok_up_to,
        "problems": [problem.plain() for problem in report.problems],
    }


def _render_check(report: CheckReport, argv: Sequence[str]) -> str:
    lines = [
        f"{report.app}: {report.segments} segments ({report.open_segments} open), "
        f"{report.entries} entries, {report.commands} commands, "
        f"{report.payload_bytes} bytes"
    ]
    for problem in report.problems:
        lines.append(f"PROBLEM {problem.kind}: {problem.message}")
    lines.append(f"ok up to index {report.ok_up_to}")
    if report.problems:
        lines.append(reproduce(argv))
    return "\n".join(lines)


# --- rsm replay -------------------------------------------------------------------------------


async def _replay(arguments: argparse.Namespace) -> int:
    machine_class = _machine_class(arguments, arguments.target)
    config = _config(arguments)
    began = time.monotonic()
    async with open_source(**_source_options(arguments)) as source:
        end = await source.end_index()
        target = await _index(source, arguments.last, end)
        if target > end:
            raise InvalidConfig(f"index {target} is past the log's readable end, index {end}")
        progress = Progress("replay", 0, target)
        breaking = arguments.break_at is not None or arguments.break_on is not None
        if breaking:
            break_at = await _index(source, arguments.break_at, 0) if arguments.break_at else None
            replay = await _replay_with_breaks(
                source,
                machine_class=machine_class,
                config=config,
                arguments=arguments,
                target=target,
                break_at=break_at,
            )
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
        f"PROBLEM: {target} has no command {name!r} (first logged at index {index}): an "
        "older log or a renamed command; applied as an UnknownCommand error"
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
    print("in scope: machine (the state), record (the next command), replay; 'c' applies it")
    debugger = pdb.Pdb()
    debugger.set_trace()
    del machine


def _args(record: Record) -> list[Any]:
    return [] if isinstance(record.item, LeaderStart) else list(record.item.args)


def _answer(replay: Replay, arguments: argparse.Namespace) -> int:
    name, *words = arguments.query
    args, kwargs = parse_arguments(words)
    try:
        outcome = answer_query(replay.machine, name, args, kwargs, applied=replay.position)
    except StatusError as error:
        raise InvalidConfig(str(error)) from None
    if arguments.json:
        print(dumps({"schema": SCHEMA_VERSION, "index": replay.index, **_outcome(outcome)}))
    elif outcome.ok:
        print(dumps(plain_value(outcome.value)))
    else:
        print(f"error: {_outcome(outcome)['error']}")
    return EXIT_OK if outcome.ok else EXIT_PROBLEM


def _outcome(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON: `{"result": ...}`, or `{"error": "Type: message"}` (for a command
    that raised, its exception's type name, as the replicas recorded it)."""
    if outcome.ok:
        return {"result": plain_value(outcome.value)}
    kind = outcome.detail or RsmStatus(outcome.status).name
    return {"error": f"{kind}: {outcome.message}" if outcome.message else kind}


def _shell(replay: Replay) -> None:
    def query(name: str, *args: Any, **kwargs: Any) -> Any:
        return answer_query(replay.machine, name, args, kwargs, applied=replay.position).value

    scope = {"machine": replay.machine, "replay": replay, "query": query}
    banner = (
        f"state of {replay.machine_class.__qualname__} at index {replay.index}: "
        "machine, query(name, *args), replay"
    )
    code.interact(banner=banner, local=scope, exitmsg="")


# --- rsm verify -------------------------------------------------------------------------------


async def _verify(arguments: argparse.Namespace) -> int:
    machine_class = _machine_class(arguments, arguments.target)
    config = _config(arguments)
    async with open_source(**_source_options(arguments)) as source:
        end = await source.end_index()
        target = await _index(source, arguments.last, end)
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
        "divergence": None if culprit is None else _divergence_plain(culprit),
        "nondeterminism": None,
    }
    words = list(arguments.argv)
    if bad is not None:
        low = 1 if last_good is None else last_good.index + 1
        report["window"] = [low, bad.index]
        report["reproduce"] = reproduce(_with_option(words, "--to", str(bad.index)))
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


def _with_option(words: Sequence[str], flag: str, value: str) -> list[str]:
    """`words` with `flag value` set (replaced when present)."""
    out = list(words)
    if flag in out:
        position = out.index(flag)
        out[position + 1 : position + 2] = [value]
        return out
    return [*out, flag, value]


def _check_plain_hash(check: HashCheck) -> dict[str, Any]:
    return {
        "index": check.index,
        "logged": check.logged.hex(),
        "replayed": None if check.replayed is None else check.replayed.hex(),
        "carried_by": {"ledger_id": check.entry.ledger_id, "entry_id": check.entry.entry_id},
    }


def _divergence_plain(divergence: Divergence) -> dict[str, Any]:
    return {
        "kind": divergence.kind,
        "record": record_plain(divergence.record),
        "old": _outcome(divergence.old),
        "new": _outcome(divergence.new),
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
                else f"{app}: the log carries no state hash up to index {report['to']}"
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


# --- rsm snapshot verify ----------------------------------------------------------------------


async def _snapshot_verify(arguments: argparse.Namespace) -> int:
    machine_class = _machine_class(arguments, arguments.target)
    config = _config(arguments)
    async with open_source(**_source_options(arguments)) as source:
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
        words = _with_option(arguments.argv, "--index", str(manifest.index))
        print(reproduce(words))
    return EXIT_OK if checked.equal else EXIT_PROBLEM


# --- rsm bisect -------------------------------------------------------------------------------


async def _bisect(arguments: argparse.Namespace) -> int:
    add_app_dir(arguments.app_dir)
    old_class = load_machine(arguments.old)
    new_class = load_machine(arguments.new)
    config = _config(arguments)
    if arguments.logs and (arguments.app or arguments.zk):
        raise InvalidConfig("give either --log FILE ... or --app and --zk, not both")
    sources: list[str | None] = list(arguments.logs) if arguments.logs else [None]
    reports: list[dict[str, Any]] = []
    for log_file in sources:
        options = {**_source_options_bisect(arguments), "log_file": log_file}
        async with open_source(**options) as source:
            end = await source.end_index()
            target = await _index(source, arguments.last, end)
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
        report: dict[str, Any] = {
            "schema": SCHEMA_VERSION,
            "source": source.description,
            "app": source.app,
            "commands": result.commands,
            "to": result.last_index,
            "divergence": None
            if result.divergence is None
            else _divergence_plain(result.divergence),
        }
        if result.divergence is not None:
            words = _bisect_words(arguments, source.description, result.divergence.record.index)
            report["reproduce"] = reproduce(words)
        reports.append(report)
        if arguments.json:
            print(dumps(report), flush=True)
        else:
            print(_render_bisect(report, arguments), flush=True)
    return EXIT_PROBLEM if any(r["divergence"] for r in reports) else EXIT_OK


def _source_options_bisect(arguments: argparse.Namespace) -> dict[str, Any]:
    return {"app": arguments.app, "zk": arguments.zk, "ledger_root": arguments.ledger_root}


def _bisect_words(arguments: argparse.Namespace, description: str, index: int) -> list[str]:
    words = ["bisect", *description.split(), "--old", arguments.old, "--new", arguments.new]
    words += ["--to", str(index)]
    if arguments.app_dir != ".":
        words += ["--app-dir", arguments.app_dir]
    if arguments.results_only:
        words.append("--results-only")
    return words


def _render_bisect(report: dict[str, Any], arguments: argparse.Namespace) -> str:
    divergence = report["divergence"]
    if divergence is None:
        return (
            f"{report['app']} ({report['source']}): {arguments.old} and {arguments.new} agree "
            f"on all {report['commands']} commands up to index {report['to']}"
        )
    lines = [f"{report['app']} ({report['source']}): {arguments.old} and {arguments.new} differ"]
    lines += _render_divergence(divergence, f"old {arguments.old}", f"new {arguments.new}")
    lines.append(report["reproduce"])
    return "\n".join(lines)


# --- rsm determinism --------------------------------------------------------------------------


async def _determinism(arguments: argparse.Namespace) -> int:
    machine_class = _machine_class(arguments, arguments.target)
    config = _config(arguments)
    if arguments.child:
        return await _determinism_child(arguments, machine_class, config)
    seeds = arguments.hash_seeds.split(",")
    if len(seeds) != 2 or not all(seed.isdigit() for seed in seeds) or seeds[0] == seeds[1]:
        raise InvalidConfig(f"--hash-seeds {arguments.hash_seeds!r} is not two different numbers")
    async with open_source(**_source_options(arguments)) as source:
        end = await source.end_index()
        target = await _index(source, arguments.last, end)
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
        words = _with_option(list(arguments.argv), "--to", str(report["divergence"]["index"]))
        report["reproduce"] = reproduce(words)
    if arguments.json:
        print(dumps(report))
    else:
        print(_render_determinism(report, arguments))
    return EXIT_PROBLEM if mismatch is not None else EXIT_OK


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

    async def child(position: int, seed: str) -> None:
        environment = {**os.environ, "PYTHONHASHSEED": seed}
        process = await anyio.run_process(words, env=environment, check=False)
        if process.returncode != 0:
            message = process.stderr.decode(errors="replace").strip().splitlines()
            raise RsmError(
                f"the replay with PYTHONHASHSEED={seed} failed: "
                + (message[-1] if message else f"status {process.returncode}")
            )
        outputs[position] = process.stdout

    async with anyio.create_task_group() as task_group:
        for position, seed in enumerate(seeds):
            task_group.start_soon(child, position, seed)
    return [determinism_engine.parse_lines(outputs[position]) for position in range(2)]


async def _determinism_child(
    arguments: argparse.Namespace, machine_class: type[StateMachine], config: ReplicaConfig
) -> int:
    async with open_source(**_source_options(arguments)) as source:
        target = await _index(source, arguments.last, await source.end_index())
        first = await _index(source, arguments.first, 1)
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
