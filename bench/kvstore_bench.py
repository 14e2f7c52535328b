"""Benchmark: the key-value store under the real redis-benchmark, against Redis and PySyncObj.

    python bench/kvstore_bench.py [--seconds 3] [--clients 50] [--pipeline 16] [--rounds 3]
                                  [--zk HOSTS] [--data-dir DIR]

What it runs, one run at a time on this machine:

1. `kvstore up` (in process: `kvstore.tools.launcher.LocalKvCluster`, the same
   launcher): a ZooKeeper (unless `--zk`), three bookies (journal fsync on,
   every acknowledged write is on disk), three replicas (each in a session
   of its own, so followers without clients run at `follower_nice`:
   rsm/runtime/cpu_priority.py).  Debian's `redis-benchmark` then drives the
   leader's Redis port with `--clients` connections, 100-byte values and
   random keys (`-r`), for SET and GET, without pipelining and with `-P
   --pipeline`; and, after those, SET and GET without pipelining through a
   follower (which forwards writes and linearizable reads to the leader, and
   keeps its own priority while it has clients).  SET is a durable replicated
   write (acknowledged once the log entry holding it is on Qa=2 of 3
   bookies' disks); GET is a linearizable read, answered under the leader's
   read lease (the store's default, 300 ms after a confirmation round in
   which enough bookies said the leader's ledger is not fenced; no entry, no
   fsync; a round per read with `kvstore serve --read-lease-ms 0`).
2. Baseline: Debian's `redis-server` with `appendonly yes` and `appendfsync
   always` (one node, fsync per write batch), the same redis-benchmark runs,
   interleaved with the store's: it runs beside the store (each idles while
   the other is measured) and every test goes `--rounds` times, store and
   Redis one after the other, who goes first alternating.  This machine's
   speed drifts by tens of percent over a minute; a baseline measured a
   minute apart from the store could make the ratio look better or worse
   than it is.  Each side reports its median run (every round's throughput
   beside it), and each ratio to Redis is the median of the rounds' ratios.
3. Baseline: bench/minimal_resp_server.py, the least a Python server can
   do for GET and SET on this host (asyncio on uvloop, a dict; no
   replication, no durability), in the same rotation as Redis.  Hosts run
   C and Python at different relative speeds, so the store's ratio to this
   server says more about the store's own cost than its ratio to Redis.
4. Baseline: PySyncObj, three processes on loopback, nothing fsynced.
   First as its authors measure it (bench/pysyncobj_rate.py, the row
   `pysyncobj-own-method-100B`): every node submits 100-byte commands at a
   fixed rate without waiting; the highest rate at which 90% succeed.  This
   is PySyncObj at its best, and what `set_vs_pysyncobj` compares with.  Then
   its `ReplDict` (journal file on disk through mmap, never fsynced), driven
   from inside the leader's process by a load generator keeping `--clients`
   asynchronous `set()` calls of 100-byte values in flight and waiting for
   each (no RESP: PySyncObj has no server protocol), for `--seconds`: once as
   it comes (it sends entries every `appendEntriesPeriod`, 100 ms by default,
   so waiting callers see a fraction of what it can do) and once tuned to
   2 ms.

5. Metrics on and off (`--metrics-rounds`, default 2; 0: skipped): two more
   fresh stores side by side, one whose replicas serve their admin HTTP API
   (with the cluster watch of the status page) and are scraped at `/metrics`
   every `--scrape-interval-s`, one whose replicas serve none; SET and GET
   without pipelining on each leader in turn, which store goes first
   alternating by round.  `metrics` reports every run and, per test, the
   medians with metrics on over off of the rate and of the leader's CPU per
   request (which other load on the machine moves less; read it first).
   The bookies serve their admin API in both (bench/bookie_bench.py measures
   theirs), and the counters on the request path cannot be switched off, so
   both stores pay for them: what differs is the replicas' admin servers,
   their watches and the scrapes.

With `--tls`, a second store runs beside the first, made as `kvstore up --tls`
makes it (bookies, replicas' links and its RESP port on TLS), and SET and
GET, without and with pipelining, alternate between the plain store's RESP
port and the TLS store's TLS RESP port (`redis-benchmark --tls --cacert`),
`--rounds` each, who goes first rotating; `tls` in the JSON holds the TLS
store's median runs and, per test, the median of the rounds' ratios, TLS
over plain.

redis-benchmark has no duration option: each run is first calibrated with a
short one (which warms up too), then given enough requests for about `--seconds`.  Latencies are
redis-benchmark's (p50, p99 from its CSV), or for PySyncObj measured per call.

The machine is shared by everything above, so numbers are indicative and
only their ratios, measured in the same run, are meant to be compared.

Every redis-benchmark run also reports `cpu_us_per_request`: the CPU time
(user + system, from /proc, in clock ticks) each serving process spent during
the run, divided by its requests: the store's `leader`, `followers` and
`bookies` (lists in the cluster's order), or `redis_server`; the
`redis_benchmark` client's own (from this process's finished children); and
`machine_busy_pct`, how busy the machine was, in % of one core (/proc/stat).
Kernel work done outside those processes (the disks' journal threads, for
one) shows only in the machine's figure.

The targets: replicated SET at least 25% of Redis-with-fsync SET and 30% of
the minimal server's; linearizable GET at least 30% of Redis's GET and 60% of
the minimal server's (40% through a follower).  `ratios` reports them and
the ratios to PySyncObj; `meets_targets` says whether this run met the
targets.

Missing tools: `scripts/bootstrap.sh redis-tools redis-server` installs
them (apt-get); the benchmark runs it when they are missing.  The last line
of output is ONE JSON object (its shape: docs/operations.md, "Benchmark");
progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import io
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "examples"))

from bookie_bench import on_over_off, scrape_metrics, scrape_report  # noqa: E402
from kvstore import limits as kv_limits  # noqa: E402
from kvstore.tools.launcher import KvSettings, LocalKvCluster  # noqa: E402
from proc_cpu import machine_cpu_s, process_cpu_s  # noqa: E402
from pysyncobj_conf import baseline_conf  # noqa: E402
from pysyncobj_rate import add_rate_search_options, rate_search  # noqa: E402

from bookie.local.zookeeper import free_port  # noqa: E402
from rsm import limits as rsm_limits  # noqa: E402

HOST = "127.0.0.1"
VALUE_BYTES = 100
KEYSPACE = 100_000
CALIBRATION_REQUESTS = 2_000
TARGETS = {
    "set_vs_redis": 0.25,
    "get_vs_redis": 0.30,
    "get_vs_minimal_python": 0.6,
    "via_follower_get_vs_minimal_python": 0.4,
    "set_vs_minimal_python": 0.3,
}
REDIS = "redis-fsync"
MINIMAL = "minimal-python"
DEFAULT_PERIOD_S = 0.1
"""PySyncObj's own default appendEntriesPeriod: it sends new entries in rounds of this."""
TUNED_PERIOD_S = 0.002
"""A period that lets PySyncObj commit about as fast as this machine allows (reported beside)."""
CORES = os.cpu_count() or 1


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ensure_tools() -> None:
    """redis-benchmark and redis-server, installed through the bootstrap script if missing."""
    if shutil.which("redis-benchmark") and shutil.which("redis-server"):
        return
    log("redis-benchmark or redis-server missing: running scripts/bootstrap.sh (apt-get)")
    subprocess.run(
        [str(REPOSITORY / "scripts" / "bootstrap.sh"), "redis-tools", "redis-server"], check=True
    )
    if not (shutil.which("redis-benchmark") and shutil.which("redis-server")):
        raise SystemExit(
            "redis-benchmark/redis-server still missing: install redis-tools and "
            "redis-server (Debian) and run again"
        )


