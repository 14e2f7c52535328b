"""Benchmark: reading a key-value store's log into Spark, against one Python process reading it.

    python bench/spark_bench.py [--commands 1000000] [--commands-per-entry 100]
                                [--master local[2]] [--data-dir DIR] [--snapshot-only]

Starts a ZooKeeper and three bookie processes on loopback (`LocalCluster`)
and writes a log of `--commands` key-value `set` commands the way the KV
store's leader logs them: batches of `--commands-per-entry` commands from 16
client sessions, encoded by the framework (`encode_command`, `encode_batch`),
in CLOSED segments of 2,000 entries.  Then, on `--master` (default
`local[2]`, two cores):

* `spark-read-arrow`: every row of `spark.read.format("rsm-log")` through
  Spark (a `noop` write materialises every column), executors yielding Arrow
  record batches;
* `spark-read-tuples`: the same with `arrow=false` (the executors yield
  Python tuples and PySpark converts them);
* `spark-export-parquet`: `rsm spark export` of the whole log to Parquet;
* `spark-bulk-snapshot`: `rsm spark snapshot` with the `KVStore` reducer:
  the state at the log's end computed in Spark, written to the bookies and
  registered.

Baselines, measured in the same run on the same log:

* `python-decode`: one process reads every entry from the bookies and decodes
  it with the framework's `decode_batch` (the least any reader does);
* `python-replay`: the same, then applies every batch to a `KVStore` with
  `apply_batch`, as a replica replaying the log does;
* `python-replay-to-snapshot`: the replay engine of the `rsm` tools
  (`replay_to`) to the log's end, then the state serialized as a snapshot
  (`snapshot()`), not written: what the bulk snapshot replaces.

`bulk_snapshot` compares the two snapshot times (and their ratio,
`bulk_over_replay`), gives the bulk snapshot's time per step
(`bulk_stages_s`, rsm/spark/bulk_snapshot.py) with the driver's CPU time per
step (`bulk_driver_cpu_s`) and the tasks' Python CPU time (`bulk_tasks_cpu_s`),
and says whether both states hash the same; `cpu_s` beside each is the CPU time it took (the bulk
snapshot's: this process, Spark's JVM and its Python workers; replay's: this
process), the bookies' excluded for both.

`--snapshot-only` runs only `spark-bulk-snapshot` and
`python-replay-to-snapshot` (and `target` is null).

Each result is commands per second of wall-clock time (Spark's include
planning and task start; a warm-up read runs first so the JVM and Python
workers are up).  The last line of output is ONE JSON object; progress goes
to stderr.  The issue's target, reported in `target`: the Arrow read at least
150,000 commands/s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.from_thread import start_blocking_portal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

from kvstore.state_machine import KVStore
from proc_cpu import process_cpu_s, tree_cpu_s

from bookie import limits as bookie_limits
from bookie.client.ledger_client import LedgerClient
from bookie.local.cluster import LocalCluster
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.commands import apply_batch
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_batch, encode_batch, encode_command, encode_log
from rsm.core.log_state import Log, Segment, SegmentState
from rsm.core.sessions import SessionTable
from rsm.tools.replay import replay_to
from rsm.tools.source import ClusterSource

APP = f"spark-bench-{os.getpid()}"
SEGMENT_ENTRIES = 2_000
BOOKIES = 3
BOOKIES_SEEN_TIMEOUT_S = 30
SESSIONS = 16
KEYS = 100_000
T0_MS = 1_700_000_000_000
TARGET_NAME = "spark-read-arrow"
TARGET_COMMANDS_PER_S = 150_000
PASSWORD = ReplicaConfig().ledger_password
BASELINES = (("python-decode", False), ("python-replay", True))


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the log ------------------------------------------------------------------------------------


@asynccontextmanager
async def cluster_with_log(
    directory: Path, commands: int, per_entry: int, zk: str | None
) -> AsyncIterator[tuple[LocalCluster, list[int], float]]:
    """A running cluster holding the benchmark's log; its ledger ids and how long writing took."""
    root = None if zk is None else f"/spark-bench-{os.getpid()}"
    async with LocalCluster(
        directory / "cluster", bookies=BOOKIES, zk_servers=zk, zk_root=root
    ) as cluster:
        started = time.perf_counter()
        async with (
            ZkMetadataStore.connect(cluster.zk_servers) as store,
            LedgerClient.open(store, root=cluster.zk_root) as ledgers,
        ):
            # The client learns the bookies from their registrations, which may come in
            # after the cluster is up: a ledger needs all three.
            with anyio.fail_after(BOOKIES_SEEN_TIMEOUT_S):
                while len(ledgers.writable_bookies) < BOOKIES:
                    await anyio.sleep(0.05)
            segments: list[Segment] = []
            index = 1
            seqs = [0] * SESSIONS
            entry = 0
            while index <= commands:
                handle = await ledgers.create_ledger(3, 3, 2, password=PASSWORD)
                first_index = index
                for _ in range(SEGMENT_ENTRIES):
                    if index > commands:
                        break
                    items = []
                    for _ in range(min(per_entry, commands - index + 1)):
                        session = index % SESSIONS
                        seqs[session] += 1
                        items.append(
                            encode_command(
                                "set",
                                [f"key:{index % KEYS:06d}".encode(), b"v" * 16],
                                client_id=b"client-%02d" % session,
                                seq=seqs[session],
                                ack_seq=seqs[session] - 1,
                            )
                        )
                        index += 1
                    handle.append_nowait(
                        encode_batch(
                            epoch=1,
                            first_index=index - len(items),
                            timestamp_ms=T0_MS + entry,
                            seed=entry,
                            items=items,
                        )
                    )
                    entry += 1
                    await handle.wait_for_capacity()
                await handle.close()
                segments.append(
                    Segment(handle.ledger_id, 1, first_index, SegmentState.CLOSED, index - 1)
                )
                log(f"  wrote up to index {index - 1}")
            layout = AppLayout.of(APP)
            await store.create(layout.log, encode_log(Log(1, tuple(segments))), make_parents=True)
        yield cluster, [segment.ledger_id for segment in segments], time.perf_counter() - started


