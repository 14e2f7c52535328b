"""Benchmark: how fast a replica is ready after a restart, with and without a snapshot, and
what truncation gives back on the bookies' disks.

    python bench/recovery_bench.py [--commands 1000000] [--keys 100000] [--value-bytes 100]

Starts a ZooKeeper and three `bookie serve` processes (`bookie.local.cluster`,
fsync on, garbage collection every second) in a temporary directory, then:

1. writes a history of `--commands` key-value puts (`--keys` keys, so the live
   state is much smaller than the log) straight into the log's ledgers: batches
   of 1,000 commands, segments of 100 batches, closed, as a leader that handed
   over gracefully leaves them.  Writing them through a leader would measure the
   write path (bench/rsm_bench.py's business) and take minutes;
2. (a) starts a fresh replica and times it until it has replayed the whole log
   (`replay_ready_s`);
3. has that replica snapshot its state (`snapshot_write_mb_per_s`, and how long
   applying was paused for the fork: `snapshot_pause_ms`), then logs a short
   tail of `--tail` commands;
4. (b) starts a second fresh replica and times it until it has loaded the
   snapshot and replayed the tail (`snapshot_ready_s`; `snapshot_load_mb_per_s`);
5. lets the leader truncate the log below the snapshot, waits until the
   bookies' disk usage stops falling, and reports it before and after
   (`disk_before_bytes`, `disk_after_bytes`) with the live data it has to keep
   (`live_bytes`: the snapshot and the log segments left, times the write
   quorum of 3).

Targets: `snapshot_ready_s` at least 10x below `replay_ready_s`;
`disk_after_bytes` within 2x of `live_bytes` plus the bookies' fixed files (one
current journal file and one current entry log each, `fixed_bytes`).  The last
line of output is ONE JSON object (its shape: docs/operations.md,
"Benchmark"); progress goes to stderr.  `--seconds` bounds each wait, not the work.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from bookie.client.ledger_client import LedgerClient  # noqa: E402
from bookie.local.cluster import BOOKIE_CONFIG_FILE, LocalCluster  # noqa: E402
from bookie.local.zookeeper import free_port  # noqa: E402
from bookie.meta.zk import ZkMetadataStore  # noqa: E402
from bookie.server.config import render_toml  # noqa: E402
from rsm.config import ReplicaConfig  # noqa: E402
from rsm.core.layout import AppLayout  # noqa: E402
from rsm.core.log_format import encode_batch, encode_command, encode_leader_start, encode_log  # noqa: E402
from rsm.core.log_state import Log, Segment, SegmentState  # noqa: E402
from rsm.core.state_machine import StateMachine, command, query  # noqa: E402
from rsm.runtime.log import LogStore  # noqa: E402
from rsm.runtime.replica import Replica  # noqa: E402

APP = "recovery-bench"
HOST = "127.0.0.1"
BOOKIES = 3
BATCH_COMMANDS = 1_000
SEGMENT_ENTRIES = 100
JOURNAL_FILE_BYTES = 4 * 1024 * 1024
ENTRY_LOG_BYTES = 4 * 1024 * 1024
BOOKIE_CONFIG: dict[str, object] = {
    "journal_file_size_bytes_max": JOURNAL_FILE_BYTES,
    "journal_files_kept": 0,
    "entry_log_size_bytes_max": ENTRY_LOG_BYTES,
    "checkpoint_interval_ms": 500,
    "gc_interval_ms": 1_000,
}
POLL_S = 0.05


class Registers(StateMachine):
    """Keys overwritten again and again: a long log over a small state."""

    def __init__(self) -> None:
        self.values: dict[int, bytes] = {}

    @command
    def put(self, key: int, value: bytes) -> None:
        self.values[key] = value

    @query
    def get(self, key: int) -> bytes | None:
        return self.values.get(key)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def value_of(number: int, size_bytes: int) -> bytes:
    return number.to_bytes(8, "big") * (size_bytes // 8)


def disk_bytes(cluster: LocalCluster) -> int:
    """Bytes of the bookies' journals, entry logs and indexes."""
    total = 0
    for bookie in cluster.bookies:
        for directory in (bookie.directory / "journal", bookie.directory / "ledgers"):
            total += sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    return total