# --- redis-benchmark ---------------------------------------------------------------------------


def redis_benchmark(
    port: int, test: str, clients: int, pipeline: int, requests: int, *, tls_ca: Path | None = None
) -> dict[str, float]:
    tls = [] if tls_ca is None else ["--tls", "--cacert", str(tls_ca)]
    result = subprocess.run(
        [
            "redis-benchmark", "-h", HOST, "-p", str(port), "-c", str(clients),
            "-n", str(requests), "-d", str(VALUE_BYTES), "-r", str(KEYSPACE),
            "-P", str(pipeline), "-t", test, "--csv", *tls,
        ],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    if len(rows) != 1:
        raise RuntimeError(
            f"unexpected redis-benchmark output: {result.stdout!r} {result.stderr!r}"
        )
    row = rows[0]
    return {
        "ops_per_s": float(row["rps"]),
        "p50_ms": float(row["p50_latency_ms"]),
        "p99_ms": float(row["p99_latency_ms"]),
    }


# --- CPU per request ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """What a run drives: a Redis port, and the processes serving it by role (a role of one
    process is reported as a number, of several as a list, in `processes` order)."""

    port: int
    processes: dict[str, list[int]]
    tls_ca: Path | None = None
    """The CA of the port's certificate, when the port speaks TLS."""


