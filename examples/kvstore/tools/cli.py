"""The `kvstore` command: a whole local store, one replica, or the state of a store.

    kvstore up [--data-dir DIR] [--zk HOSTS] [--replicas 3] [--bookies 3] [--base-port 6379]
               [--session-timeout-ms MS] [--acl-file PATH | --requirepass-file PATH]
               [--ledger-digest crc32c|hmac_sha256]
    kvstore serve --zk HOSTS --listen HOST:PORT --resp HOST:PORT [--app kv] [--replica-id ID]
                  [--advertise HOST:PORT] [--resp-advertise HOST:PORT] [--ledger-root /ledgers]
                  [--ensemble 3] [--write-quorum 3] [--ack-quorum 2]
                  [--key-bytes-max N] [--value-bytes-max N] [--request-bytes-max N]
                  [--command-timeout-ms MS] [--session-timeout-ms MS] [--follower-nice 19]
                  [--log-level info] [--log-format json]
                  [--acl-file PATH | --requirepass-file PATH] [--ledger-digest crc32c]
    kvstore status [--data-dir DIR | --zk HOSTS] [--app kv] [--json]
    kvstore history KEY [--data-dir DIR | --zk HOSTS | --log FILE] [--app kv]
                    [--ledger-root /ledgers] [--from I] [--to I] [--json]
    kvstore get KEY --at I [--data-dir DIR | --zk HOSTS | --log FILE] [--app kv]
                [--ledger-root /ledgers] [--json]

`up` starts everything on this machine (`kvstore.tools.launcher`): a ZooKeeper
(unless `--zk`), the bookies and the replicas, prints a `redis-cli -p PORT`
line per replica, and runs until Ctrl-C (SIGINT) or SIGTERM, then stops the
replicas, the bookies and ZooKeeper, in that order.  A replica or bookie that
dies meanwhile is reported on stderr (which one, its exit status, its log);
the rest keep running.  The data stays in the
data directory (`./data` by default) and the next `up` resumes it; removing
the directory while nothing runs starts the next one from nothing.  Options
other than `--data-dir`, `--zk`, `--session-timeout-ms` and the access files
apply when the store is created.

`serve` runs one replica (`kvstore.runtime.node.KvNode`) until SIGTERM or SIGINT,
then stops gracefully.  Its Redis clients log in as `--acl-file`'s users or
with `--requirepass-file`'s password (`kvstore.tools.access_options`).  It
logs one JSON object per line on stderr:
`kvstore.ready` (with its process id) once it serves Redis clients, and the
framework's events (`rsm.leader`, `rsm.step_down`, ...).

`status` shows the store: the log, the leader, the bookies, and each
replica's role, progress and Redis address, and as down the replicas and
bookies that ZooKeeper does not list as running although they left an
endpoint record or a cookie there (or, with `--data-dir`, are the
directory's), then the bookie cluster's under-replicated ledgers (how many, the
store's own, those being repaired, the bookies they miss: docs/operations.md,
"Autorecovery").  `--zk` is a ZooKeeper connect string, optionally with a chroot
(`127.0.0.1:2181/my/root`).

`history` and `get` read the store's log as `rsm blame` and `rsm replay`
do (`rsm.tools`, docs/tools.md): from the cluster (never writing to it, so
with the replicas running or stopped) or from a file `rsm log export`
wrote.  `history` lists every command that changed KEY (index, ledger,
entry and slot, the leader's time, the client's session, the command and
its arguments, the key's digest after it) with the value after it as
redis-cli prints it; `get` answers GET KEY on the state at index `--at`,
replayed from the newest snapshot at or before it.  Positions are an index
or `LEDGER:ENTRY[:SLOT]`, ranges inclusive.  Both reach the bookies with TLS
given `--tls-bookies --tls-ca-file CA [--tls-cert-file CERT]` (bookie/net/tls_flags.py),
and by themselves for the `--data-dir` of a store made with `kvstore up --tls`.

Exit status: 0 on success, 1 when the operation failed (the error on
stderr), 2 for a usage error (for `history` and `get` also a key that never
existed, an index out of the log's range, or a cluster that cannot be
reached).  `status`, `history` and `get` say at once that a store does not
exist (`NoSuchApplication`), and in one line, after
`rsm.limits.cli_zk_connect_timeout_ms`, that its ZooKeeper cannot be
reached (`MetadataUnavailable`).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final

import anyio

from bookie.errors import BookieError, NoNode
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.local.certificates import DevelopmentCertificates, development_certificates
from bookie.local.cluster import ClusterError, LocalBookie, admin_heading, admin_lines
from bookie.logs import FORMATS, LEVELS, configure, emit
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import list_bookies, list_cookies
from bookie.net.admin_token import admin_token_from_environment
from bookie.net.tls import client_context
from bookie.net.tls_flags import add_bookie_tls_arguments, bookie_tls_context
from bookie.tools.stdout import program_main
from kvstore import limits
from kvstore.connection.acl import AccessControl
from kvstore.endpoints import decode_endpoint, endpoint_path, endpoints_path
from kvstore.protocol.redis_cli import reply_text
from kvstore.runtime.metrics import kvstore_metrics
from kvstore.runtime.node import DEFAULT_APP, KvNode, StoreSettings
from kvstore.state_machine import KVStore
from kvstore.tools.access_options import access_of, add_access_arguments
from kvstore.tools.launcher import (
    HOST,
    LEDGER_ROOT,
    TLS_DIRECTORY,
    KvSettings,
    LocalKvCluster,
    read_saved,
    saved_zk_client_tls,
    tls_client_connector,
)
from kvstore.tools.tls_flags import NodeTls, add_tls_arguments, node_tls
from rsm import limits as rsm_limits
from rsm.admin import add_admin_argument, admin_server
from rsm.client import connect, tcp_connector
from rsm.config import ReplicaConfig
from rsm.errors import InvalidConfig, MalformedValue, RsmError
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
    status_heading,
    under_replication_lines,
)
from rsm.tls_flags import add_client_tls_arguments, client_connector
from rsm.tools import (
    SCHEMA_VERSION,
    key_bytes,
    key_history,
    plain_value,
    query_at,
    run_command,
    source_options_of,
)

logger = logging.getLogger("kvstore.tools.cli")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    return program_main("kvstore: ", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    arguments = parser.parse_args(argv)
    if arguments.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if arguments.command in _TOOLS:
        return run_command(arguments, sys.argv[1:] if argv is None else argv)
    try:
        if arguments.command == "serve":
            return _serve(arguments)
        if arguments.command == "up":
            return _run(_up, arguments)
        with quiet_kazoo():
            return _run(_status, arguments)
    except (RsmError, BookieError, ClusterError) as error:
        print(f"kvstore: {type(error).__name__}: {error}", file=sys.stderr)
        usage = isinstance(error, InvalidConfig | BookieInvalidConfig)
        return EXIT_USAGE if usage else EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvstore", description="A replicated key-value store that speaks Redis."
    )
    commands = parser.add_subparsers(dest="command")

    up = commands.add_parser("up", help="run a whole store on this machine until Ctrl-C")
    up.add_argument("--data-dir", type=Path, default=Path("data"), help="where data is kept")
    up.add_argument("--zk", help="use this ZooKeeper (HOST:PORT[,...][/chroot]), not a local one")
    up.add_argument("--replicas", type=int, default=3, help="replicas of a new store (3)")
    up.add_argument("--bookies", type=int, default=3, help="bookies of a new store (3)")
    up.add_argument(
        "--base-port", type=int, default=6379, help="Redis port of the first replica (6379)"
    )
    up.add_argument(
        "--session-timeout-ms",
        type=int,
        default=rsm_limits.replica_session_timeout_ms_default,
        help="ZooKeeper session timeout of the replicas: how long a dead leader holds on",
    )
    add_access_arguments(up)
    add_ledger_digest(up)
    up.add_argument(
        "--tls",
        action="store_true",
        help="a new store on TLS too: a local CA and certificates in DATA_DIR/tls",
    )

    serve = commands.add_parser("serve", help="run one replica")
    serve.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT[,...][/chroot]")
    serve.add_argument("--app", default=DEFAULT_APP, help="the store's name (kv)")
    serve.add_argument("--listen", required=True, help="HOST:PORT of the framework's port")
    serve.add_argument("--advertise", help="HOST:PORT to tell other replicas (default: --listen)")
    serve.add_argument("--resp", required=True, help="HOST:PORT to serve Redis clients on")
    serve.add_argument("--resp-advertise", help="HOST:PORT to tell operators (default: --resp)")
    serve.add_argument("--replica-id", help="this replica's id (default: its framework address)")
    add_admin_argument(serve)
    serve.add_argument("--ledger-root", default=LEDGER_ROOT, help="the bookies' root znode")
    serve.add_argument("--ensemble", type=int, default=3, help="ensemble size E")
    serve.add_argument("--write-quorum", type=int, default=3, help="write quorum Qw")
    serve.add_argument("--ack-quorum", type=int, default=2, help="ack quorum Qa")
    serve.add_argument("--key-bytes-max", type=int, default=limits.key_bytes_max_default)
    serve.add_argument("--value-bytes-max", type=int, default=limits.value_bytes_max_default)
    serve.add_argument("--request-bytes-max", type=int, default=limits.request_bytes_max_default)
    serve.add_argument(
        "--command-timeout-ms",
        type=int,
        default=limits.command_deadline_ms_default,
        help="how long a command is retried across leader changes before TRYAGAIN/TIMEOUT",
    )
    serve.add_argument(
        "--session-timeout-ms",
        type=int,
        default=rsm_limits.replica_session_timeout_ms_default,
        help="ZooKeeper session timeout: how long a dead leader holds its znodes",
    )
    serve.add_argument(
        "--read-lease-ms",
        type=int,
        default=limits.read_lease_ms_default,
        help="the leader's read lease (0: a bookie round per read); equal on every replica",
    )
    add_log_knobs(serve)
    add_follower_nice(serve)
    add_ledger_digest(serve)
    add_client_tokens_file(serve)
    add_tls_arguments(serve)
    serve.add_argument("--log-level", choices=LEVELS, default="info")
    serve.add_argument("--log-format", choices=FORMATS, default="json")
    add_access_arguments(serve)

    status = commands.add_parser("status", help="the log, the leader, the bookies, the replicas")
    add_client_tls_arguments(status)
    where = status.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, help="a store started by kvstore up (./data)")
    where.add_argument("--zk", help="ZooKeeper HOST:PORT[,...][/chroot] of the store")
    status.add_argument("--app", help=f"the store's name (default: {DEFAULT_APP})")
    status.add_argument("--json", action="store_true", help="print one JSON object")

    history = commands.add_parser("history", help="every command that changed a key")
    _log_options(history)
    history.add_argument("key", help='the key (its bytes; any bytes: {"hex": "..."})')
    history.add_argument("--from", dest="first", help="first index (default: the log's first)")
    history.add_argument("--to", dest="last", help="last index (default: the readable end)")
    history.set_defaults(handler=_history)

    get = commands.add_parser("get", help="GET a key as it was at an index of the log")
    _log_options(get)
    get.add_argument("key", help='the key (its bytes; any bytes: {"hex": "..."})')
    get.add_argument("--at", required=True, help="the index, or LEDGER:ENTRY[:SLOT]")
    get.set_defaults(handler=_get)
    return parser


def _log_options(parser: argparse.ArgumentParser) -> None:
    """Where `history` and `get` read the log: a store's cluster, or an exported file."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--data-dir", type=Path, help="a store started by kvstore up (./data)")
    where.add_argument("--zk", help="ZooKeeper HOST:PORT[,...][/chroot] of the store")
    where.add_argument("--log", help="a log file written by rsm log export")
    parser.add_argument("--app", help=f"the store's name (default: {DEFAULT_APP})")
    parser.add_argument("--ledger-root", default=LEDGER_ROOT, help="the bookies' root znode")
    parser.add_argument("--json", action="store_true", help="JSON output")
    add_bookie_tls_arguments(parser)


