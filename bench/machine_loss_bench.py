"""Benchmark: one machine of three lost under write load, how long until writes are acknowledged
again, and how fast they go while its bookie is missing.

    python bench/machine_loss_bench.py [--trials 10] [--clients 8] [--seconds 3]
                                       [--session-timeout-ms MS] [--zk HOSTS] [--data-dir DIR]

Runs `kvstore up`'s layout in process (`kvstore.tools.launcher.LocalKvCluster`):
a ZooKeeper (unless `--zk`), three bookies, three replicas, E = Qw = 3, Qa = 2;
replica kv-i and bookie-i make machine i.  `--clients` redis-py clients keep
writing (SET of 100-byte values, one at a time each, no pipelining), each on a
replica of its own choosing and on another one when its connection breaks.
Each trial:

1. waits until the open segment is fully replicated (`kvstore status`'s
   `replication.full`) and every replica is up;
2. counts the acknowledged writes over `--seconds`: `before_ops_per_s`;
3. kill -9 the leader's machine: its bookie and its replica, at once;
4. times the first acknowledgement of a write sent after the kill:
   `first_write_s` (the failover: the ZooKeeper session timeout of the dead
   leader, the successor's recovery of its ledger on the two bookies left,
   its new segment's ledger on them, degraded when the dead bookie's
   registration has expired, its marker);
5. counts the acknowledged writes over `--seconds` from there:
   `degraded_ops_per_s` (and the state the segment was in: `degraded` or a
   deferred ensemble change);
6. restarts the bookie and the replica and waits for full replication again
   (`restore_s`, from the bookie's restart).

The result is ONE JSON object on the last line of output (its shape:
docs/operations.md, "Benchmark"): the configuration, every trial
(`results`), the throughput before the kills as the baseline, and
`first_write_s` p50/p99 (nearest rank over the trials), the median
throughputs and their ratio.  Progress goes to stderr.  Numbers are this
machine's and indicative: everything shares its cores.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))
sys.path.insert(0, str(REPOSITORY / "examples"))

import redis  # noqa: E402
import redis.exceptions  # noqa: E402
from kvstore.runtime.node import DEFAULT_APP  # noqa: E402
from kvstore.tools.launcher import KvSettings, LocalKvCluster  # noqa: E402
from redis.backoff import NoBackoff  # noqa: E402
from redis.retry import Retry  # noqa: E402

from bookie.meta.zk import ZkMetadataStore  # noqa: E402
from rsm.client import connect  # noqa: E402
from rsm.host import application_status, split_zk  # noqa: E402

HOST = "127.0.0.1"
VALUE = b"v" * 100
WAIT_S = 120.0
"""Bound on every wait (failover, restore): far above what a healthy run needs."""
POLL_S = 0.05
SOCKET_TIMEOUT_S = 30.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def wait_until(probe: Callable[[], Any], what: str, timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"machine_loss_bench: {what} did not happen within {timeout_s} s")
        time.sleep(POLL_S)


@dataclass
class Writes:
    """Every acknowledged write: (sent, acknowledged) on the monotonic clock, of all clients."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acknowledged: list[tuple[float, float]] = field(default_factory=list)

    def add(self, sent_s: float, acknowledged_s: float) -> None:
        with self.lock:
            self.acknowledged.append((sent_s, acknowledged_s))

    def count_between(self, start_s: float, end_s: float) -> int:
        with self.lock:
            return sum(1 for _, acked in self.acknowledged if start_s <= acked < end_s)

    def first_sent_after(self, start_s: float) -> float | None:
        """When the first write sent at or after `start_s` was acknowledged."""
        with self.lock:
            acks = [acked for sent, acked in self.acknowledged if sent >= start_s]
        return min(acks) if acks else None


class Load:
    """`clients` threads writing through whichever replica answers (see the module)."""

    def __init__(self, ports: Callable[[], list[int]], clients: int) -> None:
        self.writes = Writes()
        self._ports = ports
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(number,), daemon=True)
            for number in range(clients)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(SOCKET_TIMEOUT_S + 5)

    def _client(self, number: int) -> None:
        sequence = 0
        choice = number
        client: redis.Redis | None = None
        while not self._stop.is_set():
            if client is None:
                ports = self._ports()
                if not ports:
                    time.sleep(POLL_S)
                    continue
                choice += 1
                client = redis.Redis(
                    host=HOST,
                    port=ports[choice % len(ports)],
                    socket_timeout=SOCKET_TIMEOUT_S,
                    retry=Retry(NoBackoff(), 0),
                )
            sequence += 1
            sent_s = time.monotonic()
            try:
                client.set(f"load:{number}:{sequence % 10_000}", VALUE)
            except redis.exceptions.ConnectionError:
                client.close()
                client = None
                continue
            except redis.exceptions.ResponseError:
                time.sleep(POLL_S)  # TRYAGAIN and the like: no leader yet
                continue
            self.writes.add(sent_s, time.monotonic())
        if client is not None:
            client.close()


