"""`rsm log dump`, `rsm log export`, `rsm log check`: the log as it is (docs/tools.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from bookie.clock import system_wall_clock_ms
from rsm.core.log_format import LeaderStart, encode_item
from rsm.core.snapshot_manifest import Manifest
from rsm.errors import InvalidConfig
from rsm.host import aligned
from rsm.tools import copies
from rsm.tools.check import CheckReport, check_log
from rsm.tools.export_format import ExportedEntry, ExportHeader, ExportWriter
from rsm.tools.options import (
    EXIT_OK,
    EXIT_PROBLEM,
    check_asked_range,
    resolve_index,
    resolve_readable,
    source_arguments,
)
from rsm.tools.output import Progress, dumps, reproduce, utc
from rsm.tools.records import (
    SCHEMA_VERSION,
    Record,
    plain_value,
    record_plain,
    records,
    short_value,
)
from rsm.tools.source import ClusterSource, Continuity, LogSource, entries, open_source

DUMP_HEADER: Final = ("INDEX", "EPOCH", "LEDGER:ENTRY:SLOT", "TIME", "SESSION", "COMMAND", "ARGS")


def _matches(record: Record, arguments: argparse.Namespace) -> bool:
    if arguments.command_name is not None and record.name != arguments.command_name:
        return False
    if arguments.session is not None:
        client_id = record.client_id
        # A prefix does: the table shows client ids shortened to 8 hex digits.
        return client_id is not None and client_id.hex().startswith(arguments.session)
    return True


def record_row(record: Record) -> tuple[str, ...]:
    """A record's cells under `DUMP_HEADER` (`rsm log dump`, and the changes `rsm blame` lists)."""
    item = record.item
    if isinstance(item, LeaderStart):
        session, args = "-", item.replica_id
    else:
        session = "-" if item.client_id is None else f"{item.client_id.hex()[:8]}:{item.seq}"
        shown = [_argument_cell(arg) for arg in item.args]
        shown += [f"{key}={_argument_cell(value)}" for key, value in item.kwargs.items()]
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