def prepare_bookies(directory: Path) -> None:
    """Bookie configs with small files and frequent collection (LocalCluster keeps them)."""
    for number in range(1, BOOKIES + 1):
        bookie_dir = directory / f"bookie-{number}"
        bookie_dir.mkdir(parents=True)
        settings = {
            "listen_address": f"{HOST}:{free_port(HOST)}",
            "journal_dir": "journal",
            "ledger_dirs": ["ledgers"],
            **BOOKIE_CONFIG,
        }
        (bookie_dir / BOOKIE_CONFIG_FILE).write_text(render_toml(settings))


async def write_history(cluster: LocalCluster, arguments: argparse.Namespace) -> int:
    """The log of `--commands` puts, written straight into ledgers (see the docstring)."""
    config = ReplicaConfig()
    layout = AppLayout.of(APP)
    segments: list[Segment] = []
    index = 1
    timestamp_ms = time.time_ns() // 1_000_000
    async with (
        ZkMetadataStore.connect(cluster.zk_servers) as store,
        LedgerClient.open(store, root=cluster.zk_root) as ledgers,
    ):
        log_store = LogStore(store, layout)
        await log_store.ensure_layout()
        remaining = arguments.commands
        first_item = True
        while remaining > 0:
            handle = await ledgers.create_ledger(
                config.ensemble_size,
                config.write_quorum,
                config.ack_quorum,
                password=config.ledger_password,
                custom_metadata={"rsm.app": APP.encode(), "rsm.epoch": b"1"},
            )
            first_index = index
            for _entry in range(SEGMENT_ENTRIES):
                if remaining <= 0:
                    break
                items: list[bytes] = []
                if first_item:
                    items.append(encode_leader_start("history"))
                    first_item = False
                while len(items) < BATCH_COMMANDS and remaining > 0:
                    number = arguments.commands - remaining
                    key = number % arguments.keys
                    items.append(
                        encode_command("put", [key, value_of(number, arguments.value_bytes)])
                    )
                    remaining -= 1
                payload = encode_batch(
                    epoch=1,
                    first_index=index,
                    timestamp_ms=timestamp_ms,
                    seed=index,
                    items=items,
                )
                index += len(items)
                await handle.wait_for_capacity()
                handle.append_nowait(payload)
            await handle.close()
            segments.append(
                Segment(handle.ledger_id, 1, first_index, SegmentState.CLOSED, index - 1)
            )
        _log, version = await log_store.read()
        await store.set(layout.log, encode_log(Log(1, tuple(segments))), version)
    log(f"history: {index - 1} indexes in {len(segments)} segments")
    return index - 1


@asynccontextmanager
async def replica(
    cluster: LocalCluster, name: str, config: ReplicaConfig
) -> AsyncIterator[Replica]:
    async with (
        ZkMetadataStore.connect(cluster.zk_servers) as store,
        LedgerClient.open(store, root=cluster.zk_root) as ledgers,
        Replica(
            Registers, app=APP, store=store, ledgers=ledgers, replica_id=name, config=config
        ) as running,
    ):
        yield running


async def wait_for(probe: Any, timeout_s: float) -> None:
    with anyio.fail_after(timeout_s):
        while not probe():
            await anyio.sleep(POLL_S)


async def settled_disk(cluster: LocalCluster, timeout_s: float) -> int:
    """The disk usage once it has not fallen for three collection rounds."""
    with anyio.move_on_after(timeout_s):
        lowest = disk_bytes(cluster)
        still_s = 0.0
        while still_s < 3.0:
            await anyio.sleep(1.0)
            now = disk_bytes(cluster)
            if now < lowest:
                lowest, still_s = now, 0.0
            else:
                still_s += 1.0
    return disk_bytes(cluster)


