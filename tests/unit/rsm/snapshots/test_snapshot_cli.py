"""`rsm snapshot ls|create|inspect` against a real ZooKeeper, and their renderings."""

from __future__ import annotations

import json

import anyio
import pytest

from bookie.local.zookeeper import LocalZooKeeper
from rsm.tools import cli
from tests.unit.rsm.runtime.harness import APP, wait_until
from tests.unit.rsm.runtime.test_zookeeper import zk_replicas
from tests.unit.rsm.snapshots.support import snapshot_config

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper]


async def test_list_create_and_inspect_snapshots(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zk = f"{zookeeper.connect_string}{zk_root}"
    config = snapshot_config(truncation=False)
    async with zk_replicas(zookeeper, zk_root) as replicas:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        follower = await replicas.start("b", config=config)
        for _ in range(12):
            await leader.call("add", 2)
        await wait_until(lambda: follower.status()["caught_up"])
        await wait_until(lambda: follower.applied_index == leader.applied_index)

        def run(*words: str) -> int:
            return cli.main(["snapshot", *words, "--app", APP, "--zk", zk, "--json"])

        assert await anyio.to_thread.run_sync(run, "ls") == cli.EXIT_OK
        assert json.loads(capsys.readouterr().out)["snapshots"] == []
        assert await anyio.to_thread.run_sync(run, "create") == cli.EXIT_OK
        created = json.loads(capsys.readouterr().out)
        assert created["replica_id"] == follower.replica_id, "a follower takes it, not the leader"
        assert created["index"] == leader.applied_index
        assert await anyio.to_thread.run_sync(run, "ls") == cli.EXIT_OK
        listed = json.loads(capsys.readouterr().out)
        assert [m["index"] for m in listed["snapshots"]] == [created["index"]]
        assert listed["log_first_index"] == 1
        assert await anyio.to_thread.run_sync(run, "inspect") == cli.EXIT_OK
        inspected = json.loads(capsys.readouterr().out)
        assert inspected["valid"] is True
        assert inspected["header"]["index"] == created["index"]
        assert inspected["attributes"] == {"value": {"type": "int", "length": None}}

        def human(*words: str) -> int:
            return cli.main(["snapshot", *words, "--app", APP, "--zk", zk])

        assert await anyio.to_thread.run_sync(human, "ls") == cli.EXIT_OK
        table = capsys.readouterr().out.splitlines()
        assert table[2].split()[0] == "INDEX"
        assert table[3].split()[0] == str(created["index"])
        assert await anyio.to_thread.run_sync(human, "inspect") == cli.EXIT_OK
        assert ": valid" in capsys.readouterr().out
        # The leader's state is the snapshot's: asked for one, it says no new one was taken.
        own = ("create", "--replica", leader.replica_id)
        assert await anyio.to_thread.run_sync(human, *own) == cli.EXIT_OK
        assert capsys.readouterr().out == (
            f"no new snapshot: the newest, at index {created['index']} by "
            f"{follower.replica_id}, is as recent as {leader.replica_id}'s state; "
            f"{leader.replica_id} takes one of its own once a command is applied after it\n"
        )
        await leader.call("add", 1)
        assert await anyio.to_thread.run_sync(human, *own) == cli.EXIT_OK
        assert capsys.readouterr().out.endswith(f"by {leader.replica_id}\n")


def test_an_invalid_inspection_renders_its_error() -> None:
    report = {
        "valid": False,
        "error": "SnapshotCorrupt: chunk 3 fails its CRC32C",
        "manifest": {
            "app": "a",
            "index": 9,
            "epoch": 1,
            "ledger_id": 4,
            "size_bytes": 10,
            "chunk_count": 1,
            "sha256": "00",
            "state_hash": "11",
        },
    }
    assert "NOT VALID: SnapshotCorrupt: chunk 3" in cli.render_inspection(report)


def test_run_takes_the_snapshot_knobs() -> None:
    arguments = cli._parser().parse_args(
        [
            "run",
            "m:C",
            "--app",
            "a",
            "--zk",
            "z:1",
            "--listen",
            "h:1",
            "--snapshot-every-commands",
            "5",
            "--snapshot-log-growth-percent",
            "250",
            "--retention-seconds",
            "7",
            "--no-truncation",
            "--snapshot-capture",
            "inline",
        ]
    )
    assert arguments.snapshot_every_commands == 5
    assert arguments.snapshot_log_growth_percent == 250
    assert arguments.retention_seconds == 7
    assert arguments.no_truncation is True
    assert arguments.snapshot_capture == "inline"