def _run(command: Any, arguments: argparse.Namespace) -> int:
    code: int = anyio.run(command, arguments)
    return code


# --- kvstore serve ----------------------------------------------------------------------------


def _tls_port(node: KvNode) -> int | None:
    return None if node.server is None else node.server.tls_port


def _serve(arguments: argparse.Namespace) -> int:
    priority = FollowerPriority(arguments.follower_nice)
    access = access_of(arguments)
    configure(arguments.log_level, arguments.log_format)
    try:
        arguments.node_tls = node_tls(arguments)
        # Read again by the admin server; checked here so a bad file is a usage error,
        # said before the replica joins anything.
        admin_token_from_environment()
    except (InvalidConfig, BookieInvalidConfig) as error:
        print(f"kvstore serve: {error}", file=sys.stderr)
        return EXIT_USAGE
    settings = StoreSettings(
        key_bytes_max=arguments.key_bytes_max,
        value_bytes_max=arguments.value_bytes_max,
        request_bytes_max=arguments.request_bytes_max,
        command_deadline_ms=arguments.command_timeout_ms,
    )
    config = ReplicaConfig(
        ensemble_size=arguments.ensemble,
        write_quorum=arguments.write_quorum,
        ack_quorum=arguments.ack_quorum,
        read_lease_ms=arguments.read_lease_ms,
        **log_knobs_of(arguments),
        # KVStore keeps its state hash up to date change by change, so checking
        # replicas against the leader often costs nothing.
        state_hash_every_commands=limits.state_hash_every_commands,
        ledger_digest=ledger_digest_of(arguments),
    )
    return run_replica_main(
        _serve_node,
        arguments,
        settings,
        config,
        priority,
        access,
        logger=logger,
        failed_event="kvstore.failed",
    )


