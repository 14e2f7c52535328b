"""`bookie shell` commands about a whole cluster, through its ZooKeeper metadata.

Each opens its own ZooKeeper session (`Cluster`: connect string and root) and
gives up after `limits.shell_metadata_timeout_ms` when ZooKeeper does not
answer.  Only `simpletest`, `autorecovery`, `triggeraudit`, `recover`,
`decommission` and `setacls` write anything.

* `listbookies`: every bookie by state: writable and read-only (its
  registration under `available/` or `available/readonly/`), and down (a
  cookie, so it joined the cluster, but no registration);
* `listledgers`: every ledger id;
* `ledgermetadata ID`: one ledger's metadata record;
* `readledger ID [--from --to] [--all-bookies]`: a ledger's entries, never
  fencing and never writing: a closed ledger up to its last entry, an open one
  up to the LAC its bookies report.  An entry of which no copy can be read is
  a problem, and the entries after it are still read.  With `--all-bookies`
  each entry is read from every bookie of its write set
  (`bookie.client.copies`) and every bookie whose copy is not the agreed one
  is a problem (`bookie.core.copies`);
* `simpletest`: create a ledger, write entries, close it, read them back,
  delete it.  Every step that fails is a problem;
* `listunderreplicated`: every ledger marked under-replicated, the bookies it
  is missing and the worker repairing it, and whether workers are paused;
* `whoisauditor`: the elected auditor and how many processes stand;
* `autorecovery enable|disable`: let replication workers take marks, or pause
  them;
* `triggeraudit`: ask the auditor to audit now (lost bookies, entry presence);
* `recover BOOKIE`: mark every ledger that names the bookie as missing it, now,
  whatever the grace period (the workers then copy its share elsewhere; of a
  bookie that is registered and holds its whole share they copy nothing).  A
  bookie no ledger names must be a member (have a cookie), as for
  `decommission`: anything else is a mistyped id;
* `decommission BOOKIE`: for a bookie that is stopped: `recover`, wait until no
  ledger names it (or `--timeout-s` passes: the ledgers still naming it are one
  problem, with their ids and, when the metadata tells, why: no spare
  writable bookie outside an ensemble, autorecovery disabled), then delete its
  cookie, so it is no longer a member;
* `setacls [PATH ...]`: give the cluster's root znode, the PATHs (`/rsm`,
  say) and every znode below them the ACL this session creates znodes with
  (`bookie.meta.zk_digest`: all permissions to the credentials of
  `BOOKIE_ZK_DIGEST_FILE`, nothing to anybody else), for a cluster started
  before it had credentials.  Idempotent: znodes that have it already are
  counted and left alone.  Without credentials: bad input.  Run it with
  every process already given the credentials, or those without them lose
  access to what it secures.

A result with a non-empty `problems` list means a problem was found (the
command line exits 1).  `ShellError.exit_code` tells bad input or an
unreachable cluster (2) from a failure found while working (1).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio

from bookie import limits
from bookie.client.config import ClientConfig
from bookie.client.copies import CopyReader
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import ReadHandle
from bookie.core.auditor import missing_bookies
from bookie.core.copies import CopyState, odd_copies
from bookie.core.metadata import LedgerMetadata
from bookie.errors import (
    BookieError,
    BookieUnavailable,
    InvalidConfig,
    MetadataUnavailable,
    NoNode,
    NoSuchLedgerError,
    UnauthorizedLedgerAccess,
)
from bookie.meta import paths
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import (
    BookieInfo,
    Cookie,
    delete_cookie,
    list_bookies,
    list_cookies,
    read_cookie,
    read_instance_id,
)
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from bookie.meta.zk import ZkMetadataStore
from bookie.server.node import EXIT_USAGE
from bookie.tools.admin import EXIT_PROBLEM, Result, ShellError, pairs
from bookie.wire.packet import DigestType


@dataclass(frozen=True, slots=True)
class Cluster:
    """Where a cluster's metadata is: ZooKeeper hosts ("host:port[,...]") and root znode;
    how its bookies are reached (`tls`: their TLS listeners with this context)."""

    zk_servers: str
    zk_root: str = limits.metadata_root_default
    tls: ssl.SSLContext | None = None

    def __post_init__(self) -> None:
        if not self.zk_servers or "/" in self.zk_servers:
            raise ShellError(
                f"--zk {self.zk_servers!r}: expected host:port[,host:port...] "
                "(the cluster's root znode goes in --zk-root)",
                EXIT_USAGE,
            )
        if not paths.is_valid(self.zk_root) or self.zk_root == paths.ROOT:
            raise ShellError(
                f"--zk-root {self.zk_root!r}: expected an absolute znode path below '/', "
                "e.g. /ledgers",
                EXIT_USAGE,
            )


@contextlib.asynccontextmanager
async def _metadata(cluster: Cluster) -> AsyncIterator[MetadataStore]:
    """A session on the cluster's ZooKeeper; `ShellError` if it is unreachable or holds no
    cluster under the root."""
    try:
        async with ZkMetadataStore.connect(
            cluster.zk_servers, operation_timeout_ms=limits.shell_metadata_timeout_ms
        ) as store:
            try:
                await read_instance_id(store, cluster.zk_root)
            except NoNode as error:
                raise ShellError(
                    f"there is no cluster under {cluster.zk_root} in ZooKeeper "
                    f"{cluster.zk_servers} (no INSTANCEID): is --zk-root the bookies' zk_root?",
                    EXIT_USAGE,
                ) from error
            yield store
    except MetadataUnavailable as error:
        raise ShellError(
            f"cannot reach ZooKeeper at {cluster.zk_servers}: {error}.  Is it running, and "
            "is --zk the bookies' zk_servers?",
            EXIT_USAGE,
        ) from error


@contextlib.asynccontextmanager
async def _client(cluster: Cluster) -> AsyncIterator[LedgerClient]:
    async with (
        _metadata(cluster) as store,
        LedgerClient.open(
            store, root=cluster.zk_root, config=ClientConfig(tls=cluster.tls)
        ) as client,
    ):
        yield client


def _run(action: Callable[[], Any]) -> Result:
    """Run a command's coroutine; a failure it did not foresee is still one line, not a
    traceback (bad input: a configuration error, such as bad ZooKeeper credentials, or
    bookies that cannot be reached, such as a TLS handshake refused, are usage errors)."""
    try:
        result: Result = anyio.run(action)
    except BookieError as error:
        unusable = isinstance(error, InvalidConfig | BookieUnavailable)
        code = EXIT_USAGE if unusable else EXIT_PROBLEM
        raise ShellError(f"{type(error).__name__}: {error}", code) from error
    return result


# --- bookies ----------------------------------------------------------------------------------


def bookies(cluster: Cluster) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            registered = await list_bookies(store, cluster.zk_root)
            down = []
            for bookie_id in await list_cookies(store, cluster.zk_root):
                if bookie_id in registered.writable or bookie_id in registered.read_only:
                    continue
                found = await read_cookie(store, bookie_id, cluster.zk_root)
                down.append(
                    {"bookie_id": bookie_id, "address": found and found[0].advertised_address}
                )
        return {
            "writable": _registered(registered.writable),
            "read_only": _registered(registered.read_only),
            "down": down,
        }

    return _run(ask)


def _registered(bookies: Mapping[str, BookieInfo]) -> list[Result]:
    return [
        {"bookie_id": bookie_id, "address": info.address, "rack": info.rack}
        for bookie_id, info in sorted(bookies.items())
    ]


# --- ledgers ----------------------------------------------------------------------------------


def ledgers(cluster: Cluster) -> Result:
    async def ask() -> Result:
        async with _client(cluster) as client:
            return {"ledgers": await client.list_ledgers()}

    return _run(ask)


def ledger_metadata(cluster: Cluster, ledger_id: int) -> Result:
    async def ask() -> Result:
        async with _client(cluster) as client:
            return _metadata_record(await _existing(client, ledger_id))

    return _run(ask)


async def _existing(client: LedgerClient, ledger_id: int) -> LedgerMetadata:
    try:
        return await client.ledger_metadata(ledger_id)
    except NoSuchLedgerError as error:
        raise ShellError(f"there is no ledger {ledger_id} (see listledgers)", EXIT_USAGE) from error


def _metadata_record(metadata: LedgerMetadata) -> Result:
    return {
        "ledger_id": metadata.ledger_id,
        "state": metadata.state.name.lower(),
        "ensemble_size": metadata.ensemble_size,
        "write_quorum": metadata.write_quorum,
        "ack_quorum": metadata.ack_quorum,
        "digest_type": metadata.digest_type.name.lower(),
        "last_entry_id": metadata.last_entry_id,
        "length": metadata.length,
        "ctime_ms": metadata.ctime_ms,
        "ensembles": [[first, list(ensemble)] for first, ensemble in metadata.ensembles],
        "custom": {key: value.hex() for key, value in sorted(metadata.custom.items())},
    }


def read_ledger(
    cluster: Cluster,
    ledger_id: int,
    *,
    first: int | None = None,
    last: int | None = None,
    all_bookies: bool = False,
    password: bytes = b"",
    preview_bytes: int = 16,
) -> Result:
    """Entries `first` .. `last` (inclusive; default: the whole readable ledger)."""
    if preview_bytes < 0:
        raise ShellError(f"--preview-bytes {preview_bytes}: expected 0 or more", EXIT_USAGE)

    async def ask() -> Result:
        async with _client(cluster) as client:
            await _existing(client, ledger_id)
            handle = await _open_without_recovery(client, ledger_id, password)
            end = handle.last_add_confirmed
            start, stop = _entry_range(handle, first, last)
            result: Result = {
                "ledger_id": ledger_id,
                "state": handle.metadata.state.name.lower(),
                "readable_to": end,
                "from": start,
                "to": stop,
                "entries": [],
                "problems": [],
            }
            if stop < start:
                return result
            if all_bookies:
                await _compare_copies(
                    client,
                    metadata=handle.metadata,
                    password=password,
                    entries=(start, stop),
                    preview_bytes=preview_bytes,
                    result=result,
                )
            else:
                await _read_entries(handle, (start, stop), preview_bytes, result)
            return result

    return _run(ask)


async def _open_without_recovery(
    client: LedgerClient, ledger_id: int, password: bytes
) -> ReadHandle:
    try:
        return await client.open_ledger(ledger_id, password, recovery=False)
    except UnauthorizedLedgerAccess as error:
        message = (
            f"{error}: the password given is not its password"
            if password
            else f"ledger {ledger_id} has a password: pass it with --password-file"
        )
        raise ShellError(message, EXIT_USAGE) from error
    except BookieError as error:
        raise ShellError(f"cannot read ledger {ledger_id}: {error}", EXIT_PROBLEM) from error


def _entry_range(handle: ReadHandle, first: int | None, last: int | None) -> tuple[int, int]:
    """The inclusive range to read; empty (stop < start) for a ledger with nothing readable."""
    end = handle.last_add_confirmed
    start = 0 if first is None else first
    stop = end if last is None else last
    if start < 0 or (last is not None and stop < start):
        raise ShellError(f"--from {start} --to {stop} is not a range of entries", EXIT_USAGE)
    for flag, value in (("--from", first), ("--to", last)):
        if value is not None and value > end:
            what = "its last entry" if handle.is_closed else "its last add confirmed"
            raise ShellError(
                f"ledger {handle.ledger_id} is readable up to entry {end} ({what}): "
                f"{flag} {value} is past it",
                EXIT_USAGE,
            )
    return start, stop


async def _read_entries(
    handle: ReadHandle, entries: tuple[int, int], preview_bytes: int, result: Result
) -> None:
    start, stop = entries
    batch_max = limits.read_batch_entries_max
    for batch_first in range(start, stop + 1, batch_max):
        batch_last = min(stop, batch_first + batch_max - 1)
        try:
            read = await handle.read_entries(batch_first, batch_last)
        except BookieError:
            # Name the entries no copy could serve, and read every other one.
            for entry_id in range(batch_first, batch_last + 1):
                try:
                    [one] = await handle.read_entries(entry_id, entry_id)
                except BookieError as error:
                    result["entries"].append(_entry(entry_id, None, preview_bytes))
                    result["problems"].append(
                        {"entry_id": entry_id, "bookie_id": None, "problem": str(error)}
                    )
                else:
                    result["entries"].append(_entry(entry_id, one.payload, preview_bytes))
            continue
        result["entries"].extend(
            _entry(entry.entry_id, entry.payload, preview_bytes) for entry in read
        )


async def _compare_copies(
    client: LedgerClient,
    *,
    metadata: LedgerMetadata,
    password: bytes,
    entries: tuple[int, int],
    preview_bytes: int,
    result: Result,
) -> None:
    start, stop = entries
    async with CopyReader.open(metadata, password, client.bookie_address, tls=client.tls) as reader:
        for entry_id in range(start, stop + 1):
            copies = await reader.read(entry_id)
            odd = odd_copies(copies)
            odd_ids = {item.bookie_id for item in odd}
            agreed = next((copy.payload for copy in copies if copy.bookie_id not in odd_ids), None)
            entry = _entry(entry_id, agreed, preview_bytes)
            entry["copies"] = {
                copy.bookie_id: "differs"
                if copy.bookie_id in odd_ids and copy.state is CopyState.OK
                else copy.state.value
                for copy in copies
            }
            result["entries"].append(entry)
            result["problems"].extend(
                {"entry_id": entry_id, "bookie_id": item.bookie_id, "problem": item.problem}
                for item in odd
            )


def _entry(entry_id: int, payload: bytes | None, preview_bytes: int) -> Result:
    return {
        "entry_id": entry_id,
        "payload_bytes": None if payload is None else len(payload),
        "payload_preview": "" if payload is None else payload[:preview_bytes].hex(),
    }


# --- simpletest -------------------------------------------------------------------------------


def simple_test(
    cluster: Cluster,
    *,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    entries: int,
) -> Result:
    """Create a ledger, write `entries` entries, close it, read them back, delete it."""
    if not ensemble_size >= write_quorum >= ack_quorum >= 1 or entries < 1:
        raise ShellError(
            "expected --ensemble >= --write-quorum >= --ack-quorum >= 1 and --entries >= 1",
            EXIT_USAGE,
        )

    async def ask() -> Result:
        result: Result = {"ledger_id": None, "ensemble": [], "steps": [], "problems": []}
        async with _client(cluster) as client:
            await _simple_test(
                client,
                result,
                ensemble_size=ensemble_size,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
                entries=entries,
            )
        return result

    return _run(ask)


async def _simple_test(
    client: LedgerClient,
    result: Result,
    *,
    ensemble_size: int,
    write_quorum: int,
    ack_quorum: int,
    entries: int,
) -> None:
    payloads = [_test_payload(number) for number in range(entries)]

    def step(name: str, outcome: str) -> None:
        result["steps"].append({"step": name, "outcome": outcome})

    def failed(name: str, error: BookieError) -> None:
        step(name, "FAILED")
        result["problems"].append({"step": name, "problem": f"{type(error).__name__}: {error}"})

    try:
        handle = await client.create_ledger(
            ensemble_size, write_quorum, ack_quorum, digest_type=DigestType.CRC32C
        )
    except BookieError as error:
        failed("create", error)
        return
    result["ledger_id"] = handle.ledger_id
    result["ensemble"] = list(handle.metadata.current_ensemble)
    step("create", f"ledger {handle.ledger_id}")
    try:
        try:
            for payload in payloads:
                await handle.append(payload)
            await handle.close()
        except BookieError as error:
            failed("write", error)
            return
        step("write", f"{entries} entries")
        try:
            reader = await client.open_ledger(handle.ledger_id)
            read = await reader.read(0, entries - 1)
        except BookieError as error:
            failed("read", error)
            return
        wrong = [number for number, payload in enumerate(read) if payload != payloads[number]]
        if wrong:
            step("read", "FAILED")
            result["problems"].append(
                {"step": "read", "problem": f"entries {wrong} read back differ from those written"}
            )
            return
        step("read", f"{entries} entries, all as written")
    finally:
        try:
            await client.delete_ledger(handle.ledger_id)
            step("delete", f"ledger {handle.ledger_id}")
        except BookieError as error:
            failed("delete", error)


def _test_payload(number: int) -> bytes:
    seed = f"simpletest entry {number}|".encode()
    size = limits.simpletest_payload_bytes
    return (seed * (size // len(seed) + 1))[:size]


# --- autorecovery -----------------------------------------------------------------------------


def under_replicated(cluster: Cluster) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            marks = UnderReplication(store, cluster.zk_root)
            ledgers: list[Result] = [
                {
                    "ledger_id": status.ledger_id,
                    "missing": sorted(status.missing),
                    "locked_by": status.locked_by,
                }
                for status in await marks.mark_statuses()
            ]
            return {"enabled": await marks.is_enabled(), "ledgers": ledgers}

    return _run(ask)


def who_is_auditor(cluster: Cluster) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            marks = UnderReplication(store, cluster.zk_root)
            candidates = await marks.candidates()
            return {"auditor": await marks.auditor(), "candidates": len(candidates.ordered)}

    return _run(ask)


def set_autorecovery(cluster: Cluster, enabled: bool) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            marks = UnderReplication(store, cluster.zk_root)
            await marks.set_enabled(enabled)
            return {"enabled": await marks.is_enabled()}

    return _run(ask)


def trigger_audit(cluster: Cluster) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            marks = UnderReplication(store, cluster.zk_root)
            await marks.trigger_audit()
            return {"triggered": True, "auditor": await marks.auditor()}

    return _run(ask)


def set_acls(cluster: Cluster, extra_paths: Sequence[str]) -> Result:
    async def secure() -> Result:
        async with _metadata(cluster) as store:
            assert isinstance(store, ZkMetadataStore)
            trees: list[Result] = []
            problems: list[Result] = []
            for path in (cluster.zk_root, *extra_paths):
                try:
                    seen, changed = await store.secure_tree(path)
                except NoNode:
                    problems.append({"step": path, "problem": "no such znode"})
                    continue
                trees.append({"path": path, "znodes": seen, "changed": changed})
            return {"trees": trees, "problems": problems}

    for path in extra_paths:
        if not paths.is_valid(path):
            raise ShellError(f"{path!r}: expected an absolute znode path", EXIT_USAGE)
    return _run(secure)


async def _ledgers_naming(store: MetadataStore, root: str, bookie_id: str) -> list[int]:
    return list(await _metadata_naming(store, root, bookie_id))


async def _metadata_naming(
    store: MetadataStore, root: str, bookie_id: str
) -> dict[int, LedgerMetadata]:
    """The metadata of every ledger that names `bookie_id`, by ledger id (ascending)."""
    ledgers = LedgerManager(store, root)
    naming: dict[int, LedgerMetadata] = {}
    for ledger_id in await ledgers.list_ledgers():
        try:
            metadata, _ = await ledgers.read(ledger_id)
        except NoSuchLedgerError:
            continue
        if missing_bookies(metadata, {bookie_id}):
            naming[ledger_id] = metadata
    return naming


async def _mark_all(store: MetadataStore, root: str, bookie_id: str) -> list[int]:
    marks = UnderReplication(store, root)
    naming = await _ledgers_naming(store, root, bookie_id)
    for ledger_id in naming:
        await marks.mark(ledger_id, [bookie_id])
    return naming


async def _member_cookie(store: MetadataStore, root: str, bookie_id: str) -> tuple[Cookie, int]:
    """The bookie's cookie and its version; `ShellError` if it has none: it is not a member."""
    cookie = await read_cookie(store, bookie_id, root)
    if cookie is None:
        raise ShellError(
            f"bookie {bookie_id} is not a member of the cluster (no cookie; see listbookies)",
            EXIT_USAGE,
        )
    return cookie


