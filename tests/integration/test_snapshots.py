"""Snapshots end to end on real bookie processes and a real ZooKeeper.

* A million commands, a snapshot taken on demand through `rsm snapshot create`,
  the log truncated below it: the bookies' disk usage drops (garbage collection
  and compaction in the `bookie serve` processes), and a replica restarted from
  the snapshot plus the log's tail has the leader's state hash.
* A bookie SIGKILLed while it compacts the entry logs the truncation emptied:
  after its restart every entry of every ledger still in use reads back
  byte-identical from it, and a new replica rebuilds the leader's state.
* A deliberately non-deterministic state machine run as `rsm run` processes:
  the followers' state hashes disagree with the leader's, and they say at which
  index, in their status and in their logs.

Replicas run in this process (except in the last test), each with its own
ZooKeeper session and ledger client, as `rsm run` would; the application name
is unique per test, since all tests share the session's ZooKeeper.
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.meta.zk import ZkMetadataStore
from bookie.storage.entry_log import entry_log_ids
from bookie.wire.messages import ReadResponse
from rsm.client import connect
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.state_machine import StateMachine, command, query
from rsm.runtime.log import LogStore
from rsm.runtime.replica import Replica
from rsm.snapshots.store import read_snapshots

from .support.disk import file_bytes
from .support.entries import read_all
from .support.processes import HOST, WAIT_S, BookieCluster, BookieProcess, BookieSetup
from .support.rsm_processes import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

ROOT = Path(__file__).resolve().parents[2]
KEYS = 10_000
"""Keys the commands overwrite: the live state stays small while the log grows."""
VALUE_BYTES = 100
CONCURRENCY = 2_000
"""Commands in flight: the leader's group commit puts hundreds in one ledger entry."""

BOOKIE_CONFIG: dict[str, object] = {
    # Small files, so that truncated ledgers leave whole entry logs and journals
    # to reclaim, and collection rounds often.
    "journal_file_size_bytes_max": 4 * 1024 * 1024,
    "journal_files_kept": 0,
    "entry_log_size_bytes_max": 4 * 1024 * 1024,
    "checkpoint_interval_ms": 200,
    "gc_interval_ms": 300,
}


class Registers(StateMachine):
    """Keys overwritten again and again: a long log over a small state."""

    def __init__(self) -> None:
        self.values: dict[int, bytes] = {}

    @command
    def put(self, key: int, value: bytes) -> None:
        self.values[key] = value

    @query
    def get(self, key: int) -> bytes | None:
        return self.values.get(key)


class Drifting(StateMachine):
    """Wrong on purpose: each replica process draws its own numbers."""

    def __init__(self) -> None:
        self.total = 0.0

    @command
    def drift(self) -> None:
        self.total += random.random()

    @query
    def get(self) -> float:
        return self.total


def app_name(zk_root: str) -> str:
    return "snapshots" + zk_root.replace("/", "-")


def replica_config(**overrides: Any) -> ReplicaConfig:
    values: dict[str, Any] = {
        # Segments roll by size too, so that a long log spans many of them however
        # the leader batches it (truncation frees whole segments, never the open one).
        "segment_entries_max": 200,
        "segment_bytes_max": 4 * 1024 * 1024,
        "snapshot_every_commands": 0,
        "snapshot_every_log_bytes": 0,
        "snapshot_every_ms": 0,
        "snapshot_check_interval_ms": 100,
        "retention_ms": 0,
        "state_hash_every_commands": 50_000,
        "retry_delay_ms": 50,
    }
    values.update(overrides)
    return ReplicaConfig(**values)


@asynccontextmanager
async def bookie_processes(
    zookeeper: LocalZooKeeper, zk_root: str, directory: Path, config: dict[str, object]
) -> AsyncIterator[tuple[BookieCluster, list[BookieSetup], list[BookieProcess]]]:
    async with BookieCluster(zookeeper, zk_root, directory) as cluster:
        setups = [cluster.add_bookie(ledger_dirs=1, config=config) for _ in range(3)]
        processes: dict[int, BookieProcess] = {}

        async def start(index: int) -> None:
            processes[index] = await cluster.start(setups[index], wait_for="bookie.ready")

        async with anyio.create_task_group() as task_group:
            for index in range(len(setups)):
                task_group.start_soon(start, index)
        yield cluster, setups, [processes[index] for index in range(len(setups))]


@asynccontextmanager
async def replica(
    zookeeper: LocalZooKeeper,
    zk_root: str,
    name: str,
    config: ReplicaConfig,
    machine: type[StateMachine] = Registers,
) -> AsyncIterator[Replica]:
    async with (
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
        LedgerClient.open(store, root=zk_root) as ledgers,
        Replica(
            machine,
            app=app_name(zk_root),
            store=store,
            ledgers=ledgers,
            replica_id=name,
            config=config,
        ) as running,
    ):
        yield running


def disk_bytes(setups: Sequence[BookieSetup]) -> int:
    """Bytes of the bookies' journals, entry logs and indexes."""
    return file_bytes(
        path
        for setup in setups
        for directory in (setup.journal_dir, *setup.ledger_dirs)
        for path in directory.rglob("*")
    )


