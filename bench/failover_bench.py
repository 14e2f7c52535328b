"""Benchmark: how long the key-value store stops taking writes when its leader fails.

    python bench/failover_bench.py [--kills 10] [--pauses 5] [--handoffs 20] [--soak-s 120]
                                   [--writers 8] [--session-timeout-ms MS] [--zk HOSTS]

It runs `kvstore up` (in process: `kvstore.tools.launcher.LocalKvCluster`, a
ZooKeeper ticking every 100 ms, three bookies with fsync on, three replicas),
every setting at the commands' defaults unless given, and measures:

* `kill`: `--kills` times, `kill -9` of whichever replica leads while
  `--writers` redis-py connections to the two followers each SET in a loop
  (every SET goes to the leader through its follower, which retries it on the
  new leader with the same session seq).  The time from the kill to the first
  acknowledged SET that was *sent* after the kill (one sent before may have
  been acknowledged by the dead leader just before it died).  SETs in flight
  at the kill must all be answered OK (`in_flight_failed` counts those that
  were not).  `detection` is the time from the kill to the successor's
  `rsm.elected` log line (the same machine's clock): the dead leader's
  session expiring; the rest is the takeover and the clients' retries.
  The killed replica is started again, and the next trial waits until all
  three replicas have caught up.
* `pause`: the same with SIGSTOP of the leader instead, held until a
  successor serves (longer than the detection time), then SIGCONT.
* `handoff`: `--handoffs` graceful transfers (`transfer-leadership`, the
  leader choosing a caught-up candidate) under writes through every
  replica: the framework's own measure of the window in which no leader
  took writes (`window_ms`), and the longest gap between two acknowledged
  SETs the writers saw around it (`observed_ms`).
* `soak`: `--soak-s` seconds of saturating load, no fault: redis-benchmark
  SETs (50 connections, pipeline 16) on every replica's port, beside the
  writers; the number of leader changes (log epochs) in that time, which
  must be 0, and the ZooKeeper connection drops the replicas logged
  (`rsm.session` SUSPENDED: each one kept its session and cost nothing).

Targets (2-core machine, defaults): kill p50 <= 2 s and p99 <= 3 s; handoff
`window_ms` p99 <= 100 ms; no leader change during the soak.  Percentiles
are nearest-rank over the trials (with 10 trials, p99 is the slowest one).
The baseline is the detection time itself (the session timeout): nothing
can serve before the dead leader's session expires, so `kill_ms - session`
is what the takeover and the clients' retries cost.

The last line of output is ONE JSON object; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import redis.asyncio
import redis.exceptions

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "examples"))

from kvstore import limits as kv_limits  # noqa: E402
from kvstore.tools.launcher import KvSettings, LocalKvCluster  # noqa: E402

from rsm import limits as rsm_limits  # noqa: E402
from rsm.client import Client, connect  # noqa: E402
from rsm.errors import RsmError  # noqa: E402

HOST = "127.0.0.1"
VALUE = b"v" * 100
TRIAL_TIMEOUT_S = 60.0
STEADY_ACKS = 200
"""Acknowledged SETs the writers must have seen before a fault is injected."""
POLL_S = 0.005
"""How often a trial looks at the writers' acknowledgements (a measurement poll)."""
SOAK_CLIENTS = 50
SOAK_PIPELINE = 16
TARGETS = {"kill_p50_ms": 2_000, "kill_p99_ms": 3_000, "handoff_p99_ms": 100, "soak_changes": 0}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def nearest_rank(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))]


def distribution(values: list[float]) -> dict[str, Any]:
    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    return {
        "trials": len(values),
        "p50_ms": ms(nearest_rank(values, 0.50)),
        "p99_ms": ms(nearest_rank(values, 0.99)),
        "max_ms": ms(max(values, default=None)),
        "all_ms": [round(value) for value in values],
    }


# --- the writers -------------------------------------------------------------------------------