def recover(cluster: Cluster, bookie_id: str) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            marked = await _mark_all(store, cluster.zk_root, bookie_id)
            if not marked:  # a typo, or a bookie that has nothing to recover
                await _member_cookie(store, cluster.zk_root, bookie_id)
            return {"bookie_id": bookie_id, "ledgers_marked": marked}

    return _run(ask)


def decommission(cluster: Cluster, bookie_id: str, timeout_s: float) -> Result:
    async def ask() -> Result:
        async with _metadata(cluster) as store:
            registered = await list_bookies(store, cluster.zk_root)
            if bookie_id in registered.writable or bookie_id in registered.read_only:
                raise ShellError(
                    f"bookie {bookie_id} is running: stop it first, then decommission it",
                    EXIT_USAGE,
                )
            cookie = await _member_cookie(store, cluster.zk_root, bookie_id)
            marked = await _mark_all(store, cluster.zk_root, bookie_id)
            naming = marked
            with anyio.move_on_after(timeout_s):
                while naming:
                    await anyio.sleep(limits.shell_decommission_poll_interval_ms / 1000)
                    naming = await _ledgers_naming(store, cluster.zk_root, bookie_id)
            problems: list[Result] = []
            if naming:
                problem = await _still_named(store, cluster.zk_root, bookie_id, timeout_s)
                problems += [] if problem is None else [problem]
            if not problems:
                await delete_cookie(store, bookie_id, cookie[1], cluster.zk_root)
            return {
                "bookie_id": bookie_id,
                "ledgers_marked": marked,
                "cookie_removed": not problems,
                "problems": problems,
            }

    return _run(ask)