async def _serve_node(
    arguments: argparse.Namespace,
    settings: StoreSettings,
    config: ReplicaConfig,
    priority: FollowerPriority,
    access: AccessControl | None,
) -> int:
    tls: NodeTls = arguments.node_tls
    client_tokens = read_client_tokens(arguments.client_tokens_file)  # before ZooKeeper
    async with (
        replica_metadata(
            arguments.zk,
            ledger_root=arguments.ledger_root,
            session_timeout_ms=arguments.session_timeout_ms,
            ledger_config=tls.replica.ledger_config(),
        ) as (store, ledgers),
        priority.running(),
        KvNode(
            store=store,
            ledgers=ledgers,
            app=arguments.app,
            replica_id=arguments.replica_id,
            listen=arguments.listen,
            advertise=arguments.advertise,
            resp_listen=arguments.resp,
            resp_advertise=arguments.resp_advertise,
            resp_tls=tls.resp,
            tls=tls.replica.server,
            tls_allowed_names=tls.replica.allowed_names,
            tls_listen=tls.replica.listen,
            tls_advertise=tls.replica.advertise,
            connector=tls.replica.connector(),
            settings=settings,
            config=config,
            on_role=priority.on_role,
            access=access,
            client_tokens=client_tokens,
        ) as node,
        admin_server(
            node.replica,
            store,
            arguments.admin,
            app_metrics=partial(kvstore_metrics, node),
            tls=tls.replica.admin,
            tls_allowed_names=tls.replica.allowed_names,
        ) as admin,
    ):
        priority.watch_clients(node.clients_connected_since)
        emit(
            logger,
            logging.INFO,
            "kvstore.ready",
            app=node.app,
            replica_id=node.replica.replica_id,
            address=node.replica.address,
            **({"tls_address": at} if (at := node.replica.tls_address) is not None else {}),
            resp=node.resp_address,
            **({"admin": admin} if admin is not None else {}),
            **({"resp_tls": tls_port} if (tls_port := _tls_port(node)) is not None else {}),
            pid=os.getpid(),
        )
        with anyio.open_signal_receiver(*_STOP_SIGNALS) as received:
            async for signum in received:
                emit(logger, logging.INFO, "kvstore.stop_requested", signal=signum.name)
                break
    return EXIT_OK


