"""`python -m bookie.local.cluster` (what `make run` starts), as a user runs it: it prints
where everything is once the bookies are registered, refuses a second launcher on the
same data directory, stops cleanly on Ctrl-C (SIGINT), and a second run resumes the same
cluster (same bookie addresses, same cookies).  The session's ZooKeeper stands in for
the launcher's own (`--zk`), so the test does not start a second Java process."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.abc
import pytest

from bookie.local.cluster import LocalCluster
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import list_bookies
from bookie.meta.zk import ZkMetadataStore

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

WAIT_S = 60.0
LAST_BANNER_LINE = "Ctrl-C stops"


async def read_until(process: anyio.abc.Process, marker: str, lines: list[str]) -> None:
    """Append stdout lines to `lines` until one contains `marker` (or stdout ends)."""
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


def launcher(data_dir: Path, zookeeper: LocalZooKeeper, zk_root: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bookie.local.cluster",
        "--data-dir",
        str(data_dir),
        "--bookies",
        "2",
        "--zk",
        zookeeper.connect_string,
        "--zk-root",
        zk_root,
    ]


async def run_once(
    data_dir: Path, zookeeper: LocalZooKeeper, zk_root: str, store: ZkMetadataStore
) -> list[str]:
    """One launcher run up to its banner, checks while it runs, then Ctrl-C; its output."""
    lines: list[str] = []
    async with await anyio.open_process(
        launcher(data_dir, zookeeper, zk_root),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    ) as process:
        await read_until(process, LAST_BANNER_LINE, lines)
        bookie_lines = [line.split() for line in lines if line.strip().startswith("bookie-")]
        addresses = [words[1] for words in bookie_lines if "log" in words]
        assert len(addresses) == 2, lines
        admins = [words[1] for words in bookie_lines if words[1].startswith("http://")]
        assert len(admins) == 2, lines
        registered = await list_bookies(store, zk_root)
        assert set(registered.writable) == set(addresses)

        second = subprocess.run(
            launcher(data_dir, zookeeper, zk_root),
            capture_output=True,
            text=True,
            timeout=WAIT_S,
            check=False,
        )
        assert second.returncode == 1
        assert "another local cluster is running" in second.stderr

        process.send_signal(signal.SIGINT)
        await read_until(process, "Stopped.", lines)
        with anyio.fail_after(WAIT_S):
            assert await process.wait() == 0
    remaining = await list_bookies(store, zk_root)
    assert not remaining.writable
    assert not remaining.read_only
    return lines


async def test_local_cluster_runs_stops_and_resumes(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    async with ZkMetadataStore.connect(zookeeper.connect_string) as store:
        first = await run_once(data_dir, zookeeper, zk_root, store)
        second = await run_once(data_dir, zookeeper, zk_root, store)
    assert any("Local cluster up (new" in line for line in first)
    assert any("Local cluster up (resumed" in line for line in second)
    # The bookies' lines (not their admin APIs', whose ports are chosen at each start).
    first_bookies = [
        line for line in first if line.strip().startswith("bookie-") and " log " in line
    ]
    second_bookies = [
        line for line in second if line.strip().startswith("bookie-") and " log " in line
    ]
    assert first_bookies == second_bookies
    for number in (1, 2):
        log = (data_dir / f"bookie-{number}" / "bookie.log").read_text()
        assert log.count('"bookie.cookies_written"') == 1
        assert log.count('"bookie.stopped"') == 2


async def test_a_restarted_bookie_counts_once_its_new_process_registered(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """After kill -9 the old process's registration stays until ZooKeeper expires its session
    (seconds): `restart` must wait for the new process's, not take the old one for it."""
    async with (
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
        LocalCluster(
            tmp_path / "data",
            bookies=1,
            zk_servers=zookeeper.connect_string,
            zk_root=zk_root,
            bookie_base_port=0,
            # Sooner gone, the old process's session: the test waits for its expiry.
            bookie_config={"zk_session_timeout_ms": 2_000},
        ) as cluster,
    ):
        bookie = cluster.bookies[0]
        before = (await list_bookies(store, zk_root)).sessions[bookie.bookie_id]
        cluster.kill(bookie.name)
        with anyio.fail_after(WAIT_S):
            await cluster.restart(bookie.name)
        after = (await list_bookies(store, zk_root)).sessions.get(bookie.bookie_id)
        assert after is not None
        assert after != before
