"""Benchmark: a replicated counter on the framework, real processes, against PySyncObj.

    python bench/rsm_bench.py [--seconds 5] [--clients 64] [--workers 2] [--zk HOSTS] ...

Starts a ZooKeeper (unless `--zk`) and 3 `bookie serve` processes with fsync
on (`bookie.local.cluster.LocalCluster`), then 3 `rsm run` replicas of
`rsm.testing.workload:AuditCounter` with E=3, Qw=3, Qa=2: an acknowledged
command is in a ledger entry fsynced on at least two bookies.  Measured:

* `add-100B`: `--clients` concurrent callers (tasks spread over `--workers`
  load processes; the callers of one process share one `rsm.Client`, a
  pipelined connection and one session) each calling `add` in a loop with a
  command of 100 encoded bytes, for `--seconds` after a warm-up: commands
  acknowledged per second and the latency from call to answer (p50, p99,
  p99.9).  Afterwards the counter is checked to hold exactly the acknowledged
  adds (`consistent`).
* `handoff`: `--handoffs` graceful transfers, each to another replica; the
  unavailability window the old leader measures (it stopped taking writes
  -> the successor serves), median and max.
* `failover`: SIGKILL of the leader while one caller keeps writing; the time
  from the kill to the first acknowledged write sent after it.  Bounded below
  by the ZooKeeper session timeout (`--session-timeout-ms`): the dead
  leader's candidacy lives until ZooKeeper expires its session.
* `framework-own-method-in-process-100B`: the framework measured the way
  PySyncObj's benchmark measures PySyncObj (bench/rsm_inprocess.py): for
  each probe three fresh replicas of a new application, load made inside the
  leader's process, a fixed number of commands at the start of every second
  without waiting; the search finds the highest rate at which 90% are
  acknowledged.  Like for like with the first baseline below, whose callers
  live in its node processes too; the `add-100B` row pays a network hop and
  a session per command on top.

Baselines, same run, same machine: PySyncObj (`pysyncobj`, the `bench`
extra), 3 nodes as processes on loopback, log in memory, nothing fsynced:

* `pysyncobj-own-method-100B`: measured the way its authors measure it
  (bench/pysyncobj_rate.py): every node submits 100-byte commands at a fixed
  rate without waiting; the highest rate at which 90% succeed.  This is
  PySyncObj at its best, and the figure to compare with.
* `pysyncobj-add-100B-callers-waiting`: a replicated counter whose `add`
  takes a 100-byte argument, driven like ours by `--clients` callers that
  each wait for their command's answer, inside one node's process (PySyncObj
  has no client protocol, so its callers skip the network hop ours pay).
  PySyncObj sends entries every `appendEntriesPeriod` (100 ms by default), so
  waiting callers see a fraction of what it can do.

Targets: failover under 2x the session timeout, handoff under 100 ms, the
in-process row at least 1.2 times PySyncObj's own method
(`vs_pysyncobj_own_method`, `meets_target`).

The last line of output is ONE JSON object (its shape: docs/operations.md,
"Benchmark"); progress goes to stderr.  `--worker` and `--pysyncobj-node` are this script's own
subprocess roles.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from pysyncobj_conf import baseline_conf  # noqa: E402
from pysyncobj_rate import (  # noqa: E402
    RATE_MIN,
    add_rate_search_options,
    highest_passing_rate,
    method_text,
    rate_search,
)

from bookie.local.cluster import LocalCluster  # noqa: E402
from bookie.local.zookeeper import free_port  # noqa: E402
from rsm import limits as rsm_limits  # noqa: E402
from rsm.client import ClientConfig, connect  # noqa: E402
from rsm.core.log_format import encode_command  # noqa: E402
from rsm.errors import RsmError  # noqa: E402

UVLOOP = importlib.util.find_spec("uvloop") is not None
HOST = "127.0.0.1"
APP = "bench"
MACHINE = "rsm.testing.workload:AuditCounter"
COMMAND_BYTES = 100
WARMUP_S = 1.0
START_TIMEOUT_S = 60.0
RESULT_TIMEOUT_S = 120.0
CANDIDATE_POLL_S = 0.01
TARGET_VS_PYSYNCOBJ = 1.2
"""The framework, load made in process as PySyncObj's benchmark makes it, against PySyncObj's
best: it fsyncs on two bookies where PySyncObj keeps its log in memory."""
PROBE = ClientConfig(attempt_timeout_ms=300, backoff_ms_initial=5, backoff_ms_max=50)
"""The failover prober retries often, so it sees the new leader as soon as it serves."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(name: str, count: int, seconds: float, latencies_ms: list[float]) -> dict[str, Any]:
    ordered = sorted(latencies_ms)
    return {
        "name": name,
        "ops_per_s": round(count / seconds),
        "p50_ms": round(percentile(ordered, 0.50), 3),
        "p99_ms": round(percentile(ordered, 0.99), 3),
        "p999_ms": round(percentile(ordered, 0.999), 3),
    }


