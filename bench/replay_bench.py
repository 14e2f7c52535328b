"""Benchmark: replaying a key-value store's log with the `rsm` tools, from bookies and a file.

    python bench/replay_bench.py [--commands 1000000] [--batch 500] [--keys 10000]
                                 [--snapshot-every 100000] [--to-samples 5] [--zk HOSTS]

Starts a ZooKeeper (unless `--zk`) and 3 `bookie serve` processes
(`bookie.local.cluster.LocalCluster`), then writes the log of a key-value
store (`kvstore.state_machine:KVStore`) of `--commands` SETs of 100-byte
values over `--keys` keys, `--batch` commands per entry, 200 entries per
segment, as a leader writes it (`rsm.testing.logs.LogWriter`: the real
encoder, the real class, a state hash every 100,000 commands), with a
snapshot registered every `--snapshot-every` commands.  The log is then
closed.  Measured, in this process, through the library the `rsm` command
runs (`rsm.tools`):

* `replay-bookies`: every command replayed from the closed log on the
  bookies (read without fencing, read-ahead in parallel with applying),
  through the real class: commands/s.
* `export` and `replay-file`: the log exported to a file (`rsm log export`),
  then replayed from it: commands/s.
* `replay-to`: `replay --to I` for `--to-samples` indexes spread over the
  log, each just below a snapshot's index (the worst case: a whole interval
  to replay after loading the snapshot before it): the slowest and the
  median time in seconds, and the slowest as the `rsm replay --to` command
  takes it, process start included (`replay-to-cli`).

Baseline, same run, same machine: `python-loop`, a minimal Python loop over
the same entries in memory that decodes each with cbor2 and applies every
SET to a dict: what replay costs without the framework, as a ratio.
Targets on a 2-core machine: at least 200,000 commands/s from the bookies,
and `--to` any index in under 3 s.

The last line of output is ONE JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import cbor2

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "examples"))

from kvstore.state_machine import KVStore  # noqa: E402

from bookie.client.ledger_client import LedgerClient  # noqa: E402
from bookie.local.cluster import LocalCluster  # noqa: E402
from bookie.meta.zk import ZkMetadataStore  # noqa: E402
from bookie.runtime_tuning import tune_for_throughput  # noqa: E402
from rsm.config import ReplicaConfig  # noqa: E402
from rsm.testing.logs import Call, LogWriter  # noqa: E402
from rsm.tools.export_format import ExportReader  # noqa: E402
from rsm.tools.replay import replay_to  # noqa: E402
from rsm.tools.source import ClusterSource, FileSource  # noqa: E402

APP = "replay-bench"
MACHINE = "kvstore.state_machine:KVStore"
VALUE_BYTES = 100
SEGMENT_ENTRIES = 200
STATE_HASH_EVERY = 100_000
T0 = 1_700_000_000_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def config() -> ReplicaConfig:
    return ReplicaConfig(
        state_hash_every_commands=STATE_HASH_EVERY,
        snapshot_capture="inline",
        snapshots_kept=32,
    )


async def write(arguments: argparse.Namespace, cluster: LocalCluster) -> list[int]:
    """Write the log (see the module docstring); the snapshots' indexes."""
    snapshots: list[int] = []
    value = b"v" * VALUE_BYTES
    async with (
        ZkMetadataStore.connect(cluster.zk_servers) as store,
        LedgerClient.open(store, root=cluster.zk_root) as ledgers,
    ):
        writer = LogWriter(store, ledgers, APP, KVStore, config())
        epoch = 0
        entries = 0
        written = 0
        while written < arguments.commands:
            if entries % SEGMENT_ENTRIES == 0:
                epoch += 1
                await writer.segment(epoch)
            count = min(arguments.batch, arguments.commands - written)
            calls = [
                Call("set", (b"key:%d" % ((written + n) % arguments.keys), value))
                for n in range(count)
            ]
            await writer.batch(calls, time_ms=T0 + entries, seed=entries)
            entries += 1
            before = written
            written += count
            if written // arguments.snapshot_every > before // arguments.snapshot_every:
                snapshots.append((await writer.snapshot()).index)
            if written % 100_000 < count:
                log(f"  written {written} commands")
        await writer.finish()
    return snapshots


async def replay_bookies(cluster: LocalCluster, commands: int) -> dict[str, Any]:
    async with ClusterSource.connect(
        cluster.zk_servers, APP, ledger_root=cluster.zk_root
    ) as source:
        began = time.perf_counter()
        replay = await replay_to(source, KVStore, config(), to_index=None, from_snapshot=False)
        seconds = time.perf_counter() - began
    assert replay.index == commands, replay.index
    assert all(check.matches for check in replay.checks), "a logged state hash differs"
    return {
        "name": "replay-bookies",
        "commands": commands,
        "seconds": round(seconds, 3),
        "commands_per_s": round(commands / seconds),
    }


def cli(*words: str) -> tuple[float, str]:
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join((str(REPOSITORY), str(REPOSITORY / "examples"))),
    }
    began = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "rsm.tools.cli", *words],
        capture_output=True,
        env=environment,
        check=True,
    )
    return time.perf_counter() - began, result.stdout.decode()


def source(cluster: LocalCluster) -> list[str]:
    """The `rsm` options naming the benchmark's log."""
    return ["--app", APP, "--zk", cluster.zk_servers, "--ledger-root", cluster.zk_root]


def export(cluster: LocalCluster, path: Path, commands: int) -> dict[str, Any]:
    seconds, _out = cli("log", "export", *source(cluster), "--to", str(path))
    return {
        "name": "export",
        "commands": commands,
        "seconds": round(seconds, 3),
        "bytes": path.stat().st_size,
        "commands_per_s": round(commands / seconds),
    }