# --- kvstore up -------------------------------------------------------------------------------


async def _up(arguments: argparse.Namespace) -> int:
    settings = KvSettings(
        replicas=arguments.replicas,
        bookies=arguments.bookies,
        base_port=arguments.base_port,
        session_timeout_ms=arguments.session_timeout_ms,
        acl_file=arguments.acl_file,
        requirepass_file=arguments.requirepass_file,
        ledger_digest=arguments.ledger_digest,
        tls=arguments.tls,
    )
    access_of(arguments)  # a bad access file stops `up` before anything starts
    if settings.replicas < 1 or settings.bookies < 3:
        raise InvalidConfig("a store needs at least 1 replica and 3 bookies (ensemble 3)")
    data_dir: Path = arguments.data_dir
    print(
        f"Starting ZooKeeper, {settings.bookies} bookies and {settings.replicas} replicas "
        f"(data in {_shown(data_dir)}) ...",
        flush=True,
    )
    async with LocalKvCluster(data_dir, zk=arguments.zk, settings=settings) as cluster:
        print(_banner(cluster), flush=True)
        async with anyio.create_task_group() as tasks:
            for replica in cluster.replicas:
                tasks.start_soon(_report_exit, cluster, replica.name)
            tasks.start_soon(cluster.bookies.watch_exits, _report_bookie_exit)
            with anyio.open_signal_receiver(*_STOP_SIGNALS) as signals:
                async for _ in signals:
                    break
            tasks.cancel_scope.cancel()
        print("Stopping the replicas, then the bookies, then ZooKeeper ...", flush=True)
    print("Stopped.", flush=True)
    return EXIT_OK