async def bench(arguments: argparse.Namespace, directory: Path) -> dict[str, Any]:
    prepare_bookies(directory)
    config = ReplicaConfig(
        snapshot_every_commands=0,
        snapshot_every_log_bytes=0,
        snapshot_every_ms=0,
        snapshot_check_interval_ms=200,
        retention_ms=0,
        state_hash_every_commands=0,
        segment_entries_max=SEGMENT_ENTRIES,
    )
    wait_s = arguments.seconds
    async with LocalCluster(directory, bookies=BOOKIES) as cluster:
        end_index = await write_history(cluster, arguments)
        disk_before = await settled_disk(cluster, 10)
        log(f"disk before: {disk_before} bytes")

        started_s = time.perf_counter()
        async with replica(cluster, "a", config) as leader:
            await wait_for(lambda: leader.applied_index >= end_index, wait_s)
            replay_s = time.perf_counter() - started_s
            log(f"(a) replay only: ready in {replay_s:.2f} s")
            await wait_for(lambda: leader.is_leader, wait_s)
            manifest = await leader.take_snapshot()
            taken = leader.snapshots.last_taken
            assert taken is not None
            for number in range(arguments.tail):
                await leader.call(
                    "put", number % arguments.keys, value_of(number, arguments.value_bytes)
                )

            started_s = time.perf_counter()
            async with replica(cluster, "b", config) as restarted:
                await wait_for(lambda: restarted.applied_index >= leader.applied_index, wait_s)
                snapshot_s = time.perf_counter() - started_s
                loaded = restarted.snapshots.last_loaded
                assert loaded is not None
                log(f"(b) snapshot + tail: ready in {snapshot_s:.2f} s")
                assert restarted.machine.state_hash() == leader.machine.state_hash()

            await wait_for(lambda: leader.snapshots.truncations > 0, wait_s)
            await wait_for(lambda: not leader.snapshots.value.garbage, wait_s)
            disk_after = await settled_disk(cluster, wait_s)
            log(f"disk after truncation and compaction: {disk_after} bytes")
            term = leader.term
            assert term is not None
            kept_log_bytes = 0
            async with (
                ZkMetadataStore.connect(cluster.zk_servers) as store,
                LedgerClient.open(store, root=cluster.zk_root) as ledgers,
            ):
                log_value, _version = await LogStore(store, AppLayout.of(APP)).read()
                for segment in log_value.segments:
                    metadata = await ledgers.ledger_metadata(segment.ledger_id)
                    kept_log_bytes += metadata.length
    size_mb = manifest["size_bytes"] / 1e6
    live = (manifest["size_bytes"] + kept_log_bytes) * 3
    fixed = BOOKIES * (JOURNAL_FILE_BYTES + ENTRY_LOG_BYTES)
    results = [
        {"name": "replay_ready_s", "value": round(replay_s, 3)},
        {"name": "snapshot_ready_s", "value": round(snapshot_s, 3)},
        {"name": "speedup", "value": round(replay_s / snapshot_s, 1)},
        {"name": "snapshot_bytes", "value": manifest["size_bytes"]},
        {"name": "snapshot_pause_ms", "value": taken["pause_ms"]},
        {
            "name": "snapshot_write_mb_per_s",
            "value": round(size_mb / max(taken["duration_ms"], 1) * 1000, 1),
        },
        {
            "name": "snapshot_load_mb_per_s",
            "value": round(size_mb / max(loaded["duration_ms"], 1) * 1000, 1),
        },
        {"name": "disk_before_bytes", "value": disk_before},
        {"name": "disk_after_bytes", "value": disk_after},
        {"name": "live_bytes", "value": live},
        {"name": "fixed_bytes", "value": fixed},
        {"name": "disk_after_over_live", "value": round(disk_after / max(live, 1), 2)},
    ]
    return {
        "benchmark": "recovery",
        "config": {
            "commands": arguments.commands,
            "keys": arguments.keys,
            "value_bytes": arguments.value_bytes,
            "tail": arguments.tail,
            "batch_commands": BATCH_COMMANDS,
            "segment_entries": SEGMENT_ENTRIES,
            "bookies": BOOKIES,
            "capture": leader.snapshots.status()["strategy"],
        },
        "results": results,
        "baselines": [{"name": "replay_ready_s", "value": round(replay_s, 3)}],
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--tail", type=int, default=1_000, help="commands after the snapshot")
    parser.add_argument("--seconds", type=float, default=300.0, help="bound of each wait")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    arguments = parse(argv)
    with tempfile.TemporaryDirectory(prefix="recovery-bench-") as directory:
        report = anyio.run(bench, arguments, Path(directory))
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