def pad_for(command_bytes: int) -> str:
    """A `pad` argument that makes an `add` command item `command_bytes` long when encoded."""
    for length in range(command_bytes):
        item = encode_command(
            "add",
            ["w1-c1", 1_000_000, "x" * length],
            {},
            client_id=bytes(16),
            seq=1_000_000,
            ack_seq=999_999,
        )
        if len(item) >= command_bytes:
            return "x" * length
    raise ValueError(f"an add command is longer than {command_bytes} bytes")


def run_async(function: Any, *args: Any) -> Any:
    return anyio.run(function, *args, backend_options={"use_uvloop": UVLOOP})


# --- load worker (subprocess role) ------------------------------------------------------------


async def worker(arguments: argparse.Namespace) -> None:
    """`--clients` callers on one client for warm-up + `--seconds`; a JSON result on stdout."""
    pad = pad_for(COMMAND_BYTES)
    latencies_ms: list[float] = []
    counts = {"measured": 0, "acknowledged": 0, "errors": 0}
    started = time.perf_counter()
    measure_from = started + WARMUP_S
    stop_at = measure_from + arguments.seconds

    async with connect(APP, zk=arguments.zk) as client:

        async def caller(name: str) -> None:
            seq = 0
            while (now := time.perf_counter()) < stop_at:
                seq += 1
                try:
                    await client.call("add", name, seq, pad)
                except RsmError:
                    counts["errors"] += 1
                    continue
                done = time.perf_counter()
                counts["acknowledged"] += 1
                if now >= measure_from and done <= stop_at:
                    counts["measured"] += 1
                    latencies_ms.append((done - now) * 1000)

        async with anyio.create_task_group() as task_group:
            for number in range(arguments.clients):
                task_group.start_soon(caller, f"{arguments.name}-c{number}")
    print(json.dumps({**counts, "latencies_ms": latencies_ms}))


# --- PySyncObj node (subprocess role) ---------------------------------------------------------