class Bench:
    """The cluster (driven from this thread through a portal) and its status."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, cluster: LocalKvCluster) -> None:
        self.portal = portal
        self.cluster = cluster

    def live_ports(self) -> list[int]:
        return [r.resp_port for r in self.cluster.replicas if r.process is not None]

    def report(self) -> dict[str, Any]:
        return self.portal.call(self._report)

    async def _report(self) -> dict[str, Any]:
        hosts, chroot = split_zk(self.cluster.zk)
        async with (
            ZkMetadataStore.connect(hosts, root=chroot) as store,
            connect(DEFAULT_APP, store=store) as client,
        ):
            return await application_status(store, client)

    def leader(self) -> str | None:
        report = self.report()
        leader = report["leader"]
        serving = [r for r in report["replicas"] if r.get("serving")]
        if leader is None or not serving:
            return None
        name: str = leader["replica_id"]
        return name

    def fully_replicated(self) -> bool:
        replication = self.report()["replication"]
        return replication is not None and replication["full"]

    def kill_machine(self, replica: str) -> str:
        bookie = "bookie-" + replica.rpartition("-")[2]
        self.cluster.bookies.kill(bookie)
        self.cluster.kill(replica)
        self.portal.call(self._reap, replica)
        return bookie

    async def _reap(self, name: str) -> None:
        replica = self.cluster.replica(name)
        assert replica.process is not None
        await replica.process.wait()
        await replica.process.aclose()
        replica.process = None

    def restart_machine(self, replica: str, bookie: str) -> None:
        self.portal.call(self.cluster.bookies.restart, bookie)
        # Not waiting for it to catch up under the load: the next trial needs it running.
        self.portal.call(lambda: self.cluster.start(replica, wait=False))


def trial(bench: Bench, load: Load, number: int, seconds: float) -> dict[str, Any]:
    wait_until(lambda: len(bench.live_ports()) == 3, "all replicas up")
    wait_until(bench.fully_replicated, "full replication")
    leader = wait_until(bench.leader, "a serving leader")
    writes = load.writes
    start_s = time.monotonic()
    time.sleep(seconds)
    before = writes.count_between(start_s, start_s + seconds) / seconds
    killed_s = time.monotonic()
    bookie = bench.kill_machine(leader)
    first_s = wait_until(lambda: writes.first_sent_after(killed_s), "a write after the kill")
    time.sleep(seconds)
    degraded = writes.count_between(first_s, first_s + seconds) / seconds
    replication = bench.report()["replication"] or {}
    restart_s = time.monotonic()
    bench.restart_machine(leader, bookie)
    wait_until(bench.fully_replicated, "full replication after the restart")
    result = {
        "name": f"trial-{number}",
        "killed": [leader, bookie],
        "first_write_s": round(first_s - killed_s, 3),
        "before_ops_per_s": round(before, 1),
        "degraded_ops_per_s": round(degraded, 1),
        "segment_while_down": "degraded"
        if replication.get("degraded")
        else "ensemble_change_deferred"
        if replication.get("ensemble_change_deferred")
        else "full",
        "restore_s": round(time.monotonic() - restart_s, 3),
    }
    log(f"trial {number}: {result}")
    return result


def nearest_rank(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def run(arguments: argparse.Namespace, data_dir: Path) -> dict[str, Any]:
    settings = KvSettings(base_port=0)
    if arguments.session_timeout_ms is not None:
        settings = KvSettings(base_port=0, session_timeout_ms=arguments.session_timeout_ms)
    cluster = LocalKvCluster(data_dir, zk=arguments.zk, settings=settings)
    log("machine_loss_bench: starting ZooKeeper, 3 bookies, 3 replicas ...")
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(cluster),
    ):
        bench = Bench(portal, cluster)
        with Load(bench.live_ports, arguments.clients) as load:
            trials = [
                trial(bench, load, number, arguments.seconds)
                for number in range(1, arguments.trials + 1)
            ]
        session_timeout_ms = cluster.settings.session_timeout_ms
    first = [t["first_write_s"] for t in trials]
    before = statistics.median(t["before_ops_per_s"] for t in trials)
    degraded = statistics.median(t["degraded_ops_per_s"] for t in trials)
    return {
        "benchmark": "machine_loss",
        "config": {
            "replicas": 3,
            "bookies": 3,
            "ensemble": 3,
            "write_quorum": 3,
            "ack_quorum": 2,
            "clients": arguments.clients,
            "value_bytes": len(VALUE),
            "seconds": arguments.seconds,
            "trials": arguments.trials,
            "session_timeout_ms": session_timeout_ms,
            "killed": "the leader replica and the bookie of its machine, kill -9 together",
        },
        "results": trials,
        "baselines": [{"name": "writes-before-the-kill", "ops_per_s": before}],
        "first_write_s": {
            "p50": nearest_rank(first, 0.5),
            "p99": nearest_rank(first, 0.99),
            "max": max(first),
        },
        "before_ops_per_s": before,
        "degraded_ops_per_s": degraded,
        "degraded_vs_before": round(degraded / before, 3) if before else None,
        "measured": [
            "first_write_s: from the kill to the first acknowledgement of a SET sent after it",
            "before/degraded_ops_per_s: acknowledged SETs per second over --seconds before the "
            "kill and from the first write after it (medians over the trials)",
            "restore_s: from the bookie's restart to a fully replicated open segment",
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10, help="machines killed, one per trial")
    parser.add_argument("--clients", type=int, default=8, help="concurrent writers (8)")
    parser.add_argument("--seconds", type=float, default=3.0, help="throughput windows (3)")
    parser.add_argument(
        "--session-timeout-ms",
        type=int,
        help="the replicas' ZooKeeper session timeout (default: the launcher's)",
    )
    parser.add_argument("--zk", help="use this ZooKeeper (HOST:PORT[/chroot]), not a local one")
    parser.add_argument("--data-dir", help="where the run keeps its data (a temporary dir)")
    arguments = parser.parse_args()
    if arguments.trials < 1 or arguments.clients < 1 or arguments.seconds <= 0:
        parser.error("--trials and --clients must be at least 1, --seconds above 0")
    with tempfile.TemporaryDirectory(prefix="machine-loss-", dir=arguments.data_dir) as scratch:
        result = run(arguments, Path(scratch))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