async def python_read(
    zk: str, root: str, ledger_ids: list[int], *, replay: bool
) -> tuple[int, float]:
    """(commands, seconds) of one process reading (and with `replay`, applying) the log."""
    started = time.perf_counter()
    count = 0
    machine = KVStore()
    sessions = SessionTable()
    chunk = bookie_limits.read_batch_entries_max
    async with (
        ZkMetadataStore.connect(zk) as store,
        LedgerClient.open(store, root=root) as ledgers,
    ):
        for ledger_id in ledger_ids:
            handle = await ledgers.open_ledger(ledger_id, PASSWORD, recovery=False)
            last = handle.last_add_confirmed
            for first in range(0, last + 1, chunk):
                for payload in await handle.read(first, min(last, first + chunk - 1)):
                    batch = decode_batch(payload)
                    count += len(batch.items)
                    if replay:
                        apply_batch(machine, batch, sessions)
    return count, time.perf_counter() - started


async def replay_to_snapshot(zk: str, root: str) -> tuple[int, float, float, str]:
    """(commands, seconds, CPU seconds of this process, state hash in hex) of replaying the
    log and serializing the state."""
    cpu_before = time.process_time()
    started = time.perf_counter()
    async with ClusterSource.connect(zk, APP, ledger_root=root) as source:
        replay = await replay_to(source, KVStore, ReplicaConfig(), to_index=None)
    for _chunk in replay.machine.snapshot():
        pass
    seconds = time.perf_counter() - started
    return replay.index, seconds, time.process_time() - cpu_before, replay.state_hash().hex()


# --- Spark --------------------------------------------------------------------------------------