async def _report_exit(cluster: LocalKvCluster, name: str) -> None:
    replica = cluster.replica(name)
    process = replica.process
    assert process is not None
    status = await process.wait()
    print(
        f"{name} exited with status {status}; the others keep running.  Its log: "
        f"{_shown(replica.log_file)}.  Restart the store to bring it back.",
        file=sys.stderr,
        flush=True,
    )


def _report_bookie_exit(bookie: LocalBookie, status: int) -> None:
    print(
        f"{bookie.name} ({bookie.address}) exited with status {status}; the others keep "
        f"running.  Its log: {_shown(bookie.log_file)}.  Restart the store to bring it back.",
        file=sys.stderr,
        flush=True,
    )


def _banner(cluster: LocalKvCluster) -> str:
    state = "resumed" if cluster.resumed else "new"
    bookies = cluster.bookies
    zk_kind = "local" if bookies.zk_is_local else "external"
    if bookies.zk_tls is not None:
        zk_kind += ", mutual TLS only"
    lines = [
        f"Key-value store up ({state}, data in {_shown(cluster.data_dir)})",
        f"  ZooKeeper  {cluster.zk:<21} {zk_kind}",
    ]
    for bookie in bookies.bookies:
        lines.append(f"  {bookie.name:<9}  {bookie.address:<21} log {_shown(bookie.log_file)}")
    for replica in cluster.replicas:
        role = "leader" if replica.name == cluster.leader else "follower"
        lines.append(
            f"  {replica.name:<9}  {replica.resp_address:<21} {role:<9} "
            f"try: redis-cli -p {replica.resp_port}"
        )
    if cluster.tls is not None:
        lines += _tls_lines(cluster, cluster.tls)
    lines.append(admin_heading())
    lines += admin_lines(bookies.bookies)
    lines += [f"  {replica.name:<9}  {replica.admin_url}" for replica in cluster.replicas]
    lines.append(f"Status page: {cluster.replicas[0].admin_url}/ (on any replica's admin address)")
    lines += [
        f"Any replica takes any command.  Status: {_kvstore_program()} status --data-dir "
        f"{_shown(cluster.data_dir)}",
        f"To start from nothing, stop it, then: rm -rf {shlex.quote(_shown(cluster.data_dir))}",
        "Ctrl-C stops the replicas, the bookies, then ZooKeeper; the data stays for the next run.",
    ]
    return "\n".join(lines)


def _tls_lines(cluster: LocalKvCluster, tls: DevelopmentCertificates) -> list[str]:
    """How to connect with TLS (the launcher's CA signed every certificate)."""
    ca = shlex.quote(_shown(tls.ca))
    lines = [f"TLS (certificates in {_shown(tls.ca.parent)}; the plain ports stay open too):"]
    for replica in cluster.replicas:
        lines.append(
            f"  {replica.name:<9}  {HOST}:{replica.resp_tls_port:<11} "
            f"try: redis-cli --tls --cacert {ca} -p {replica.resp_tls_port}"
        )
    first = cluster.replicas[0].resp_tls_port
    lines.append(f"  redis-py:  redis.Redis(port={first}, ssl=True, ssl_ca_certs={str(tls.ca)!r})")
    lines.append(
        f"  bookies and replicas take mutual TLS only: client certificate "
        f"{_shown(tls.client)} (key inside)"
    )
    zk_tls = cluster.bookies.zk_client_tls
    if zk_tls is not None:
        variables = " ".join(
            f"{name}={shlex.quote(value)}" for name, value in zk_tls.environment().items() if value
        )
        lines.append(f"  ZooKeeper too; for bookie shell and rsm tools: export {variables}")
    return lines