def children_cpu_s() -> float:
    """CPU time of this process's finished children (here: the redis-benchmark runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pid_of(process: anyio.abc.Process | None) -> int:
    assert process is not None, "the cluster's processes run while it is up"
    return process.pid


def cpu_snapshot(target: Target) -> dict[str, Any]:
    return {
        "processes": {
            role: [process_cpu_s(pid) for pid in pids] for role, pids in target.processes.items()
        },
        "client": children_cpu_s(),
        "machine": machine_cpu_s(),
    }


def cpu_per_request(before: dict[str, Any], after: dict[str, Any], requests: int) -> dict[str, Any]:
    """CPU microseconds per request by role, and how busy the machine was (% of one core)."""

    def per_request(seconds: float) -> float:
        return round(seconds * 1e6 / requests, 1)

    report: dict[str, Any] = {}
    for role, ending in after["processes"].items():
        starts = before["processes"][role]
        spent = [per_request(end - start) for start, end in zip(starts, ending, strict=True)]
        report[role] = spent[0] if len(spent) == 1 else spent
    report["redis_benchmark"] = per_request(after["client"] - before["client"])
    busy_s = after["machine"][0] - before["machine"][0]
    all_s = after["machine"][1] - before["machine"][1]
    report["machine_busy_pct"] = round(100 * CORES * busy_s / all_s) if all_s else None
    return report


# --- runs ----------------------------------------------------------------------------------------


def measure(
    target: Target, name: str, test: str, *, clients: int, pipeline: int, seconds: float
) -> dict[str, Any]:
    """One redis-benchmark run of about `seconds`, after a short calibration."""
    port, tls_ca = target.port, target.tls_ca
    calibration = redis_benchmark(
        port, test, clients, pipeline, CALIBRATION_REQUESTS * pipeline, tls_ca=tls_ca
    )
    requests = max(CALIBRATION_REQUESTS, int(calibration["ops_per_s"] * seconds))
    before = cpu_snapshot(target)
    measured = redis_benchmark(port, test, clients, pipeline, requests, tls_ca=tls_ca)
    cpu = cpu_per_request(before, cpu_snapshot(target), requests)
    log(
        f"  {name}: {measured['ops_per_s']:.0f} ops/s, p50 {measured['p50_ms']} ms, "
        f"p99 {measured['p99_ms']} ms ({requests} requests); CPU us per request {cpu}"
    )
    return {
        "name": name,
        "pipeline": pipeline,
        "requests": requests,
        **measured,
        "cpu_us_per_request": cpu,
    }


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median throughput (the lower middle one of an even count), with every
    round's throughput beside it."""
    middle = dict(sorted(runs, key=lambda run: run["ops_per_s"])[(len(runs) - 1) // 2])
    middle["rounds_ops_per_s"] = [run["ops_per_s"] for run in runs]
    return middle


def paired_suite(
    store: Target, peers: dict[str, Target], arguments: argparse.Namespace
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, float]]]:
    """SET and GET, without and with pipelining, on the store and on each peer in turn, every
    test `--rounds` times, who goes first rotating: (the store's median runs, the peers',
    {peer: {test: the median of the rounds' ratios}})."""
    results: list[dict[str, Any]] = []
    baselines: list[dict[str, Any]] = []
    ratios: dict[str, dict[str, float]] = {peer: {} for peer in peers}
    for pipeline in (1, arguments.pipeline):
        for test in ("set", "get"):
            name = test.upper() + ("" if pipeline == 1 else f"-P{pipeline}")
            runs: dict[str, list[dict[str, Any]]] = {"": [], **{peer: [] for peer in peers}}
            turns = [("", store, name)] + [
                (peer, target, f"{peer}-{name}") for peer, target in peers.items()
            ]
            for round_number in range(arguments.rounds):
                shift = round_number % len(turns)
                for who, target, label in turns[shift:] + turns[:shift]:
                    runs[who].append(
                        measure(
                            target,
                            label,
                            test,
                            clients=arguments.clients,
                            pipeline=pipeline,
                            seconds=arguments.seconds,
                        )
                    )
            results.append(median_run(runs[""]))
            for peer in peers:
                baselines.append(median_run(runs[peer]))
                paired = zip(runs[""], runs[peer], strict=True)
                ratios[peer][name] = round(
                    statistics.median(a["ops_per_s"] / b["ops_per_s"] for a, b in paired), 3
                )
    return results, baselines, ratios


