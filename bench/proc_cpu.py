"""CPU time of a process and of the whole machine, from Linux's /proc.

For the benchmarks that report CPU per request beside throughput: a figure
that drifts less than throughput on a shared machine, and says which process
the time goes to.  Times are user plus system, all threads, in seconds (the
kernel counts them in clock ticks, `SC_CLK_TCK` a second).
"""

from __future__ import annotations

import os
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
"""The unit of /proc's CPU times."""


def process_cpu_s(pid: int) -> float:
    """CPU time process `pid` has used so far (/proc/PID/stat: utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def machine_cpu_s() -> tuple[float, float]:
    """(busy, all) CPU time of the machine so far, summed over its cores (/proc/stat's
    first line: user, nice, system, idle, iowait, irq, softirq, steal; idle and iowait
    are not busy)."""
    first_line = Path("/proc/stat").read_text().split("\n", 1)[0]
    fields = [int(field) for field in first_line.split()[1:9]]
    all_ticks = sum(fields)
    return (all_ticks - fields[3] - fields[4]) / TICKS_PER_S, all_ticks / TICKS_PER_S


def tree_cpu_s(root: int) -> float:
    """CPU time process `root` and every process under it (those running now) have used so
    far, each with its waited-for children (/proc/PID/stat: utime + stime + cutime +
    cstime)."""
    parents: dict[int, int] = {}
    used: dict[int, int] = {}
    for directory in Path("/proc").iterdir():
        if not directory.name.isdigit():
            continue
        try:
            fields = (directory / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue  # ended since the listing
        pid = int(directory.name)
        parents[pid] = int(fields[1])
        used[pid] = sum(int(field) for field in fields[11:15])
    total = 0
    for pid, ticks in used.items():
        ancestor = pid
        while ancestor in parents and ancestor != root:
            ancestor = parents[ancestor]
        if ancestor == root:
            total += ticks
    return total / TICKS_PER_S
