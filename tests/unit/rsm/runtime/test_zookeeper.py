"""The runtime on a real ZooKeeper: election, failover, the blocking client, the CLI,
and `rsm run` as a process."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.api import MetadataStore
from bookie.meta.zk import ZkMetadataStore
from rsm.client import connect, connect_sync
from rsm.tools import cli
from tests.unit.bookie.client.cluster import LocalCluster
from tests.unit.rsm.runtime.harness import APP, Replicas, wait_until
from tests.unit.rsm.runtime.test_failover import all_converge_to, start_three

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper]

ROOT = Path(__file__).resolve().parents[4]


@asynccontextmanager
async def zk_replicas(zookeeper: LocalZooKeeper, zk_root: str) -> AsyncIterator[Replicas]:
    def sessions() -> AbstractAsyncContextManager[MetadataStore]:
        return ZkMetadataStore.connect(zookeeper.connect_string, root=zk_root)

    async with LocalCluster.start(sessions) as cluster, anyio.create_task_group() as task_group:
        yield Replicas(cluster, task_group)
        task_group.cancel_scope.cancel()


async def test_failover_on_zookeeper(zookeeper: LocalZooKeeper, zk_root: str) -> None:
    async with zk_replicas(zookeeper, zk_root) as replicas:
        leader = await start_three(replicas)
        async with connect(APP, zk=zookeeper.connect_string, zk_root=zk_root) as client:
            for _ in range(5):
                await client.call("add", 1)
            await replicas.kill(leader.replica_id)
            assert await client.call("add", 1) == 6
            successor = await replicas.wait_leader()
            assert successor.epoch == leader.epoch + 1
            assert await client.query("get", consistency="read_your_writes") == 6
        await all_converge_to(replicas, 6)


async def test_blocking_client_and_command_line(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zk = f"{zookeeper.connect_string}{zk_root}"
    async with zk_replicas(zookeeper, zk_root) as replicas:
        leader = await start_three(replicas)
        await wait_until(
            lambda: all(r.replica.status()["candidate"] for r in replicas.running.values())
        )

        def script() -> list[object]:
            with connect_sync(APP, zk=zookeeper.connect_string, zk_root=zk_root) as client:
                seen: list[object] = [client.call("add", 3), client.query("get")]
            seen.append(cli.main(["call", "--app", APP, "--zk", zk, "add", "4", "--json"]))
            seen.append(cli.main(["query", "--app", APP, "--zk", zk, "get"]))
            seen.append(cli.main(["status", "--app", APP, "--zk", zk, "--json"]))
            seen.append(cli.main(["call", "--app", APP, "--zk", zk, "fail", "oops"]))
            seen.append(cli.main(["transfer-leadership", "--app", APP, "--zk", zk, "--json"]))
            return seen

        results = await anyio.to_thread.run_sync(script)
        assert results == [
            3,
            3,
            cli.EXIT_OK,
            cli.EXIT_OK,
            cli.EXIT_OK,
            cli.EXIT_FAILED,
            cli.EXIT_OK,
        ]
        out, err = capsys.readouterr()
        called, queried, status, transferred = out.strip().splitlines()
        assert json.loads(called)["result"] == 7
        assert json.loads(queried) == 7
        report = json.loads(status)
        assert report["leader"]["replica_id"] == leader.replica_id
        assert sorted(r["role"] for r in report["replicas"]) == ["follower", "follower", "leader"]
        assert all(r["lag"] == 0 or r["role"] == "follower" for r in report["replicas"])
        assert "error: ValueError: oops" in err
        assert json.loads(transferred)["target"] != leader.replica_id
        successor = await replicas.wait_leader(exclude=leader.replica_id)
        assert successor.applied_index >= 3


async def test_a_call_with_no_replica_running_says_so_at_once(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not after the client's deadline for a leader: the command line asks who is there."""
    zk = f"{zookeeper.connect_string}{zk_root}"
    async with zk_replicas(zookeeper, zk_root) as replicas:
        await replicas.start("a")
        leader = await replicas.wait_leader()
        await leader.call("add", 1)
        await replicas.stop("a")

        def script() -> list[int]:
            return [
                cli.main(["call", "--app", APP, "--zk", zk, "add", "1"]),
                cli.main(["query", "--app", APP, "--zk", zk, "get"]),
                cli.main(["status", "--app", APP, "--zk", zk]),
                cli.main(["call", "--app", "nosuchapp", "--zk", zk, "add", "1"]),
            ]

        codes = await anyio.to_thread.run_sync(script)
    assert codes == [cli.EXIT_FAILED, cli.EXIT_FAILED, cli.EXIT_OK, cli.EXIT_USAGE]
    out, err = capsys.readouterr()
    running = f"error: Unavailable: no replica of {APP} is running (start one with rsm run)\n"
    missing = "error: NoSuchApplication: there is no application 'nosuchapp' in this ZooKeeper\n"
    assert err == running * 2 + missing
    assert "\nno replica is running: start one with rsm run\n" in out


async def test_rsm_run_serves_until_sigterm_then_stops_gracefully(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zk = f"{zookeeper.connect_string}{zk_root}"
    async with zk_replicas(zookeeper, zk_root):
        command = [
            sys.executable,
            "-m",
            "rsm.tools.cli",
            "run",
            "tests.unit.rsm.core.counter:Counter",
            "--app",
            APP,
            "--zk",
            zk,
            "--listen",
            "127.0.0.1:0",
        ]
        environment = {**os.environ, "PYTHONPATH": str(ROOT)}
        async with await anyio.open_process(command, cwd=ROOT, env=environment) as process:
            stderr = process.stderr
            assert stderr is not None
            events: list[dict[str, object]] = []
            buffer = b""

            async def read_events(until: str) -> None:
                nonlocal buffer
                while not any(event.get("event") == until for event in events):
                    buffer += await stderr.receive()
                    *lines, buffer = buffer.split(b"\n")
                    events.extend(json.loads(line) for line in lines if line.startswith(b"{"))

            with anyio.fail_after(30):
                await read_events("rsm.leader")

            def call() -> int:
                return cli.main(["call", "--app", APP, "--zk", zk, "add", "5"])

            assert await anyio.to_thread.run_sync(call) == cli.EXIT_OK
            assert capsys.readouterr().out.strip() == "5"
            process.send_signal(signal.SIGTERM)
            with anyio.fail_after(30):
                await read_events("rsm.replica_stopped")
                assert await process.wait() == 0
        names = [event["event"] for event in events]
        assert names.index("rsm.ready") < names.index("rsm.stop_requested")
        [ready] = [event for event in events if event["event"] == "rsm.ready"]
        assert ready["pid"] == process.pid, "the pid to kill it by"
        # The only replica closed its segment for whichever replica comes next.
        [handed_over] = [event for event in events if event["event"] == "rsm.handed_over"]
        assert handed_over["target"] is None