# --- the key-value store -----------------------------------------------------------------------


async def kvstore_runs(
    arguments: argparse.Namespace, data_dir: Path, peers: dict[str, Target]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, dict[str, float]], dict[str, Any]]:
    """The store's runs and the peers' runs interleaved with them (see the module docstring):
    (results, the peers' baselines, ratios to each peer by test, config)."""
    settings = KvSettings(base_port=0)
    log("kvstore: starting ZooKeeper, 3 bookies, 3 replicas ...")
    async with LocalKvCluster(data_dir, zk=arguments.zk, settings=settings) as cluster:
        leader = cluster.replica(cluster.leader or cluster.replicas[0].name)
        followers = [r for r in cluster.replicas if r.name != leader.name]
        follower = followers[0]
        log(f"kvstore: leader {leader.name} on {leader.resp_address}")
        processes = {
            "leader": [pid_of(leader.process)],
            "followers": [pid_of(replica.process) for replica in followers],
            "bookies": [pid_of(bookie.process) for bookie in cluster.bookies.bookies],
        }
        store = Target(leader.resp_port, processes)
        results, baselines, ratios = await anyio.to_thread.run_sync(
            paired_suite, store, peers, arguments
        )
        for test in ("set", "get"):
            run = functools.partial(
                measure,
                Target(follower.resp_port, processes),
                f"via-follower-{test.upper()}",
                test,
                clients=arguments.clients,
                pipeline=1,
                seconds=arguments.seconds,
            )
            runs = [await anyio.to_thread.run_sync(run) for _ in range(arguments.rounds)]
            results.append(median_run(runs))
        config = {
            "replicas": len(cluster.replicas),
            "bookies": len(cluster.bookies.bookies),
            "ensemble": 3,
            "write_quorum": 3,
            "ack_quorum": 2,
            "read_lease_ms": kv_limits.read_lease_ms_default,
            "follower_nice": rsm_limits.follower_nice_default,
            "zk": cluster.zk,
        }
        if arguments.tls:
            config["tls"] = await tls_runs(arguments, data_dir.parent / "kvstore-tls", store)
    return results, baselines, ratios, config


async def tls_runs(arguments: argparse.Namespace, data_dir: Path, plain: Target) -> dict[str, Any]:
    """`--tls`: a store on TLS beside the plain one, and the same tests on both in turn
    (see the module docstring)."""
    log("kvstore on TLS: starting ZooKeeper, 3 bookies, 3 replicas ...")
    settings = KvSettings(base_port=0, tls=True)
    # On a shared ZooKeeper (--zk), a root of its own beside the plain store's.
    zk = None if arguments.zk is None else arguments.zk.rstrip("/") + "/kvstore-tls"
    async with LocalKvCluster(data_dir, zk=zk, settings=settings) as cluster:
        assert cluster.tls is not None
        leader = cluster.replica(cluster.leader or cluster.replicas[0].name)
        assert leader.resp_tls_port is not None
        processes = {
            "leader": [pid_of(leader.process)],
            "followers": [pid_of(r.process) for r in cluster.replicas if r is not leader],
            "bookies": [pid_of(bookie.process) for bookie in cluster.bookies.bookies],
        }
        tls = Target(leader.resp_tls_port, processes, tls_ca=cluster.tls.ca)
        plain_runs, tls_results, plain_over_tls = await anyio.to_thread.run_sync(
            paired_suite, plain, {"tls": tls}, arguments
        )
    return {
        "what": "a store made as kvstore up --tls makes it (bookies, replica links and RESP on "
        "TLS; RESP not mutual), through its TLS RESP port, against the plain store",
        "results": tls_results,
        "plain_results": plain_runs,
        "tls_over_plain_ops": {
            test: round(1 / ratio, 3) for test, ratio in plain_over_tls["tls"].items() if ratio
        },
    }


