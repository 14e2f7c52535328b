"""The `rsm` command: run a replica, look at an application, call it, move its leader.

    rsm run MODULE:CLASS --app NAME --zk HOSTS --listen HOST:PORT [--advertise HOST:PORT]
            [--replica-id ID] [--ledger-root /ledgers] [--ensemble 3] [--write-quorum 3]
            [--ack-quorum 2] [--segment-entries-max N] [--session-timeout-ms 10000]
            [--snapshot-every-commands N] [--snapshot-every-bytes N]
            [--snapshot-every-seconds N] [--snapshots-kept 3] [--snapshot-capture auto]
            [--retention-commands N] [--retention-seconds N] [--no-truncation]
            [--orphan-safe-age-seconds 3600] [--orphan-check-interval-seconds 600]
            [--state-hash-every N] [--follower-nice 19] [--ledger-digest crc32c]
            [--app-dir .] [--log-level info] [--log-format json]
    rsm status --app NAME --zk HOSTS [--ledger-root /ledgers] [--json]
    rsm call --app NAME --zk HOSTS COMMAND [ARG ...] [--bytes] [--json]
    rsm query --app NAME --zk HOSTS QUERY [ARG ...] [--consistency linearizable] [--bytes]
            [--json]
    rsm transfer-leadership --app NAME --zk HOSTS [--to REPLICA_ID] [--json]
    rsm snapshot ls --app NAME --zk HOSTS [--json]
    rsm snapshot create --app NAME --zk HOSTS [--replica REPLICA_ID] [--json]
    rsm snapshot inspect --app NAME --zk HOSTS [--index N] [--ledger-root /ledgers] [--json]
    rsm log dump|export|check, rsm replay, rsm verify, rsm bisect, rsm determinism,
    rsm diff, rsm blame
            (investigating a log: rsm/tools/investigate.py, docs/tools.md)
    rsm spark export|audit|snapshot ... (rsm/spark/cli.py; needs the `spark` extra)

`--zk` is a ZooKeeper connect string, optionally with a chroot:
`127.0.0.1:2181` or `zk1:2181,zk2:2181/my/root`.  Arguments of `call` and
`query` are parsed as JSON where they parse (`5`, `"x"`, `[1, 2]`, `null`) and
taken as text otherwise (`hello`); `key=value` arguments are keyword
arguments, the value parsed the same way.  Bytes are `{"hex": "6869"}`, as
the output shows them; `--bytes` passes every text as its UTF-8 bytes
(rsm/tools/arguments.py).

`rsm run` imports CLASS from MODULE (a `StateMachine` subclass; `--app-dir`,
the current directory by default, comes first on the import path), runs one
replica until SIGTERM or SIGINT, then stops gracefully (a leader hands over
or closes its segment, so the successor needs no fencing).  It logs one JSON
object per line on stderr (`bookie.logs`): `rsm.ready` once it serves
clients (with its process id, `pid`), `rsm.leader` when it becomes leader,
`rsm.step_down`, `rsm.handed_over` naming the successor, ...  While it
follows, a replica that leads its own session (`setsid rsm run ...`) runs at
a lower CPU priority, `--follower-nice` (rsm/runtime/cpu_priority.py).

`rsm snapshot create` asks one replica to snapshot its state now: the one
named by `--replica`, else a caught-up follower (so the leader is not
disturbed), else the leader.  `rsm snapshot inspect` reads the newest snapshot
(or the one at `--index`) through, checks it as a loading replica would, and
shows its header and, for the default codec, its attributes.  The snapshot
knobs of `rsm run` are docs/snapshots.md's ("0" turns a criterion off).

Output: a human-readable table or line by default, one JSON object with
`--json`.  Exit status: 0 on success, 1 when the operation failed, 2 for a
usage error (a bad argument, an application that does not exist).  An error
is one line on stderr, `error: <type>: <message>`, where a command or query
that raised names the application's exception (`error: TypeError: amount
must be an integer`) and any other failure names the framework's error class
(`error: Timeout: ...`).  With `--json` it is instead one JSON object on
stdout, nothing on stderr:

    {"error": {"type": "TypeError", "message": "amount must be an integer",
               "command_failed": true}}

`command_failed` is true when the application's code raised (`type` is its
exception's type name, `rsm.errors.CommandFailed` in Python) and false when
the framework or the cluster failed (`type` is an `rsm.errors` or
`bookie.errors` class name).  Mistakes argparse catches (a missing or
unknown option) print its usage on stderr and exit with 2, with or without
`--json`.  An output that cannot be written (a full disk) is the line
`error: OSError: ...` on stderr and status 1; a reader that leaves early
(`| head`) ends the command quietly, also with 1 (bookie/tools/stdout.py).

The commands that call or report on an application fail fast with the cause:
an application of which no replica ever ran in that ZooKeeper (a misspelt
`--app` or chroot) is `NoSuchApplication` at once, exit 2; a ZooKeeper that
gives no session within `limits.cli_zk_connect_timeout_ms` (3 s) is
`MetadataUnavailable` naming its address, exit 1, without kazoo's line per
reconnect attempt.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any, Final

import anyio

from bookie import limits as bookie_limits
from bookie.client.config import ClientConfig as LedgerClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.errors import BookieError
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.logs import FORMATS, LEVELS, configure, emit
from bookie.meta.api import MetadataStore
from bookie.net.admin_token import admin_token_from_environment
from bookie.net.tls_flags import add_bookie_tls_arguments, bookie_tls_context
from bookie.tools.stdout import program_main
from rsm import limits
from rsm.admin import add_admin_argument, admin_server
from rsm.client import Client, ClientConfig, connect
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.protocol import Consistency
from rsm.core.state_machine import StateMachine
from rsm.errors import CommandFailed, InvalidConfig, NoSuchApplication, RsmError, Unavailable
from rsm.host import (
    FollowerPriority,
    add_client_tokens_file,
    add_follower_nice,
    add_ledger_digest,
    add_log_knobs,
    aligned,
    application_status,
    command_zk_store,
    ledger_digest_of,
    log_knobs_of,
    quiet_kazoo,
    read_client_tokens,
    replica_metadata,
    replication_lines,
    run_replica_main,
    shown_addresses,
    status_heading,
    under_replication_lines,
)
from rsm.machines import add_app_dir, load_machine
from rsm.runtime.log import LogStore
from rsm.runtime.replica import Replica
from rsm.snapshots.inspect import inspect, listing
from rsm.snapshots.store import SnapshotStore, read_snapshots
from rsm.tls_flags import (
    ReplicaTls,
    add_client_tls_arguments,
    add_replica_tls_arguments,
    client_connector,
    replica_tls,
)
from rsm.tools import investigate
from rsm.tools.arguments import add_bytes_argument, parse_arguments

logger = logging.getLogger("rsm.cli")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_CLI_CLIENT: Final = ClientConfig(require_application=True)
"""The commands' client: an application that does not exist is said so at once."""


