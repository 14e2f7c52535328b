"""Fencing with real bookie processes and a real ZooKeeper (BookKeeper's `TestFencing`,
and `LedgerRecoveryTest#testLedgerRecoveryWithWrongPassword`).

Each test starts three `bookie serve` processes and opens its clients in this
process, each client with its own ZooKeeper session, as separate applications
would.  What is checked is the single-writer guarantee (G4): once a recovery
open returns, the old writer can get nothing more acknowledged, and every
recoverer agrees on the end, which covers everything the writer saw confirmed
(G1, G3); an open without recovery, or with a wrong password, fences nothing.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerState
from bookie.errors import LedgerFenced, UnauthorizedLedgerAccess
from bookie.local.zookeeper import LocalZooKeeper

from .support.ledgers import (
    PASSWORD,
    entry_payload,
    ledger_client,
    running_bookies,
    scenario_config,
)
from .support.processes import WAIT_S

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

ENTRIES = 10
RECOVERERS = 10


async def append_entries(writer: WriteHandle, first: int, count: int) -> None:
    for number in range(first, first + count):
        assert await writer.append(entry_payload(number)) == number


async def test_basic_fencing(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, _bookies),
        ledger_client(cluster, seed=1) as writer_client,
        ledger_client(cluster, seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        await append_entries(writer, 0, ENTRIES)

        reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD)

        assert reader.is_closed
        assert reader.last_add_confirmed == writer.last_add_confirmed == ENTRIES - 1
        assert await reader.read(0, ENTRIES - 1) == [entry_payload(n) for n in range(ENTRIES)]
        with anyio.fail_after(WAIT_S), pytest.raises(LedgerFenced):
            await writer.append(entry_payload(ENTRIES))
        with pytest.raises(LedgerFenced):
            await writer.close()
        metadata = await reader_client.ledger_metadata(writer.ledger_id)
        assert metadata.state is LedgerState.CLOSED
        assert metadata.last_entry_id == ENTRIES - 1


async def test_many_parallel_recovery_opens_agree(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """Ten clients recover the ledger at once while its writer streams pipelined adds."""
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, _bookies),
        ledger_client(cluster, seed=1, config=scenario_config(outstanding_adds_max=64)) as client,
    ):
        writer = await client.create_ledger(3, 2, 2, password=PASSWORD)
        hundred_sent = anyio.Event()
        stream_ended = anyio.Event()
        stream_errors: list[Exception] = []

        async def stream() -> None:
            try:
                while True:
                    await writer.wait_for_capacity()
                    if writer.append_nowait(entry_payload(writer.last_add_pushed + 1)) == 99:
                        hundred_sent.set()
            except LedgerFenced as error:
                stream_errors.append(error)
            finally:
                stream_ended.set()

        ends: list[tuple[int, int]] = []

        async def recover(seed: int) -> None:
            async with ledger_client(cluster, seed=seed) as recoverer:
                reader = await recoverer.open_ledger(writer.ledger_id, PASSWORD)
                assert reader.is_closed
                ends.append((reader.metadata.last_entry_id, reader.metadata.length))

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(stream)
                await hundred_sent.wait()
                await writer.wait_confirmed(99)
                async with anyio.create_task_group() as recoveries:
                    for seed in range(RECOVERERS):
                        recoveries.start_soon(recover, 100 + seed)
                await stream_ended.wait()

        assert len(stream_errors) == 1
        assert len(ends) == RECOVERERS
        assert len(set(ends)) == 1, f"recoverers disagree on the end: {sorted(set(ends))}"
        last_entry_id, length = ends[0]
        # Everything the writer saw confirmed is in; nothing it never sent is.
        assert writer.last_add_confirmed <= last_entry_id <= writer.last_add_pushed
        assert writer.last_add_confirmed >= 99
        expected = [entry_payload(n) for n in range(last_entry_id + 1)]
        assert length == sum(map(len, expected))
        reader = await client.open_ledger(writer.ledger_id, PASSWORD)
        assert reader.last_add_confirmed == last_entry_id
        assert await reader.read(0, last_entry_id) == expected


async def test_open_without_recovery_does_not_fence(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, _bookies),
        ledger_client(cluster, seed=1) as writer_client,
        ledger_client(cluster, seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        await append_entries(writer, 0, ENTRIES)

        reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)

        assert not reader.is_closed
        # The last entry carried the LAC before it: that is what the bookies know.
        assert reader.last_add_confirmed == ENTRIES - 2
        await append_entries(writer, ENTRIES, ENTRIES)
        assert writer.last_add_confirmed == 2 * ENTRIES - 1
        assert (await reader_client.ledger_metadata(writer.ledger_id)).state is LedgerState.OPEN
        assert await reader.read_last_add_confirmed() == 2 * ENTRIES - 2
        assert await reader.read(0, 2 * ENTRIES - 2) == [
            entry_payload(n) for n in range(2 * ENTRIES - 1)
        ]
        await writer.close()
        metadata = await reader_client.ledger_metadata(writer.ledger_id)
        assert metadata.state is LedgerState.CLOSED
        assert metadata.last_entry_id == 2 * ENTRIES - 1


async def test_recovery_with_a_wrong_password_is_refused_and_fences_nothing(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, _bookies),
        ledger_client(cluster, seed=1) as writer_client,
        ledger_client(cluster, seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 3, password=PASSWORD)
        await append_entries(writer, 0, ENTRIES)

        with pytest.raises(UnauthorizedLedgerAccess):
            await reader_client.open_ledger(writer.ledger_id, b"not " + PASSWORD)

        assert (await reader_client.ledger_metadata(writer.ledger_id)).state is LedgerState.OPEN
        # With Qa = E every bookie must take the next add: none of them is fenced.
        await append_entries(writer, ENTRIES, 1)
        reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD)
        assert reader.last_add_confirmed == ENTRIES
        with anyio.fail_after(WAIT_S), pytest.raises(LedgerFenced):
            await writer.append(entry_payload(ENTRIES + 1))
