"""What a program that hosts replicas needs besides `rsm`: the pieces its command line
shares with `rsm run` and `rsm status`.

An application that ships its own command (the key-value store's `kvstore`)
runs replicas with `rsm.Replica` and reports on them like `rsm status`; it
takes from here, and from nowhere else inside the framework:

* the ZooKeeper connect string's form (`split_zk`) and the root under which
  applications live (`RSM_ROOT`), and the rules for names (`check_name`,
  `check_replica_id`);
* for a command a person waits for, a ZooKeeper session that fails fast
  (`command_zk_store`: an unreachable ZooKeeper is `MetadataUnavailable`
  naming its address after `limits.cli_zk_connect_timeout_ms`) and
  `quiet_kazoo` around the command, so that failure is one line without
  kazoo's line per reconnect attempt;
* a listener of its own (the store's RESP port) that reports a port in use
  as `InvalidConfig`, like the replica's (`listen_tcp`);
* `--follower-nice` and the priority it sets (`add_follower_nice`,
  `FollowerPriority`: a follower without clients lowers its CPU priority,
  docs/operations.md);
* the log's knobs: segments, snapshots, retention, orphan ledgers
  (`add_log_knobs`, `log_knobs_of`);
* `--ledger-digest`, what the ledgers a replica creates are checked with
  (`add_ledger_digest`, `ledger_digest_of`; the password comes from
  `RSM_LEDGER_PASSWORD_FILE`, `rsm.config`);
* an application's status report (`application_status`: the log, the leader
  znode, every registered replica's STATUS, and autorecovery's progress in the
  bookie cluster, `under_replication_status`) and the pieces of its
  human-readable form (`status_heading`, `aligned`, `replication_lines`,
  `under_replication_lines`);
* what a front end of its own (the store's Redis server) hands a `Replica`
  in process and gets back: `CallRequest` and `QueryRequest` for
  `Replica.handle_call` / `handle_query`, the `Answerer` that receives each
  answer, and the `Outcome` it carries (`Replica.read_now` returns one too).
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Final

import anyio

from bookie import limits as bookie_limits
from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.core.tokens import TokenTable
from bookie.errors import BookieError, NoNode, NoSuchLedgerError, leaf_error
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.logs import emit
from bookie.meta.api import MetadataStore
from bookie.meta.layout import MetadataLayout
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from bookie.meta.zk import ZkMetadataStore
from bookie.meta.zk_tls import ZkTls
from bookie.net.credentials import read_token_table
from bookie.runtime_tuning import tune_for_throughput
from bookie.wire.packet import DigestType
from rsm import limits
from rsm.client import Client
from rsm.config import SNAPSHOT_CAPTURES
from rsm.core.layout import RSM_ROOT, AppLayout, check_name, check_replica_id
from rsm.core.log_format import decode_leader
from rsm.core.orphans import APP_KEY
from rsm.core.protocol import CallRequest, QueryRequest
from rsm.core.sessions import Outcome
from rsm.errors import InvalidConfig, MalformedValue, NoSuchApplication, RsmError
from rsm.runtime.applier import Answerer
from rsm.runtime.cpu_priority import FollowerPriority
from rsm.runtime.listening import listen_tcp
from rsm.runtime.log import LogStore

__all__ = [
    "RSM_ROOT",
    "Answerer",
    "CallRequest",
    "FollowerPriority",
    "Outcome",
    "QueryRequest",
    "add_follower_nice",
    "add_ledger_digest",
    "aligned",
    "application_status",
    "check_name",
    "check_replica_id",
    "ledger_digest_of",
    "command_zk_store",
    "listen_tcp",
    "quiet_kazoo",
    "replica_metadata",
    "replication_lines",
    "split_zk",
    "status_heading",
    "under_replication_lines",
    "under_replication_status",
]


def split_zk(connect_string: str) -> tuple[str, str | None]:
    """("hosts", chroot or None) of a ZooKeeper connect string (`HOST:PORT[,...][/chroot]`)."""
    hosts, slash, chroot = connect_string.partition("/")
    if not hosts:
        raise InvalidConfig(f"--zk {connect_string!r} names no host")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else None


def command_zk_store(
    connect_string: str, *, tls: ZkTls | None = None
) -> AbstractAsyncContextManager[ZkMetadataStore]:
    """A session on `connect_string` (`HOST:PORT[,...][/chroot]`) for a command a person
    waits for: an unreachable ZooKeeper is reported after `limits.cli_zk_connect_timeout_ms`.
    With `tls`, over TLS with those files (default: as `BOOKIE_ZK_TLS_*` say).

    The session timeout asked for is that bound too: kazoo waits that long for a server's
    answer to the session handshake, so one that accepts connections and never answers
    is reported after it as well, not after the default session timeout."""
    hosts, chroot = split_zk(connect_string)
    timeout_ms = limits.cli_zk_connect_timeout_ms
    return ZkMetadataStore.connect(
        hosts, root=chroot, session_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms, tls=tls
    )


@asynccontextmanager
async def replica_metadata(
    connect_string: str,
    *,
    ledger_root: str,
    session_timeout_ms: int,
    ledger_config: ClientConfig | None = None,
) -> AsyncIterator[tuple[ZkMetadataStore, LedgerClient]]:
    """A replica process's ZooKeeper session on `connect_string` (`HOST:PORT[,...][/chroot]`)
    and its ledger client on the bookies registered under `ledger_root` (with
    `ledger_config`, e.g. to reach them over TLS)."""
    hosts, chroot = split_zk(connect_string)
    async with (
        ZkMetadataStore.connect(hosts, root=chroot, session_timeout_ms=session_timeout_ms) as store,
        LedgerClient.open(store, root=ledger_root, config=ledger_config) as ledgers,
    ):
        yield store, ledgers


@contextmanager
def quiet_kazoo() -> Iterator[None]:
    """Hide kazoo's warnings for the block: the command's one-line error says what failed,
    and kazoo's line per reconnect attempt on the way there would only bury it."""
    kazoo = logging.getLogger("kazoo")
    level = kazoo.level
    kazoo.setLevel(logging.ERROR)
    try:
        yield
    finally:
        kazoo.setLevel(level)