# --- metrics on and off -----------------------------------------------------------------------


async def metrics_runs(arguments: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    """The metrics comparison (item 5 of the module docstring)."""
    runs: list[dict[str, Any]] = []
    scrapes: list[float] = []
    if not arguments.metrics_rounds:
        return {"rounds": 0}

    def store(mode: str) -> LocalKvCluster:
        zk = None if arguments.zk is None else f"{arguments.zk}/kvstore-bench-metrics-{mode}"
        settings = KvSettings(base_port=0, admin=mode == "on")
        return LocalKvCluster(data_dir / f"metrics-{mode}", zk=zk, settings=settings)

    log("kvstore: two more stores, replicas' metrics off and on ...")
    async with store("off") as off, store("on") as on:
        clusters = {"off": off, "on": on}
        for round_number in range(arguments.metrics_rounds):
            order = ("off", "on") if round_number % 2 == 0 else ("on", "off")
            for test in ("set", "get"):
                for mode in order:
                    cluster = clusters[mode]
                    leader = cluster.replica(cluster.leader or cluster.replicas[0].name)
                    followers = [r for r in cluster.replicas if r is not leader]
                    target = Target(
                        leader.resp_port,
                        {
                            "leader": [pid_of(leader.process)],
                            "followers": [pid_of(replica.process) for replica in followers],
                        },
                    )
                    run_once = functools.partial(
                        measure,
                        target,
                        f"metrics-{mode}-{test.upper()}",
                        test,
                        clients=arguments.clients,
                        pipeline=1,
                        seconds=arguments.seconds,
                    )
                    async with anyio.create_task_group() as scraping:
                        if mode == "on":
                            for replica in cluster.replicas:
                                scraping.start_soon(
                                    scrape_metrics,
                                    replica.admin_port,
                                    arguments.scrape_interval_s,
                                    scrapes,
                                )
                        run = await anyio.to_thread.run_sync(run_once)
                        scraping.cancel_scope.cancel()
                    runs.append(
                        {**run, "name": test.upper(), "metrics": mode, "round": round_number}
                    )
    return metrics_report(runs, scrapes, arguments)


def metrics_report(
    runs: list[dict[str, Any]], scrapes: list[float], arguments: argparse.Namespace
) -> dict[str, Any]:
    """Every run, and per test the medians with metrics on over off: of the rates, and of the
    leader's CPU per request."""
    return {
        **scrape_report(scrapes, arguments),
        "on_over_off_ops": on_over_off(runs, lambda run: run["ops_per_s"]),
        "on_over_off_leader_cpu_per_request": on_over_off(
            runs, lambda run: run["cpu_us_per_request"]["leader"]
        ),
        "runs": runs,
    }


# --- Redis with fsync --------------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(directory: Path) -> Iterator[Target]:
    """A redis-server with appendonly yes and appendfsync always."""
    port = free_port()
    log(f"redis-server: appendonly yes, appendfsync always, on port {port}")
    command = [
        "redis-server", "--port", str(port), "--bind", HOST, "--appendonly", "yes",
        "--appendfsync", "always", "--save", "", "--dir", str(directory),
    ]  # fmt: skip
    with serving(command, port, "redis_server") as target:
        yield target


@contextlib.contextmanager
def minimal_server() -> Iterator[Target]:
    """bench/minimal_resp_server.py: what plain Python on uvloop needs per GET and SET."""
    port = free_port()
    log(f"minimal Python server (asyncio + uvloop, a dict) on port {port}")
    command = [sys.executable, str(REPOSITORY / "bench" / "minimal_resp_server.py"), str(port)]
    with serving(command, port, "minimal_server") as target:
        yield target


@contextlib.contextmanager
def serving(command: list[str], port: int, role: str) -> Iterator[Target]:
    """Run `command`, a server that will listen on `port`, for the block."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        yield Target(port, {role: [process.pid]})
    finally:
        process.terminate()
        process.wait(timeout=30)


def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((HOST, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --- PySyncObj ---------------------------------------------------------------------------------


def pysyncobj_runs(arguments: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    """PySyncObj by its own method; then with waiting callers, as it comes (appendEntriesPeriod
    100 ms) and tuned (2 ms)."""
    log("pysyncobj: its own method ...")
    return [
        rate_search(arguments, "pysyncobj-own-method-100B", VALUE_BYTES),
        pysyncobj_run(arguments, directory / "default", "pysyncobj-ReplDict-SET", DEFAULT_PERIOD_S),
        pysyncobj_run(
            arguments, directory / "tuned", "pysyncobj-ReplDict-SET-tuned", TUNED_PERIOD_S
        ),
    ]


def pysyncobj_run(
    arguments: argparse.Namespace, directory: Path, name: str, period_s: float
) -> dict[str, Any]:
    directory.mkdir()
    ports = [free_port() for _ in range(3)]
    log(f"pysyncobj: 3 ReplDict processes, appendEntriesPeriod {period_s} s, ports {ports}")
    command = [sys.executable, __file__, "--pysyncobj-ports", ",".join(map(str, ports)),
               "--seconds", str(arguments.seconds), "--clients", str(arguments.clients),
               "--data-dir", str(directory), "--pysyncobj-period", str(period_s)]  # fmt: skip
    nodes = [
        subprocess.Popen(
            [*command, "--pysyncobj-node", str(node)], stdout=subprocess.PIPE, text=True
        )
        for node in range(3)
    ]
    try:
        # The node that leads drives the load, prints the result and exits; the others
        # serve until they are stopped.
        deadline = time.monotonic() + 120
        while not any(process.poll() is not None for process in nodes):
            if time.monotonic() > deadline:
                raise RuntimeError("pysyncobj: no result within 120 s")
            time.sleep(0.1)
    finally:
        for process in nodes:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=30)
    outputs = [process.stdout.read() if process.stdout else "" for process in nodes]
    # Normally one line; two if the driving leader was deposed and its successor drove
    # too (each measured a whole window: either will do).
    lines = [output.strip() for output in outputs if output.strip()]
    if not lines:
        raise RuntimeError("pysyncobj: no node printed a result")
    measured = json.loads(lines[0])
    log(
        f"  {name}: {measured['ops_per_s']:.0f} ops/s, p50 {measured['p50_ms']} ms, "
        f"p99 {measured['p99_ms']} ms"
    )
    return {"name": name, "pipeline": 1, "append_entries_period_s": period_s, **measured}


def pysyncobj_node(arguments: argparse.Namespace) -> None:
    """One PySyncObj process; the one elected leader also drives the load and prints its
    result (driving it from a follower would add a forwarding hop PySyncObj's clients avoid)."""
    from pysyncobj import FAIL_REASON, SyncObj
    from pysyncobj.batteries import ReplDict

    FAIL_REASON_SUCCESS = FAIL_REASON.SUCCESS
    ports = [int(port) for port in arguments.pysyncobj_ports.split(",")]
    node = arguments.pysyncobj_node
    addresses = [f"{HOST}:{port}" for port in ports]
    replicated = ReplDict()
    journal = str(Path(arguments.data_dir) / f"pysyncobj-{node}.journal")
    conf = baseline_conf(
        journalFile=journal,
        dynamicMembershipChange=False,
        appendEntriesPeriod=arguments.pysyncobj_period,
    )
    syncobj = SyncObj(addresses[node], addresses[:node] + addresses[node + 1 :],
                      consumers=[replicated], conf=conf)  # fmt: skip
    deadline = time.monotonic() + 60
    while not syncobj.isReady() or syncobj._getLeader() is None:
        if time.monotonic() > deadline:
            raise SystemExit("pysyncobj: no leader within 60 s")
        time.sleep(0.05)
    # A follower serves until the leader's load is done (and the parent ends it).  It
    # keeps watching for leadership rather than settling for good: at start-up the first
    # leader it sees may be deposed before it leads, and then, if every node had settled,
    # none would drive.
    while not syncobj._isLeader():
        time.sleep(0.05)
    value = "v" * VALUE_BYTES
    latencies: list[float] = []
    lock = threading.Lock()
    state = {"next": 0, "done": 0, "failed": 0, "stop": False}
    finished = threading.Event()
    committing = threading.Event()
    """Set by the first write that succeeds: the cluster commits, the warm-up may start."""

    def issue() -> None:
        with lock:
            state["next"] += 1
            key = f"key:{state['next'] % KEYSPACE}"
        started = time.monotonic()

        def done(result: Any, error: Any) -> None:
            with lock:
                if error == FAIL_REASON_SUCCESS:
                    latencies.append(time.monotonic() - started)
                    state["done"] += 1
                    committing.set()
                else:
                    state["failed"] += 1
                stop = state["stop"]
            if stop:
                finished.set()
            else:
                issue()

        replicated.set(key, value, callback=done)

    for _ in range(arguments.clients):
        issue()
    # A leader that has just been elected may not commit yet (its followers have
    # not caught up, or it is about to lose the election): measuring from then
    # on could count nothing at all in a short run.
    if not committing.wait(60):
        raise SystemExit(f"pysyncobj: no write committed within 60 s ({state['failed']} failed)")
    time.sleep(0.5)  # warm-up once writes commit
    with lock:
        start_done = state["done"]
        latencies.clear()
    started = time.monotonic()
    time.sleep(arguments.seconds)
    with lock:
        elapsed = time.monotonic() - started
        done_count = state["done"] - start_done
        state["stop"] = True
        measured = sorted(latencies)
    finished.wait(10)
    print(json.dumps({
        "ops_per_s": round(done_count / elapsed, 1),
        "p50_ms": round(measured[len(measured) // 2] * 1000, 3) if measured else None,
        "p99_ms": round(measured[int(len(measured) * 0.99)] * 1000, 3) if measured else None,
        "requests": done_count,
        "failed": state["failed"],
    }), flush=True)  # fmt: skip
    syncobj.destroy()


# --- main --------------------------------------------------------------------------------------


def ratio(results: list[dict[str, Any]], ours: str, theirs: str) -> float | None:
    by_name: dict[str, float] = {entry["name"]: float(entry["ops_per_s"]) for entry in results}
    if not by_name.get(theirs):
        return None
    return round(by_name[ours] / by_name[theirs], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (3)")
    parser.add_argument("--clients", type=int, default=50, help="concurrent connections (50)")
    parser.add_argument("--pipeline", type=int, default=16, help="-P of the pipelined runs (16)")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs per test, store and Redis in turn (3)"
    )
    parser.add_argument("--zk", help="use this ZooKeeper (HOST:PORT[/chroot]), not a local one")
    parser.add_argument(
        "--metrics-rounds",
        type=int,
        default=2,
        help="rounds of the stores with replicas' metrics off and on (0: no comparison) (2)",
    )
    parser.add_argument(
        "--scrape-interval-s",
        type=float,
        default=1.0,
        help="how often each replica's /metrics is scraped while metrics are on (1)",
    )
    parser.add_argument("--data-dir", help="where the runs keep their data (a temporary dir)")
    parser.add_argument(
        "--tls", action="store_true", help="also a store on TLS, in turn with the plain one"
    )
    add_rate_search_options(parser)
    parser.add_argument("--pysyncobj-node", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-ports", help=argparse.SUPPRESS)
    parser.add_argument("--pysyncobj-period", type=float, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.pysyncobj_node is not None:
        pysyncobj_node(arguments)
        return
    if arguments.rounds < 1:
        parser.error("--rounds must be at least 1")
    if arguments.metrics_rounds < 0 or arguments.scrape_interval_s <= 0:
        parser.error("--metrics-rounds must be at least 0 and --scrape-interval-s above 0")
    ensure_tools()
    with tempfile.TemporaryDirectory(prefix="kvstore-bench-", dir=arguments.data_dir) as scratch:
        base = Path(scratch)
        for name in ("kvstore", "redis", "pysyncobj"):
            (base / name).mkdir()
        with redis_server(base / "redis") as redis, minimal_server() as minimal:
            peers = {REDIS: redis, MINIMAL: minimal}
            results, baselines, to_peer, config = anyio.run(
                kvstore_runs, arguments, base / "kvstore", peers
            )
        (base / "metrics").mkdir()
        metrics = anyio.run(metrics_runs, arguments, base / "metrics")
        baselines += pysyncobj_runs(arguments, base / "pysyncobj")
    tls = config.pop("tls", None)  # --tls: not configuration, a comparison
    everything = results + baselines
    pipelined = arguments.pipeline
    to_redis, to_minimal = to_peer[REDIS], to_peer[MINIMAL]
    ratios = {
        "set_vs_redis": to_redis["SET"],
        "set_vs_minimal_python": to_minimal["SET"],
        "set_vs_pysyncobj": ratio(everything, "SET", "pysyncobj-own-method-100B"),
        "set_vs_pysyncobj_waiting_callers": ratio(everything, "SET", "pysyncobj-ReplDict-SET"),
        "set_vs_pysyncobj_tuned": ratio(everything, "SET", "pysyncobj-ReplDict-SET-tuned"),
        "get_vs_redis": to_redis["GET"],
        "get_vs_minimal_python": to_minimal["GET"],
        "via_follower_get_vs_minimal_python": ratio(
            everything, "via-follower-GET", f"{MINIMAL}-GET"
        ),
        "via_follower_set_vs_minimal_python": ratio(
            everything, "via-follower-SET", f"{MINIMAL}-SET"
        ),
        f"set_p{pipelined}_vs_redis": to_redis[f"SET-P{pipelined}"],
        f"get_p{pipelined}_vs_redis": to_redis[f"GET-P{pipelined}"],
        f"set_p{pipelined}_vs_minimal_python": to_minimal[f"SET-P{pipelined}"],
        f"get_p{pipelined}_vs_minimal_python": to_minimal[f"GET-P{pipelined}"],
    }
    print(json.dumps({
        "benchmark": "kvstore",
        "config": {
            "clients": arguments.clients, "value_bytes": VALUE_BYTES, "keyspace": KEYSPACE,
            "pipeline": arguments.pipeline, "seconds": arguments.seconds,
            "rounds": arguments.rounds,
            "target": "the leader's Redis port (via-follower-*: a follower's)", **config,
        },
        "results": results,
        "metrics": metrics,
        "baselines": baselines,
        "ratios": ratios,
        "tls": tls,
        "targets": TARGETS,
        "meets_targets": all(
            ratios[name] is not None and ratios[name] >= minimum  # type: ignore[operator]
            for name, minimum in TARGETS.items()
        ),
        "measured": [
            "SET: durable replicated write (log entry on 2 of 3 bookies' disks, fsync)",
            f"GET: linearizable read under the leader's {kv_limits.read_lease_ms_default} ms "
            "read lease (renewed by a confirmation round on the bookies, no log entry)",
            "redis-fsync: one redis-server, appendonly yes, appendfsync always; "
            "minimal-python: bench/minimal_resp_server.py (asyncio + uvloop, a dict, no "
            "replication, no durability); their runs and the store's alternate, --rounds "
            "per test, who goes first rotating",
            "cpu_us_per_request: CPU time of each serving process, and of redis-benchmark, "
            "per request of the run; machine_busy_pct: % of one core",
            "ops_per_s: each side's median run (rounds_ops_per_s: every run); ratios to "
            "Redis and the minimal server: the median of the rounds' ratios (via-follower "
            "ones: medians over medians); to PySyncObj: the store's median over PySyncObj's "
            "one run",
            "pysyncobj-own-method: PySyncObj's own benchmark method (see its row's `method`)",
            "pysyncobj-ReplDict-SET: 3 processes, ReplDict.set with callbacks, --clients in "
            "flight each waiting for its answer, journal via mmap without fsync, load "
            "generated inside the leader process; as it comes (appendEntriesPeriod 0.1 s) "
            "and tuned (0.002 s)",
        ],
    }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