@dataclass
class Writers:
    """`count` connections spread over `ports`, each SETting in a loop; what they saw."""

    ports: list[int]
    count: int
    acks: list[tuple[float, float]] = field(default_factory=list)
    """(sent, acknowledged) perf_counter times of every SET answered OK."""
    failures: list[tuple[float, str]] = field(default_factory=list)
    """(sent, error) of every SET answered with an error."""
    in_flight: dict[int, float] = field(default_factory=dict)
    """Writer number -> when its unanswered SET was sent."""

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Writers]:
        async with anyio.create_task_group() as task_group:
            for number in range(self.count):
                task_group.start_soon(self._write, number, self.ports[number % len(self.ports)])
            try:
                yield self
            finally:
                task_group.cancel_scope.cancel()

    async def _write(self, number: int, port: int) -> None:
        client = redis.asyncio.Redis(host=HOST, port=port, single_connection_client=True)
        try:
            sequence = 0
            while True:
                sequence += 1
                sent = time.perf_counter()
                self.in_flight[number] = sent
                try:
                    await client.set(f"failover:{number}:{sequence % 1000}", VALUE)
                except redis.exceptions.RedisError as error:
                    self.failures.append((sent, f"{type(error).__name__}: {error}"))
                    await anyio.sleep(0.01)
                else:
                    self.acks.append((sent, time.perf_counter()))
                finally:
                    del self.in_flight[number]
        finally:
            with anyio.CancelScope(shield=True):
                await client.aclose()

    async def wait_acks(self, count: int) -> None:
        target = len(self.acks) + count
        with anyio.fail_after(TRIAL_TIMEOUT_S):
            while len(self.acks) < target:
                await anyio.sleep(POLL_S)

    async def first_ack_sent_after(self, moment: float) -> float:
        """When the first SET sent after `moment` was acknowledged (waits for it)."""
        seen = 0
        with anyio.fail_after(TRIAL_TIMEOUT_S):
            while True:
                acks = self.acks
                for sent, acknowledged in acks[seen:]:
                    if sent >= moment:
                        return acknowledged
                seen = len(acks)
                await anyio.sleep(POLL_S)

    async def answered(self, sent_before: float) -> None:
        """Wait until no SET sent before `sent_before` is still unanswered."""
        with anyio.fail_after(TRIAL_TIMEOUT_S):
            while any(sent < sent_before for sent in self.in_flight.values()):
                await anyio.sleep(POLL_S)

    def longest_gap_ms(self, start: float, end: float) -> float:
        """The longest time in [start, end] without an acknowledgement."""
        moments = sorted(acknowledged for _sent, acknowledged in self.acks)
        inside = [start] + [m for m in moments if start < m < end] + [end]
        return max(b - a for a, b in itertools.pairwise(inside)) * 1000


# --- the cluster -------------------------------------------------------------------------------


async def leader_status(client: Client) -> dict[str, Any]:
    with anyio.fail_after(TRIAL_TIMEOUT_S):
        while True:
            try:
                status = await client.status()
            except RsmError:
                await anyio.sleep(0.05)
                continue
            if status.get("serving"):
                return status
            await anyio.sleep(0.05)


async def ready_to_lead(client: Client, addresses: list[str]) -> None:
    """Wait until one of the replicas at `addresses` is a caught-up candidate (a handoff's
    target must be one: a replica that just handed over stands again once caught up)."""
    with anyio.fail_after(TRIAL_TIMEOUT_S):
        while True:
            for address in addresses:
                with contextlib.suppress(RsmError):
                    status = await client.status(address)
                    if status["candidate"] and status["caught_up"]:
                        return
            await anyio.sleep(0.05)


def follower_ports(cluster: LocalKvCluster, leader: str) -> list[int]:
    return [replica.resp_port for replica in cluster.replicas if replica.name != leader]


def pid(cluster: LocalKvCluster, name: str) -> int:
    process = cluster.replica(name).process
    assert process is not None
    return int(process.pid)


async def fault_trial(
    cluster: LocalKvCluster, client: Client, arguments: argparse.Namespace, fault: str
) -> dict[str, Any]:
    """One kill or pause of the leader under the writers' load (see the module docstring)."""
    status = await leader_status(client)
    leader = str(status["replica_id"])
    writers = Writers(follower_ports(cluster, leader), arguments.writers)
    offsets = {replica.name: replica.log_file.stat().st_size for replica in cluster.replicas}
    async with writers.running():
        await writers.wait_acks(STEADY_ACKS)
        faulted_wall_s = time.time()
        faulted = time.perf_counter()
        if fault == "kill":
            cluster.kill(leader)
        else:
            os.kill(pid(cluster, leader), signal.SIGSTOP)
        try:
            acknowledged = await writers.first_ack_sent_after(faulted)
            await writers.answered(faulted)
        finally:
            if fault == "pause":
                os.kill(pid(cluster, leader), signal.SIGCONT)
        failed = [error for _sent, error in writers.failures]
    successor = await leader_status(client)
    events = logged_events(cluster, str(successor["replica_id"]), offsets)
    if fault == "kill":
        await cluster.stop(leader)
        await cluster.start(leader)
    else:
        await cluster.wait_ready()
    return {
        "ms": (acknowledged - faulted) * 1000,
        "detection_ms": since_ms(events.get("rsm.elected"), faulted_wall_s),
        "serving_ms": since_ms(events.get("rsm.leader"), faulted_wall_s),
        "leader": leader,
        "successor": successor["replica_id"],
        "epochs": [status["epoch"], successor["epoch"]],
        "failed": failed,
    }


