"""What waking another process costs on this host: the price of every message of a cluster.

    python bench/wakeup_bench.py [--round-trips 20000] [--message-bytes 50]

Two Python processes exchange messages over a loopback TCP connection, each
blocking in `recv` until the other's message arrives (every message wakes a
sleeping process), and the CPU time each spends per round trip is measured
(`resource.getrusage`), with both processes pinned to one core (the
baseline: a wake-up without an inter-processor interrupt) and pinned to two
different cores (what a cluster's processes spread over the cores pay).
Prints one JSON object.  On virtual machines the second costs several times
the first, which is why the key-value store's README counts a log entry's
cost in messages.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import time
from typing import Any

NODELAY = (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _cpu_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def _connected_pair() -> tuple[socket.socket, socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        near = socket.create_connection(listener.getsockname())
        far, _ = listener.accept()
    for end in (near, far):
        end.setsockopt(*NODELAY)
    return near, far


def _exchange(near: socket.socket, message: bytes, round_trips: int) -> None:
    for _ in range(round_trips):
        near.sendall(message)
        near.recv(16)


def _echo(far: socket.socket, message_bytes: int, round_trips: int) -> None:
    for _ in range(round_trips):
        received = 0
        while received < message_bytes:
            received += len(far.recv(65536))
        far.sendall(b"k")


def measure(cpus: tuple[int, int], message_bytes: int, round_trips: int) -> dict[str, Any]:
    """One run: this process on `cpus[0]`, the echoing child on `cpus[1]`."""
    near, far = _connected_pair()
    child = os.fork()
    if child == 0:
        near.close()
        os.sched_setaffinity(0, {cpus[1]})
        _echo(far, message_bytes, round_trips)
        os._exit(0)
    far.close()
    os.sched_setaffinity(0, {cpus[0]})
    message = b"m" * message_bytes
    _exchange(near, message, round_trips // 10)  # both processes running before the clock
    started_s, cpu_started_s = time.perf_counter(), _cpu_s(resource.RUSAGE_SELF)
    _exchange(near, message, round_trips - round_trips // 10)
    wall_s = time.perf_counter() - started_s
    cpu_s = _cpu_s(resource.RUSAGE_SELF) - cpu_started_s
    children_before_s = _cpu_s(resource.RUSAGE_CHILDREN)
    os.waitpid(child, 0)
    near.close()
    child_cpu_s = _cpu_s(resource.RUSAGE_CHILDREN) - children_before_s
    timed = round_trips - round_trips // 10
    return {
        "cpus": list(cpus),
        "round_trip_us": round(wall_s / timed * 1e6, 1),
        "cpu_us_per_round_trip": {
            "sender": round(cpu_s / timed * 1e6, 1),
            # The child's whole run (its untimed tenth too), per round trip of it.
            "echo": round(child_cpu_s / round_trips * 1e6, 1),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--round-trips", type=int, default=20_000)
    parser.add_argument("--message-bytes", type=int, default=50)
    arguments = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit("wakeup_bench: needs two cores to compare with one")
    one_core = measure((cores[0], cores[0]), arguments.message_bytes, arguments.round_trips)
    two_cores = measure((cores[0], cores[1]), arguments.message_bytes, arguments.round_trips)
    baseline_us = one_core["cpu_us_per_round_trip"]["sender"]
    ratio = two_cores["cpu_us_per_round_trip"]["sender"] / baseline_us if baseline_us else None
    print(
        json.dumps(
            {
                "benchmark": "wakeup",
                "config": {
                    "round_trips": arguments.round_trips,
                    "message_bytes": arguments.message_bytes,
                    "transport": "loopback TCP, TCP_NODELAY, blocking recv on both sides",
                },
                "results": [{"name": "two-cores", **two_cores}],
                "baselines": [{"name": "one-core", **one_core}],
                "ratios": {
                    "sender_cpu_two_cores_vs_one": None if ratio is None else round(ratio, 2)
                },
            }
        )
    )


if __name__ == "__main__":
    main()
