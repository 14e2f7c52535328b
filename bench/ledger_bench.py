"""Benchmark: replicated ledger writes and reads through the ledger client, on three
bookie PROCESSES (in the manner of BookKeeper's BenchThroughputLatency).

    python bench/ledger_bench.py [--seconds 20] [--window 5000] [--sizes 100 1024] ...

Starts a ZooKeeper (unless `--zk`) and three real `bookie serve` processes on
loopback, fsync on (an acknowledged add is on disk on Qa bookies), then runs
one client, this process, with the pipelined append API (`append_nowait`, at
most `--window` adds pending, confirmations taken in runs).  The window
defaults to the ledger client's own bound on adds in flight
(`limits.outstanding_adds_max_default`, like BookKeeper's client throttle):
a throughput benchmark measures the client saturated, as
BenchThroughputLatency does with its 10,000 outstanding; a smaller window
leaves the CPU idle waiting for acknowledgements, and the run measures round
trips, not throughput (docs/operations.md, "Benchmark").  For each quorum
configuration (E=3 Qw=3 Qa=2 and E=3 Qw=2 Qa=2) and entry size (100 B and
1 KiB) it writes one ledger for `--seconds` (default 20: two of the bookies'
10-second checkpoint intervals, see below) after a short warm-up and reports
confirmed entries per second and the p50/p99/p99.9 latency from
`append_nowait` to the moment the client sees the confirmation (entries sent
in one burst share a send time, entries confirmed in one run share a
confirmation time: the clock is read per burst and per run, not per entry).
Then it reads the closed E=3 Qw=3 Qa=2 1-KiB ledger back sequentially
(entries/s and MB/s).

Baselines, measured in the same run on the same disk, so results read as
ratios:

* `fdatasync-100B`: one 100-byte write + fdatasync at a time (a single
  bookie without group commit could at best reach this);
* `single-bookie-1KiB`: raw pipelined ADDs (no ledger client, no replication)
  to one of the same bookie processes, as `bench/bookie_bench.py` drives it:
  the ceiling of one bookie on this machine.

CPU per operation of the client and of the three bookies together is
reported too: the machine is shared by all four processes, so these tell
where the time goes when the wall-clock rate disappoints.

Why 20 seconds: a bookie checkpoints every 10 s (`checkpoint_interval_ms`),
and a checkpoint of a hundred thousand entries costs the bookies a visible
share of their CPU.  A shorter run's result depends on where the checkpoints
fall (whether it pays for an earlier run's entries or for none); a run over
two intervals pays for about as many checkpoints as it causes.

The last line of output is ONE JSON object; progress goes to stderr.  The
defaults take about two and a half minutes.  The target is reported in
`target`: at least 15,000 confirmed 1-KiB entries/s at E=3 Qw=3
Qa=2 on a 2-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from bookie_bench import (  # noqa: E402
    HOST,
    START_TIMEOUT_S,
    UVLOOP,
    WARMUP_S,
    drive_bookie,
    fdatasync_rate,
    log,
    percentile,
)
from proc_cpu import process_cpu_s  # noqa: E402

from bookie import limits as bookie_limits  # noqa: E402
from bookie.client.config import ClientConfig  # noqa: E402
from bookie.client.ledger_client import LedgerClient  # noqa: E402
from bookie.client.write_handle import WriteHandle  # noqa: E402
from bookie.local.cluster import bookie_command  # noqa: E402
from bookie.local.zookeeper import LocalZooKeeper, free_port  # noqa: E402
from bookie.meta.zk import ZkMetadataStore  # noqa: E402
from bookie.runtime_tuning import tune_for_throughput  # noqa: E402
from bookie.server.config import render_toml  # noqa: E402

BOOKIES = 3
QUORUMS = ((3, 3, 2), (3, 2, 2))
TARGET_OPS_PER_S = 15_000
TARGET_NAME = "write-E3-Qw3-Qa2-1KiB"
PASSWORD = b"bench"
READ_CHUNK_ENTRIES = 5_000
RAW_LEDGER_BASE = 1 << 40
"""Ledger ids of the single-bookie baseline: far above any id the ledger client allocates."""


def size_label(size_bytes: int) -> str:
    return "1KiB" if size_bytes == 1024 else f"{size_bytes}B"


# --- bookie processes -------------------------------------------------------------------------


class Bookie:
    """One `bookie serve` process of the benchmark: its port, directory and config file."""

    def __init__(
        self, directory: Path, zk_servers: str, zk_root: str, options: dict[str, object]
    ) -> None:
        self.directory = directory
        self.port = free_port(HOST)
        self.pid = 0
        directory.mkdir(parents=True)
        values: dict[str, object] = {
            "listen_address": f"{HOST}:{self.port}",
            "journal_dir": directory / "journal",
            "ledger_dirs": [directory / "ledgers"],
            "zk_servers": zk_servers,
            "zk_root": zk_root,
        }
        values.update(options)
        self.config_file = directory / "bookie.toml"
        self.config_file.write_text(render_toml(values))


@contextlib.asynccontextmanager
async def running(bookies: list[Bookie]) -> AsyncIterator[None]:
    """The bookie processes, started together, from all registered (`bookie.ready`) to
    the end of the block; then terminated (each drains and checkpoints)."""
    async with contextlib.AsyncExitStack() as stack:
        processes = []
        for bookie in bookies:
            process = await stack.enter_async_context(
                await anyio.open_process(
                    bookie_command(bookie.config_file),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                )
            )
            bookie.pid = process.pid
            processes.append(process)
        ready = [anyio.Event() for _ in bookies]

        async def follow(index: int) -> None:
            stderr = processes[index].stderr
            assert stderr is not None
            with (bookies[index].directory / "bookie.log").open("ab") as sink:
                async for chunk in stderr:
                    sink.write(chunk)
                    if b'"bookie.ready"' in chunk:
                        ready[index].set()

        async with anyio.create_task_group() as tasks:
            for index in range(len(bookies)):
                tasks.start_soon(follow, index)
            try:
                with anyio.fail_after(START_TIMEOUT_S):
                    for event in ready:
                        await event.wait()
                yield
            finally:
                # Each bookie's exit ends its `follow` (end of its stderr).
                for process in processes:
                    process.terminate()


def bookies_cpu_s(bookies: list[Bookie]) -> float:
    return sum(process_cpu_s(bookie.pid) for bookie in bookies)


# --- writes -----------------------------------------------------------------------------------


async def write_for(
    writer: WriteHandle, payload: bytes, seconds: float, latencies_ns: list[int]
) -> int:
    """Keep the window full for `seconds`; record the latency of every entry confirmed
    meanwhile; return how many were confirmed."""
    sent_ns: list[int] = []
    """Send time of entry e at index e - first (entry ids are dense)."""
    first = writer.last_add_pushed + 1
    seen = first - 1
    deadline = time.perf_counter() + seconds
    clock = time.perf_counter_ns
    append = writer.append_nowait
    while time.perf_counter() < deadline:
        now = clock()
        for _ in range(writer.capacity):
            append(payload)
            sent_ns.append(now)
        await writer.wait_for_capacity()
        confirmed = writer.last_add_confirmed
        if confirmed > seen:
            now = clock()
            latencies_ns.extend(
                now - started for started in sent_ns[seen + 1 - first : confirmed + 1 - first]
            )
            seen = confirmed
    return seen - first + 1


async def bench_write(
    client: LedgerClient,
    bookies: list[Bookie],
    quorum: tuple[int, int, int],
    size_bytes: int,
    seconds: float,
) -> tuple[dict[str, Any], int]:
    """One configuration; returns its result and the id of the ledger written (closed)."""
    ensemble_size, write_quorum, ack_quorum = quorum
    payload = random.Random(size_bytes).randbytes(size_bytes)
    writer = await client.create_ledger(ensemble_size, write_quorum, ack_quorum, password=PASSWORD)
    await write_for(writer, payload, WARMUP_S, [])
    latencies_ns: list[int] = []
    started = time.perf_counter()
    client_cpu = time.process_time()
    bookie_cpu = bookies_cpu_s(bookies)
    count = await write_for(writer, payload, seconds, latencies_ns)
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    bookie_cpu = bookies_cpu_s(bookies) - bookie_cpu
    await writer.close()
    ordered = sorted(value / 1e6 for value in latencies_ns)
    name = f"write-E{ensemble_size}-Qw{write_quorum}-Qa{ack_quorum}-{size_label(size_bytes)}"
    result = {
        "name": name,
        "ensemble_size": ensemble_size,
        "write_quorum": write_quorum,
        "ack_quorum": ack_quorum,
        "size_bytes": size_bytes,
        "entries": count,
        "ops_per_s": round(count / elapsed),
        "mb_per_s": round(count * size_bytes / elapsed / 1e6, 2),
        "p50_ms": round(percentile(ordered, 0.50), 3),
        "p99_ms": round(percentile(ordered, 0.99), 3),
        "p999_ms": round(percentile(ordered, 0.999), 3),
        "client_cpu_us_per_op": round(client_cpu * 1e6 / max(count, 1), 1),
        "bookies_cpu_us_per_op": round(bookie_cpu * 1e6 / max(count, 1), 1),
    }
    return result, writer.ledger_id


# --- reads ------------------------------------------------------------------------------------


async def bench_read(
    client: LedgerClient, bookies: list[Bookie], ledger_id: int, seconds: float
) -> dict[str, Any]:
    """Read the closed ledger from its first entry, in order, for at most `seconds`."""
    reader = await client.open_ledger(ledger_id, PASSWORD)
    last = reader.last_add_confirmed
    count = 0
    size_bytes = 0
    started = time.perf_counter()
    client_cpu = time.process_time()
    bookie_cpu = bookies_cpu_s(bookies)
    deadline = started + seconds
    first = 0
    while first <= last and time.perf_counter() < deadline:
        chunk_last = min(last, first + READ_CHUNK_ENTRIES - 1)
        payloads = await reader.read(first, chunk_last)
        count += len(payloads)
        size_bytes += sum(map(len, payloads))
        first = chunk_last + 1
    elapsed = time.perf_counter() - started
    client_cpu = time.process_time() - client_cpu
    bookie_cpu = bookies_cpu_s(bookies) - bookie_cpu
    return {
        "name": "read-sequential-E3-Qw3-Qa2-1KiB",
        "entries": count,
        "entries_per_s": round(count / elapsed),
        "mb_per_s": round(size_bytes / elapsed / 1e6, 2),
        "client_cpu_us_per_op": round(client_cpu * 1e6 / max(count, 1), 1),
        "bookies_cpu_us_per_op": round(bookie_cpu * 1e6 / max(count, 1), 1),
    }


# --- the run ----------------------------------------------------------------------------------


async def bench_ledgers(
    arguments: argparse.Namespace, directory: Path
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    options: dict[str, object] = {
        "group_wait_ms": arguments.group_wait_ms,
        "event_loop": arguments.event_loop,
    }
    results: list[dict[str, Any]] = []
    baselines: list[dict[str, Any]] = []
    config = ClientConfig(outstanding_adds_max=arguments.window)
    async with contextlib.AsyncExitStack() as stack:
        zk_servers = arguments.zk
        if zk_servers is None:
            zookeeper = LocalZooKeeper(directory / "zookeeper")
            await anyio.to_thread.run_sync(zookeeper.start)
            stack.callback(zookeeper.stop)
            zk_servers = zookeeper.connect_string
        zk_root = f"/ledger-bench-{os.getpid()}"
        bookies = [
            Bookie(directory / f"bookie-{number}", zk_servers, zk_root, options)
            for number in range(1, BOOKIES + 1)
        ]
        await stack.enter_async_context(running(bookies))
        store = await stack.enter_async_context(ZkMetadataStore.connect(zk_servers))
        client = await stack.enter_async_context(
            LedgerClient.open(store, root=zk_root, config=config, rng=random.Random(1))
        )
        read_ledger: int | None = None
        for quorum in arguments.quorums:
            for size_bytes in arguments.sizes:
                log(f"ledger: E/Qw/Qa {quorum}, {size_bytes}-byte entries, {arguments.seconds} s")
                result, ledger_id = await bench_write(
                    client, bookies, quorum, size_bytes, arguments.seconds
                )
                results.append(result)
                log(f"  {result}")
                if result["name"] == TARGET_NAME:
                    read_ledger = ledger_id
        if read_ledger is not None:
            log("ledger: sequential read of the E=3 Qw=3 Qa=2 1-KiB ledger ...")
            results.append(await bench_read(client, bookies, read_ledger, arguments.seconds))
            log(f"  {results[-1]}")
        if not arguments.no_baselines:
            log("baseline: raw adds to one of the bookies ...")
            single = await drive_bookie(
                bookies[0].port,
                bookies[0].pid,
                seconds=arguments.seconds,
                window=arguments.window,
                connections=1,
                size_bytes=1024,
                ledger_base=RAW_LEDGER_BASE,
            )
            single["name"] = "single-bookie-1KiB"
            baselines.append(single)
            log(f"  {single}")
    return results, baselines


def parse_quorum(text: str) -> tuple[int, int, int]:
    """ "3/3/2" -> (3, 3, 2)."""
    try:
        ensemble_size, write_quorum, ack_quorum = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not E/Qw/Qa, e.g. 3/3/2") from None
    if not ensemble_size >= write_quorum >= ack_quorum >= 1 or ensemble_size > BOOKIES:
        raise argparse.ArgumentTypeError(f"{text!r}: need {BOOKIES} >= E >= Qw >= Qa >= 1")
    return ensemble_size, write_quorum, ack_quorum


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="measured seconds per run (at least two checkpoint intervals: see the docstring)",
    )
    parser.add_argument(
        "--window",
        type=int,
        default=bookie_limits.outstanding_adds_max_default,
        help="adds pending per ledger (the client's default bound)",
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument(
        "--quorums",
        type=parse_quorum,
        nargs="+",
        default=list(QUORUMS),
        help="E/Qw/Qa configurations to write (default: 3/3/2 3/2/2)",
    )
    parser.add_argument("--group-wait-ms", type=int, default=2)
    parser.add_argument("--event-loop", choices=["asyncio", "uvloop"], default="uvloop")
    parser.add_argument("--zk", help="use this ZooKeeper instead of starting one")
    parser.add_argument("--data-dir", type=Path, help="where to put files (default: a temp dir)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    tune_for_throughput()  # as the bookies do; see bookie/runtime_tuning.py
    arguments = parse(argv)
    parent = arguments.data_dir
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ledger-bench-", dir=parent) as name:
        directory = Path(name)
        baselines = []
        if not arguments.no_baselines:
            log("baseline: fdatasync ...")
            baselines.append(fdatasync_rate(directory, min(arguments.seconds, 2.0)))
            log(f"  {baselines[-1]}")
        results, bookie_baselines = anyio.run(
            bench_ledgers, arguments, directory, backend_options={"use_uvloop": UVLOOP}
        )
        baselines.extend(bookie_baselines)
    config = {key: value for key, value in vars(arguments).items() if key not in ("data_dir", "zk")}
    config["bookies"] = BOOKIES
    config["fsync"] = True
    config["client_event_loop"] = "uvloop" if UVLOOP else "asyncio"
    config["cpus"] = os.cpu_count()
    config["runtime_tuned"] = True
    measured = next((item for item in results if item["name"] == TARGET_NAME), None)
    target = {
        "name": TARGET_NAME,
        "ops_per_s_min": TARGET_OPS_PER_S,
        "ops_per_s": None if measured is None else measured["ops_per_s"],
        "met": measured is not None and measured["ops_per_s"] >= TARGET_OPS_PER_S,
    }
    print(
        json.dumps(
            {
                "benchmark": "ledger",
                "config": config,
                "results": results,
                "baselines": baselines,
                "target": target,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
