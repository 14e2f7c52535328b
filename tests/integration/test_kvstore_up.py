"""`kvstore up` as a user runs it: a banner with a redis-cli line per replica, `kvstore status`,
Ctrl-C stopping everything cleanly, and a second run resuming the same data on the same ports.

The session's ZooKeeper stands in for the launcher's own (`--zk` with the
test's chroot), so the test does not start a second Java process; the
bookies and the replicas are real processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest
import redis

from bookie.local.zookeeper import LocalZooKeeper

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

WAIT_S = 90.0
LAST_BANNER_LINE = "Ctrl-C stops"
STATUS_LINE = re.compile(r"Status: (.*)$")
TRY_LINE = re.compile(
    r"^\s+(kv-\d)\s+127\.0\.0\.1:(\d+)\s+(leader|follower)\s+try: redis-cli -p (\d+)$"
)


def kvstore(*args: str) -> list[str]:
    return [sys.executable, "-m", "kvstore.tools.cli", *args]


async def read_until(process: anyio.abc.Process, marker: str, lines: list[str]) -> None:
    assert process.stdout is not None
    pending = b""
    with anyio.fail_after(WAIT_S):
        async for chunk in process.stdout:
            pending += chunk
            *complete, pending = pending.split(b"\n")
            lines.extend(line.decode() for line in complete)
            if any(marker in line for line in lines):
                return
    raise AssertionError(f"stdout ended before {marker!r}:\n" + "\n".join(lines))


@contextlib.asynccontextmanager
async def kvstore_up(data_dir: Path, zk: str, lines: list[str]) -> AsyncIterator[anyio.abc.Process]:
    """`kvstore up` on free ports, once its banner is in `lines` (its output goes on there).

    If the block fails with the store still running, Ctrl-C stops it, so no bookie or
    replica outlives the test (and leaving the block does not wait forever)."""
    async with await anyio.open_process(
        kvstore(
            "up",
            "--data-dir",
            str(data_dir),
            "--zk",
            zk,
            "--base-port",
            "0",
        ),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    ) as process:
        try:
            await read_until(process, LAST_BANNER_LINE, lines)
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)


async def run_once(data_dir: Path, zk: str, work: str) -> list[str]:
    """One `kvstore up` run up to its banner, `work` done with redis-py and `kvstore status`
    while it runs, then Ctrl-C; its output."""
    lines: list[str] = []
    async with kvstore_up(data_dir, zk, lines) as process:
        replicas = [match.groups() for line in lines if (match := TRY_LINE.match(line))]
        assert [name for name, *_ in replicas] == ["kv-1", "kv-2", "kv-3"], lines
        assert sum(role == "leader" for _, _, role, _ in replicas) == 1
        assert all(port == shown for _, port, _, shown in replicas)
        port = int(replicas[1][1])
        with redis.Redis(port=port) as client:
            if work == "write":
                assert client.set("greeting", "hello")
                assert client.set("visits", 1)
            else:
                assert client.get("greeting") == b"hello", "the data survived the restart"
                assert client.incr("visits") == 2
        # The banner's own status command, as a user would paste it.
        (status_command,) = [found[1] for line in lines if (found := STATUS_LINE.search(line))]
        status = subprocess.run(
            shlex.split(status_command),
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=True,
        ).stdout
        assert "leader kv-" in status
        assert "under-replicated ledgers: none" in status
        for name, port_text, role, _ in replicas:
            assert re.search(
                rf"^{name}\s+127\.0\.0\.1:{port_text}\s+{role}\s+\d+\s+\d+\s+\d+\s+"
                rf"redis-cli -p {port_text}$",
                status,
                re.MULTILINE,
            ), status
        report = json.loads(
            subprocess.run(
                kvstore("status", "--data-dir", str(data_dir), "--json"),
                capture_output=True,
                text=True,
                timeout=WAIT_S,
                check=True,
            ).stdout
        )
        assert len(report["bookies"]["writable"]) == 3
        assert report["under_replication"]["ledgers"] == 0
        assert report["under_replication"]["enabled"] is True
        assert {entry["resp"] for entry in report["replicas"]} == {
            f"127.0.0.1:{port_text}" for _, port_text, _, _ in replicas
        }
        process.send_signal(signal.SIGINT)
        await read_until(process, "Stopped.", lines)
        with anyio.fail_after(WAIT_S):
            assert await process.wait() == 0
    return lines


def ports(lines: list[str]) -> list[str]:
    """The Redis ports the banner in `lines` shows, in replica order."""
    return [match.group(2) for line in lines if (match := TRY_LINE.match(line))]


async def test_up_runs_stops_and_resumes(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    zk = zookeeper.connect_string + zk_root
    first = await run_once(data_dir, zk, "write")
    second = await run_once(data_dir, zk, "read")
    assert any("Key-value store up (new" in line for line in first)
    assert any("Key-value store up (resumed" in line for line in second)
    assert ports(first) == ports(second), "the same ports again"
    for number in (1, 2, 3):
        log = (data_dir / f"kv-{number}" / "replica.log").read_text()
        assert log.count('"kvstore.ready"') == 2
        assert '"rsm.replica_stopped"' in log


def pid_of(*words: str) -> int:
    """The process whose command line holds every one of `words`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command_line = (entry / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue  # gone meanwhile
            if all(word in command_line for word in words):
                found.append(int(entry.name))
    assert len(found) == 1, (words, found)
    return found[0]


async def test_up_reports_a_replica_or_bookie_that_dies_and_keeps_the_others(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    zk = zookeeper.connect_string + zk_root
    lines: list[str] = []
    async with kvstore_up(data_dir, zk, lines) as process:
        os.kill(pid_of(str(data_dir / "bookie-2")), signal.SIGKILL)
        await read_until(process, "bookie-2 (127.0.0.1:", lines)
        os.kill(pid_of("--replica-id", "kv-3", zk_root), signal.SIGKILL)
        await read_until(process, "kv-3 exited", lines)
        assert process.returncode is None, "the others keep running"
        process.send_signal(signal.SIGINT)
        await read_until(process, "Stopped.", lines)
        with anyio.fail_after(WAIT_S):
            assert await process.wait() == 0
    reports = [line for line in lines if "exited with status" in line]
    assert [line.split(" exited")[0].split(" (")[0] for line in reports] == ["bookie-2", "kv-3"]
    assert all("status -9;" in line and "Its log: " in line for line in reports), reports