def main(argv: Sequence[str] | None = None) -> int:
    return program_main("error: ", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    if words[:1] == ["spark"]:
        from rsm.spark.cli import main as spark_main  # noqa: PLC0415 (PySpark loads only here)

        return spark_main(words[1:])
    parser = _parser()
    arguments = parser.parse_args(argv)
    command = arguments.command
    if command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    handler = getattr(arguments, "handler", None)
    if handler is not None:
        return investigate.run(arguments, sys.argv[1:] if argv is None else argv)
    try:
        if command == "run":
            return _run(arguments)
        # Checked before any connection: a bad TLS file is a usage error, said at once.
        arguments.connector = client_connector(arguments)
        with quiet_kazoo():
            return _backend_run(_COMMANDS[command], arguments)
    except (RsmError, BookieError) as error:
        _print_error(error, as_json=getattr(arguments, "json", False))
        usage = isinstance(error, InvalidConfig | BookieInvalidConfig)
        return EXIT_USAGE if usage else EXIT_FAILED


def _print_error(error: RsmError | BookieError, *, as_json: bool) -> None:
    """The one error of a command: a line on stderr, or with `--json` an object on stdout
    (the shape is in the module docstring)."""
    command_failed = isinstance(error, CommandFailed)
    remote_type = error.type_name if isinstance(error, CommandFailed) else None
    type_name = remote_type or type(error).__name__
    if as_json:
        fields = {"type": type_name, "message": str(error), "command_failed": command_failed}
        print(_dumps({"error": fields}))
    else:
        print(f"error: {type_name}: {error}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rsm", description="Replicated state machines on ledgers: run, inspect, call."
    )
    commands = parser.add_subparsers(dest="command")

    run = commands.add_parser("run", help="run one replica of an application")
    run.add_argument("target", help="MODULE:CLASS of the StateMachine subclass")
    _common(run, output=False)
    run.add_argument("--listen", required=True, help="HOST:PORT to serve clients on")
    run.add_argument("--advertise", help="HOST:PORT to tell others (default: --listen)")
    run.add_argument("--replica-id", help="this replica's id (default: the advertised address)")
    add_admin_argument(run)
    run.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)
    run.add_argument("--ensemble", type=int, default=3, help="ensemble size E")
    run.add_argument("--write-quorum", type=int, default=3, help="write quorum Qw")
    run.add_argument("--ack-quorum", type=int, default=2, help="ack quorum Qa")
    run.add_argument(
        "--session-timeout-ms",
        type=int,
        default=limits.replica_session_timeout_ms_default,
        help="ZooKeeper session timeout: how long a dead leader holds its znodes",
    )
    run.add_argument(
        "--app-dir",
        default=".",
        help="directory put first on the import path to find MODULE (default: here)",
    )
    add_log_knobs(run)
    run.add_argument(
        "--state-hash-every",
        type=int,
        default=limits.state_hash_every_commands_default,
        help="record a state hash every N commands (equal on every replica; 0: never)",
    )
    add_follower_nice(run)
    add_ledger_digest(run)
    add_client_tokens_file(run)
    add_replica_tls_arguments(run)
    run.add_argument("--log-level", choices=LEVELS, default="info")
    run.add_argument("--log-format", choices=FORMATS, default="json")

    status = commands.add_parser(
        "status", help="the log, the leader, every replica, and under-replicated ledgers"
    )
    _common(status)
    status.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)

    call = commands.add_parser("call", help="run a command through the log")
    _common(call)
    call.add_argument("name", help="the command")
    call.add_argument("arguments", nargs="*", help="JSON values, text, or key=value")
    add_bytes_argument(call)

    query = commands.add_parser("query", help="answer a query")
    _common(query)
    query.add_argument("name", help="the query")
    query.add_argument("arguments", nargs="*", help="JSON values, text, or key=value")
    add_bytes_argument(query)
    query.add_argument(
        "--consistency",
        choices=[level.name.lower() for level in Consistency],
        default="linearizable",
    )

    transfer = commands.add_parser(
        "transfer-leadership", help="hand leadership to a caught-up replica"
    )
    _common(transfer)
    transfer.add_argument("--to", help="the target replica id (default: any caught-up one)")

    snapshot = commands.add_parser("snapshot", help="list, take and inspect snapshots")
    snapshot_commands = snapshot.add_subparsers(dest="snapshot_command", required=True)
    listed = snapshot_commands.add_parser("ls", help="the registered snapshots, newest first")
    _common(listed)
    create = snapshot_commands.add_parser("create", help="have a replica take a snapshot now")
    _common(create)
    create.add_argument("--replica", help="the replica id (default: a caught-up follower)")
    inspected = snapshot_commands.add_parser("inspect", help="read a snapshot through, check it")
    _common(inspected)
    inspected.add_argument("--index", type=int, help="the snapshot's index (default: newest)")
    inspected.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)
    add_bookie_tls_arguments(inspected, files=False)
    investigate.add_snapshot_verify(snapshot_commands)
    investigate.add_parsers(commands)
    return parser