def _kvstore_program() -> str:
    """How to run `kvstore` from here: the script beside this interpreter (after `make run`
    the virtualenv is not on the PATH), else by its name."""
    script = Path(sys.executable).parent / "kvstore"
    return shlex.quote(_shown(script)) if script.exists() else "kvstore"


def _shown(path: Path) -> str:
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


# --- kvstore history, kvstore get -------------------------------------------------------------

_TOOLS: Final = ("history", "get")


def _tool_config() -> ReplicaConfig:
    """The replicas' settings that decide what is applied (`serve`'s)."""
    return ReplicaConfig(state_hash_every_commands=limits.state_hash_every_commands)


def _log_of(arguments: argparse.Namespace) -> dict[str, Any]:
    """The log `--log`, `--zk` or `--data-dir` (default ./data) names."""
    if arguments.log is not None:
        if arguments.app is not None:
            raise InvalidConfig("--log FILE names its store: no --app")
        return source_options_of(
            app=None, zk=None, ledger_root=arguments.ledger_root, log_file=arguments.log
        )
    zk, app = arguments.zk, arguments.app
    tls = bookie_tls_context(arguments)
    zk_tls = None
    if zk is None:
        data_dir = arguments.data_dir or Path("data")
        try:
            saved = read_saved(data_dir)
        except ClusterError as error:
            raise InvalidConfig(str(error)) from None
        zk, app = saved["zk"], app or saved["app"]
        zk_tls = saved_zk_client_tls(data_dir, saved)
        if saved.get("tls") and tls is None:
            # A store made by `kvstore up --tls`: its bookies' TLS listeners, as its client.
            certificates = development_certificates(data_dir / TLS_DIRECTORY)
            tls = client_context(certificates.ca, certificates.client)
    return source_options_of(
        app=app or DEFAULT_APP,
        zk=zk,
        ledger_root=arguments.ledger_root,
        log_file=None,
        tls=tls,
        zk_tls=zk_tls,
    )


async def _history(arguments: argparse.Namespace) -> int:
    return await key_history(
        _log_of(arguments),
        KVStore,
        _tool_config(),
        key=key_bytes(arguments.key),
        first=arguments.first,
        last=arguments.last,
        as_json=arguments.json,
    )


async def _get(arguments: argparse.Namespace) -> int:
    key = key_bytes(arguments.key)
    answer = await query_at(
        _log_of(arguments), KVStore, _tool_config(), at=arguments.at, name="get", args=[key]
    )
    outcome = answer.outcome
    if arguments.json:
        report = {
            "schema": SCHEMA_VERSION,
            "index": answer.index,
            "from_snapshot": answer.from_snapshot,
            "key": plain_value(key),
        }
        if outcome.ok:
            report["value"] = plain_value(outcome.value)
        else:
            report["error"] = outcome.message
        print(json.dumps(report, sort_keys=True, ensure_ascii=False))
    else:
        print(reply_text(outcome.value) if outcome.ok else f"(error) {outcome.message}")
    return EXIT_OK if outcome.ok else EXIT_FAILED


# --- kvstore status ---------------------------------------------------------------------------


