"""PySyncObj measured by its own method: the highest rate at which 90% of commands succeed.

PySyncObj's repository measures itself (benchmarks/benchmarks.py and testobj.py
there) by starting its nodes as processes, having every node submit commands
at a fixed rate without waiting for them (a callback counts each outcome),
and searching for the highest total rate at which the nodes' average success
rate is at least 90%.  This module does the same, so the baselines of
bench/rsm_bench.py and bench/kvstore_bench.py show PySyncObj at its best, as
its authors measure it:

* a probe at `rate` starts `nodes` processes (default configuration, log in
  memory, nothing fsynced, as in PySyncObj's benchmark); each node, once a
  leader is known and after `WARMUP_S`, submits `rate / nodes` commands at the
  start of every second for `probe_s` seconds (followers forward theirs to
  the leader), then waits up to `DRAIN_S` for the outcomes and reports the
  share that succeeded;
* a binary search between `rate_min` and `rate_max` keeps the highest rate
  that passed, to within `resolution`.

Differences, to fit a benchmark run: probes of a few seconds instead of 25, a
1 s warm-up instead of 4, one search instead of the median of five.  The
command is its benchmark's: one `@replicated` call with a `command_bytes`
string argument.

Run as a script it is one node of a probe (`--node`), printing its result as
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pysyncobj_conf import baseline_conf

WARMUP_S = 1.0
DRAIN_S = 4.0
LEADER_TIMEOUT_S = 30.0
PASS_SHARE = 0.9
RATE_MIN = 500
"""The first rate a search probes."""
HOST = "127.0.0.1"


def node(arguments: argparse.Namespace) -> None:
    """One node of a probe: submit at the fixed rate, print the share that succeeded."""
    from pysyncobj import FAIL_REASON, SyncObj, replicated

    class TestObj(SyncObj):  # type: ignore[misc]
        def __init__(self, address: str, partners: list[str]) -> None:
            super().__init__(address, partners, baseline_conf())
            self.applied = 0

        @replicated  # type: ignore[misc]
        def test_method(self, value: str) -> None:
            self.applied += 1

    addresses = [f"{HOST}:{port}" for port in arguments.ports.split(",")]
    me = addresses[arguments.node]
    obj = TestObj(me, [address for address in addresses if address != me])
    deadline = time.monotonic() + LEADER_TIMEOUT_S
    while obj._getLeader() is None:
        if time.monotonic() > deadline:
            raise SystemExit("pysyncobj: no leader")
        time.sleep(0.05)
    time.sleep(WARMUP_S)
    counts = {"sent": 0, "ok": 0, "failed": 0}

    def callback(result: Any, error: int) -> None:
        counts["ok" if error == FAIL_REASON.SUCCESS else "failed"] += 1

    value = "x" * arguments.command_bytes
    per_second = max(1, round(arguments.rate / len(addresses)))
    started = time.monotonic()
    for second in range(arguments.seconds):
        for _ in range(per_second):
            obj.test_method(value, callback=callback)
        counts["sent"] += per_second
        pause = started + second + 1 - time.monotonic()
        if pause > 0:
            time.sleep(pause)
    drain_deadline = time.monotonic() + DRAIN_S
    while counts["ok"] + counts["failed"] < counts["sent"] and time.monotonic() < drain_deadline:
        time.sleep(0.05)
    print(json.dumps({**counts, "share_ok": counts["ok"] / counts["sent"]}), flush=True)
    os._exit(0)  # PySyncObj's threads do not end on their own


def probe(rate: int, *, nodes: int, probe_s: int, command_bytes: int) -> float:
    """The nodes' average share of commands that succeeded at `rate` commands/s in total."""
    from bookie.local.zookeeper import free_port

    taken: list[int] = []
    for _ in range(nodes):
        taken.append(free_port(taken=taken))
    ports = ",".join(map(str, taken))
    processes = []
    for index in range(nodes):
        command = [sys.executable, __file__, "--node", str(index), "--ports", ports,
                   "--rate", str(rate), "--seconds", str(probe_s),
                   "--command-bytes", str(command_bytes)]  # fmt: skip
        processes.append(
            subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        )
    shares = []
    for process in processes:
        try:
            output, _ = process.communicate(timeout=LEADER_TIMEOUT_S + probe_s + DRAIN_S + 30)
        except subprocess.TimeoutExpired:  # a node that never finished counts as failing
            process.kill()
            output, _ = process.communicate()
        lines = output.strip().splitlines()
        shares.append(json.loads(lines[-1])["share_ok"] if lines else 0.0)
    return sum(shares) / len(shares)