_LEDGER_IDS_SHOWN = 10
"""How many ids of the ledgers still naming a bookie the problem's text lists."""


async def _still_named(
    store: MetadataStore, root: str, bookie_id: str, timeout_s: float
) -> Result | None:
    """The one problem of a decommission whose time ran out: the ledgers that still name
    the bookie (read again now: None if none does), and why they do when the metadata
    tells."""
    naming = await _metadata_naming(store, root, bookie_id)
    if not naming:
        return None
    registered = await list_bookies(store, root)
    enabled = await UnderReplication(store, root).is_enabled()
    ids = list(naming)
    shown = ", ".join(str(ledger_id) for ledger_id in ids[:_LEDGER_IDS_SHOWN])
    if len(ids) > _LEDGER_IDS_SHOWN:
        shown += f", ... ({len(ids) - _LEDGER_IDS_SHOWN} more)"
    count = "1 ledger still names" if len(ids) == 1 else f"{len(ids)} ledgers still name"
    return {
        "step": "recover",
        "problem": f"{count} the bookie after {timeout_s:g} s: {shown}",
        "ledger_ids": ids,
        "reason": _still_named_reason(
            bookie_id, naming, sorted(registered.writable), autorecovery_enabled=enabled
        ),
    }


def _still_named_reason(
    bookie_id: str,
    naming: Mapping[int, LedgerMetadata],
    writable: Sequence[str],
    *,
    autorecovery_enabled: bool,
) -> str | None:
    """Why ledgers still name `bookie_id`, as far as the metadata and the registrations
    tell (None: only the workers' `autorecovery.repair_failed` events say).

    A segment naming the bookie moves to a writable bookie that it does not name: with
    none left for some segment, no worker can repair that ledger (what a worker logs as
    "no spare bookie")."""
    reasons: list[str] = []
    if not autorecovery_enabled:
        reasons.append(
            "autorecovery is disabled: workers take no ledger (bookie shell autorecovery enable)"
        )
    stuck = [
        ledger_id
        for ledger_id, metadata in naming.items()
        if any(
            bookie_id in ensemble
            and sum(1 for other in writable if other not in ensemble)
            < sum(1 for member in ensemble if member == bookie_id)
            for _, ensemble in metadata.ensembles
        )
    ]
    if stuck:
        sizes = sorted({naming[ledger_id].ensemble_size for ledger_id in stuck})
        reasons.append(
            f"no spare bookie to move to: {len(stuck)} of the {len(naming)} ledgers have an "
            f"ensemble (of {' or '.join(map(str, sizes))} bookies) that already names every "
            f"other writable bookie ({len(writable)} writable: {', '.join(writable) or 'none'});"
            " start or add a bookie, then decommission again"
        )
    if not reasons:
        return None
    return "; ".join(reasons)