def logged_events(cluster: LocalKvCluster, name: str, offsets: dict[str, int]) -> dict[str, float]:
    """When replica `name` first logged each event since `offsets` (Unix time in s)."""
    seen: dict[str, float] = {}
    with cluster.replica(name).log_file.open("rb") as handle:
        handle.seek(offsets[name])
        for line in handle:
            if not line.startswith(b"{"):
                continue
            record = json.loads(line)
            moment = datetime.datetime.fromisoformat(record["time"].replace("Z", "+00:00"))
            seen.setdefault(record["event"], moment.timestamp())
    return seen


def since_ms(moment_s: float | None, start_s: float) -> float | None:
    return None if moment_s is None else round((moment_s - start_s) * 1000, 1)


async def faults(
    cluster: LocalKvCluster, client: Client, arguments: argparse.Namespace, fault: str, count: int
) -> dict[str, Any]:
    times: list[float] = []
    detections: list[float] = []
    failed: list[str] = []
    for trial in range(count):
        result = await fault_trial(cluster, client, arguments, fault)
        times.append(result["ms"])
        if result["detection_ms"] is not None:
            detections.append(result["detection_ms"])
        failed += result["failed"]
        log(
            f"  {fault} {trial + 1}/{count}: {result['leader']} -> {result['successor']} "
            f"in {result['ms']:.0f} ms (elected at {result['detection_ms']}, serving at "
            f"{result['serving_ms']}), epochs {result['epochs']}, failed {len(result['failed'])}"
        )
    return {
        "name": fault,
        **distribution(times),
        "detection": distribution(detections),
        "failed_writes": len(failed),
        "failed_examples": failed[:3],
    }


async def handoffs(
    cluster: LocalKvCluster, client: Client, arguments: argparse.Namespace
) -> dict[str, Any]:
    windows: list[float] = []
    observed: list[float] = []
    failed = 0
    for _ in range(arguments.handoffs):
        status = await leader_status(client)
        leader = str(status["replica_id"])
        others = [replica.address for replica in cluster.replicas if replica.name != leader]
        await ready_to_lead(client, others)
        writers = Writers([replica.resp_port for replica in cluster.replicas], arguments.writers)
        async with writers.running():
            await writers.wait_acks(STEADY_ACKS)
            start = time.perf_counter()
            result = await client.transfer_leadership()  # the leader picks a ready candidate
            await writers.wait_acks(STEADY_ACKS)
            end = time.perf_counter()
            if result["window_ms"] is not None:
                windows.append(float(result["window_ms"]))
            observed.append(writers.longest_gap_ms(start, end))
            failed += len(writers.failures)
    return {
        "name": "handoff",
        "window": distribution(windows),
        "observed": distribution(observed),
        "failed_writes": failed,
    }


