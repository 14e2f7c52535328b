"""Logs with an exactly known history, written on real bookies, for the Spark tests.

`known_cluster` starts three bookie processes against the session's
ZooKeeper and writes each application's log the way leaders do: batches
encoded by the framework (`encode_batch`, `encode_command`) appended to
ledgers, and the log znode listing the segments.  The tests then know every
row a read must give (`Expected`), built here from the same plan and not
through rsm.spark.

Applications:

* `known`: segment 1 (epoch 1, CLOSED, 30 entries), segment 2 (epoch 1,
  CLOSED, 20 entries: a rollover), segment 3 (epoch 2, OPEN: a takeover, 12
  entries written).  The writer of segment 3 stays open and never publishes
  an explicit LAC, so its bookies report LAC 10: entry 11 is not readable
  without fencing, and a read must stop before it.  Entry k (k > 0) of a
  ledger holds `k % 3 + 1` commands; entry 0 of an epoch's first ledger is
  the leader-start marker.  Entry j of the log is logged at `T0_MS + 1000 j`.
* `tail`, `growing` and `stream`: one OPEN segment of 3 entries each (2
  readable), with their writers kept for tests that append after a read (a
  read never fences; an incremental export and a restarted stream pick up
  what was added, across a takeover: `KnownCluster.take_over`).
* `corrupt`: one CLOSED segment whose entry 1 is not a batch.
* `truncated`: a log whose first segment starts at index 50, and a snapshot
  registered at index 49.

Each bookie also serves a TLS listener (server certificate only: clients are
not asked for one), for the reads with the `tls*` options.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.client.write_handle import WriteHandle
from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_format import (
    decode_log,
    encode_batch,
    encode_command,
    encode_leader_start,
    encode_log,
)
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue, encode_snapshots
from tests.integration.support.processes import HOST, BookieCluster
from tests.tls_certs import Certificates

T0_MS = 1_700_000_000_000
CLIENT = b"client-0000000001"
PASSWORD = ReplicaConfig().ledger_password
UNREADABLE = b"\xa1not a batch"
ROLES = ("known", "tail", "growing", "stream", "corrupt", "truncated")


@dataclass
class Expected:
    """The rows (LOG_SCHEMA order, leader_time in ms) a full read of one application gives."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    ledgers: list[int] = field(default_factory=list)
    payloads: dict[tuple[int, int], bytes] = field(default_factory=dict)
    """(ledger id, entry id) -> payload, for the entries a reader may see."""

    def between(self, start: int, end: int) -> list[tuple[Any, ...]]:
        return [row for row in self.rows if start <= row[0] < end]


@dataclass
class KnownCluster:
    zk: str
    ledger_root: str
    apps: dict[str, str]
    """Role (`known`, `tail`, ...) -> application name."""
    expected: dict[str, Expected]
    writers: dict[str, Writer]
    bookie_ids: list[str]
    store: ZkMetadataStore
    certs: Certificates
    """The bookies' TLS listeners (next to their plain ones) serve `certs.server`."""

    async def take_over(self, role: str) -> None:
        """A new leader: the OPEN segment closed at its end, a new one of the next epoch."""
        writer = self.writers[role]
        closed = await writer.close()
        await writer.start(writer.epoch + 1, marker=True)
        layout = AppLayout.of(self.apps[role])
        versioned = await self.store.get(layout.log)
        log = decode_log(versioned.value)
        updated = Log(writer.epoch, (*log.segments[:-1], closed, writer.open_segment()))
        await self.store.set(layout.log, encode_log(updated), versioned.version)

    def options(self, role: str) -> dict[str, str]:
        return {"zk": self.zk, "ledgerRoot": self.ledger_root, "app": self.apps[role]}


def arguments(args: list[bytes], kwargs: dict[str, Any]) -> str:
    """The `arguments` column as docs/spark.md specifies it (oracle of the tests)."""
    value: dict[str, Any] = {
        "args": [arg.decode() if _utf8(arg) else {"hex": arg.hex()} for arg in args]
    }
    if kwargs:
        value["kwargs"] = kwargs
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _utf8(raw: bytes) -> bool:
    try:
        raw.decode()
    except UnicodeDecodeError:
        return False
    return True


