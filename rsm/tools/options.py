"""What the investigation commands share: their options, exit statuses, positions, outcomes.

* A SOURCE is `--app NAME --zk HOSTS [--ledger-root PATH]` (with the bookie TLS
  flags of bookie/net/tls_flags.py) or `--log FILE` (`source_options`,
  `source_arguments`); a class is `--class MODULE:CLASS`
  with `--app-dir` and the replicas' settings that decide what is applied
  (`machine_options`, `replica_config`).
* Exit statuses: `EXIT_OK` clean, `EXIT_PROBLEM` a problem found,
  `EXIT_USAGE` a usage error, something that does not exist, or a cluster
  that cannot be reached.
* `resolve_index`: a position given as an index or `LEDGER:ENTRY[:SLOT]`.
* `outcome_plain`: an outcome as JSON, `{"result": ...}` or `{"error": "Type: message"}`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Final

from bookie import limits as bookie_limits
from bookie.net.tls_flags import add_bookie_tls_arguments, bookie_tls_context
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core.sessions import Outcome
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, RsmStatus, Truncated
from rsm.machines import add_app_dir, load_machine
from rsm.tools.records import Coordinate, plain_value
from rsm.tools.source import LogSource

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1
EXIT_USAGE: Final = 2


def source_options(parser: argparse.ArgumentParser, *, many_logs: bool = False) -> None:
    """SOURCE (a cluster or `--log`) and `--json`."""
    parser.add_argument("--app", help="the application's name (with --zk)")
    parser.add_argument("--zk", help="ZooKeeper HOST:PORT[,...][/chroot]")
    parser.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)
    if many_logs:
        parser.add_argument(
            "--log", dest="logs", action="append", help="an exported log file (repeatable)"
        )
    else:
        parser.add_argument("--log", dest="log_file", help="an exported log file")
    parser.add_argument("--json", action="store_true", help="JSON output")
    add_bookie_tls_arguments(parser)


def machine_options(parser: argparse.ArgumentParser, flag: str, *, dest: str) -> None:
    """The class (`flag MODULE:CLASS`, `--app-dir`) and the replicas' settings that decide what
    is applied and when the state is hashed."""
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


def replica_config(arguments: argparse.Namespace) -> ReplicaConfig:
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


def load_class(arguments: argparse.Namespace, target: str) -> type[StateMachine]:
    add_app_dir(arguments.app_dir)
    return load_machine(target)


def source_arguments(arguments: argparse.Namespace) -> dict[str, Any]:
    return {
        "log_file": arguments.log_file,
        "app": arguments.app,
        "zk": arguments.zk,
        "ledger_root": arguments.ledger_root,
        "tls": bookie_tls_context(arguments),
    }


def count_argument(text: str) -> int:
    """An argparse type: a count of at least 1 (`--last N`, `--limit N`)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count of at least 1")
    return value


def client_id_argument(text: str) -> str:
    """An argparse type: a client id in hex (`--session`), lower-cased."""
    try:
        bytes.fromhex(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a client id in hex") from None
    if not text:
        raise argparse.ArgumentTypeError("an empty client id")
    return text.lower()


async def resolve_readable(source: LogSource, text: str | None, default: int, end: int) -> int:
    """`resolve_index`, refusing an index given past the readable end `end`: a range that
    does not exist is a usage error, never an empty answer."""
    index = await resolve_index(source, text, default)
    if text is not None and index > end:
        raise InvalidConfig(f"index {index} is past the log's readable end, index {end}")
    return index


def check_asked_range(
    source: LogSource,
    asked: tuple[str | None, str | None],
    first: int,
    last: int,
    *,
    last_option: str = "--to",
) -> None:
    """Refuse the range `first..last` that `--from`/`last_option` (`asked`, as given) made
    empty: an end truncated away, or a start past the end.  A range empty because the log
    is (no option given) is no error."""
    first_text, last_text = asked
    log_first = source.log.first_index
    if last_text is not None and last < log_first:
        raise Truncated(
            f"index {last} was truncated away: the log of {source.app!r} starts at index "
            f"{log_first}"
        )
    if (first_text is not None or last_text is not None) and first > last:
        raise InvalidConfig(f"--from {first} is past {last_option} {last}")


async def resolve_index(source: LogSource, text: str | None, default: int) -> int:
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


def with_option(words: Sequence[str], flag: str, value: str) -> list[str]:
    """`words` with `flag value` set (replaced when present)."""
    out = list(words)
    if flag in out:
        position = out.index(flag)
        out[position + 1 : position + 2] = [value]
        return out
    return [*out, flag, value]


def outcome_plain(outcome: Outcome) -> dict[str, Any]:
    """An outcome as JSON: `{"result": ...}`, or `{"error": "Type: message"}` (for a command
    that raised, its exception's type name, as the replicas recorded it)."""
    if outcome.ok:
        return {"result": plain_value(outcome.value)}
    kind = outcome.detail or RsmStatus(outcome.status).name
    return {"error": f"{kind}: {outcome.message}" if outcome.message else kind}
