"""Open with and without recovery: fencing, the end a recovery finds, concurrent
recoverers, and a first writer that may not commit after a recovery closed its ledger."""

from __future__ import annotations

import anyio
import pytest

from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerState
from bookie.errors import (
    BookieError,
    ClientClosed,
    LedgerFenced,
    NotEnoughBookies,
    ReadBeyondLastAddConfirmed,
    RecoveryFailed,
)
from tests.unit.bookie.client.cluster import WAIT_S, memory_cluster
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


async def append_all(payloads: list[bytes], writer: WriteHandle) -> None:
    for payload in payloads:
        await writer.append(payload)


PAYLOADS = [f"payload {index}".encode() for index in range(10)]


async def test_recovery_open_fences_the_writer_and_closes_at_its_last_entry() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2, password=b"pw")
        await append_all(PAYLOADS, writer)

        reader = await reader_client.open_ledger(writer.ledger_id, b"pw")

        assert reader.is_closed
        assert reader.last_add_confirmed == 9
        assert reader_client.stats.recoveries == 1
        await reader_client.open_ledger(writer.ledger_id, b"pw")
        assert reader_client.stats.recoveries == 1, "a closed ledger needs no recovery"
        metadata = await reader_client.ledger_metadata(writer.ledger_id)
        assert metadata.state is LedgerState.CLOSED
        assert (metadata.last_entry_id, metadata.length) == (9, sum(map(len, PAYLOADS)))
        assert await reader.read(0, 9) == PAYLOADS
        with pytest.raises(LedgerFenced):
            await writer.append(b"after the recovery")
        with pytest.raises(LedgerFenced):
            await writer.close()
        assert (await reader_client.ledger_metadata(writer.ledger_id)).last_entry_id == 9


async def test_a_fenced_writer_tells_its_failure_listener_once() -> None:
    failures: list[BookieError] = []
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2, password=b"pw")
        writer.on_failure(failures.append)
        await append_all(PAYLOADS[:3], writer)
        await reader_client.open_ledger(writer.ledger_id, b"pw")
        assert failures == [], "fencing is news to the writer only when a bookie says so"
        with pytest.raises(LedgerFenced):
            await writer.append(b"after the recovery")
        assert len(failures) == 1
        assert isinstance(failures[0], LedgerFenced)
        with pytest.raises(LedgerFenced):
            await writer.append(b"again")
        assert len(failures) == 1, "a listener is called once"


async def test_recovery_re_replicates_the_tail_to_a_bookie_that_missed_it() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2)
        await append_all(PAYLOADS[:5], writer)
        missing = writer.metadata.current_ensemble[2]
        await cluster.stop_bookie(missing)
        # Confirmed by the other two (Qa = 2); the stopped bookie never gets it,
        # and no bookie knows it is confirmed (no later add carried the LAC).
        assert await writer.append(PAYLOADS[5]) == 5
        ledger_id = writer.ledger_id
        await cluster.restart_bookie(missing)
        await wait_for(lambda: missing in reader_client.writable_bookies, WAIT_S)
        assert cluster.holders(ledger_id, 5) == sorted(
            b for b in writer.metadata.current_ensemble if b != missing
        )

        reader = await reader_client.open_ledger(ledger_id)

        assert reader.last_add_confirmed == 5
        assert await reader.read(0, 5) == PAYLOADS[:6]
        assert cluster.holders(ledger_id, 5) == sorted(reader.metadata.current_ensemble)


async def test_recovery_with_a_dead_bookie_and_none_to_replace_it_closes_on_the_two_left() -> None:
    """E = Qw = 3, Qa = 2 on three bookies, one dead for good (a lost machine): fencing
    is covered by the two left (Qw - Qa + 1 = 2), the tail is re-added to them (Qa
    acks, no replacement needed), and the ledger closes at the writer's last entry."""
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2)
        await append_all(PAYLOADS[:5], writer)
        dead = writer.metadata.current_ensemble[0]
        await cluster.stop_bookie(dead)
        await append_all(PAYLOADS[5:], writer)
        await wait_for(lambda: dead not in reader_client.writable_bookies, WAIT_S)

        reader = await reader_client.open_ledger(writer.ledger_id)

        assert reader.last_add_confirmed == 9
        assert await reader.read(0, 9) == PAYLOADS
        alive = sorted(b for b in writer.metadata.current_ensemble if b != dead)
        assert all(cluster.holders(writer.ledger_id, e) == alive for e in range(5, 10))
        with pytest.raises(LedgerFenced):
            await writer.append(b"after the recovery")


async def test_open_without_recovery_does_not_fence() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(password=b"pw")
        await append_all(PAYLOADS[:5], writer)

        reader = await reader_client.open_ledger(writer.ledger_id, b"pw", recovery=False)

        assert not reader.is_closed
        assert reader.last_add_confirmed == 3
        assert await reader.read(0, 3) == PAYLOADS[:4]
        await append_all(PAYLOADS[5:], writer)
        assert writer.last_add_confirmed == 9
        assert await reader.read_last_add_confirmed() == 8
        assert await reader.read(4, 8) == PAYLOADS[4:9]
        await writer.close()
        # The close is in the metadata only: bookies still know 8 (a tail, or
        # opening again, learns the end).
        assert await reader.read_last_add_confirmed() == 8
        reopened = await reader_client.open_ledger(writer.ledger_id, b"pw", recovery=False)
        assert reopened.is_closed
        assert reopened.last_add_confirmed == 9


