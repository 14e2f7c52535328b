"""The investigation commands of `rsm`: log dump/export/check, replay, verify, bisect,
determinism, diff, blame.

    rsm log dump   SOURCE [--from I] [--to I] [--last N] [--limit N] [--command NAME]
                   [--session HEX] [--follow] [--stats] [--json]
    rsm log export SOURCE --to FILE [--from I] [--through I] [--json]
    rsm log check  SOURCE [--keep-going] [--all-bookies] [--json]
    rsm replay     SOURCE --class MODULE:CLASS [--to I] [--from-snapshot | --from-start]
                   [--query NAME [ARG ...]] [--bytes] [--shell] [--break-at I] [--break-on COMMAND]
    rsm verify     SOURCE --class MODULE:CLASS [--to I] [--reference MODULE:CLASS]
    rsm bisect     SOURCE... --old MODULE:CLASS --new MODULE:CLASS [--to I] [--results-only]
    rsm determinism SOURCE --class MODULE:CLASS [--to I] [--hash-seeds A,B]
    rsm snapshot verify SOURCE --class MODULE:CLASS [--index I]
    rsm diff       SOURCE --class MODULE:CLASS (--at I --at J | --replica A --replica B)
    rsm blame      SOURCE --class MODULE:CLASS KEY [--from I] [--to I]

SOURCE is `--app NAME --zk HOSTS [--ledger-root PATH]` (a cluster, read
without fencing and without writing; its bookies with TLS given the flags of
bookie/net/tls_flags.py) or `--log FILE` (an exported log; `rsm
bisect` takes `--log` many times).  Positions (`--from`, `--to`,
`--break-at`, `--at`) are an index or `LEDGER:ENTRY[:SLOT]`; ranges are inclusive.
Commands that replay take `--app-dir`, `--state-hash-every` and the session
settings, which must be the replicas' (`rsm run` has the same options and
defaults), so that the replay's state and hashes equal a replica's.

Output is a table, or JSON with `--json` (NDJSON for the records of `log
dump`).  Exit status: 0 clean, 1 a problem found (a divergence, a corrupt
entry, a gap), 2 a usage error, an application or range that does not exist,
or a cluster that cannot be reached.  An application that does not exist is
`NoSuchApplication` at once; a ZooKeeper that gives no session within
`limits.cli_zk_connect_timeout_ms` is `MetadataUnavailable` naming its
address, in one line (`rsm.host.command_zk_store`, `quiet_kazoo`).  An
output that cannot be written (a full disk) is one line and status 1; a
reader that left (`| head`) ends the command quietly, status 1.  A
problem report's last line is the command that reproduces it.  Progress goes
to stderr when it is a terminal.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

import anyio

from bookie.errors import (
    BookieError,
    BookieUnavailable,
    ClientError,
    ClientTimeout,
    MetadataUnavailable,
    NoSuchLedgerError,
    NotEnoughBookies,
    leaf_error,
)
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.runtime_tuning import tune_for_throughput
from bookie.tools.stdout import discard_stdout
from rsm.errors import InvalidConfig, MalformedValue, RsmError, Truncated
from rsm.host import quiet_kazoo
from rsm.tools import divergence_commands, key_commands, log_commands, replay_commands
from rsm.tools.arguments import add_bytes_argument
from rsm.tools.options import (
    EXIT_PROBLEM,
    EXIT_USAGE,
    client_id_argument,
    count_argument,
    machine_options,
    source_options,
)


def add_parsers(commands: Any) -> None:
    """Add `log`, `replay`, `verify`, `bisect`, `determinism`, `diff` and `blame` to the `rsm`
    parser."""
    log = commands.add_parser("log", help="dump, export and check an application's log")
    log_parsers = log.add_subparsers(dest="log_command", required=True)

    dump = log_parsers.add_parser("dump", help="the decoded commands of the log")
    source_options(dump)
    dump.add_argument("--from", dest="first", help="first index or LEDGER:ENTRY[:SLOT]")
    dump.add_argument("--to", dest="last", help="last index or LEDGER:ENTRY[:SLOT] (inclusive)")
    dump.add_argument("--last", dest="tail", type=count_argument, help="only the last N commands")
    dump.add_argument("--limit", type=count_argument, help="print at most N records")
    dump.add_argument("--command", dest="command_name", help="only commands of this name")
    dump.add_argument(
        "--session", type=client_id_argument, help="only commands of client ids starting so (hex)"
    )
    dump.add_argument("--follow", action="store_true", help="keep printing as the log grows")
    dump.add_argument("--stats", action="store_true", help="counts and bytes, not records")
    dump.set_defaults(handler=log_commands.dump)

    export = log_parsers.add_parser("export", help="write the log to a self-contained file")
    source_options(export)
    export.add_argument("--to", dest="output", required=True, help="the file to write")
    export.add_argument("--from", dest="first", help="first index (default: the log's first)")
    export.add_argument("--through", dest="last", help="last index (default: the readable end)")
    export.set_defaults(handler=log_commands.export)

    check = log_parsers.add_parser("check", help="find gaps, corrupt entries, open segments")
    source_options(check)
    check.add_argument(
        "--keep-going", action="store_true", help="go on past unreadable or corrupt entries"
    )
    check.add_argument(
        "--all-bookies",
        action="store_true",
        help="read every entry from every bookie of its write set; name the one that differs",
    )
    check.set_defaults(handler=log_commands.check)

    replay = commands.add_parser("replay", help="the state at an index, through the real class")
    source_options(replay)
    machine_options(replay, "--class", dest="target")
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
    add_bytes_argument(replay)
    replay.add_argument("--shell", action="store_true", help="a Python shell with the state")
    replay.add_argument("--break-at", help="stop in pdb just before this command applies")
    replay.add_argument("--break-on", help="stop in pdb before every command of this name")
    replay.set_defaults(handler=replay_commands.replay)

    verify = commands.add_parser("verify", help="replay and check every logged state hash")
    source_options(verify)
    machine_options(verify, "--class", dest="target")
    verify.add_argument("--to", dest="last", help="the last index to verify (default: the end)")
    verify.add_argument(
        "--reference", help="MODULE:CLASS that wrote the log, to name the divergent command"
    )
    verify.set_defaults(handler=divergence_commands.verify)

    bisect = commands.add_parser("bisect", help="the first command where two versions differ")
    source_options(bisect, many_logs=True)
    machine_options(bisect, "--old", dest="old")
    bisect.add_argument("--new", required=True, help="MODULE:CLASS of the new version")
    bisect.add_argument("--to", dest="last", help="the last index (default: the end)")
    bisect.add_argument(
        "--results-only", action="store_true", help="compare results, not state hashes"
    )
    bisect.set_defaults(handler=divergence_commands.bisect)

    determinism = commands.add_parser(
        "determinism", help="replay twice with different hash seeds and compare"
    )
    source_options(determinism)
    machine_options(determinism, "--class", dest="target")
    determinism.add_argument("--to", dest="last", help="the last index (default: the end)")
    determinism.add_argument("--hash-seeds", default="1,2", help="two PYTHONHASHSEED values")
    determinism.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    determinism.add_argument("--from", dest="first", help=argparse.SUPPRESS)
    determinism.add_argument("--per-command", action="store_true", help=argparse.SUPPRESS)
    determinism.set_defaults(handler=divergence_commands.determinism)

    diff = commands.add_parser("diff", help="where two states differ: two indexes or replicas")
    source_options(diff)
    machine_options(diff, "--class", dest="target")
    diff.add_argument("--at", action="append", help="an index or LEDGER:ENTRY[:SLOT] (twice)")
    diff.add_argument(
        "--replica",
        dest="replicas",
        action="append",
        help="a replica id: its newest snapshot (twice)",
    )
    diff.set_defaults(handler=key_commands.diff)

    blame = commands.add_parser("blame", help="every command that changed a key")
    source_options(blame)
    machine_options(blame, "--class", dest="target")
    blame.add_argument("key", help='the key (its bytes; any bytes: {"hex": "..."})')
    blame.add_argument("--from", dest="first", help="first index (default: the log's first)")
    blame.add_argument("--to", dest="last", help="last index (default: the readable end)")
    blame.set_defaults(handler=key_commands.blame)


def add_snapshot_verify(snapshot_commands: Any) -> None:
    """`rsm snapshot verify`: a snapshot's state equals replay of the log to its index."""
    verify = snapshot_commands.add_parser(
        "verify", help="check a snapshot's state against replay of the log to its index"
    )
    source_options(verify)
    machine_options(verify, "--class", dest="target")
    verify.add_argument("--index", type=int, help="the snapshot's index (default: newest)")
    verify.set_defaults(handler=replay_commands.snapshot_verify)


