"""The investigation commands beside live replicas: read only, and equal to a replica.

Two replicas of `Notes` (tests/integration/support/replay_apps.py) run in
this process on three bookie processes; clients' commands are logged in small
segments, a follower takes a snapshot and the leader truncates the log below
it.  Then, with the replicas still running:

* `rsm replay` (from that snapshot, the default) ends with the leader's state
  hash at the leader's applied index; from the start it refuses, naming the
  snapshot that covers the truncated range;
* `rsm verify` checks every state hash the leader logged against the replay;
* `rsm log check` finds the log whole, its OPEN segment included;
* the leader keeps its term: nothing was fenced, a command still commits in
  the same epoch.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.runtime.replica import Replica

from .support.processes import WAIT_S, BookieCluster
from .support.replay_apps import Notes
from .support.replay_cluster import NOTES, ROOT, rsm
from .support.rsm_processes import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

CONFIG = ReplicaConfig(
    segment_entries_max=4,
    snapshot_every_commands=0,
    snapshot_every_log_bytes=0,
    snapshot_every_ms=0,
    snapshot_check_interval_ms=100,
    retention_ms=0,
    state_hash_every_commands=10,
    retry_delay_ms=50,
)


@asynccontextmanager
async def replica(
    zookeeper: LocalZooKeeper, zk_root: str, app: str, name: str
) -> AsyncIterator[Replica]:
    async with (
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
        LedgerClient.open(store, root=zk_root) as ledgers,
        Replica(
            Notes, app=app, store=store, ledgers=ledgers, replica_id=name, config=CONFIG
        ) as running,
    ):
        yield running


async def load(leader: Replica, first: int, count: int) -> None:
    async def client(number: int) -> None:
        for step in range(first + number, first + count, 8):
            await leader.call("put", f"k{step % 13}", f"v{step}")
            await leader.call("incr", f"n{step % 5}")
            if step % 7 == 0:
                await leader.call("tag", f"t{step}", "x", "y", str(step))

    async with anyio.create_task_group() as task_group:
        for number in range(8):
            task_group.start_soon(client, number)


async def test_tools_read_beside_live_replicas_and_agree_with_them(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    app = "live" + zk_root.replace("/", "-")
    source = ["--app", app, "--zk", zookeeper.connect_string, "--ledger-root", zk_root]
    async with BookieCluster(zookeeper, zk_root, tmp_path) as bookies, AsyncExitStack() as stack:
        setups = [bookies.add_bookie(ledger_dirs=1) for _ in range(3)]
        for setup in setups:
            await bookies.start(setup, wait_for="bookie.ready")
        leader = await stack.enter_async_context(replica(zookeeper, zk_root, app, "a"))
        await wait_for(lambda: leader.is_leader)
        follower = await stack.enter_async_context(replica(zookeeper, zk_root, app, "b"))
        await load(leader, 0, 120)
        snapshot = await follower.take_snapshot()
        await wait_for(lambda: leader.snapshots.truncations > 0)
        await load(leader, 120, 80)
        await wait_for(lambda: follower.applied_index == leader.applied_index)
        epoch = leader.status()["epoch"]
        index = leader.applied_index

        code, out, err = await rsm(
            "replay", *source, "--class", NOTES, "--to", str(index), "--json"
        )
        assert code == 0, err
        report = json.loads(out)
        assert report["index"] == index
        assert report["from_snapshot"] == snapshot["index"]
        assert report["state_hash"] == leader.machine.state_hash().hex()

        # The log is truncated: its export carries the snapshot, and replays with no cluster.
        exported = tmp_path / "live.rsmlog"
        words = ["log", "export", *source, "--to", str(exported), "--through", str(index)]
        code, out, err = await rsm(*words, "--json")
        assert code == 0, err
        assert json.loads(out)["snapshot"] == snapshot["index"]
        code, out, err = await rsm("replay", "--log", str(exported), "--class", NOTES, "--json")
        assert code == 0, err
        from_file = json.loads(out)
        assert (from_file["index"], from_file["from_snapshot"]) == (index, snapshot["index"])
        assert from_file["state_hash"] == leader.machine.state_hash().hex()

        code, out, err = await rsm("replay", *source, "--class", NOTES, "--from-start")
        assert (code, out) == (2, "")
        assert f"the snapshots at indexes {snapshot['index']} cover the rest" in err

        code, out, err = await rsm("verify", *source, "--class", NOTES, "--state-hash-every", "10")
        assert code == 0, out + err
        matched = int(out.split(": ")[1].split()[0])
        logged = leader.status()["state_hashes"]["newest_index"]
        assert matched >= (logged - snapshot["index"]) // 10 - 1 > 0, out

        code, out, err = await rsm("log", "check", *source, "--json")
        assert code == 0, out + err
        checked = json.loads(out)
        assert checked["open_segments"] == 1
        assert checked["problems"] == []
        assert checked["ok_up_to"] == checked["end_index"] >= index - 1

        # `log dump --follow` prints commands as they are logged, from the readable end on.
        words = ["log", "dump", *source, "--follow", "--json", "--limit", "3", "--command", "incr"]
        follow = await anyio.open_process(
            [sys.executable, "-m", "rsm.tools.cli", *words],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}"},
        )
        async with follow:
            with anyio.fail_after(WAIT_S):
                while follow.returncode is None:
                    # Until it printed three and ended: it may start after some of these.
                    await leader.call("incr", "after")
            assert follow.stdout is not None
            printed = b"".join([chunk async for chunk in follow.stdout]).decode()
        followed = [json.loads(line) for line in printed.splitlines()]
        assert [line["command"] for line in followed] == ["incr"] * 3
        assert [line["args"] for line in followed] == [["after"]] * 3
        first = followed[0]["index"]
        assert first > index
        # Nothing was fenced: the leader still commits in its own epoch.
        assert await leader.call("incr", "more") == 1
        assert leader.is_leader
        assert leader.status()["epoch"] == epoch