async def replay_file(path: Path, commands: int) -> dict[str, Any]:
    source = FileSource(path)
    began = time.perf_counter()
    replay = await replay_to(source, KVStore, config(), to_index=None, from_snapshot=False)
    seconds = time.perf_counter() - began
    assert replay.index == commands
    return {
        "name": "replay-file",
        "commands": commands,
        "seconds": round(seconds, 3),
        "commands_per_s": round(commands / seconds),
    }


async def replay_to_samples(
    cluster: LocalCluster, snapshots: list[int], samples: int, commands: int
) -> tuple[dict[str, Any], int]:
    """`--to` just below evenly spread snapshots (or the end); the slowest index too."""
    boundaries = [*snapshots[1:], commands + 1]
    step = max(1, len(boundaries) // samples)
    targets = [boundary - 1 for boundary in boundaries[::step]][:samples]
    times: list[tuple[float, int]] = []
    async with ClusterSource.connect(
        cluster.zk_servers, APP, ledger_root=cluster.zk_root
    ) as source:
        for target in targets:
            began = time.perf_counter()
            replay = await replay_to(source, KVStore, config(), to_index=target)
            times.append((time.perf_counter() - began, target))
            assert replay.index == target
    slowest, index = max(times)
    return {
        "name": "replay-to",
        "indexes": targets,
        "max_s": round(slowest, 3),
        "median_s": round(statistics.median(seconds for seconds, _ in times), 3),
    }, index


def replay_to_cli(cluster: LocalCluster, index: int) -> dict[str, Any]:
    seconds, out = cli("replay", *source(cluster), "--class", MACHINE, "--to", str(index), "--json")
    report = json.loads(out)
    return {
        "name": "replay-to-cli",
        "index": index,
        "seconds": round(seconds, 3),
        "replayed_commands": report["commands"],
        "from_snapshot": report["from_snapshot"],
    }


def python_loop(path: Path, commands: int) -> dict[str, Any]:
    """Decode every entry with cbor2 and apply its SETs to a dict (the data in memory)."""
    with path.open("rb") as stream:
        payloads = [entry.payload for entry in ExportReader(stream)]
    began = time.perf_counter()
    store: dict[bytes, bytes] = {}
    applied = 0
    for payload in payloads:
        batch = cbor2.loads(payload)
        for item in batch[5]:
            store[item[2][0]] = item[2][1]
            applied += 1
    seconds = time.perf_counter() - began
    assert applied == commands
    return {
        "name": "python-loop",
        "commands": commands,
        "seconds": round(seconds, 3),
        "commands_per_s": round(commands / seconds),
    }


async def run(arguments: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    async with LocalCluster(
        data_dir / "cluster", bookies=3, zk_servers=arguments.zk, zk_root=f"/bench-{os.getpid()}"
    ) as cluster:
        log(f"writing {arguments.commands} commands ...")
        snapshots = await write(arguments, cluster)
        results = []
        log("replaying from the bookies ...")
        results.append(await replay_bookies(cluster, arguments.commands))
        log(f"  {results[-1]}")
        path = data_dir / "log.rsmlog"
        results.append(export(cluster, path, arguments.commands))
        log(f"  {results[-1]}")
        results.append(await replay_file(path, arguments.commands))
        log(f"  {results[-1]}")
        sampled, slowest = await replay_to_samples(
            cluster, snapshots, arguments.to_samples, arguments.commands
        )
        results.append(sampled)
        log(f"  {results[-1]}")
        results.append(replay_to_cli(cluster, slowest))
        log(f"  {results[-1]}")
        baselines = [python_loop(path, arguments.commands)]
        log(f"  {baselines[-1]}")
    return {"results": results, "baselines": baselines, "snapshots": len(snapshots)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=500, help="commands per log entry")
    parser.add_argument("--keys", type=int, default=10_000, help="distinct keys SET")
    parser.add_argument("--snapshot-every", type=int, default=100_000, help="commands")
    parser.add_argument("--to-samples", type=int, default=5, help="indexes `--to` is timed at")
    parser.add_argument("--zk", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--data-dir", type=Path, help="where the data goes (default: a temp dir)")
    arguments = parser.parse_args(argv)
    if arguments.commands < arguments.snapshot_every or arguments.batch < 1:
        parser.error("need --commands >= --snapshot-every and --batch >= 1")
    with contextlib.ExitStack() as stack:
        if arguments.data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="replay-")))
        else:
            data_dir = arguments.data_dir
            data_dir.mkdir(parents=True, exist_ok=True)
        tune_for_throughput()
        measured = anyio.run(run, arguments, data_dir)
    configuration = {
        "commands": arguments.commands,
        "command": "SET",
        "value_bytes": VALUE_BYTES,
        "keys": arguments.keys,
        "batch_commands": arguments.batch,
        "segment_entries": SEGMENT_ENTRIES,
        "snapshot_every_commands": arguments.snapshot_every,
        "snapshots": measured["snapshots"],
        "state_hash_every_commands": STATE_HASH_EVERY,
        "bookies": 3,
        "ensemble": 3,
        "write_quorum": 3,
        "ack_quorum": 2,
        "cpus": os.cpu_count(),
    }
    targets = {"replay_bookies_commands_per_s_min": 200_000, "replay_to_s_max": 3.0}
    print(
        json.dumps(
            {
                "benchmark": "replay",
                "config": configuration,
                "results": measured["results"],
                "baselines": measured["baselines"],
                "targets": targets,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