def _common(parser: argparse.ArgumentParser, *, output: bool = True) -> None:
    parser.add_argument("--app", required=True, help="the application's name")
    parser.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT[,...][/chroot]")
    if output:
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        add_client_tls_arguments(parser)


def _client(
    arguments: argparse.Namespace, store: MetadataStore
) -> contextlib.AbstractAsyncContextManager[Client]:
    """The command's client of `--app` (over TLS with the TLS flags, `main` checked them)."""
    return connect(arguments.app, store=store, config=_CLI_CLIENT, connector=arguments.connector)


def _backend_run(command: Any, arguments: argparse.Namespace) -> int:
    result: int = anyio.run(command, arguments)
    return result


# --- rsm run ----------------------------------------------------------------------------------


def _run(arguments: argparse.Namespace) -> int:
    priority = FollowerPriority(arguments.follower_nice)
    configure(arguments.log_level, arguments.log_format)
    add_app_dir(arguments.app_dir)
    machine = load_machine(arguments.target)
    config = ReplicaConfig(
        ensemble_size=arguments.ensemble,
        write_quorum=arguments.write_quorum,
        ack_quorum=arguments.ack_quorum,
        **log_knobs_of(arguments),
        state_hash_every_commands=arguments.state_hash_every,
        ledger_digest=ledger_digest_of(arguments),
    )
    arguments.replica_tls = replica_tls(arguments)
    # Read again by the admin server; checked here so a bad file is a usage error, said
    # before the replica joins anything.
    admin_token_from_environment()
    return run_replica_main(
        _serve, arguments, machine, config, priority, logger=logger, failed_event="rsm.failed"
    )