async def test_many_parallel_recovery_opens_agree() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 2)
        await append_all(PAYLOADS, writer)
        # A few more adds in flight while the recoveries start.
        for payload in PAYLOADS[:5]:
            writer.append_nowait(payload)
        ends: list[tuple[int, int]] = []

        async def recover(seed: int) -> None:
            async with cluster.client(seed=seed) as client:
                reader = await client.open_ledger(writer.ledger_id)
                ends.append((reader.metadata.last_entry_id, reader.metadata.length))
                assert len(await reader.read(0, reader.last_add_confirmed)) == (
                    reader.last_add_confirmed + 1
                )

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                for seed in range(5):
                    task_group.start_soon(recover, 10 + seed)
        assert len(ends) == 5
        assert len(set(ends)) == 1
        last_entry_id, _ = ends[0]
        # Every entry the writer saw confirmed is inside the recovered ledger.
        assert last_entry_id >= writer.last_add_confirmed >= 9
        stored = await writer_client.ledger_metadata(writer.ledger_id)
        assert (stored.last_entry_id, stored.length) == ends[0]


async def test_recovery_of_an_empty_ledger_closes_it_empty() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger()
        reader = await client.open_ledger(writer.ledger_id)
        assert reader.is_closed
        assert (reader.metadata.last_entry_id, reader.metadata.length) == (-1, 0)
        with pytest.raises(ReadBeyondLastAddConfirmed):
            await reader.read(0, 0)
        with pytest.raises(LedgerFenced):
            await writer.append(b"too late")


async def test_recovery_fails_and_stays_in_recovery_without_enough_bookies() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        await append_all(PAYLOADS[:3], writer)
        ensemble = writer.metadata.current_ensemble
        await cluster.stop_bookie(ensemble[0])
        await cluster.stop_bookie(ensemble[1])

        with pytest.raises(RecoveryFailed):
            await client.open_ledger(writer.ledger_id)
        assert (await client.ledger_metadata(writer.ledger_id)).state is LedgerState.IN_RECOVERY

        await cluster.restart_bookie(ensemble[0])
        await wait_for(lambda: ensemble[0] in client.writable_bookies, WAIT_S)
        reader = await client.open_ledger(writer.ledger_id)
        assert reader.last_add_confirmed == 2
        assert await reader.read(0, 2) == PAYLOADS[:3]


async def test_ensemble_change_during_recovery() -> None:
    async with (
        memory_cluster(4) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as reader_client,
    ):
        writer = await writer_client.create_ledger(3, 3, 3)
        await append_all(PAYLOADS, writer)
        ensemble = writer.metadata.current_ensemble
        spare = next(b for b in cluster.bookie_ids if b not in ensemble)
        await cluster.stop_bookie(ensemble[1])
        await wait_for(lambda: ensemble[1] not in reader_client.writable_bookies, WAIT_S)

        # Recovery re-adds entry 9 (the fence answers say 8 is confirmed) to
        # the whole write set; with Qa = 3 the stopped bookie must be replaced.
        reader = await reader_client.open_ledger(writer.ledger_id)

        metadata = reader.metadata
        assert metadata.last_entry_id == 9
        assert metadata.ensembles == (
            (0, ensemble),
            (9, (ensemble[0], spare, ensemble[2])),
        )
        # The stopped bookie's storage still has its copy; the spare got one.
        assert cluster.holders(writer.ledger_id, 9) == sorted(cluster.bookie_ids)
        assert await reader.read(0, 9) == PAYLOADS


async def test_first_writer_cannot_commit_after_the_second_closes() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as first_client,
        cluster.client(seed=2) as second_client,
    ):
        first = await first_client.create_ledger(3, 3, 2)
        await append_all(PAYLOADS[:5], first)
        ensemble = first.metadata.current_ensemble
        # The recovery cannot reach one bookie: it fences the other two only.
        await cluster.stop_bookie(ensemble[2])
        recovered = await second_client.open_ledger(first.ledger_id)
        assert recovered.metadata.last_entry_id == 4
        await cluster.restart_bookie(ensemble[2])
        await wait_for(
            lambda: first_client.bookie_address(ensemble[2]) == cluster.bookie(ensemble[2]).address,
            WAIT_S,
        )

        # The unfenced bookie may take the add, but Qa = 2 needs a fenced one.  (If the
        # stopped bookie's last acks had not reached the writer, the writer already
        # tried to replace it and, with no spare bookie, broke: no commit either.)
        with anyio.fail_after(WAIT_S), pytest.raises((LedgerFenced, NotEnoughBookies)):
            await first.append(b"zombie")
        metadata = await second_client.ledger_metadata(first.ledger_id)
        assert metadata.last_entry_id == 4
        reader = await second_client.open_ledger(first.ledger_id)
        assert await reader.read(0, 4) == PAYLOADS[:5]
        with pytest.raises(ReadBeyondLastAddConfirmed):
            await reader.read(5, 5, allow_unconfirmed=True)


async def test_handles_of_a_closed_client_refuse_work() -> None:
    async with memory_cluster(3) as cluster:
        async with cluster.client() as client:
            writer = await client.create_ledger()
            await writer.append(b"x")
        with pytest.raises(ClientClosed):
            await writer.append(b"y")
        with pytest.raises(ClientClosed):
            await client.open_ledger(writer.ledger_id)