def spark_runs(
    zk: str, root: str, master: str, directory: Path, *, snapshot_only: bool
) -> list[dict[str, Any]]:
    import rsm.spark
    from rsm.spark import jobs
    from rsm.spark.bulk_snapshot import bulk_snapshot

    spark = rsm.spark.session(master, app_name="spark-bench")
    spark.sparkContext.setLogLevel("ERROR")
    rsm.spark.register(spark)
    results = []

    def rate(name: str, seconds: float, commands: int) -> None:
        results.append(
            {
                "name": name,
                "commands": commands,
                "seconds": round(seconds, 3),
                "commands_per_s": round(commands / seconds),
            }
        )
        log(f"  {results[-1]}")

    def read(**options: str) -> Any:
        return jobs.read_log(spark, zk, APP, ledger_root=root, **options)

    log("spark: warm-up ...")
    read(endingIndex="1000").write.format("noop").mode("overwrite").save()
    if not snapshot_only:
        count = read().count()
        for name, arrow in (("spark-read-arrow", "true"), ("spark-read-tuples", "false")):
            log(f"spark: {name} ...")
            started = time.perf_counter()
            read(arrow=arrow).write.format("noop").mode("overwrite").save()
            rate(name, time.perf_counter() - started, count)
        log("spark: export to Parquet ...")
        started = time.perf_counter()
        report = jobs.export(spark, zk, APP, str(directory / "export"), ledger_root=root)
        rate("spark-export-parquet", time.perf_counter() - started, report.rows)
    log("spark: bulk snapshot ...")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())

    def spark_cpu_s() -> float:
        """This process's CPU time, and the JVM's with its Python workers' (not the bookies')."""
        return process_cpu_s(os.getpid()) + tree_cpu_s(jvm_pid)

    cpu_before = spark_cpu_s()
    started = time.perf_counter()
    snapshot = bulk_snapshot(spark, zk, APP, KVStore, ledger_root=root)
    rate("spark-bulk-snapshot", time.perf_counter() - started, snapshot.index)
    results[-1]["state_hash"] = snapshot.state_hash
    results[-1]["cpu_s"] = round(spark_cpu_s() - cpu_before, 1)
    results[-1]["stages_s"] = snapshot.stages_s
    results[-1]["driver_cpu_s"] = snapshot.driver_cpu_s
    results[-1]["tasks_cpu_s"] = snapshot.tasks_cpu_s
    results[-1]["tasks"] = snapshot.tasks
    config = {
        "master": master,
        "default_parallelism": spark.sparkContext.defaultParallelism,
        "pyspark": spark.version,
    }
    spark.stop()
    results.append({"name": "spark-config", **config})
    return results


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=1_000_000)
    parser.add_argument("--commands-per-entry", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--data-dir", type=Path, help="where to put files (default: a temp dir)")
    parser.add_argument("--zk", help="use this ZooKeeper instead of starting one")
    parser.add_argument(
        "--snapshot-only",
        action="store_true",
        help="measure only the bulk snapshot and replay-to-snapshot (no target then)",
    )
    arguments = parser.parse_args(argv)
    if arguments.commands < 1 or arguments.commands_per_entry < 1:
        parser.error("--commands and --commands-per-entry must be at least 1")
    return arguments


def main(argv: list[str]) -> None:
    arguments = parse(argv)
    parent = arguments.data_dir
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    baselines: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="spark-bench-", dir=parent) as name,
        start_blocking_portal() as portal,
    ):
        directory = Path(name)
        log(f"writing a log of {arguments.commands} commands ...")
        manager = cluster_with_log(
            directory, arguments.commands, arguments.commands_per_entry, arguments.zk
        )
        with portal.wrap_async_context_manager(manager) as (cluster, ledger_ids, write_s):
            zk, root = cluster.zk_servers, cluster.zk_root
            plain_baselines = () if arguments.snapshot_only else BASELINES
            for baseline, replay in plain_baselines:
                log(f"baseline: {baseline} ...")
                commands, seconds = portal.call(
                    lambda replay=replay: python_read(zk, root, ledger_ids, replay=replay)
                )
                baselines.append(
                    {
                        "name": baseline,
                        "commands": commands,
                        "seconds": round(seconds, 3),
                        "commands_per_s": round(commands / seconds),
                    }
                )
                log(f"  {baselines[-1]}")
            log("baseline: python-replay-to-snapshot ...")
            commands, seconds, cpu_s, state_hash = portal.call(replay_to_snapshot, zk, root)
            baselines.append(
                {
                    "name": "python-replay-to-snapshot",
                    "commands": commands,
                    "seconds": round(seconds, 3),
                    "commands_per_s": round(commands / seconds),
                    "cpu_s": round(cpu_s, 1),
                    "state_hash": state_hash,
                }
            )
            log(f"  {baselines[-1]}")
            results = spark_runs(
                zk, root, arguments.master, directory, snapshot_only=arguments.snapshot_only
            )
    spark_config = results.pop()
    spark_config.pop("name")
    config = {
        "commands": arguments.commands,
        "commands_per_entry": arguments.commands_per_entry,
        "segment_entries": SEGMENT_ENTRIES,
        "sessions": SESSIONS,
        "bookies": BOOKIES,
        "cpus": os.cpu_count(),
        "write_s": round(write_s, 1),
        **spark_config,
    }
    measured = next((item for item in results if item["name"] == TARGET_NAME), None)
    target = None
    if measured is not None:
        target = {
            "name": TARGET_NAME,
            "commands_per_s_min": TARGET_COMMANDS_PER_S,
            "commands_per_s": measured["commands_per_s"],
            "met": measured["commands_per_s"] >= TARGET_COMMANDS_PER_S,
        }
    bulk = next(item for item in results if item["name"] == "spark-bulk-snapshot")
    replayed = next(item for item in baselines if item["name"] == "python-replay-to-snapshot")
    bulk_snapshot = {
        "bulk_snapshot_s": bulk["seconds"],
        "replay_to_snapshot_s": replayed["seconds"],
        "bulk_faster": bulk["seconds"] < replayed["seconds"],
        "bulk_over_replay": round(bulk["seconds"] / replayed["seconds"], 2),
        "bulk_stages_s": bulk["stages_s"],
        "bulk_driver_cpu_s": bulk["driver_cpu_s"],
        "bulk_tasks_cpu_s": bulk["tasks_cpu_s"],
        "bulk_cpu_s": bulk["cpu_s"],
        "replay_cpu_s": replayed["cpu_s"],
        "same_state_hash": bulk["state_hash"] == replayed["state_hash"],
    }
    print(
        json.dumps(
            {
                "benchmark": "spark",
                "config": config,
                "results": results,
                "baselines": baselines,
                "target": target,
                "bulk_snapshot": bulk_snapshot,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