def _argument_cell(value: Any) -> str:
    """One argument in the ARGS cell: a text quoted (JSON) when it is empty or holds a space
    or a quote, so that the arguments the cell lists can be told apart."""
    text = short_value(value, 24)
    if isinstance(plain_value(value), str) and (not text or " " in text or '"' in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def _hash_line(record: Record) -> str | None:
    logged = record.state_hash
    if logged is None:
        return None
    return f"  state hash at index {logged.index}: {logged.digest.hex()}"


async def dump(arguments: argparse.Namespace) -> int:
    if arguments.follow and arguments.log_file is not None:
        # Before anything is printed: a file does not grow.
        raise InvalidConfig("--follow needs a cluster (--app, --zk), not a file")
    async with open_source(**source_arguments(arguments)) as source:
        end = await source.end_index()
        default_first = source.log.first_index
        if arguments.follow:  # it waits for indexes past the end
            first = await resolve_index(source, arguments.first, default_first)
        else:
            first = await resolve_readable(source, arguments.first, default_first, end)
        last = await resolve_readable(source, arguments.last, end, end)
        if not arguments.follow:
            check_asked_range(source, (arguments.first, arguments.last), first, last)
        if arguments.tail is not None:
            first = max(first, last - arguments.tail + 1)
        if arguments.follow and (arguments.last is not None or arguments.stats):
            raise InvalidConfig("--follow goes on past the end: no --to, no --stats")
        if arguments.stats:
            return await _dump_stats(arguments, source, first, last)
        if arguments.follow and arguments.first is None and arguments.tail is None:
            first = end + 1  # only what is logged from now on, unless asked for more
        printed = 0
        rows: list[tuple[str, ...]] = [DUMP_HEADER]
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
                            rows.append(record_row(record))
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
    print("  ".join(record_row(record)), flush=True)
    line = _hash_line(record)
    if line is not None:
        print(line, flush=True)


async def _follow(
    source: LogSource, arguments: argparse.Namespace, printed: int, next_index: int
) -> None:
    """Print the commands logged from `next_index` on, until interrupted or `--limit`
    records were printed in all (a cluster only)."""
    assert isinstance(source, ClusterSource), "dump refuses --follow of a file"
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


async def export(arguments: argparse.Namespace) -> int:
    path = Path(arguments.output)
    if path.is_dir():
        raise InvalidConfig(f"cannot write {path}: it is a directory")
    async with open_source(**source_arguments(arguments)) as source:
        end = await source.end_index()
        first = await resolve_readable(source, arguments.first, source.log.first_index, end)
        last = await resolve_readable(source, arguments.last, end, end)
        check_asked_range(
            source, (arguments.first, arguments.last), first, last, last_option="--through"
        )
        snapshot = await _covering_snapshot(source, first, last)
        header = ExportHeader(
            app=source.app,
            segments=source.log.segments,
            first_index=first,
            last_index=last,
            exported_ms=system_wall_clock_ms(),
            source=source.description,
            snapshot=snapshot,
        )
        progress = Progress("export", first, last)
        partial = path.with_name(path.name + ".partial")
        try:
            with partial.open("wb") as stream:
                writer = ExportWriter(stream, header)
                if snapshot is not None:
                    async for chunk in source.snapshot_chunks(snapshot):
                        writer.add_chunk(chunk)
                if last >= first:
                    await _export_entries(source, writer, first, last, progress)
                summary = writer.finish()
            os.replace(partial, path)
        except BaseException as error:
            with contextlib.suppress(OSError):  # none was made, or it cannot be: said below
                partial.unlink()
            if isinstance(error, OSError):
                raise InvalidConfig(f"cannot write {path}: {error.strerror}") from None
            raise
        progress.done()
    replayable = first <= 1 or snapshot is not None
    if arguments.json:
        report = {
            "schema": SCHEMA_VERSION,
            "app": source.app,
            "from": first,
            "to": last,
            "entries": summary.entries,
            "payload_bytes": summary.payload_bytes,
            "snapshot": None if snapshot is None else snapshot.index,
            "replayable": replayable,
            "file": str(path),
        }
        print(dumps(report))
        return EXIT_OK
    with_snapshot = "" if snapshot is None else f", the snapshot at index {snapshot.index}"
    print(
        f"exported {source.app} indexes {first}..{last}: {summary.entries} entries, "
        f"{summary.payload_bytes} bytes of payload{with_snapshot}, to {path}"
    )
    if not replayable:
        print(
            f"note: no snapshot is at an index from {first - 1} to {last}, so the file can be "
            "dumped and checked but not replayed; export from index 1, or from just after a "
            "snapshot's index (rsm snapshot ls)"
        )
    return EXIT_OK


async def _covering_snapshot(source: LogSource, first: int, last: int) -> Manifest | None:
    """For a range that does not start at index 1, the oldest snapshot from which it can be
    replayed (at or above `first - 1`, at most `last`): the file carries it."""
    if first <= 1:
        return None
    value = await source.snapshots()
    usable = [m for m in value.snapshots if first - 1 <= m.index <= last]
    return min(usable, key=lambda manifest: manifest.index) if usable else None


async def _export_entries(
    source: LogSource, writer: ExportWriter, first: int, last: int, progress: Progress
) -> None:
    continuity = Continuity(first)
    async with source.raw_entries(first, last) as raw:
        async for read in raw:
            entry = read.decode()
            continuity.check(entry)
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
                return


# --- rsm log check ----------------------------------------------------------------------------


async def check(arguments: argparse.Namespace) -> int:
    async with open_source(**source_arguments(arguments)) as source:
        progress = Progress("check", source.log.first_index, await source.end_index())
        report = await check_log(source, keep_going=arguments.keep_going, progress=progress)
        progress.done()
        if arguments.all_bookies and (arguments.keep_going or not report.problems):
            if not isinstance(source, ClusterSource):
                raise InvalidConfig("--all-bookies needs a cluster (--app, --zk), not a file")
            for segment in source.log.segments:
                found = await copies.compare_segment(source, segment, source.password)
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