class Writer:
    """Appends batches to one ledger at a time and records the rows readers may see.

    The rows of the last entry appended to an open ledger stay pending: its
    LAC, which readers go by, is only published with the next entry.
    """

    def __init__(self, ledgers: LedgerClient, expected: Expected) -> None:
        self.ledgers = ledgers
        self.expected = expected
        self.index = 1
        self.entry_number = 0
        self.seq = itertools.count(1)
        self.handle: WriteHandle | None = None
        self.epoch = 0
        self.first_index = 1
        self._pending: list[tuple[Any, ...]] = []
        self._pending_payload: tuple[tuple[int, int], bytes] | None = None

    async def start(self, epoch: int, *, marker: bool) -> None:
        """A new ledger for `epoch`, opened with a leader-start marker when `marker`."""
        self.handle = await self.ledgers.create_ledger(3, 3, 2, password=PASSWORD)
        self.epoch = epoch
        self.first_index = self.index
        self.expected.ledgers.append(self.handle.ledger_id)
        if marker:
            await self._append([("marker",)])

    async def append(self, entries: int) -> None:
        """`entries` more batches: entry k holds `k % 3 + 1` commands."""
        assert self.handle is not None
        for _ in range(entries):
            count = (self.handle.last_add_pushed + 1) % 3 + 1
            await self._append([("command",)] * count)

    async def close(self) -> Segment:
        assert self.handle is not None
        await self.handle.close()
        self._flush()
        return Segment(
            self.handle.ledger_id, self.epoch, self.first_index, SegmentState.CLOSED, self.index - 1
        )

    def open_segment(self) -> Segment:
        assert self.handle is not None
        return Segment(self.handle.ledger_id, self.epoch, self.first_index, SegmentState.OPEN, -1)

    async def _append(self, kinds: list[tuple[str]]) -> None:
        handle = self.handle
        assert handle is not None
        entry_id = handle.last_add_pushed + 1
        time_ms = T0_MS + 1000 * self.entry_number
        self.entry_number += 1
        items: list[bytes] = []
        rows: list[tuple[Any, ...]] = []
        for (kind,) in kinds:
            if kind == "marker":
                items.append(encode_leader_start(f"replica-{self.epoch}"))
                marker = json.dumps(
                    {"leader_start": f"replica-{self.epoch}"}, separators=(",", ":")
                )
                rows.append((None, None, None, None, marker))
            else:
                rows.append(self._command(items))
        payload = encode_batch(
            epoch=self.epoch,
            first_index=self.index,
            timestamp_ms=time_ms,
            seed=entry_id,
            items=items,
        )
        assert await handle.append(payload) == entry_id
        self._flush()
        self._pending = [
            (
                self.index + slot,
                self.epoch,
                handle.ledger_id,
                entry_id,
                slot,
                time_ms,
                client_id,
                seq,
                ack_seq,
                name,
                argument,
                len(payload),
            )
            for slot, (client_id, seq, ack_seq, name, argument) in enumerate(rows)
        ]
        self._pending_payload = ((handle.ledger_id, entry_id), payload)
        self.index += len(items)

    def _flush(self) -> None:
        self.expected.rows.extend(self._pending)
        self._pending = []
        if self._pending_payload is not None:
            key, payload = self._pending_payload
            self.expected.payloads[key] = payload
            self._pending_payload = None

    def _command(self, items: list[bytes]) -> tuple[Any, ...]:
        number = self.index + len(items)
        args = [f"key-{number % 7}".encode(), f"value-{number}".encode()]
        kwargs: dict[str, Any] = {}
        if number % 11 == 0:
            args.append(b"\xff\x00")
        if number % 13 == 0:
            kwargs = {"ttl_ms": number}
        if number % 5 == 0:
            items.append(encode_command("set", args, kwargs))
            return (None, None, None, "set", arguments(args, kwargs))
        seq = next(self.seq)
        items.append(
            encode_command("set", args, kwargs, client_id=CLIENT, seq=seq, ack_seq=seq - 1)
        )
        return (CLIENT, seq, seq - 1, "set", arguments(args, kwargs))