@contextlib.contextmanager
def redis_benchmarks(ports: list[int]) -> Iterator[None]:
    """redis-benchmark SET loops (`-l`) on every port until the block ends."""
    processes = [
        subprocess.Popen(
            [
                "redis-benchmark",
                "-h",
                HOST,
                "-p",
                str(port),
                "-c",
                str(SOAK_CLIENTS),
                "-P",
                str(SOAK_PIPELINE),
                "-d",
                "100",
                "-r",
                "100000",
                "-t",
                "set",
                "-l",
                "-q",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for port in ports
    ]
    try:
        yield
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()


def session_drops(cluster: LocalKvCluster, offsets: dict[str, int]) -> int:
    """`rsm.session` events logged by the replicas since `offsets` (file sizes)."""
    drops = 0
    for replica in cluster.replicas:
        with replica.log_file.open("rb") as handle:
            handle.seek(offsets[replica.name])
            drops += sum(1 for line in handle if b"rsm.session" in line)
    return drops


async def soak(
    cluster: LocalKvCluster, client: Client, arguments: argparse.Namespace
) -> dict[str, Any]:
    await cluster.wait_ready()
    before = await leader_status(client)
    offsets = {replica.name: replica.log_file.stat().st_size for replica in cluster.replicas}
    writers = Writers(follower_ports(cluster, str(before["replica_id"])), arguments.writers)
    started = time.perf_counter()
    with redis_benchmarks([replica.resp_port for replica in cluster.replicas]):
        async with writers.running():
            await anyio.sleep(arguments.soak_s)
    seconds = time.perf_counter() - started
    after = await leader_status(client)
    load = os.getloadavg()[0]
    return {
        "name": "soak",
        "seconds": round(seconds, 1),
        "leader_changes": int(after["epoch"]) - int(before["epoch"]),
        "leaders": [before["replica_id"], after["replica_id"]],
        "session_drops": session_drops(cluster, offsets),
        "writer_acks_per_s": round(len(writers.acks) / seconds),
        "writer_failures": len(writers.failures),
        "load_average_1m": round(load, 2),
    }


# --- main --------------------------------------------------------------------------------------


async def run(arguments: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = KvSettings(base_port=0, session_timeout_ms=arguments.session_timeout_ms)
    log(f"kvstore up: session timeout {arguments.session_timeout_ms} ms ...")
    async with (
        LocalKvCluster(data_dir, zk=arguments.zk, settings=settings) as cluster,
        connect(settings.app, zk=cluster.zk) as client,
    ):
        results = []
        for fault, count in (("kill", arguments.kills), ("pause", arguments.pauses)):
            if count:
                log(f"{fault}: {count} trials, {arguments.writers} writers through followers")
                results.append(await faults(cluster, client, arguments, fault, count))
        if arguments.handoffs:
            log(f"handoff: {arguments.handoffs} transfers")
            results.append(await handoffs(cluster, client, arguments))
            log(f"  {results[-1]}")
        if arguments.soak_s:
            log(f"soak: {arguments.soak_s} s of redis-benchmark on every replica, no fault")
            results.append(await soak(cluster, client, arguments))
            log(f"  {results[-1]}")
    by_name = {result["name"]: result for result in results}
    met: dict[str, bool] = {}
    if "kill" in by_name:
        met["kill_p50_ms"] = by_name["kill"]["p50_ms"] <= TARGETS["kill_p50_ms"]
        met["kill_p99_ms"] = by_name["kill"]["p99_ms"] <= TARGETS["kill_p99_ms"]
    if "handoff" in by_name and by_name["handoff"]["window"]["p99_ms"] is not None:
        met["handoff_p99_ms"] = by_name["handoff"]["window"]["p99_ms"] <= TARGETS["handoff_p99_ms"]
    if "soak" in by_name:
        met["soak_changes"] = by_name["soak"]["leader_changes"] <= TARGETS["soak_changes"]
    return {
        "benchmark": "failover",
        "config": {
            "replicas": 3,
            "bookies": 3,
            "session_timeout_ms": arguments.session_timeout_ms,
            "read_lease_ms": kv_limits.read_lease_ms_default,
            "zookeeper_tick_ms": 100 if arguments.zk is None else None,
            "writers": arguments.writers,
            "cpus": os.cpu_count(),
        },
        "results": results,
        "baseline": {
            "name": "detection-time",
            "ms": arguments.session_timeout_ms,
            "note": "nothing can serve before the dead leader's session expires",
        },
        "targets": TARGETS,
        "met": met,
        "meets_targets": all(met.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--pauses", type=int, default=5)
    parser.add_argument("--handoffs", type=int, default=20)
    parser.add_argument("--soak-s", type=float, default=120.0)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument(
        "--session-timeout-ms", type=int, default=rsm_limits.replica_session_timeout_ms_default
    )
    parser.add_argument("--zk", help="use this ZooKeeper (HOST:PORT[,...][/chroot])")
    parser.add_argument("--data-dir", type=Path, help="default: a temporary directory")
    arguments = parser.parse_args()
    if arguments.soak_s and shutil.which("redis-benchmark") is None:
        subprocess.run([str(REPOSITORY / "scripts" / "bootstrap.sh"), "redis-tools"], check=True)
    with contextlib.ExitStack() as stack:
        data_dir = arguments.data_dir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="failover-bench-"))
        )
        result = anyio.run(run, arguments, data_dir)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
