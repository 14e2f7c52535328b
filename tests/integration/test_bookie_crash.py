"""Crash consistency of a real bookie process: SIGKILL at random points, many times.

A writer streams pipelined adds to three ledgers through `BookieConnection`;
after a seeded-random number of acknowledgements the bookie is SIGKILLed
(small journal files, small entry logs and a checkpoint every few tens of
milliseconds, so kills land in every phase: mid-group, mid-checkpoint, at a
file roll).  After each restart, every add ever acknowledged must read back
byte-identical, the bookie's LAC must cover what the last acknowledged entry
carried, and a ledger fenced in the first round must still refuse normal adds
(EFENCED) while keeping its entries.  At the end a recovery add on the fenced
ledger is accepted.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import Fenced
from bookie.local.zookeeper import LocalZooKeeper

from .support.entries import KEY, AddStream, check_durable, expect_status, packet
from .support.processes import HOST, BookieCluster, BookieSetup

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

STREAM_LEDGERS = (11, 12, 13)
FENCED_LEDGER = 20
FENCED_ENTRIES = 5
CRASH_CONFIG: dict[str, object] = {
    "journal_file_size_bytes_max": 64 * 1024,
    "journal_files_kept": 0,
    "entry_log_size_bytes_max": 64 * 1024,
    "checkpoint_interval_ms": 20,
}


async def fence_ledger(connection: BookieConnection) -> None:
    for entry_id in range(FENCED_ENTRIES):
        await connection.add(FENCED_LEDGER, entry_id, KEY, packet(FENCED_LEDGER, entry_id))
    # A fencing read is answered only once the fence is durable.
    await connection.read(FENCED_LEDGER, -1, fence=True, master_key=KEY)


async def check_fenced(connection: BookieConnection) -> None:
    await check_durable(connection, {FENCED_LEDGER: list(range(FENCED_ENTRIES))})
    add = connection.add(FENCED_LEDGER, FENCED_ENTRIES, KEY, packet(FENCED_LEDGER, FENCED_ENTRIES))
    await expect_status(add, Fenced)


async def crash_rounds(
    cluster: BookieCluster, setup: BookieSetup, *, rounds: int, acks_max: int, seed: int
) -> None:
    """`rounds` times: stream adds, SIGKILL after 50..`acks_max` acknowledgements, restart
    and check everything acknowledged so far."""
    rng = random.Random(seed)
    acked: dict[int, list[int]] = {ledger_id: [] for ledger_id in STREAM_LEDGERS}
    next_entry = dict.fromkeys(STREAM_LEDGERS, 0)
    for round_number in range(rounds):
        bookie = await cluster.start(setup)
        async with BookieConnection.connect(HOST, setup.port) as connection:
            await check_durable(connection, acked)
            if round_number == 0:
                await fence_ledger(connection)
            else:
                await check_fenced(connection)
            stream = AddStream(connection, next_entry, window=rng.choice([8, 200, 3000]))
            stream.start()
            await stream.wait_acked(rng.randrange(50, acks_max))
            bookie.kill()
            assert await bookie.wait_exit() == -9
            await stream.wait_answered()
        for ledger_id, entries in stream.acked.items():
            acked[ledger_id].extend(entries)
        next_entry = stream.next_entry
    bookie = await cluster.start(setup)
    async with BookieConnection.connect(HOST, setup.port) as connection:
        await check_durable(connection, acked)
        await check_fenced(connection)
        response = await connection.add(
            FENCED_LEDGER,
            FENCED_ENTRIES,
            KEY,
            packet(FENCED_LEDGER, FENCED_ENTRIES),
            recovery=True,
        )
        assert response.entry_id == FENCED_ENTRIES
    assert sum(len(entries) for entries in acked.values()) >= rounds * 50


async def test_sigkill_rounds_lose_no_acknowledged_add(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = cluster.add_bookie(config=CRASH_CONFIG)
        await crash_rounds(cluster, setup, rounds=3, acks_max=1_500, seed=20261122)


@pytest.mark.slow
async def test_sigkill_many_rounds_lose_no_acknowledged_add(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = cluster.add_bookie(config=CRASH_CONFIG)
        await crash_rounds(cluster, setup, rounds=12, acks_max=6_000, seed=7)