async def _serve(
    arguments: argparse.Namespace,
    machine: type[StateMachine],
    config: ReplicaConfig,
    priority: FollowerPriority,
) -> int:
    tls: ReplicaTls = arguments.replica_tls
    client_tokens = read_client_tokens(arguments.client_tokens_file)  # before ZooKeeper
    async with (
        replica_metadata(
            arguments.zk,
            ledger_root=arguments.ledger_root,
            session_timeout_ms=arguments.session_timeout_ms,
            ledger_config=tls.ledger_config(),
        ) as (store, ledgers),
        priority.running(),
        Replica(
            machine,
            app=arguments.app,
            store=store,
            ledgers=ledgers,
            replica_id=arguments.replica_id,
            listen=arguments.listen,
            advertise=arguments.advertise,
            config=config,
            on_role=priority.on_role,
            client_tokens=client_tokens,
            tls=tls.server,
            tls_allowed_names=tls.allowed_names,
            tls_listen=tls.listen,
            tls_advertise=tls.advertise,
        ) as replica,
        admin_server(
            replica, store, arguments.admin, tls=tls.admin, tls_allowed_names=tls.allowed_names
        ) as admin,
    ):
        priority.watch_clients(replica.clients_connected_since)
        emit(
            logger,
            logging.INFO,
            "rsm.ready",
            app=replica.app,
            replica_id=replica.replica_id,
            address=replica.address,
            **({"tls_address": port} if (port := replica.tls_address) is not None else {}),
            **({"admin": admin} if admin is not None else {}),
            pid=os.getpid(),
        )
        with anyio.open_signal_receiver(*_STOP_SIGNALS) as received:
            async for signum in received:
                emit(logger, logging.INFO, "rsm.stop_requested", signal=signum.name)
                break
    return EXIT_OK


# --- client commands --------------------------------------------------------------------------


async def _call(arguments: argparse.Namespace) -> int:
    args, kwargs = parse_arguments(arguments.arguments, as_bytes=arguments.bytes)
    async with (
        command_zk_store(arguments.zk) as store,
        _client(arguments, store) as client,
    ):
        await _some_replica_runs(client, store)
        result = await client.call(arguments.name, *args, **kwargs)
        _print_result(arguments, result, client.last_index)
    return EXIT_OK


async def _query(arguments: argparse.Namespace) -> int:
    args, kwargs = parse_arguments(arguments.arguments, as_bytes=arguments.bytes)
    async with (
        command_zk_store(arguments.zk) as store,
        _client(arguments, store) as client,
    ):
        await _some_replica_runs(client, store)
        result = await client.query(
            arguments.name, *args, consistency=arguments.consistency, **kwargs
        )
        _print_result(arguments, result, client.last_index)
    return EXIT_OK