async def _status(arguments: argparse.Namespace) -> int:
    app = arguments.app
    zk = arguments.zk
    saved: dict[str, Any] | None = None
    zk_tls = None
    data_dir = Path(arguments.data_dir or "data")
    if zk is None:
        saved = read_saved(data_dir)
        zk = saved["zk"]
        app = app or saved["app"]
        zk_tls = saved_zk_client_tls(data_dir, saved)
    app = app or DEFAULT_APP
    connector = client_connector(arguments) or tcp_connector
    if saved is not None and saved.get("tls") and arguments.tls_ca_file is None:
        connector = tls_client_connector(development_certificates(data_dir / TLS_DIRECTORY))
    async with (
        command_zk_store(zk, tls=zk_tls) as store,
        connect(app, store=store, connector=connector) as client,
    ):
        report = await application_status(store, client, ledger_root=LEDGER_ROOT)
        report["zk"] = zk
        bookies = report["bookies"] = await _bookies(store)
        endpoints = await _endpoints(store, app)
        for entry in report["replicas"]:
            entry["resp"] = endpoints.get(entry["replica_id"])
    # Replicas and bookies that ZooKeeper does not list as running: those that left an
    # endpoint record or a cookie, and with --data-dir those of the directory (which may
    # never have started).
    known = {name: endpoints[name] for name in sorted(endpoints)}
    if saved is not None:
        registered = set(bookies["writable"] + bookies["read_only"])
        bookies["down"] = sorted(
            set(bookies["down"]) | {b for b in saved["bookies"] if b not in registered}
        )
        if app == saved["app"]:
            ports = saved["resp_ports"]
            in_directory = zip(saved["replicas"], ports, strict=True)
            known = {name: f"{HOST}:{port}" for name, port in in_directory} | known
    report["replicas"] += not_registered(known, report["replicas"])
    if arguments.json:
        print(json.dumps(report, sort_keys=True, default=str))
    else:
        print(render_status(report))
    return EXIT_OK


def not_registered(known: dict[str, str], replicas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Status rows for the replicas of `known` (replica id -> Redis address) that ZooKeeper
    does not list: not running (or not yet, or cut off from ZooKeeper for longer than a
    session), which a status read from the registrations alone would leave out without a
    word."""
    listed = {entry["replica_id"] for entry in replicas}
    return [
        {"replica_id": name, "resp": resp, "error": "down (not registered)"}
        for name, resp in known.items()
        if name not in listed
    ]


async def _bookies(store: MetadataStore) -> dict[str, list[str]]:
    """Registered bookies, writable and read-only, and `down`: those with a cookie (they
    joined the cluster and were not decommissioned) but no registration."""
    registered = await list_bookies(store, LEDGER_ROOT)
    running = set(registered.writable) | set(registered.read_only)
    return {
        "writable": sorted(registered.writable),
        "read_only": sorted(registered.read_only),
        "down": [b for b in await list_cookies(store, LEDGER_ROOT) if b not in running],
    }


async def _endpoints(store: MetadataStore, app: str) -> dict[str, str]:
    """Replica id -> Redis address, as each replica recorded it."""
    found: dict[str, str] = {}
    try:
        names = await store.children(endpoints_path(app))
    except NoNode:
        return found
    for name in names:
        try:
            value = (await store.get(endpoint_path(app, name))).value
            found[name] = decode_endpoint(name, value).resp
        except (NoNode, MalformedValue):
            continue
    return found


def render_status(report: dict[str, Any]) -> str:
    """The human-readable form of `kvstore status`."""
    leader_text, log_line = status_heading(report)
    bookies = report["bookies"]
    bookie_text = ", ".join(bookies["writable"]) or "none"
    if bookies["read_only"]:
        bookie_text += "; read-only: " + ", ".join(bookies["read_only"])
    if bookies.get("down"):
        bookie_text += "; down (not registered): " + ", ".join(bookies["down"])
    lines = [
        f"store {report['app']}  ZooKeeper {report['zk']}  epoch {report['epoch']}  "
        f"leader {leader_text}",
        log_line,
        f"bookies: {bookie_text}",
        "",
    ]
    rows = [("REPLICA", "REDIS", "ROLE", "EPOCH", "APPLIED", "LAG", "TRY")]
    for entry in report["replicas"]:
        resp = entry.get("resp") or "?"
        try_text = f"redis-cli -p {resp.rpartition(':')[2]}" if entry.get("resp") else ""
        if "error" in entry:
            rows.append((entry["replica_id"], resp, entry["error"], "", "", "", ""))
            continue
        rows.append(
            (
                entry["replica_id"],
                resp,
                entry["role"],
                str(entry["epoch"]),
                str(entry["applied_index"]),
                str(entry["lag"]),
                try_text,
            )
        )
    lines += aligned(rows) + replication_lines(report) + under_replication_lines(report)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
