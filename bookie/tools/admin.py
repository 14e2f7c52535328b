"""`bookie shell`: inspect a bookie over the network, and its files offline.

Network commands talk to a running bookie with the single-bookie client
(bookie/client/bookie_conn.py) and change nothing on it:

* `bookieinfo ADDRESS`: free and total disk bytes, read-only flag;
* `readentry ADDRESS LEDGER ENTRY`: one entry (ENTRY -1: the last one), its
  header fields, digest check and a payload preview;
* `listentries ADDRESS LEDGER`: which entries the bookie holds, as ranges.

Given a TLS context (`--tls-bookies`, bookie/net/tls_flags.py), they connect
with TLS: ADDRESS is then the bookie's TLS listener.

Offline commands read a bookie's directories without writing anything, so
they are safe on a running bookie and on one that refuses to start
(bookie/storage/inspect.py):

* `lastmark`: the checkpoint mark of each ledger directory, and the one
  journal replay would start from;
* `readjournal`: every journal record (kind, ledger, entry or LAC, size),
  plus where a file stops being valid and whether that is a torn tail (which
  replay truncates) or corruption before the tail (which refuses to start);
  zeros after the newest file's last record are its space allocated ahead
  (a running bookie always has some), which the next start trims.

Each command builds one result (a dict of plain values); `--json` prints it as
one JSON object for scripts, otherwise a few aligned lines for a human.
Failures are `ShellError` with a message that says what to do and an exit
code (EXIT_USAGE when the bookie cannot be reached); the command line prints
the message and exits with the code.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import anyio

from bookie import limits
from bookie.address import Address
from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieError, DigestMismatch, StatusError
from bookie.server.node import EXIT_FAILED, EXIT_USAGE
from bookie.storage.index import read_checkpoint_mark
from bookie.storage.inspect import FileTail, checkpoint_mark, journal_records
from bookie.wire.packet import HEADER, HEADER_BYTES, Digest, DigestType

Result = dict[str, Any]

SHELL_SCHEMA_VERSION: Final = 1
"""The `schema` of every `bookie shell --json` object."""


EXIT_PROBLEM: Final = EXIT_FAILED
"""A command found a problem (a failed read, a copy that disagrees) or could not finish."""


class ShellError(Exception):
    """A shell command could not do its job; the message is for the operator.

    `exit_code` is EXIT_USAGE for bad input and for a cluster or bookie that
    cannot be reached, EXIT_PROBLEM for a failure found while working.
    """

    def __init__(self, message: str, exit_code: int = EXIT_PROBLEM) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# --- network ----------------------------------------------------------------------------------


async def _with_connection(
    address: Address,
    timeout_ms: int,
    tls: ssl.SSLContext | None,
    action: Callable[[BookieConnection], Any],
) -> Any:
    try:
        async with BookieConnection.connect(
            address.host, address.port, connect_timeout_ms=timeout_ms, tls=tls
        ) as connection:
            return await action(connection)
    except StatusError as error:
        raise ShellError(f"bookie {address} answered {error.status.name}: {error}") from error
    except BookieError as error:
        raise ShellError(
            f"cannot talk to bookie {address}: {error}.  Is it running, and is the address "
            "the one it advertises?",
            EXIT_USAGE,
        ) from error


def bookie_info(
    address: Address,
    timeout_ms: int = limits.read_timeout_ms_default,
    *,
    tls: ssl.SSLContext | None = None,
) -> Result:
    async def ask(connection: BookieConnection) -> Result:
        response = await connection.bookie_info(timeout_ms=timeout_ms)
        return {
            "address": str(address),
            "free_bytes": response.free_bytes,
            "total_bytes": response.total_bytes,
            "read_only": response.read_only,
        }

    result: Result = anyio.run(_with_connection, address, timeout_ms, tls, ask)
    return result


def read_entry(
    address: Address,
    ledger_id: int,
    entry_id: int,
    *,
    digest_type: DigestType = DigestType.CRC32C,
    password: bytes = b"",
    preview_bytes: int = 64,
    timeout_ms: int = limits.read_timeout_ms_default,
    tls: ssl.SSLContext | None = None,
) -> Result:
    """One entry as the bookie stores it; the digest is checked when it can be.

    A CRC32C digest needs no password; an HMAC digest is checked only when
    `password` is given (otherwise `digest` says "unchecked").
    """

    async def ask(connection: BookieConnection) -> Result:
        response = await connection.read(ledger_id, entry_id, timeout_ms=timeout_ms)
        packet = response.packet or b""
        result: Result = {
            "address": str(address),
            "ledger_id": ledger_id,
            "entry_id": response.entry_id,
            "bookie_lac": response.lac,
            "packet_bytes": len(packet),
        }
        if len(packet) < HEADER_BYTES:
            result["digest"] = "packet shorter than its header"
            return result
        _, packet_entry_id, lac, length = HEADER.unpack_from(packet)
        result.update(entry_lac=lac, ledger_length=length)
        if digest_type is DigestType.HMAC_SHA256 and not password:
            result["digest"] = "unchecked (HMAC needs --password)"
            payload = packet[HEADER_BYTES + Digest(digest_type, b"").size_bytes :]
        else:
            try:
                _, _, payload = Digest(digest_type, password).verify_entry(
                    packet, ledger_id, packet_entry_id
                )
                result["digest"] = "ok"
            except DigestMismatch as error:
                result["digest"] = f"MISMATCH: {error}"
                payload = packet[HEADER_BYTES:]
        result["payload_bytes"] = len(payload)
        result["payload_preview"] = bytes(payload[:preview_bytes]).hex()
        return result

    result: Result = anyio.run(_with_connection, address, timeout_ms, tls, ask)
    return result


def list_entries(
    address: Address,
    ledger_id: int,
    timeout_ms: int = limits.read_timeout_ms_default,
    *,
    tls: ssl.SSLContext | None = None,
) -> Result:
    async def ask(connection: BookieConnection) -> Result:
        response = await connection.list_entries(ledger_id, timeout_ms=timeout_ms)
        ranges = [list(item) for item in response.ranges or []]
        return {
            "address": str(address),
            "ledger_id": ledger_id,
            "ranges": ranges,
            "entries": sum(last - first + 1 for first, last in ranges),
        }

    result: Result = anyio.run(_with_connection, address, timeout_ms, tls, ask)
    return result


# --- offline ----------------------------------------------------------------------------------


def last_mark(ledger_dirs: list[Path]) -> Result:
    for directory in ledger_dirs:
        if not directory.is_dir():
            raise ShellError(f"{directory} is not a directory")
    per_directory = {}
    for directory in ledger_dirs:
        mark = read_checkpoint_mark(directory)
        per_directory[str(directory)] = None if mark is None else _mark(mark)
    effective = checkpoint_mark(ledger_dirs)
    return {
        "ledger_dirs": per_directory,
        "replay_from": None if effective is None else _mark(effective),
    }


def _mark(mark: Any) -> Result:
    return {"journal_file_id": mark.file_id, "offset": mark.offset}


def read_journal(path: Path, *, ledger_id: int | None = None, limit: int | None = None) -> Result:
    """The records of a journal file, or of every journal file of a directory."""
    if not path.exists():
        raise ShellError(f"{path} does not exist")
    records: list[Result] = []
    tails: list[Result] = []
    count = 0
    for item in journal_records(path):
        if isinstance(item, FileTail):
            tails.append(
                {
                    "file": str(item.path),
                    "valid_bytes": item.offset,
                    "file_bytes": item.file_bytes,
                    "header_ok": item.header_ok,
                    "next_valid_offset": item.next_valid_offset,
                    "verdict": _tail_verdict(item),
                }
            )
            continue
        if ledger_id is not None and item.ledger_id != ledger_id:
            continue
        count += 1
        if limit is None or len(records) < limit:
            records.append(
                {
                    "file": item.path.name,
                    "offset": item.offset,
                    "kind": item.kind.name,
                    "ledger_id": item.ledger_id,
                    "argument": item.argument,
                    "size_bytes": item.size_bytes,
                }
            )
    return {"path": str(path), "records": records, "record_count": count, "tails": tails}


def _tail_verdict(tail: FileTail) -> str:
    if tail.next_valid_offset is not None:
        return (
            f"CORRUPT before the tail: a valid record follows at offset "
            f"{tail.next_valid_offset}; the bookie refuses to start (see docs/operations.md)"
        )
    if tail.zeros:
        return (
            "zeros: space allocated ahead if this is the newest file (trimmed by the next"
            " start), else CORRUPT (only the newest file may end early)"
        )
    return "torn or junk tail: truncated by the next start"


# --- output -----------------------------------------------------------------------------------


def render(result: Result, human: Callable[[Result], Iterator[str]], *, as_json: bool) -> str:
    """The text to print for `result`: one JSON object, or the lines of `human`."""
    if as_json:
        return json.dumps(result, sort_keys=True)
    return "\n".join(human(result))


def pairs(result: Result, keys: list[str]) -> Iterator[str]:
    width = max(len(key) for key in keys)
    for key in keys:
        if key in result:
            yield f"{key:<{width}}  {result[key]}"


def _human_bookie_info(result: Result) -> Iterator[str]:
    yield from pairs(result, ["address", "read_only"])
    free, total = result["free_bytes"], result["total_bytes"]
    used = 1 - free / total if total else 0.0
    yield f"{'disk':<9}  {_size(free)} free of {_size(total)} ({used:.1%} used)"


def _human_read_entry(result: Result) -> Iterator[str]:
    yield from pairs(
        result,
        [
            "address",
            "ledger_id",
            "entry_id",
            "entry_lac",
            "bookie_lac",
            "ledger_length",
            "packet_bytes",
            "payload_bytes",
            "digest",
        ],
    )
    if "payload_preview" in result:
        preview = bytes.fromhex(result["payload_preview"])
        yield f"payload   {preview!r}{'...' if len(preview) < result['payload_bytes'] else ''}"


def _human_list_entries(result: Result) -> Iterator[str]:
    yield from pairs(result, ["address", "ledger_id", "entries"])
    ranges = ", ".join(
        str(first) if first == last else f"{first}-{last}" for first, last in result["ranges"]
    )
    yield f"ranges     {ranges or '(none)'}"


def _human_last_mark(result: Result) -> Iterator[str]:
    for directory, mark in result["ledger_dirs"].items():
        yield f"{directory}: {_human_mark(mark)}"
    yield f"replay starts at: {_human_mark(result['replay_from'])}"


def _human_mark(mark: Result | None) -> str:
    if mark is None:
        return "never checkpointed (replay from the first journal file)"
    return f"journal file {mark['journal_file_id']:016x}, offset {mark['offset']}"


def _human_read_journal(result: Result) -> Iterator[str]:
    yield f"{'file':<24} {'offset':>10} {'kind':<12} {'ledger':>10} {'argument':>10} {'bytes':>8}"
    for record in result["records"]:
        yield (
            f"{record['file']:<24} {record['offset']:>10} {record['kind']:<12} "
            f"{record['ledger_id']:>10} {record['argument']:>10} {record['size_bytes']:>8}"
        )
    shown = len(result["records"])
    if shown < result["record_count"]:
        yield f"... {result['record_count'] - shown} more records (raise --limit)"
    yield f"{result['record_count']} records"
    for tail in result["tails"]:
        yield (
            f"{tail['file']}: valid up to byte {tail['valid_bytes']} of {tail['file_bytes']}: "
            f"{tail['verdict']}"
        )


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB", "GiB"):
        if value < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


HUMAN: dict[str, Callable[[Result], Iterator[str]]] = {
    "bookieinfo": _human_bookie_info,
    "readentry": _human_read_entry,
    "listentries": _human_list_entries,
    "lastmark": _human_last_mark,
    "readjournal": _human_read_journal,
}