def highest_passing_rate(
    *, rate_min: int, rate_max: int, resolution: int
) -> Generator[int, float, int]:
    """The search, for any prober: yields the next rate to probe, is sent the share of
    commands that succeeded at it, and returns the highest rate that passed (0 if none)."""
    low, high = 0, rate_max
    rate = rate_min
    while high - low > resolution:
        share = yield rate
        if share >= PASS_SHARE:
            low = rate
        else:
            high = rate
        rate = (low + high) // 2
    return low


def method_text(subject: str, *, probe_s: int, resolution: int) -> str:
    """How a row found by `highest_passing_rate` was measured, for its JSON."""
    return (
        f"{subject} submitting a fixed number of commands at the start of every second "
        f"without waiting, {probe_s} s per probe; the highest total rate at which at least "
        f"{PASS_SHARE:.0%} succeeded (binary search to {resolution}/s)"
    )


def max_rate(
    *,
    name: str,
    nodes: int = 3,
    probe_s: int = 5,
    command_bytes: int = 100,
    rate_min: int = RATE_MIN,
    rate_max: int = 40_000,
    resolution: int = 500,
) -> dict[str, Any]:
    """The benchmark row: the highest rate that passed, with the search's steps."""
    steps: list[dict[str, Any]] = []
    search = highest_passing_rate(rate_min=rate_min, rate_max=rate_max, resolution=resolution)
    rate = next(search)
    try:
        while True:
            share = probe(rate, nodes=nodes, probe_s=probe_s, command_bytes=command_bytes)
            steps.append({"rate": rate, "share_ok": round(share, 4)})
            print(f"pysyncobj own method: {rate}/s -> {share:.1%} succeeded", file=sys.stderr)
            rate = search.send(share)
    except StopIteration as done:
        highest: int = done.value
    subject = f"PySyncObj's own: {nodes} nodes each"
    return {
        "name": name,
        "ops_per_s": highest,
        "method": method_text(subject, probe_s=probe_s, resolution=resolution)
        + "; log in memory, nothing fsynced",
        "command_bytes": command_bytes,
        "search": steps,
    }


def add_rate_search_options(parser: argparse.ArgumentParser) -> None:
    """The search's settings, for the benchmarks that run it."""
    parser.add_argument(
        "--pysyncobj-probe-seconds",
        type=int,
        default=5,
        help="seconds of load per probe of PySyncObj's own method (5)",
    )
    parser.add_argument(
        "--pysyncobj-rate-max",
        type=int,
        default=40_000,
        help="the highest rate the search tries (40000)",
    )
    parser.add_argument("--pysyncobj-resolution", type=int, default=500,
                        help="the search stops within this many commands/s (500)")  # fmt: skip


def rate_search(arguments: argparse.Namespace, name: str, command_bytes: int) -> dict[str, Any]:
    """`max_rate` with the settings `add_rate_search_options` added."""
    return max_rate(
        name=name,
        probe_s=arguments.pysyncobj_probe_seconds,
        command_bytes=command_bytes,
        rate_max=arguments.pysyncobj_rate_max,
        resolution=arguments.pysyncobj_resolution,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--ports", required=True)
    parser.add_argument("--rate", type=int, required=True)
    parser.add_argument("--seconds", type=int, required=True)
    parser.add_argument("--command-bytes", type=int, required=True)
    node(parser.parse_args())


if __name__ == "__main__":
    main()