def _print_result(arguments: argparse.Namespace, result: Any, index: int) -> None:
    if arguments.json:
        print(_dumps({"result": result, "index": index}))
    else:
        print(_dumps(result))


async def _transfer(arguments: argparse.Namespace) -> int:
    async with (
        command_zk_store(arguments.zk) as store,
        _client(arguments, store) as client,
    ):
        result = await client.transfer_leadership(arguments.to)
    if arguments.json:
        print(_dumps(result))
    else:
        window = result.get("window_ms")
        took = f"in {window} ms" if window is not None else "(the target was not seen serving)"
        print(f"leadership handed to {result['target']}, epoch {result.get('epoch')}, {took}")
    return EXIT_OK


async def _status(arguments: argparse.Namespace) -> int:
    async with (
        command_zk_store(arguments.zk) as store,
        _client(arguments, store) as client,
    ):
        report = await application_status(store, client, ledger_root=arguments.ledger_root)
    if arguments.json:
        print(_dumps(report))
    else:
        print(render_status(report))
    return EXIT_OK


def render_status(report: dict[str, Any]) -> str:
    """The human-readable form of `application_status`."""
    leader_text, log_line = status_heading(report)
    lines = [f"app {report['app']}  epoch {report['epoch']}  leader {leader_text}", log_line, ""]
    rows = [("REPLICA", "ADDRESS", "ROLE", "EPOCH", "APPLIED", "LAG", "CANDIDATE")]
    for entry in report["replicas"]:
        if "error" in entry:
            rows.append(
                (entry["replica_id"], shown_addresses(entry), entry["error"], "", "", "", "")
            )
            continue
        rows.append(
            (
                entry["replica_id"],
                shown_addresses(entry),
                entry["role"],
                str(entry["epoch"]),
                str(entry["applied_index"]),
                str(entry["lag"]),
                "yes" if entry["candidate"] else "no",
            )
        )
    idle = [] if report["replicas"] else ["no replica is running: start one with rsm run"]
    return "\n".join(
        lines + aligned(rows) + idle + replication_lines(report) + under_replication_lines(report)
    )


# --- snapshots --------------------------------------------------------------------------------


async def _snapshot(arguments: argparse.Namespace) -> int:
    command = arguments.snapshot_command
    async with command_zk_store(arguments.zk) as store:
        layout = AppLayout.of(arguments.app)
        if await store.exists(layout.log) is None:
            raise NoSuchApplication(arguments.app)
        if command == "create":
            async with _client(arguments, store) as client:
                report = await _create_snapshot(client, arguments.replica)
        else:
            report = await _read_snapshots(store, layout, arguments)
    if arguments.json:
        print(_dumps(report))
    elif command == "ls":
        print(render_snapshots(report))
    elif command == "create" and arguments.replica not in (None, report["replica_id"]):
        print(
            f"no new snapshot: the newest, at index {report['index']} by "
            f"{report['replica_id']}, is as recent as {arguments.replica}'s state; "
            f"{arguments.replica} takes one of its own once a command is applied after it"
        )
    elif command == "create":
        print(
            f"snapshot of {report['app']} at index {report['index']}: ledger "
            f"{report['ledger_id']}, {report['size_bytes']} bytes in {report['chunk_count']} "
            f"chunks, by {report['replica_id']}"
        )
    else:
        print(render_inspection(report))
    return EXIT_OK if command != "inspect" or report["valid"] else EXIT_FAILED


async def _some_replica_runs(client: Client, store: MetadataStore) -> None:
    """`NoSuchApplication` or `Unavailable` at once when no replica of the application is
    registered: a person waiting would otherwise wait out the client's deadline for a
    leader."""
    if await client.members():
        return
    if await store.exists(AppLayout.of(client.app).log) is None:
        raise NoSuchApplication(client.app)
    raise Unavailable(f"no replica of {client.app} is running (start one with rsm run)")