def add_follower_nice(run: argparse.ArgumentParser) -> None:
    """`--follower-nice`, for every command that runs a replica (rsm/runtime/cpu_priority.py)."""
    run.add_argument(
        "--follower-nice",
        type=int,
        default=limits.follower_nice_default,
        help="CPU priority while following without clients, when the replica leads its"
        " session (0: leave it)",
    )


def add_log_knobs(run: argparse.ArgumentParser) -> None:
    """The log's segments, snapshots, retention and orphan ledgers, for every command that
    runs a replica (`log_knobs_of` gives them to `ReplicaConfig`)."""
    run.add_argument("--segment-entries-max", type=int, default=limits.segment_entries_max_default)
    run.add_argument(
        "--snapshot-every-commands", type=int, default=limits.snapshot_every_commands_default
    )
    run.add_argument(
        "--snapshot-every-bytes", type=int, default=limits.snapshot_every_log_bytes_default
    )
    run.add_argument(
        "--snapshot-every-seconds", type=int, default=limits.snapshot_every_ms_default // 1000
    )
    run.add_argument(
        "--snapshot-log-growth-percent",
        type=int,
        default=limits.snapshot_log_growth_percent_default,
    )
    run.add_argument("--snapshots-kept", type=int, default=limits.snapshots_kept_default)
    run.add_argument("--snapshot-capture", choices=SNAPSHOT_CAPTURES, default="auto")
    run.add_argument("--retention-commands", type=int, default=limits.retention_commands_default)
    run.add_argument("--retention-seconds", type=int, default=limits.retention_ms_default // 1000)
    run.add_argument(
        "--no-truncation", action="store_true", help="never truncate the log below snapshots"
    )
    run.add_argument(
        "--orphan-safe-age-seconds",
        type=int,
        default=limits.orphan_safe_age_ms_default // 1000,
        help="the leader deletes the application's ledgers nothing names once this old",
    )
    run.add_argument(
        "--orphan-check-interval-seconds",
        type=int,
        default=limits.orphan_check_interval_ms_default // 1000,
        help="how often the leader looks for such orphan ledgers",
    )


def log_knobs_of(arguments: argparse.Namespace) -> dict[str, Any]:
    """`add_log_knobs`'s flags as `ReplicaConfig` fields."""
    return {
        "segment_entries_max": arguments.segment_entries_max,
        "snapshot_every_commands": arguments.snapshot_every_commands,
        "snapshot_every_log_bytes": arguments.snapshot_every_bytes,
        "snapshot_every_ms": arguments.snapshot_every_seconds * 1000,
        "snapshot_log_growth_percent": arguments.snapshot_log_growth_percent,
        "snapshots_kept": arguments.snapshots_kept,
        "snapshot_capture": arguments.snapshot_capture,
        "retention_commands": arguments.retention_commands,
        "retention_ms": arguments.retention_seconds * 1000,
        "truncation": not arguments.no_truncation,
        "orphan_safe_age_ms": arguments.orphan_safe_age_seconds * 1000,
        "orphan_check_interval_ms": arguments.orphan_check_interval_seconds * 1000,
    }


def add_ledger_digest(run: argparse.ArgumentParser) -> None:
    """`--ledger-digest`, for every command that runs a replica."""
    run.add_argument(
        "--ledger-digest",
        choices=[digest.name.lower() for digest in DigestType],
        default=DigestType.CRC32C.name.lower(),
        help="how the ledgers this replica creates are checked (hmac_sha256: keyed by the "
        "ledger password, RSM_LEDGER_PASSWORD_FILE)",
    )


def ledger_digest_of(arguments: argparse.Namespace) -> DigestType:
    return DigestType[arguments.ledger_digest.upper()]


def add_client_tokens_file(run: argparse.ArgumentParser) -> None:
    """`--client-tokens-file`, for every command that runs a replica (`read_client_tokens`)."""
    run.add_argument(
        "--client-tokens-file",
        type=Path,
        help="serve only clients that present a token of this file of 'PRINCIPAL TOKEN' lines "
        "(docs/security.md, client tokens)",
    )


async def application_status(
    store: MetadataStore, client: Client, *, ledger_root: str = bookie_limits.metadata_root_default
) -> dict[str, Any]:
    """The log, the leader znode, every registered replica's STATUS and the bookie
    cluster's under-replication (at `ledger_root`), as one report.

    A replica that does not answer within `limits.status_answer_timeout_ms`, or
    answers an error, has an `error` instead of its STATUS fields; the others
    have `lag`: how far their applied index is behind the leader's.
    """
    layout = AppLayout.of(client.app)
    try:
        log, _version = await LogStore(store, layout).read()
    except NoNode:
        raise NoSuchApplication(client.app) from None
    leader: dict[str, Any] | None = None
    try:
        info = decode_leader((await store.get(layout.leader)).value)
        leader = {
            "replica_id": info.replica_id,
            "address": info.address,
            "tls_address": info.tls_address,
            "epoch": info.epoch,
        }
    except (NoNode, MalformedValue):
        pass
    open_segment = log.open_segment
    timeout_s = limits.status_answer_timeout_ms / 1000
    replicas: list[dict[str, Any]] = []
    for replica_id, member in sorted((await client.members()).items()):
        entry: dict[str, Any] = {
            "replica_id": replica_id,
            "address": member.address,
            "tls_address": member.tls_address,
        }
        try:
            with anyio.fail_after(timeout_s):
                entry.update(await client.status(client.dial_address(member)))
        except TimeoutError:
            entry["error"] = f"no answer within {timeout_s:g} s"
        except RsmError as error:
            entry["error"] = f"{type(error).__name__}: {error}"
        replicas.append(entry)
    leader_index = max(
        (r["applied_index"] for r in replicas if r.get("serving")),
        default=max((r.get("applied_index", 0) for r in replicas), default=0),
    )
    for entry in replicas:
        if "applied_index" in entry:
            entry["lag"] = max(0, leader_index - entry["applied_index"])
    return {
        "app": client.app,
        "epoch": log.epoch,
        "leader": leader,
        "segments": len(log.segments),
        "open_segment": None
        if open_segment is None
        else {"ledger_id": open_segment.ledger_id, "first_index": open_segment.first_index},
        "end_index": log.end_index,
        "replication": next(
            (
                entry["term"]["replication"]
                for entry in replicas
                if entry.get("serving") and entry.get("term")
            ),
            None,
        ),
        "replicas": replicas,
        "under_replication": await under_replication_status(store, client.app, ledger_root),
    }


async def under_replication_status(
    store: MetadataStore, app: str, ledger_root: str
) -> dict[str, Any]:
    """Autorecovery's progress, read only: `ledgers` marked under-replicated in the bookie
    cluster, of which `app_ledgers` (ids) belong to `app` (custom metadata "rsm.app"),
    `being_repaired` (a worker holds its lock), the `missing_bookies` they name, and
    whether workers are `enabled`; `{"error": ...}` when the marks cannot be read."""
    marks = UnderReplication(store, ledger_root)
    ledgers = LedgerManager(store, ledger_root)
    try:
        if await store.exists(MetadataLayout(ledger_root).instance_id) is None:
            # Not a bookie cluster's root (a wrong --ledger-root): no marks is no news.
            return {"error": f"no bookie cluster at {ledger_root} (no INSTANCEID there)"}
        statuses = await marks.mark_statuses()
        enabled = await marks.is_enabled()
        app_ledgers = []
        for status in statuses:
            try:
                metadata, _version = await ledgers.read(status.ledger_id)
            except NoSuchLedgerError:
                continue
            if metadata.custom.get(APP_KEY) == app.encode():
                app_ledgers.append(status.ledger_id)
    except BookieError as error:
        return {"error": f"{type(error).__name__}: {error}"}
    return {
        "enabled": enabled,
        "ledgers": len(statuses),
        "app_ledgers": app_ledgers,
        "being_repaired": sum(status.locked_by is not None for status in statuses),
        "missing_bookies": sorted({b for status in statuses for b in status.missing}),
    }


def under_replication_lines(report: dict[str, Any]) -> list[str]:
    """The line of an `application_status` on autorecovery (none when it has no
    `under_replication`)."""
    status = report.get("under_replication")
    if status is None:
        return []
    if "error" in status:
        return [f"under-replicated ledgers: unknown ({status['error']})"]
    paused = (
        []
        if status["enabled"]
        else ["autorecovery is paused: nothing is repaired (bookie shell autorecovery enable)"]
    )
    if not status["ledgers"]:
        return ["under-replicated ledgers: none", *paused]
    return [
        f"under-replicated ledgers: {status['ledgers']} ({len(status['app_ledgers'])} of "
        f"{report['app']}'s), {status['being_repaired']} being repaired; missing bookies: "
        + ", ".join(status["missing_bookies"]),
        *paused,
    ]


def shown_addresses(entry: dict[str, Any]) -> str:
    """A replica's plain and TLS addresses as a status report shows them ("host:port",
    "host:port tls host:port", "tls host:port")."""
    address, tls_address = entry.get("address"), entry.get("tls_address")
    if tls_address is None or tls_address == address:
        return str(address)
    return f"tls {tls_address}" if address is None else f"{address} tls {tls_address}"


def status_heading(report: dict[str, Any]) -> tuple[str, str]:
    """The leader ("id (address)" or "none") and the log's line of an `application_status`."""
    leader = report["leader"]
    leader_text = f"{leader['replica_id']} ({shown_addresses(leader)})" if leader else "none"
    segments = report["segments"]
    open_segment = report["open_segment"]
    open_text = (
        f"open: ledger {open_segment['ledger_id']} from index {open_segment['first_index']}"
        if open_segment
        else f"all closed, end index {report['end_index']}"
    )
    return leader_text, f"log: {segments} segment{'' if segments == 1 else 's'}, {open_text}"


def replication_lines(report: dict[str, Any]) -> list[str]:
    """The warning of an `application_status` whose open segment is under-replicated."""
    replication = report.get("replication")
    if not replication or replication["full"]:
        return []
    sizes = (
        f"E={replication['ensemble_size']} Qw={replication['write_quorum']} "
        f"Qa={replication['ack_quorum']}"
    )
    configured = (
        f"E={replication['configured_ensemble_size']} Qw={replication['configured_write_quorum']}"
    )
    if replication["degraded"]:
        what = [
            f"degraded: the open segment's ledger has {sizes} (configured {configured}): too",
            "few bookies were writable when it was created.",
        ]
    else:
        what = [
            "under-replicated: a bookie of the open segment's ledger failed and none can",
            "replace it; writes go to the bookies left.",
        ]
    return [
        "",
        *what,
        "Every acknowledged write is on Qa bookies' disks; the leader rolls over to a",
        "full-size ledger once E bookies are writable again.",
    ]


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """`rows` (the header first) as lines of left-aligned columns two spaces apart."""
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def read_client_tokens(path: Path | None) -> TokenTable | None:
    """The table of a replica's `--client-tokens-file` (docs/security.md, "Client tokens"),
    or None; `InvalidConfig` naming the file and a line, never a token."""
    if path is None:
        return None
    try:
        return read_token_table(path, "--client-tokens-file")
    except BookieInvalidConfig as error:
        raise InvalidConfig(str(error)) from None


def run_replica_main(
    serve: Callable[..., Awaitable[int]],
    *args: Any,
    logger: logging.Logger,
    failed_event: str,
) -> int:
    """Run `serve(*args)` as a replica process's main and return its exit status.

    On uvloop when installed (the `fast` extra: a replica is bound by its event
    loop), with the interpreter tuned for throughput (`bookie.runtime_tuning`).
    A framework or bookie error, also one raised inside a task group, ends it with one
    `failed_event` log line: exit `EXIT_USAGE` for a configuration error, else
    `EXIT_FAILED`.  Anything else is a bug, and its traceback shows."""
    backend_options = {"use_uvloop": importlib.util.find_spec("uvloop") is not None}
    tune_for_throughput()
    try:
        code: int = anyio.run(serve, *args, backend_options=backend_options)
    except BaseException as raised:
        error = leaf_error(raised)
        if not isinstance(error, RsmError | BookieError):
            raise
        emit(logger, logging.ERROR, failed_event, error=f"{type(error).__name__}: {error}")
        return EXIT_USAGE if isinstance(error, InvalidConfig) else EXIT_FAILED
    return code
