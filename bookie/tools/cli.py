"""The `bookie` command: `bookie serve` runs a bookie, `bookie shell ...` inspects one,
`bookie autorecovery` runs autorecovery alone.

`bookie serve [--config FILE] [--KEY VALUE ...]` takes every configuration key
of bookie/server/config.py as a flag (`group_wait_ms` is `--group-wait-ms`,
bool keys have `--key` / `--no-key`, `ledger_dirs` takes one or more paths and
may be repeated); flags override the file.  An invalid configuration exits 2
with one `bookie.invalid_config` log event naming the key.  The process then
runs `BookieNode` (bookie/server/node.py), which documents signals, logs and
exit statuses, hosting autorecovery (bookie/autorecovery/) unless
`autorecovery = false`.

`bookie autorecovery --zk HOSTS [--zk-root ROOT] [--id ID] [--grace-ms MS]
[--poll-interval-ms MS] [--presence-interval-ms MS] [--presence-sample-entries N]
[--open-ledger-grace-ms MS]
[--rate-entries-per-s N]
[--rate-bytes-per-s N] [--password P | --password-file FILE]
[--tls-bookies --tls-ca-file CA ...]` runs
autorecovery without a bookie (a
candidate for auditor and a replication worker) until SIGTERM or SIGINT; exit 0
then, 2 for bad flags or a ZooKeeper that cannot be reached.

`bookie shell COMMAND` runs one of the inspection commands of bookie/tools/admin.py
(one bookie) or bookie/tools/cluster.py (a cluster, through ZooKeeper); `--json`
prints one JSON object instead of human-readable lines, with `"schema":
SHELL_SCHEMA_VERSION` (bookie/tools/admin.py), raised when a field changes
meaning or goes away.  Exit statuses: 0 done, 1 a problem found (the result's
`problems`, or a failure while working), 2 bad input or a bookie or ZooKeeper
that cannot be reached; a failure prints one line on stderr (a ledger id outside
0..`limits.ledger_id_max` is refused as the arguments are parsed).  Output that
cannot be written (a full disk) is one line and status 1; a reader that left
(`| head`) ends the command quietly, status 1.  A report of
problems ends with `reproduce: bookie shell ...`, the command line that shows
them again (in JSON, its `reproduce` field).  The shell commands that talk to bookies
take the TLS flags of bookie/net/tls_flags.py.

Also runnable as `python -m bookie.tools.cli`, which is how launchers start bookies
(the same interpreter and virtualenv as theirs).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import logging
import os
import shlex
import signal
import socket
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path

import anyio

from bookie import limits
from bookie.address import Address
from bookie.autorecovery.service import run_autorecovery
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.stats import AutoRecoveryStats, autorecovery_metrics
from bookie.errors import InvalidConfig, MetadataUnavailable
from bookie.logs import FORMATS, configure, emit
from bookie.meta import paths
from bookie.meta.zk import ZkMetadataStore
from bookie.net.admin_token import admin_token_from_environment
from bookie.net.tls_flags import add_bookie_tls_arguments, bookie_tls_context
from bookie.runtime_tuning import tune_for_throughput
from bookie.server.config import (
    KEYS,
    REQUIRED,
    BookieConfig,
    address_setting,
    load_config,
    read_client_tokens,
)
from bookie.server.node import EXIT_USAGE, BookieNode
from bookie.tools import cluster
from bookie.tools.admin import (
    EXIT_PROBLEM,
    HUMAN,
    SHELL_SCHEMA_VERSION,
    ShellError,
    bookie_info,
    last_mark,
    list_entries,
    read_entry,
    read_journal,
    render,
)
from bookie.tools.password_flags import add_password_arguments, password_from
from bookie.tools.stdout import discard_stdout, program_main
from bookie.wire.packet import DigestType

logger = logging.getLogger("bookie.cli")


def main(argv: Sequence[str] | None = None) -> int:
    return program_main("bookie: ", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    words = list(sys.argv[1:] if argv is None else argv)
    arguments = parser.parse_args(words)
    if arguments.command == "serve":
        return _serve(arguments)
    if arguments.command == "shell":
        return _shell(arguments, words)
    if arguments.command == "autorecovery":
        return _autorecovery(arguments)
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bookie", description="Run or inspect a bookie (a ledger storage server)."
    )
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser(
        "serve",
        help="run a bookie",
        description="Run a bookie.  Flags override the config file; "
        "see docs/operations.md for every key.",
        argument_default=argparse.SUPPRESS,
    )
    serve.add_argument("--config", type=Path, help="TOML config file (flat key = value pairs)")
    for name, key in KEYS.items():
        flags = [f"--{name.replace('_', '-')}"]
        if key.flag is not None:
            flags.append(key.flag)
        if key.default is REQUIRED:
            help_text = f"{key.help} (required)"
        elif key.default is None:
            help_text = key.help
        else:
            help_text = f"{key.help} (default: {key.default})"
        if key.kind == "bool":
            serve.add_argument(
                *flags, dest=name, action=argparse.BooleanOptionalAction, help=help_text
            )
        elif key.kind == "paths":
            serve.add_argument(
                *flags,
                "--ledger-dir",
                dest=name,
                action="extend",
                nargs="+",
                metavar="DIR",
                help=help_text,
            )
        else:
            metavar = (
                "{" + ",".join(key.choices) + "}"
                if key.kind == "choice"
                else key.kind.removeprefix("optional_").upper()
            )
            serve.add_argument(*flags, dest=name, metavar=metavar, help=help_text)
    _shell_parser(commands)
    _autorecovery_parser(commands)
    return parser


def _autorecovery_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    standalone = commands.add_parser(
        "autorecovery",
        help="run autorecovery without a bookie",
        description="Stand for auditor and repair under-replicated ledgers until stopped.",
    )
    standalone.add_argument("--zk", default="127.0.0.1:2181", help="ZooKeeper hosts")
    standalone.add_argument(
        "--zk-root", default=limits.metadata_root_default, help="the cluster's root znode"
    )
    standalone.add_argument("--id", help="this process's autorecovery id (default: host-pid)")
    standalone.add_argument(
        "--grace-ms",
        type=int,
        default=limits.autorecovery_grace_ms_default,
        help="a bookie unregistered for this long is lost",
    )
    standalone.add_argument(
        "--poll-interval-ms",
        type=int,
        default=limits.autorecovery_poll_interval_ms_default,
        help="how often workers look for marked ledgers",
    )
    standalone.add_argument(
        "--presence-interval-ms",
        type=int,
        default=limits.autorecovery_presence_interval_ms_default,
        help="how often the auditor checks that bookies hold every entry they should",
    )
    standalone.add_argument(
        "--presence-sample-entries",
        type=int,
        default=limits.autorecovery_presence_sample_entries_default,
        help="a presence check compares at most this many entries of a ledger per bookie (0: all)",
    )
    standalone.add_argument(
        "--open-ledger-grace-ms",
        type=int,
        default=limits.autorecovery_open_ledger_grace_ms_default,
        help="an open ledger whose writer is not known alive is fenced after this long "
        "without progress",
    )
    standalone.add_argument(
        "--rate-entries-per-s", type=int, default=0, help="copy at most this many entries/s"
    )
    standalone.add_argument(
        "--rate-bytes-per-s", type=int, default=0, help="copy at most this many bytes/s"
    )
    add_password_arguments(standalone, what="a ledger password it may use, besides ''")
    standalone.add_argument("--log-format", choices=FORMATS, default="json")
    add_bookie_tls_arguments(standalone)


def ledger_id_argument(text: str) -> int:
    """A ledger id on the command line: an integer from 0 to `limits.ledger_id_max` (else
    argparse's usage error, exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= value <= limits.ledger_id_max:
        raise argparse.ArgumentTypeError(f"{text}: ledger ids are 0..{limits.ledger_id_max}")
    return value


def _shell_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    shell = commands.add_parser("shell", help="inspect a bookie over the network or offline")
    tools = shell.add_subparsers(dest="tool", required=True)

    def tool(name: str, description: str) -> argparse.ArgumentParser:
        parser = tools.add_parser(name, help=description, description=description)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        return parser

    def bookie_tool(name: str, description: str) -> argparse.ArgumentParser:
        parser = tool(name, description)
        parser.add_argument(
            "address", help="host:port of the bookie (of its TLS listener with --tls-bookies)"
        )
        add_bookie_tls_arguments(parser)
        return parser

    bookie_tool("bookieinfo", "disk space and read-only flag of a running bookie")
    entry = bookie_tool("readentry", "one entry of a ledger, read from a running bookie")
    entry.add_argument("ledger_id", type=ledger_id_argument)
    entry.add_argument("entry_id", type=int, help="entry id, or -1 for the last one")
    entry.add_argument(
        "--digest",
        choices=[item.name.lower() for item in DigestType],
        default=DigestType.CRC32C.name.lower(),
        help="the ledger's digest type (to check the entry)",
    )
    add_password_arguments(entry, what="the ledger's password (HMAC digests)")
    entry.add_argument("--preview-bytes", type=int, default=64, help="payload bytes to show")
    entries = bookie_tool("listentries", "which entries of a ledger a running bookie holds")
    entries.add_argument("ledger_id", type=ledger_id_argument)
    mark = tool("lastmark", "checkpoint marks of a bookie's ledger directories (offline)")
    mark_source = mark.add_mutually_exclusive_group(required=True)
    mark_source.add_argument("--config", type=Path, help="the bookie's config file")
    mark_source.add_argument("--ledger-dirs", type=Path, nargs="+", metavar="DIR")
    journal = tool("readjournal", "records of a bookie's journal files (offline)")
    journal_source = journal.add_mutually_exclusive_group(required=True)
    journal_source.add_argument("--config", type=Path, help="the bookie's config file")
    journal_source.add_argument("--journal-dir", type=Path, metavar="DIR")
    journal_source.add_argument("--file", type=Path, help="one journal file")
    journal.add_argument("--ledger", type=ledger_id_argument, help="only records of this ledger")
    journal.add_argument("--limit", type=int, default=1000, help="records to print at most")

    def cluster_tool(name: str, description: str) -> argparse.ArgumentParser:
        parser = tool(name, description)
        parser.add_argument(
            "--zk", default="127.0.0.1:2181", help="ZooKeeper hosts host:port[,host:port...]"
        )
        parser.add_argument(
            "--zk-root", default=limits.metadata_root_default, help="the cluster's root znode"
        )
        return parser

    cluster_tool("listbookies", "every bookie of the cluster: writable, read-only or down")
    cluster_tool("listledgers", "every ledger id of the cluster")
    metadata = cluster_tool("ledgermetadata", "one ledger's metadata")
    metadata.add_argument("ledger_id", type=ledger_id_argument)
    ledger = cluster_tool(
        "readledger",
        "a ledger's entries (never fences: a closed ledger to its end, an open one to its LAC)",
    )
    ledger.add_argument("ledger_id", type=ledger_id_argument)
    ledger.add_argument("--from", dest="first", type=int, help="first entry (default 0)")
    ledger.add_argument("--to", dest="last", type=int, help="last entry (default: the end)")
    ledger.add_argument(
        "--all-bookies",
        action="store_true",
        help="read each entry from every bookie of its write set; name the ones that disagree",
    )
    add_password_arguments(ledger, what="the ledger's password")
    ledger.add_argument("--preview-bytes", type=int, default=16, help="payload bytes to show")
    add_bookie_tls_arguments(ledger)
    simple = cluster_tool("simpletest", "create a ledger, write entries, read them back, delete it")
    simple.add_argument("--ensemble", type=int, default=3, help="ensemble size E")
    simple.add_argument("--write-quorum", type=int, default=2, help="write quorum Qw")
    simple.add_argument("--ack-quorum", type=int, default=2, help="ack quorum Qa")
    simple.add_argument("--entries", type=int, default=100, help="entries to write")
    add_bookie_tls_arguments(simple)
    cluster_tool(
        "listunderreplicated", "ledgers marked under-replicated, what they miss, who repairs them"
    )
    cluster_tool("whoisauditor", "the elected autorecovery auditor")
    switch = cluster_tool("autorecovery", "let replication workers repair ledgers, or pause them")
    switch.add_argument("action", choices=["enable", "disable"])
    cluster_tool("triggeraudit", "ask the auditor to audit now")
    recover = cluster_tool("recover", "mark every ledger naming a bookie for repair, now")
    recover.add_argument("bookie_id")
    acls = cluster_tool(
        "setacls", "give the cluster's znodes (and PATHs') the ACL of BOOKIE_ZK_DIGEST_FILE"
    )
    acls.add_argument("paths", nargs="*", metavar="PATH", help="more trees to secure (/rsm)")
    decommission = cluster_tool(
        "decommission",
        "copy a stopped bookie's data elsewhere, then remove it from the cluster",
    )
    decommission.add_argument("bookie_id")
    decommission.add_argument(
        "--timeout-s",
        type=float,
        default=limits.shell_decommission_timeout_s_default,
        help="how long to wait for its ledgers to be repaired",
    )


# --- serve ------------------------------------------------------------------------------------


def _serve(arguments: argparse.Namespace) -> int:
    values = vars(arguments)
    config_file: Path | None = values.pop("config", None)
    values.pop("command")
    flags = {name: value for name, value in values.items() if name in KEYS}
    try:
        config = load_config(config_file, flags)
        tokens = read_client_tokens(config)
        peers_tls = config.peer_tls()
        # Read again by the admin server; checked here so a bad file is a usage error,
        # said before the bookie registers.
        admin_token_from_environment()
    except InvalidConfig as error:
        log_format = flags.get("log_format")
        configure("info", log_format if log_format in ("json", "text") else "json")
        emit(logger, logging.ERROR, "bookie.invalid_config", reason=str(error))
        return EXIT_USAGE
    configure(config.log_level, config.log_format)

    def reload() -> BookieConfig:
        return load_config(config_file, flags)

    hosted = hosted_metrics = None
    if config.autorecovery:
        settings = AutoRecoverySettings(
            owner=config.bookie_id,
            root=config.zk_root,
            grace_ms=config.autorecovery_grace_ms,
            poll_interval_ms=config.autorecovery_poll_interval_ms,
            presence_interval_ms=config.autorecovery_presence_interval_ms,
            open_ledger_grace_ms=config.autorecovery_open_ledger_grace_ms,
            presence_sample_entries=config.autorecovery_presence_sample_entries,
            rate_entries_per_s=config.autorecovery_rate_entries_per_s,
            rate_bytes_per_s=config.autorecovery_rate_bytes_per_s,
            passwords=_passwords((config.autorecovery_password or "").encode()),
            tls=peers_tls,
        )
        stats = AutoRecoveryStats()
        hosted = functools.partial(run_autorecovery, settings=settings, stats=stats)
        hosted_metrics = functools.partial(autorecovery_metrics, stats)
    node = BookieNode(
        config, reload if config_file is not None else None, hosted, tokens, hosted_metrics
    )
    tune_for_throughput()
    use_uvloop = config.event_loop == "uvloop" and importlib.util.find_spec("uvloop") is not None
    code: int = anyio.run(node.run, backend="asyncio", backend_options={"use_uvloop": use_uvloop})
    return code


def _passwords(extra: bytes | None) -> tuple[bytes, ...]:
    return (b"",) if not extra else (b"", extra)


# --- autorecovery -----------------------------------------------------------------------------


def _autorecovery(arguments: argparse.Namespace) -> int:
    configure("info", arguments.log_format)
    problem = None
    if not paths.is_valid(arguments.zk_root) or arguments.zk_root == paths.ROOT:
        problem = f"--zk-root {arguments.zk_root!r}: expected an absolute znode path below '/'"
    elif (
        min(
            arguments.grace_ms,
            arguments.open_ledger_grace_ms,
            arguments.presence_sample_entries,
            arguments.rate_entries_per_s,
            arguments.rate_bytes_per_s,
        )
        < 0
    ):
        problem = (
            "--grace-ms, --open-ledger-grace-ms, --presence-sample-entries and the rates "
            "must be at least 0"
        )
    elif min(arguments.poll_interval_ms, arguments.presence_interval_ms) < 1:
        problem = "--poll-interval-ms and --presence-interval-ms must be at least 1"
    elif arguments.id is not None and not paths.is_valid_name(arguments.id):
        problem = f"--id {arguments.id!r}: no '/', not empty, '.' or '..'"
    tls = password = None
    try:
        tls = bookie_tls_context(arguments)
        password = password_from(arguments)
    except InvalidConfig as error:
        problem = problem or str(error)
    if problem is not None:
        emit(logger, logging.ERROR, "autorecovery.invalid_arguments", reason=problem)
        return EXIT_USAGE
    settings = AutoRecoverySettings(
        owner=arguments.id or f"autorecovery-{socket.gethostname()}-{os.getpid()}",
        root=arguments.zk_root,
        grace_ms=arguments.grace_ms,
        poll_interval_ms=arguments.poll_interval_ms,
        presence_interval_ms=arguments.presence_interval_ms,
        open_ledger_grace_ms=arguments.open_ledger_grace_ms,
        presence_sample_entries=arguments.presence_sample_entries,
        rate_entries_per_s=arguments.rate_entries_per_s,
        rate_bytes_per_s=arguments.rate_bytes_per_s,
        passwords=_passwords(password),
        tls=tls,
    )
    try:
        anyio.run(_run_autorecovery, arguments.zk, settings)
    except MetadataUnavailable as error:
        emit(
            logger,
            logging.ERROR,
            "autorecovery.failed",
            reason=f"cannot reach ZooKeeper at {arguments.zk}: {error}",
        )
        return EXIT_USAGE
    return 0


async def _run_autorecovery(zk_servers: str, settings: AutoRecoverySettings) -> None:
    async with (
        ZkMetadataStore.connect(zk_servers) as store,
        anyio.create_task_group() as task_group,
    ):
        task_group.start_soon(run_autorecovery, store, settings)
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
            async for signum in received:
                emit(logger, logging.INFO, "autorecovery.stopping", signal=signum.name)
                break
        task_group.cancel_scope.cancel()


# --- shell ------------------------------------------------------------------------------------


def _shell(arguments: argparse.Namespace, words: list[str]) -> int:
    # The command's one-line error says what failed; the libraries' warnings on the
    # way there (kazoo's reconnect attempts) would only bury it.
    configure("error", "text")
    try:
        result = _run_tool(arguments)
    except ShellError as error:
        print(f"bookie shell {arguments.tool}: {error}", file=sys.stderr)
        return error.exit_code
    except InvalidConfig as error:
        print(f"bookie shell {arguments.tool}: {error}", file=sys.stderr)
        return EXIT_USAGE
    human = HUMAN.get(arguments.tool) or cluster.HUMAN[arguments.tool]
    problems = bool(result.get("problems"))
    reproduce = "reproduce: bookie " + shlex.join(words)
    try:
        if arguments.json:
            report = {"schema": SHELL_SCHEMA_VERSION, **result}
            if problems:
                report["reproduce"] = reproduce
            print(render(report, human, as_json=True))
        else:
            print(render(result, human, as_json=False))
            if problems:
                print(reproduce)
        sys.stdout.flush()
    except OSError as error:
        discard_stdout()
        if not isinstance(error, BrokenPipeError):  # a reader that left: quietly
            reason = error.strerror or str(error)
            print(
                f"bookie shell {arguments.tool}: cannot write the output: {reason}", file=sys.stderr
            )
        return EXIT_PROBLEM
    return EXIT_PROBLEM if problems else 0


def _run_tool(arguments: argparse.Namespace) -> dict[str, object]:
    tool = arguments.tool
    # Only the tools that talk to bookies take the TLS flags.
    tls = bookie_tls_context(arguments) if "tls_bookies" in arguments else None
    if tool in cluster.HUMAN:
        return _run_cluster_tool(arguments, tls)
    if tool == "bookieinfo":
        return bookie_info(_address(arguments.address), tls=tls)
    if tool == "readentry":
        return read_entry(
            _address(arguments.address),
            arguments.ledger_id,
            arguments.entry_id,
            digest_type=DigestType[arguments.digest.upper()],
            password=password_from(arguments) or b"",
            preview_bytes=arguments.preview_bytes,
            tls=tls,
        )
    if tool == "listentries":
        return list_entries(_address(arguments.address), arguments.ledger_id, tls=tls)
    if tool == "lastmark":
        ledger_dirs = (
            list(_offline_config(arguments.config).ledger_dirs)
            if arguments.config is not None
            else arguments.ledger_dirs
        )
        return last_mark(ledger_dirs)
    assert tool == "readjournal", tool
    if arguments.config is not None:
        path = _offline_config(arguments.config).journal_dir
    else:
        path = arguments.journal_dir if arguments.journal_dir is not None else arguments.file
    return read_journal(path, ledger_id=arguments.ledger, limit=arguments.limit)


def _run_cluster_tool(
    arguments: argparse.Namespace, tls: ssl.SSLContext | None
) -> dict[str, object]:
    tool = arguments.tool
    where = cluster.Cluster(arguments.zk, arguments.zk_root, tls)
    if tool == "listbookies":
        return cluster.bookies(where)
    if tool == "listledgers":
        return cluster.ledgers(where)
    if tool == "ledgermetadata":
        return cluster.ledger_metadata(where, arguments.ledger_id)
    if tool == "readledger":
        return cluster.read_ledger(
            where,
            arguments.ledger_id,
            first=arguments.first,
            last=arguments.last,
            all_bookies=arguments.all_bookies,
            password=password_from(arguments) or b"",
            preview_bytes=arguments.preview_bytes,
        )
    if tool == "listunderreplicated":
        return cluster.under_replicated(where)
    if tool == "whoisauditor":
        return cluster.who_is_auditor(where)
    if tool == "autorecovery":
        return cluster.set_autorecovery(where, arguments.action == "enable")
    if tool == "triggeraudit":
        return cluster.trigger_audit(where)
    if tool == "recover":
        return cluster.recover(where, arguments.bookie_id)
    if tool == "setacls":
        return cluster.set_acls(where, arguments.paths)
    if tool == "decommission":
        return cluster.decommission(where, arguments.bookie_id, arguments.timeout_s)
    assert tool == "simpletest", tool
    return cluster.simple_test(
        where,
        ensemble_size=arguments.ensemble,
        write_quorum=arguments.write_quorum,
        ack_quorum=arguments.ack_quorum,
        entries=arguments.entries,
    )


def _address(text: str) -> Address:
    return address_setting(text, "address")


def _offline_config(path: Path) -> BookieConfig:
    return load_config(path)


if __name__ == "__main__":
    sys.exit(main())