async def _create_snapshot(client: Client, replica_id: str | None) -> dict[str, Any]:
    """Ask the chosen replica (see the module docstring) for a snapshot; its manifest."""
    members = await client.replicas()
    if replica_id is not None:
        address = members.get(replica_id)
        if address is None:
            raise InvalidConfig(f"no replica {replica_id!r} is registered; there are {members}")
        return await client.snapshot(address)
    followers: list[tuple[int, str]] = []
    for address in members.values():
        try:
            with anyio.fail_after(limits.status_answer_timeout_ms / 1000):
                status = await client.status(address)
        except (TimeoutError, RsmError):
            continue
        if not status["serving"] and status["caught_up"]:
            followers.append((-status["applied_index"], address))
    if followers:
        return await client.snapshot(min(followers)[1])
    if not members:
        raise Unavailable(f"no replica of {client.app} is running")
    return await client.snapshot()


async def _read_snapshots(
    store: MetadataStore, layout: AppLayout, arguments: argparse.Namespace
) -> dict[str, Any]:
    log, _version = await LogStore(store, layout).read()
    value, _version = await read_snapshots(store, layout)
    if arguments.snapshot_command == "ls":
        return {"app": layout.app, "log_first_index": log.first_index, **listing(value)}
    manifest = value.newest if arguments.index is None else value.find(arguments.index)
    if manifest is None:
        raise InvalidConfig(
            f"{layout.app!r} has no snapshot"
            if arguments.index is None
            else f"no snapshot of {layout.app!r} at index {arguments.index}"
        )
    config = LedgerClientConfig(tls=bookie_tls_context(arguments))
    async with LedgerClient.open(store, root=arguments.ledger_root, config=config) as ledgers:
        return await inspect(SnapshotStore(store, ledgers, layout, ReplicaConfig()), manifest)


def render_snapshots(report: dict[str, Any]) -> str:
    """The human-readable form of `rsm snapshot ls`."""
    lines = [
        f"app {report['app']}  log from index {report['log_first_index']}  "
        f"{len(report['pending'])} being written  {len(report['garbage'])} ledgers to delete",
        "",
    ]
    header = ("INDEX", "EPOCH", "LEDGER", "BYTES", "CHUNKS", "STATE HASH", "BY")
    rows = [header]
    for manifest in report["snapshots"]:
        rows.append(
            (
                str(manifest["index"]),
                str(manifest["epoch"]),
                str(manifest["ledger_id"]),
                str(manifest["size_bytes"]),
                str(manifest["chunk_count"]),
                manifest["state_hash"][:16],
                manifest["replica_id"],
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    for row in rows:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    return "\n".join(line.rstrip() for line in lines)


def render_inspection(report: dict[str, Any]) -> str:
    """The human-readable form of `rsm snapshot inspect`."""
    manifest = report["manifest"]
    lines = [
        f"snapshot of {manifest['app']} at index {manifest['index']} (epoch "
        f"{manifest['epoch']}), ledger {manifest['ledger_id']}: "
        + ("valid" if report["valid"] else f"NOT VALID: {report.get('error')}"),
        f"{manifest['size_bytes']} bytes in {manifest['chunk_count']} chunks, "
        f"sha256 {manifest['sha256']}",
        f"state hash {manifest['state_hash']}",
    ]
    header = report.get("header")
    if header is not None:
        lines.append(
            f"machine {header['machine']} ({header['codec']} codec), {header['sessions']} "
            f"sessions, taken by {header['replica_id']}"
        )
    for name, attribute in sorted(report.get("attributes", {}).items()):
        length = attribute["length"]
        size = "" if length is None else f" of {length}"
        lines.append(f"  {name}: {attribute['type']}{size}")
    return "\n".join(lines)


def _dumps(value: Any) -> str:
    return json.dumps(value, default=_jsonable, ensure_ascii=False, sort_keys=True)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        try:
            return bytes(value).decode()
        except UnicodeDecodeError:
            return {"hex": bytes(value).hex()}
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return repr(value)


_COMMANDS: Final = {
    "status": _status,
    "call": _call,
    "query": _query,
    "transfer-leadership": _transfer,
    "snapshot": _snapshot,
}


if __name__ == "__main__":
    sys.exit(main())