async def put_all(leader: Replica, first: int, count: int) -> None:
    async def worker(start: int) -> None:
        for number in range(start, first + count, CONCURRENCY):
            await leader.call("put", number % KEYS, number.to_bytes(8, "big") * (VALUE_BYTES // 8))

    async with anyio.create_task_group() as task_group:
        for offset in range(min(CONCURRENCY, count)):
            task_group.start_soon(worker, first + offset)


async def create_snapshot(zookeeper: LocalZooKeeper, app: str) -> dict[str, Any]:
    """`rsm snapshot create --json`, run as the command line would."""
    words = ["snapshot", "create", "--app", app, "--zk", zookeeper.connect_string, "--json"]
    process = await anyio.run_process(
        [sys.executable, "-m", "rsm.tools.cli", *words],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    created: dict[str, Any] = json.loads(process.stdout)
    return created


@pytest.mark.slow
async def test_a_million_commands_snapshot_truncate_and_restart(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    commands = 1_000_000
    config = replica_config()
    async with (
        bookie_processes(zookeeper, zk_root, tmp_path, BOOKIE_CONFIG) as (_cluster, setups, _),
        AsyncExitStack() as stack,
    ):
        leader = await stack.enter_async_context(replica(zookeeper, zk_root, "a", config))
        await wait_for(lambda: leader.is_leader)
        follower = await stack.enter_async_context(replica(zookeeper, zk_root, "b", config))
        with anyio.fail_after(600):
            await put_all(leader, 0, commands)
        await wait_for(lambda: follower.applied_index == leader.applied_index, 60)
        before = disk_bytes(setups)

        created = await create_snapshot(zookeeper, app_name(zk_root))
        assert created["replica_id"] == "b", "the follower takes it"
        assert created["index"] >= commands
        await wait_for(lambda: leader.snapshots.truncations > 0)
        await wait_for(lambda: not leader.snapshots.value.garbage)
        # Give the bookies' collectors the time of a few rounds: deletion, then compaction.
        await wait_for(lambda: disk_bytes(setups) * 4 < before, 120)
        after = disk_bytes(setups)
        live = created["size_bytes"] * 3
        assert after < before / 4, (before, after)

        follower_state = follower.machine.state_hash()
        await stack.aclose()
        # A restart: a new replica beside the leader, from the snapshot and the tail.
        async with (
            replica(zookeeper, zk_root, "a", config) as leader,
            replica(zookeeper, zk_root, "c", config) as restarted,
        ):
            await wait_for(lambda: leader.is_leader, 60)
            await put_all(leader, commands, 1_000)
            assert restarted.snapshots.last_loaded is not None
            assert restarted.snapshots.last_loaded["index"] == created["index"]
            await wait_for(lambda: restarted.applied_index == leader.applied_index, 60)
            assert restarted.machine.state_hash() == leader.machine.state_hash()
            assert leader.machine.state_hash() != follower_state
            assert restarted.status()["state_hashes"]["divergences"] == 0
        print(json.dumps({"disk_before": before, "disk_after": after, "snapshot_x3": live}))


async def read_ledgers_from(
    setup: BookieSetup, ledgers: dict[int, int]
) -> dict[tuple[int, int], bytes | None]:
    """Every entry 0..last of `ledgers` (id -> last entry id) as one bookie holds it."""
    wanted = [
        (ledger_id, entry) for ledger_id, last in ledgers.items() for entry in range(last + 1)
    ]
    async with BookieConnection.connect(HOST, setup.port) as connection:
        outcomes = await read_all(connection, wanted)
    return {
        key: outcome.packet if isinstance(outcome, ReadResponse) and not outcome.status else None
        for key, outcome in outcomes.items()
    }


async def tenant(
    leader: Replica, ledgers: LedgerClient, until_index: int, done: anyio.Event
) -> int:
    """Another user of the bookies: a plain ledger written alongside the application's log,
    one small entry per 50 commands, so that every entry log holds some of both.  Its
    ledger id, once closed."""
    handle = await ledgers.create_ledger(3, 3, 2, password=b"tenant")
    entry = 0
    while leader.applied_index < until_index:
        mark = 50 * (entry + 1)
        await wait_for(lambda mark=mark: leader.applied_index >= mark or done.is_set(), 120)
        if done.is_set():
            break
        await handle.append(f"tenant {entry} ".encode() * 64)
        entry += 1
    await handle.close()
    return handle.ledger_id


@pytest.mark.slow
async def test_a_bookie_killed_while_compacting_loses_nothing(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    config = replica_config(segment_entries_max=20)
    commands = 60_000
    # Compaction slowed down, so that it is still copying when the bookie is killed.
    bookie_config = {**BOOKIE_CONFIG, "compaction_rate_bytes_per_s": 256 * 1024}
    async with (
        bookie_processes(zookeeper, zk_root, tmp_path, bookie_config) as (cluster, setups, bookies),
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
        LedgerClient.open(store, root=zk_root) as ledgers,
        replica(zookeeper, zk_root, "a", config) as leader,
    ):
        await wait_for(lambda: leader.is_leader)
        victim = setups[0]
        async with replica(zookeeper, zk_root, "b", config) as follower:
            done = anyio.Event()
            tenant_ledger: list[int] = []

            async def write_tenant() -> None:
                tenant_ledger.append(await tenant(leader, ledgers, commands, done))

            async with anyio.create_task_group() as task_group:
                task_group.start_soon(write_tenant)
                await put_all(leader, 0, commands)
                done.set()
            await wait_for(lambda: follower.applied_index == leader.applied_index, 60)
            logs_before = set(entry_log_ids(victim.ledger_dirs[0]))
            await follower.take_snapshot()
            await wait_for(lambda: leader.snapshots.truncations > 0)
            await wait_for(lambda: not leader.snapshots.value.garbage)

            def compacting() -> bool:
                # After the load, only compaction creates entry logs: its outputs.
                return bool(set(entry_log_ids(victim.ledger_dirs[0])) - logs_before)

            await wait_for(compacting, 60)
            bookies[0].kill()
            assert await bookies[0].wait_exit() == -9
        await cluster.start(victim, wait_for="bookie.ready")

        layout = AppLayout.of(app_name(zk_root))
        log, _version = await LogStore(store, layout).read()
        value, _version = await read_snapshots(store, layout)
        in_use = [s.ledger_id for s in log.segments if not s.is_open]
        in_use += [m.ledger_id for m in value.snapshots] + tenant_ledger
        last_entries: dict[int, int] = {}
        for ledger_id in in_use:
            metadata = await ledgers.ledger_metadata(ledger_id)
            assert metadata.is_closed
            last_entries[ledger_id] = metadata.last_entry_id
        restarted = await read_ledgers_from(victim, last_entries)
        witness = await read_ledgers_from(setups[1], last_entries)
        assert restarted == witness
        assert all(packet is not None for packet in restarted.values())

        async with replica(zookeeper, zk_root, "c", config) as fresh:
            await put_all(leader, commands, 100)
            await wait_for(lambda: fresh.applied_index == leader.applied_index, 60)
            assert fresh.machine.state_hash() == leader.machine.state_hash()


@pytest.mark.slow
async def test_non_deterministic_replicas_are_caught_by_their_state_hashes(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    app = app_name(zk_root)
    async with (
        bookie_processes(zookeeper, zk_root, tmp_path, BOOKIE_CONFIG) as (_cluster, _setups, _),
        anyio.create_task_group() as task_group,
    ):
        logs: dict[str, list[dict[str, Any]]] = {}
        changed = anyio.Event()
        processes = []

        async def run(name: str) -> None:
            nonlocal changed
            command = [
                sys.executable,
                "-m",
                "rsm.tools.cli",
                "run",
                "tests.integration.test_snapshots:Drifting",
                "--app",
                app,
                "--zk",
                zookeeper.connect_string,
                "--ledger-root",
                zk_root,
                "--listen",
                f"{HOST}:{free_port(HOST)}",
                "--replica-id",
                name,
                "--state-hash-every",
                "10",
            ]
            environment = {**os.environ, "PYTHONPATH": str(ROOT)}
            async with await anyio.open_process(command, cwd=ROOT, env=environment) as process:
                processes.append(process)
                stderr = process.stderr
                assert stderr is not None
                buffer = b""
                events = logs.setdefault(name, [])
                async for chunk in stderr:
                    buffer += chunk
                    *lines, buffer = buffer.split(b"\n")
                    events.extend(json.loads(line) for line in lines if line.startswith(b"{"))
                    changed.set()
                    changed = anyio.Event()

        def seen(name: str, event: str) -> bool:
            return any(e.get("event") == event for e in logs.get(name, []))

        task_group.start_soon(run, "a")
        with anyio.fail_after(WAIT_S):
            while not seen("a", "rsm.leader"):
                await changed.wait()
        for name in ("b", "c"):
            task_group.start_soon(run, name)
        with anyio.fail_after(WAIT_S):
            while not (seen("b", "rsm.ready") and seen("c", "rsm.ready")):
                await changed.wait()
        async with connect(app, zk=zookeeper.connect_string) as client:
            for _ in range(30):
                await client.call("drift")
            members = await client.replicas()
            statuses = {name: await client.status(members[name]) for name in ("a", "b", "c")}
            with anyio.fail_after(WAIT_S):
                while not all(statuses[name]["state_hashes"]["divergences"] for name in ("b", "c")):
                    await client.call("drift")
                    statuses = {name: await client.status(members[name]) for name in ("b", "c")}
        for name in ("b", "c"):
            diverged_at = statuses[name]["state_hashes"]["diverged_at"]
            assert diverged_at is not None
            with anyio.fail_after(WAIT_S):
                while not seen(name, "rsm.diverged"):
                    await changed.wait()
            alarm = next(e for e in logs[name] if e["event"] == "rsm.diverged")
            assert alarm["index"] == diverged_at
            assert alarm["level"] == "error"
        for process in processes:
            process.kill()
        task_group.cancel_scope.cancel()