# --- running a command ------------------------------------------------------------------------


def run(arguments: argparse.Namespace, argv: Sequence[str]) -> int:
    """Run the command `arguments` names; its exit status (see the module docstring)."""
    arguments.argv = list(argv)
    # Only this command's own messages reach stderr (the libraries log to the root logger).
    logging.getLogger().addHandler(logging.NullHandler())
    tune_for_throughput()
    try:
        with quiet_kazoo():
            result: int = anyio.run(arguments.handler, arguments)
        return result
    except BaseException as raised:  # groups from task groups are unwrapped first
        error = leaf_error(raised)
        if isinstance(error, KeyboardInterrupt | SystemExit) or not isinstance(error, Exception):
            raise
        code, message = _classify(error)
        if code is None:
            raise
        if isinstance(error, OSError):
            discard_stdout()
        if not isinstance(error, BrokenPipeError):
            print(f"error: {message}", file=sys.stderr)
        return code


def _classify(error: Exception) -> tuple[int | None, str]:
    """The exit status and message of an error, or None for a bug (let the traceback show)."""
    text = f"{type(error).__name__}: {error}"
    if isinstance(
        error,
        InvalidConfig | BookieInvalidConfig | Truncated | MetadataUnavailable | NoSuchLedgerError,
    ):
        return EXIT_USAGE, text
    if isinstance(error, ClientError) and not isinstance(error, NoSuchLedgerError):
        return EXIT_USAGE if _unreachable(error) else EXIT_PROBLEM, text
    if isinstance(error, MalformedValue | RsmError | BookieError | OSError):
        return EXIT_PROBLEM, text
    return None, text


def _unreachable(error: ClientError) -> bool:
    return isinstance(error, BookieUnavailable | ClientTimeout | NotEnoughBookies)