def pysyncobj_node(arguments: argparse.Namespace) -> None:
    """One PySyncObj node; with `--clients`, it also drives the counter and prints a result."""
    from pysyncobj import FAIL_REASON, SyncObj, replicated

    class Counter(SyncObj):  # type: ignore[misc]
        def __init__(self, address: str, partners: list[str]) -> None:
            super().__init__(address, partners, baseline_conf(dynamicMembershipChange=False))
            self.value = 0

        @replicated  # type: ignore[untyped-decorator]
        def add(self, pad: str) -> int:
            self.value += 1
            return int(self.value)

    counter = Counter(arguments.node, arguments.partners.split(","))
    # Only the leader drives the load: a follower would forward every command to it.  A
    # node that is not leading keeps watching rather than settling for good: at start-up
    # the first leader it sees may be deposed before it leads, and then, if every node
    # had settled, none would drive.
    while not counter._isLeader():
        time.sleep(0.01)
    pad = "x" * COMMAND_BYTES
    lock = threading.Lock()
    latencies_ms: list[float] = []
    counts = {"measured": 0, "acknowledged": 0, "errors": 0}
    # A leader that has just been elected may not commit yet (its followers have not
    # caught up, or it is about to be deposed), so the warm-up and the measured window
    # start at the first commit, not at the first command.
    measure_from = stop_at = math.inf
    finished = threading.Event()
    active = [arguments.clients]

    def submit() -> None:
        started = time.perf_counter()
        counter.add(pad, callback=lambda result, error: done(started, error))

    def done(started: float, error: int) -> None:
        nonlocal measure_from, stop_at
        now = time.perf_counter()
        with lock:
            if error == FAIL_REASON.SUCCESS:
                if measure_from == math.inf:
                    measure_from = now + WARMUP_S
                    stop_at = measure_from + arguments.seconds
                counts["acknowledged"] += 1
                if started >= measure_from and now <= stop_at:
                    counts["measured"] += 1
                    latencies_ms.append((now - started) * 1000)
            else:
                counts["errors"] += 1
            if now >= stop_at:
                active[0] -= 1
                if not active[0]:
                    finished.set()
                return
        submit()

    for _ in range(arguments.clients):
        submit()
    finished.wait(arguments.seconds + RESULT_TIMEOUT_S)
    # Per process: if the driving leader was deposed, its successor drives and writes too
    # (each measured a whole window: either result will do).
    partial = arguments.result.with_suffix(f".{os.getpid()}.partial")
    partial.write_text(json.dumps({**counts, "latencies_ms": latencies_ms}))
    partial.rename(arguments.result)
    os._exit(0)  # PySyncObj's threads do not stop by themselves


def pysyncobj_baseline(arguments: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    ports = [free_port(HOST) for _ in range(3)]
    nodes = [f"{HOST}:{port}" for port in ports]
    result_file = data_dir / "pysyncobj-result.json"
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for index, node in enumerate(nodes):
            partners = ",".join(other for other in nodes if other != node)
            command = [
                sys.executable,
                __file__,
                "--pysyncobj-node",
                node,
                "--partners",
                partners,
                "--seconds",
                str(arguments.seconds),
                "--clients",
                str(arguments.clients),
                "--result",
                str(result_file),
            ]
            with (data_dir / f"pysyncobj-{index}.log").open("w") as log_file:
                processes.append(subprocess.Popen(command, stderr=log_file))
        deadline = time.monotonic() + arguments.seconds + RESULT_TIMEOUT_S
        while not result_file.exists():
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in processes):
                raise RuntimeError(f"PySyncObj gave no result; see {data_dir}/pysyncobj-*.log")
            time.sleep(0.05)
    finally:
        for process in processes:
            process.kill()
            process.wait()
    result = json.loads(result_file.read_text())
    return {
        **summary(
            "pysyncobj-add-100B-callers-waiting",
            result["measured"],
            arguments.seconds,
            result["latencies_ms"],
        ),
        "errors": result["errors"],
    }


# --- the framework ----------------------------------------------------------------------------


class Replicas:
    """The `rsm run` processes, by address."""

    def __init__(self, arguments: argparse.Namespace, cluster: LocalCluster, data_dir: Path):
        self._arguments = arguments
        self.cluster = cluster
        self._data_dir = data_dir
        self.processes: dict[str, anyio.abc.Process] = {}

    async def start(self, count: int) -> None:
        for number in range(1, count + 1):
            address = f"{HOST}:{free_port(HOST)}"
            command = [
                sys.executable,
                "-m",
                "rsm.tools.cli",
                "run",
                MACHINE,
                "--app",
                APP,
                "--zk",
                self.cluster.zk_servers,
                "--ledger-root",
                self.cluster.zk_root,
                "--listen",
                address,
                "--session-timeout-ms",
                str(self._arguments.session_timeout_ms),
            ]
            log_file = (self._data_dir / f"replica-{number}.log").open("ab")
            self.processes[address] = await anyio.open_process(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log_file
            )

    async def stop(self) -> None:
        for process in self.processes.values():
            if process.returncode is None:
                process.kill()
        for process in self.processes.values():
            await process.wait()
            await process.aclose()


