"""Orphan ledgers with real processes: a process killed with SIGKILL right after creating a
segment ledger, before any log names it, leaves an orphan; the leader of a running `rsm
run` application deletes it once old enough, and every ledger its log names stays."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.errors import NoSuchLedgerError
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from rsm.core.layout import AppLayout
from rsm.runtime.log import LogStore

from .support.processes import WAIT_S
from .support.rsm_processes import RsmProcesses

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

ORPHAN_FLAGS = ("--orphan-safe-age-seconds", "1", "--orphan-check-interval-seconds", "1")


async def create_and_crash(cluster: RsmProcesses) -> int:
    """Run `crash_after_create` for the cluster's application, SIGKILL it once it printed
    its ledger id; return that id."""
    command = [
        sys.executable,
        "-m",
        "tests.integration.support.crash_after_create",
        cluster.zookeeper.connect_string,
        cluster.zk_root,
        cluster.app,
    ]
    async with await anyio.open_process(
        command, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    ) as process:
        assert process.stdout is not None
        with anyio.fail_after(WAIT_S):
            line = b""
            while not line.endswith(b"\n"):
                line += await process.stdout.receive()
        process.send_signal(signal.SIGKILL)
        await process.wait()
    return int(line)


async def test_a_ledger_left_by_a_crash_between_create_and_cas_is_deleted(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await cluster.start_bookies(3)
        leader = await cluster.start_replica("r1", flags=ORPHAN_FLAGS)
        async with cluster.client() as client:
            assert await client.call("add", "c1", 1) == 1
        orphan = await create_and_crash(cluster)
        event = await leader.wait_event("rsm.orphan_deleted", ledger_id=orphan)
        assert event["age_ms"] >= 1_000
        async with (
            ZkMetadataStore.connect(zookeeper.connect_string) as store,
            LedgerClient.open(store, root=zk_root) as ledgers,
        ):
            with pytest.raises(NoSuchLedgerError):
                await ledgers.ledger_metadata(orphan)
            log, _ = await LogStore(store, AppLayout.of(cluster.app)).read()
            assert log.segments
            for segment in log.segments:
                await ledgers.ledger_metadata(segment.ledger_id)  # still there
        assert [e["ledger_id"] for e in leader.named("rsm.orphan_deleted")] == [orphan]
        async with cluster.client() as client:
            assert await client.call("add", "c1", 2) == 2, "the application goes on"