# --- output -----------------------------------------------------------------------------------


def _human_bookies(result: Result) -> Iterator[str]:
    rows = [
        (
            state,
            str(bookie["bookie_id"]),
            str(bookie["address"] or "-"),
            str(bookie.get("rack") or "-"),
        )
        for state, key in (("writable", "writable"), ("read-only", "read_only"), ("down", "down"))
        for bookie in result[key]
    ]
    yield from _table(("state", "bookie", "address", "rack"), rows)
    yield (
        f"{len(result['writable'])} writable, {len(result['read_only'])} read-only, "
        f"{len(result['down'])} down"
    )


def _table(heading: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> Iterator[str]:
    widths = [max(len(row[column]) for row in [heading, *rows]) for column in range(len(heading))]
    for row in [heading, *rows]:
        yield "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()


def _human_ledgers(result: Result) -> Iterator[str]:
    yield from (str(ledger_id) for ledger_id in result["ledgers"])
    yield f"{len(result['ledgers'])} ledgers"


def _human_metadata(result: Result) -> Iterator[str]:
    yield from pairs(
        result,
        [
            "ledger_id",
            "state",
            "ensemble_size",
            "write_quorum",
            "ack_quorum",
            "digest_type",
            "last_entry_id",
            "length",
            "ctime_ms",
        ],
    )
    for first, ensemble in result["ensembles"]:
        yield f"ensemble from entry {first}: {', '.join(ensemble)}"
    for key, value in result["custom"].items():
        yield f"custom {key}: {bytes.fromhex(value)!r}"


def _human_read_ledger(result: Result) -> Iterator[str]:
    yield (
        f"ledger {result['ledger_id']} ({result['state']}, readable to entry "
        f"{result['readable_to']}): entries {result['from']}-{result['to']}"
    )
    rows: list[tuple[str, ...]] = []
    for entry in result["entries"]:
        missing = entry["payload_bytes"] is None
        row: tuple[str, ...] = (
            str(entry["entry_id"]),
            "-" if missing else str(entry["payload_bytes"]),
            "-" if missing else repr(bytes.fromhex(entry["payload_preview"])),
        )
        if "copies" in entry:
            row += (" ".join(f"{bookie}={state}" for bookie, state in entry["copies"].items()),)
        rows.append(row)
    heading: tuple[str, ...] = ("entry", "bytes", "payload")
    if any("copies" in entry for entry in result["entries"]):
        heading += ("copies",)
    yield from _table(heading, rows)
    yield from _human_problems(result)


def _human_problems(result: Result) -> Iterator[str]:
    for problem in result["problems"]:
        where = f"entry {problem['entry_id']}" if "entry_id" in problem else problem["step"]
        who = f" bookie {problem['bookie_id']}" if problem.get("bookie_id") else ""
        yield f"PROBLEM {where}{who}: {problem['problem']}"
    yield f"{len(result['problems'])} problems" if result["problems"] else "no problems"


def _human_simple_test(result: Result) -> Iterator[str]:
    for step in result["steps"]:
        yield f"{step['step']:<7} {step['outcome']}"
    if result["ensemble"]:
        yield f"ensemble {', '.join(result['ensemble'])}"
    yield from _human_problems(result)


def _human_under_replicated(result: Result) -> Iterator[str]:
    rows = [
        (str(ledger["ledger_id"]), ", ".join(ledger["missing"]), ledger["locked_by"] or "-")
        for ledger in result["ledgers"]
    ]
    if rows:
        yield from _table(("ledger", "missing", "repaired by"), rows)
    yield f"{len(rows)} under-replicated ledgers"
    if not result["enabled"]:
        yield "autorecovery is disabled: workers take no ledger (bookie shell autorecovery enable)"


def _human_auditor(result: Result) -> Iterator[str]:
    yield f"auditor {result['auditor'] or '(none)'}, {result['candidates']} candidates"


def _human_autorecovery(result: Result) -> Iterator[str]:
    yield f"autorecovery {'enabled' if result['enabled'] else 'disabled'}"


def _human_trigger(result: Result) -> Iterator[str]:
    yield f"audit asked of auditor {result['auditor'] or '(none: nobody will audit)'}"


def _human_recover(result: Result) -> Iterator[str]:
    yield f"{len(result['ledgers_marked'])} ledgers naming {result['bookie_id']} marked"


def _human_set_acls(result: Result) -> Iterator[str]:
    for tree in result["trees"]:
        yield f"{tree['path']}: {tree['znodes']} znodes, {tree['changed']} given the ACL"
    yield from _human_problems(result)


def _human_decommission(result: Result) -> Iterator[str]:
    yield from _human_recover(result)
    if result["cookie_removed"]:
        yield f"bookie {result['bookie_id']} decommissioned: no ledger names it, cookie removed"
    for problem in result["problems"]:
        if "ledger_ids" in problem:
            reason = problem["reason"] or (
                "not known here: the workers' autorecovery.repair_failed events say (e.g. "
                "a ledger password autorecovery_password does not give)"
            )
            yield f"not decommissioned, cookie kept: why: {reason}"
    yield from _human_problems(result)


HUMAN: dict[str, Callable[[Result], Iterator[str]]] = {
    "listbookies": _human_bookies,
    "listledgers": _human_ledgers,
    "ledgermetadata": _human_metadata,
    "readledger": _human_read_ledger,
    "simpletest": _human_simple_test,
    "listunderreplicated": _human_under_replicated,
    "whoisauditor": _human_auditor,
    "autorecovery": _human_autorecovery,
    "triggeraudit": _human_trigger,
    "recover": _human_recover,
    "decommission": _human_decommission,
    "setacls": _human_set_acls,
}
