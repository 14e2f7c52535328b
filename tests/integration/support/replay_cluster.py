"""A cluster holding one application's log with a known history, for the replay tools' tests.

`write_known_history` writes the log with `rsm.testing.logs.LogWriter` through the
real `Notes` class (tests/integration/support/replay_apps.py): three
segments of epochs 1, 2 and 3, each opened by a leader-start marker; fixed
times, seeds and sessions; a state hash recorded every `HASH_EVERY`
commands and logged by the next batch, as a leader does.  `HistoryCluster`
starts three bookie processes, writes that log, and runs `rsm` commands as a
user would (`rsm`).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.log_state import Log
from rsm.testing.logs import Call, LogWriter

from .processes import BookieCluster
from .replay_apps import Notes

ROOT = Path(__file__).resolve().parents[3]
HASH_EVERY = 5
CONFIG = ReplicaConfig(state_hash_every_commands=HASH_EVERY)
T0 = 1_700_000_000_000
"""2023-11-14T22:13:20.000Z"""
CLIENT = bytes.fromhex("c1c1c1c1")
NOTES = "tests.integration.support.replay_apps:Notes"


async def write_known_history(writer: LogWriter) -> None:
    """The log every test of the tools reads (see the module docstring); 29 commands."""
    seq = 0

    def session(name: str, *args: str) -> Call:
        nonlocal seq
        seq += 1
        return Call(name, args, client_id=CLIENT, seq=seq, ack_seq=seq - 1)

    await writer.segment(1, leader="r1", time_ms=T0)  # index 1
    await writer.batch([Call("put", ("a", "one")), Call("put", ("b", "two"))], time_ms=T0 + 10)
    await writer.batch([session("incr", "a"), session("incr", "a")], time_ms=T0 + 20, seed=7)
    await writer.batch([Call("tag", ("a", "x", "y", "z", "w"))], time_ms=T0 + 30)  # index 6
    await writer.batch([Call("put", ("c", "low")), Call("incr", ("c",))], time_ms=T0 + 40)
    await writer.segment(2, leader="r2", time_ms=T0 + 1_000)  # index 9
    await writer.batch([session("incr", "b"), Call("put", ("a", "uno"))], time_ms=T0 + 1_010)
    await writer.batch([Call("tag", ("b", "p", "q", "r", "s", "t"))], time_ms=T0 + 1_020)
    await writer.batch([Call("incr", ("a",)) for _ in range(4)], time_ms=T0 + 1_030, seed=9)
    await writer.segment(3, leader="r1", time_ms=T0 + 2_000)  # index 17
    await writer.batch([Call("put", ("c", "again")), session("incr", "b")], time_ms=T0 + 2_010)
    await writer.batch([Call("put", ("d", str(n))) for n in range(6)], time_ms=T0 + 2_020)
    await writer.batch([Call("incr", ("d",)), Call("put", ("e", "end"))], time_ms=T0 + 2_030)
    await writer.batch([Call("incr", ("a",)), Call("incr", ("e",))], time_ms=T0 + 2_040)
    assert writer.last_index == 29


@dataclass
class HistoryCluster:
    zookeeper: LocalZooKeeper
    zk_root: str
    app: str
    log: Log

    @property
    def source(self) -> list[str]:
        """The `rsm` options naming the known history's log."""
        return self.source_of(self.app)

    def source_of(self, app: str) -> list[str]:
        """The `rsm` options naming the log of application `app` on this cluster."""
        return ["--app", app, "--zk", self.zookeeper.connect_string, "--ledger-root", self.zk_root]

    @asynccontextmanager
    async def clients(self) -> AsyncIterator[tuple[ZkMetadataStore, LedgerClient]]:
        """A metadata store and a ledger client of this cluster, for writing other logs."""
        async with (
            ZkMetadataStore.connect(self.zookeeper.connect_string) as store,
            LedgerClient.open(store, root=self.zk_root) as ledgers,
        ):
            yield store, ledgers

    @property
    def ledgers(self) -> list[int]:
        return [segment.ledger_id for segment in self.log.segments]


@asynccontextmanager
async def history_cluster(
    zookeeper: LocalZooKeeper, zk_root: str, directory: Path
) -> AsyncIterator[HistoryCluster]:
    """Three bookies under `zk_root` (the application's ledgers live there too, as its
    default `/ledgers` would be: the commands pass `--ledger-root`), holding the log."""
    app = "notes" + zk_root.replace("/", "-")
    async with BookieCluster(zookeeper, zk_root, directory) as bookies:
        setups = [bookies.add_bookie(ledger_dirs=1) for _ in range(3)]
        async with anyio.create_task_group() as task_group:
            for setup in setups:
                task_group.start_soon(
                    functools.partial(bookies.start, setup, wait_for="bookie.ready")
                )
        async with (
            ZkMetadataStore.connect(zookeeper.connect_string) as store,
            LedgerClient.open(store, root=zk_root) as ledgers,
        ):
            writer = LogWriter(store, ledgers, app, Notes, CONFIG)
            await write_known_history(writer)
            log = await writer.finish()
        yield HistoryCluster(zookeeper, zk_root, app, log)


async def rsm(
    *words: str, stdin: bytes | None = None, hash_seed: int | None = None
) -> tuple[int, str, str]:
    """Run `rsm WORDS` as a user would, with `stdin` as its input (and PYTHONHASHSEED
    `hash_seed`); (exit status, stdout, stderr)."""
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}"}
    if hash_seed is not None:
        environment["PYTHONHASHSEED"] = str(hash_seed)
    result = await anyio.run_process(
        [sys.executable, "-m", "rsm.tools.cli", *words],
        input=stdin,
        cwd=ROOT,
        env=environment,
        check=False,
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()