@contextlib.asynccontextmanager
async def framework(arguments: argparse.Namespace, data_dir: Path) -> AsyncIterator[Replicas]:
    async with LocalCluster(
        data_dir / "cluster", bookies=3, zk_servers=arguments.zk, zk_root=f"/bench-{os.getpid()}"
    ) as cluster:
        replicas = Replicas(arguments, cluster, data_dir)
        try:
            await replicas.start(3)
            arguments.zk = cluster.zk_servers
            async with connect(APP, zk=cluster.zk_servers) as client:
                with anyio.fail_after(START_TIMEOUT_S):
                    await client.call("add", "start", 1, "")
            yield replicas
        finally:
            with anyio.CancelScope(shield=True):
                await replicas.stop()


async def throughput(arguments: argparse.Namespace) -> dict[str, Any]:
    per_worker = [arguments.clients // arguments.workers] * arguments.workers
    per_worker[0] += arguments.clients - sum(per_worker)
    commands = [
        [
            sys.executable,
            __file__,
            "--worker",
            f"w{index}",
            "--zk",
            arguments.zk,
            "--clients",
            str(clients),
            "--seconds",
            str(arguments.seconds),
        ]
        for index, clients in enumerate(per_worker)
    ]
    results: list[dict[str, Any]] = []

    async def run(command: list[str]) -> None:
        completed = await anyio.run_process(command, check=True)
        results.append(json.loads(completed.stdout.decode().strip().splitlines()[-1]))

    with anyio.fail_after(arguments.seconds + RESULT_TIMEOUT_S):
        async with anyio.create_task_group() as task_group:
            for command in commands:
                task_group.start_soon(run, command)
    latencies = [value for result in results for value in result["latencies_ms"]]
    measured = sum(result["measured"] for result in results)
    acknowledged = sum(result["acknowledged"] for result in results)
    async with connect(APP, zk=arguments.zk) as client:
        audit = await client.query("audit")
    seqs: dict[str, list[int]] = audit["seqs"]
    load_adds = sum(len(applied) for name, applied in seqs.items() if name.startswith("w"))
    return {
        **summary("add-100B", measured, arguments.seconds, latencies),
        "errors": sum(result["errors"] for result in results),
        "consistent": load_adds == acknowledged
        and all(len(set(applied)) == len(applied) for applied in seqs.values()),
    }


def _ready_to_lead(status: dict[str, Any]) -> bool:
    return bool(status["candidate"]) and bool(status["caught_up"])


async def handoffs(arguments: argparse.Namespace, replicas: Replicas) -> dict[str, Any]:
    windows: list[int] = []
    async with connect(APP, zk=arguments.zk) as client:
        for _ in range(arguments.handoffs):
            leader = (await client.status())["replica_id"]
            target = next(address for address in replicas.processes if address != leader)
            # Only a caught-up candidate can take over; the replica demoted by the
            # previous handoff, or a follower still applying the load, is one soon.
            with anyio.fail_after(START_TIMEOUT_S):
                while not _ready_to_lead(await client.status(target)):
                    await anyio.sleep(CANDIDATE_POLL_S)
            result = await client.transfer_leadership(target)
            if result["window_ms"] is not None:
                windows.append(result["window_ms"])
            await client.call("add", "handoff", len(windows), "")
    return {
        "name": "handoff",
        "handoffs": arguments.handoffs,
        "median_ms": statistics.median(windows) if windows else None,
        "max_ms": max(windows) if windows else None,
    }


async def failover(arguments: argparse.Namespace, replicas: Replicas) -> dict[str, Any]:
    killed_at: list[float] = []
    first_write_s: list[float] = []
    async with connect(APP, zk=arguments.zk, config=PROBE) as client:
        leader = (await client.status())["replica_id"]

        async def probe() -> None:
            seq = 0
            while not first_write_s:
                seq += 1
                sent = time.perf_counter()
                try:
                    await client.call("add", "failover", seq, "")
                except RsmError:
                    continue
                if killed_at and sent > killed_at[0]:
                    first_write_s.append(time.perf_counter() - killed_at[0])

        with anyio.fail_after(START_TIMEOUT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(probe)
                await anyio.sleep(0.2)  # the prober writes steadily before the kill
                killed_at.append(time.perf_counter())
                replicas.processes[leader].send_signal(signal.SIGKILL)
    return {
        "name": "failover",
        "ms": round(first_write_s[0] * 1000),
        "session_timeout_ms": arguments.session_timeout_ms,
    }


async def in_process_probe(
    arguments: argparse.Namespace, cluster: LocalCluster, data_dir: Path, rate: int, number: int
) -> float:
    """One probe (bench/rsm_inprocess.py): three fresh replicas of a new application on the
    same bookies; the share of `rate` commands/s its leader's process got acknowledged."""
    result_file = data_dir / f"in-process-{number}.json"
    processes: list[anyio.abc.Process] = []
    try:
        for replica in range(1, 4):
            command = [
                sys.executable,
                str(REPOSITORY / "bench" / "rsm_inprocess.py"),
                "--zk",
                cluster.zk_servers,
                "--ledger-root",
                cluster.zk_root,
                "--app",
                f"{APP}-in-process-{number}",
                "--listen",
                f"{HOST}:{free_port(HOST)}",
                "--result",
                str(result_file),
                "--session-timeout-ms",
                str(arguments.session_timeout_ms),
                "--pad-chars",
                str(len(pad_for(COMMAND_BYTES))),
                "--rate",
                str(rate),
                "--seconds",
                str(arguments.pysyncobj_probe_seconds),
            ]
            log_file = (data_dir / f"in-process-{number}-{replica}.log").open("ab")
            processes.append(
                await anyio.open_process(command, stdout=subprocess.DEVNULL, stderr=log_file)
            )
        probe_s = arguments.pysyncobj_probe_seconds
        with anyio.fail_after(START_TIMEOUT_S + probe_s + RESULT_TIMEOUT_S):
            while not result_file.exists():
                if any(process.returncode is not None for process in processes):
                    raise RuntimeError(f"a replica of probe {number} ended; see {data_dir}")
                await anyio.sleep(0.1)
    finally:
        with anyio.CancelScope(shield=True):
            for process in processes:
                with contextlib.suppress(ProcessLookupError):  # one that ended already
                    process.kill()
                await process.wait()
                await process.aclose()
    share: float = json.loads(result_file.read_text())["share_ok"]
    return share


async def in_process(
    arguments: argparse.Namespace, cluster: LocalCluster, data_dir: Path
) -> dict[str, Any]:
    """PySyncObj's own method applied to the framework: its search, with load made in the
    leader's process, fresh replicas for every probe as its benchmark has fresh nodes."""
    steps: list[dict[str, Any]] = []
    search = highest_passing_rate(
        rate_min=RATE_MIN,
        rate_max=arguments.in_process_rate_max,
        resolution=arguments.pysyncobj_resolution,
    )
    rate = next(search)
    try:
        while True:
            share = await in_process_probe(arguments, cluster, data_dir, rate, len(steps) + 1)
            steps.append({"rate": rate, "share_ok": round(share, 4)})
            log(f"framework in process: {rate}/s -> {share:.1%} acknowledged")
            rate = search.send(share)
    except StopIteration as done:
        highest: int = done.value
    method = method_text(
        "the leader's own process",
        probe_s=arguments.pysyncobj_probe_seconds,
        resolution=arguments.pysyncobj_resolution,
    )
    return {
        "name": "framework-own-method-in-process-100B",
        "ops_per_s": highest,
        "search_rate_max": arguments.in_process_rate_max,
        "method": method + "; fsynced on 2 of 3 bookies before acknowledged",
        "command_bytes": COMMAND_BYTES,
        "search": steps,
    }


async def bench_framework(arguments: argparse.Namespace, data_dir: Path) -> list[dict[str, Any]]:
    async with framework(arguments, data_dir) as replicas:
        log(f"framework: {arguments.clients} callers for {arguments.seconds} s ...")
        results = [await throughput(arguments)]
        log(f"  {results[-1]}")
        results.append(await handoffs(arguments, replicas))
        log(f"  {results[-1]}")
        results.append(await failover(arguments, replicas))
        log(f"  {results[-1]}")
        if not arguments.no_in_process:
            log("framework by PySyncObj's own method, load in the leader's process ...")
            results.append(await in_process(arguments, replicas.cluster, data_dir))
            log(f"  {results[-1]}")
    return results


def ratios(results: list[dict[str, Any]], baselines: list[dict[str, Any]]) -> dict[str, Any]:
    """Each framework row against PySyncObj at its best (its own method), like for like where
    a row makes its load the way PySyncObj's benchmark does, and the target."""
    rows = {row["name"]: row["ops_per_s"] for row in results + baselines if "ops_per_s" in row}
    best = rows.get("pysyncobj-own-method-100B")
    if not best:
        return {}
    found = {
        "add-100B_vs_pysyncobj": round(rows["add-100B"] / best, 3),
    }
    in_process = rows.get("framework-own-method-in-process-100B")
    if in_process is not None:
        found["in_process_vs_pysyncobj"] = round(in_process / best, 3)
    return {
        "vs_pysyncobj_own_method": found,
        "target": {"in_process_vs_pysyncobj": TARGET_VS_PYSYNCOBJ},
        "meets_target": found.get("in_process_vs_pysyncobj", 0.0) >= TARGET_VS_PYSYNCOBJ,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=64, help="concurrent callers")
    parser.add_argument("--workers", type=int, default=2, help="load processes")
    parser.add_argument("--handoffs", type=int, default=3)
    parser.add_argument(
        "--session-timeout-ms", type=int, default=rsm_limits.replica_session_timeout_ms_default
    )
    parser.add_argument("--zk", help="an existing ZooKeeper (default: start one)")
    parser.add_argument("--data-dir", type=Path, help="where the data goes (default: a temp dir)")
    parser.add_argument("--no-baseline", action="store_true", help="skip PySyncObj")
    parser.add_argument(
        "--no-in-process", action="store_true", help="skip the framework's in-process row"
    )
    parser.add_argument(
        "--in-process-rate-max",
        type=int,
        default=160_000,
        help="the highest rate the in-process row's search tries (160000)",
    )
    add_rate_search_options(parser)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-node", help=argparse.SUPPRESS)
    parser.add_argument("--partners", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args(argv)
    if arguments.worker:
        arguments.name = arguments.worker
        run_async(worker, arguments)
        return 0
    if arguments.pysyncobj_node:
        arguments.node = arguments.pysyncobj_node
        pysyncobj_node(arguments)
        return 0
    if arguments.clients < 1 or arguments.workers < 1 or arguments.workers > arguments.clients:
        parser.error("need --clients >= --workers >= 1")
    config = {
        "seconds": arguments.seconds,
        "clients": arguments.clients,
        "workers": arguments.workers,
        "command_bytes": COMMAND_BYTES,
        "replicas": 3,
        "bookies": 3,
        "ensemble": 3,
        "write_quorum": 3,
        "ack_quorum": 2,
        "session_timeout_ms": arguments.session_timeout_ms,
        "uvloop": UVLOOP,
    }
    with contextlib.ExitStack() as stack:
        if arguments.data_dir is None:
            data_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rsm-bench-")))
        else:
            data_dir = arguments.data_dir
            data_dir.mkdir(parents=True, exist_ok=True)
        results = run_async(bench_framework, arguments, data_dir)
        baselines = []
        if not arguments.no_baseline:
            log("PySyncObj by its own method ...")
            baselines.append(rate_search(arguments, "pysyncobj-own-method-100B", COMMAND_BYTES))
            log(f"  {baselines[-1]}")
            log(f"PySyncObj: {arguments.clients} waiting callers for {arguments.seconds} s ...")
            baselines.append(pysyncobj_baseline(arguments, data_dir))
            log(f"  {baselines[-1]}")
    print(
        json.dumps(
            {
                "benchmark": "rsm",
                "config": config,
                "results": results,
                "baselines": baselines,
                **ratios(results, baselines),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