async def _register_snapshot(store: ZkMetadataStore, app: str, *, index: int) -> None:
    """A snapshot manifest at `index` (its ledger is not read by these tests)."""
    manifest = Manifest(
        app=app,
        index=index,
        time_ms=T0_MS,
        epoch=1,
        ledger_id=10**9,
        state_hash=b"\x01" * 32,
        sha256=b"\x02" * 32,
        size_bytes=1,
        chunk_count=1,
        created_ms=T0_MS,
        replica_id="replica-1",
    )
    layout = AppLayout.of(app)
    await store.create(layout.snapshots, encode_snapshots(SnapshotsValue(snapshots=(manifest,))))


async def _publish(store: ZkMetadataStore, app: str, log: Log) -> None:
    layout = AppLayout.of(app)
    await store.create(layout.log, encode_log(log), make_parents=True)


@contextlib.asynccontextmanager
async def known_cluster(
    zookeeper: LocalZooKeeper, directory: Path, zk_root: str, suffix: str
) -> AsyncIterator[KnownCluster]:
    certs = Certificates.make(directory / "certs")
    async with BookieCluster(zookeeper, zk_root, directory) as cluster:
        tls = {"tls_cert_file": str(certs.server), "tls_ca_file": str(certs.ca)}
        setups = [
            cluster.add_bookie(
                ledger_dirs=1,
                config={"tls_listen_address": f"{HOST}:{free_port(HOST)}", **tls},
            )
            for _ in range(3)
        ]
        async with anyio.create_task_group() as group:
            for setup in setups:
                group.start_soon(functools.partial(cluster.start, setup, wait_for="bookie.ready"))
        config = ClientConfig(explicit_lac_interval_ms=0)
        async with (
            ZkMetadataStore.connect(zookeeper.connect_string) as store,
            LedgerClient.open(store, root=zk_root, config=config) as ledgers,
        ):
            apps = {role: f"{role}-{suffix}" for role in ROLES}
            expected = {role: Expected() for role in apps}

            known = Writer(ledgers, expected["known"])
            await known.start(1, marker=True)
            await known.append(29)
            first = await known.close()
            await known.start(1, marker=False)
            await known.append(20)
            second = await known.close()
            await known.start(2, marker=True)
            await known.append(11)
            await _publish(store, apps["known"], Log(2, (first, second, known.open_segment())))

            writers: dict[str, Writer] = {}
            for role in ("tail", "growing", "stream"):
                writers[role] = Writer(ledgers, expected[role])
                await writers[role].start(1, marker=True)
                await writers[role].append(2)
                await _publish(store, apps[role], Log(1, (writers[role].open_segment(),)))

            corrupt = await ledgers.create_ledger(3, 3, 2, password=PASSWORD)
            await corrupt.append(
                encode_batch(
                    epoch=1,
                    first_index=1,
                    timestamp_ms=T0_MS,
                    seed=0,
                    items=[encode_leader_start("replica-1")],
                )
            )
            await corrupt.append(UNREADABLE)
            await corrupt.close()
            await _publish(
                store,
                apps["corrupt"],
                Log(1, (Segment(corrupt.ledger_id, 1, 1, SegmentState.CLOSED, 2),)),
            )

            late = Writer(ledgers, expected["truncated"])
            late.index = 50
            await late.start(1, marker=True)
            await late.append(1)
            kept = await late.close()
            await _publish(store, apps["truncated"], Log(1, (kept,)))
            await _register_snapshot(store, apps["truncated"], index=49)

            yield KnownCluster(
                zk=zookeeper.connect_string,
                ledger_root=zk_root,
                apps=apps,
                expected=expected,
                writers=writers,
                bookie_ids=sorted(ledgers.writable_bookies),
                store=store,
                certs=certs,
            )
