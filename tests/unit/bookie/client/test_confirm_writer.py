"""`WriteHandle.confirm_writer`: proving, with no append and no fsync, that no
recovery had finished fencing the ledger at an instant after the call began
(rule 5 of bookie.core.quorum), which is what fast linearizable reads need."""

from __future__ import annotations

import pytest

from bookie.errors import LedgerClosed, LedgerFenced, WriterNotConfirmed
from tests.unit.bookie.client.cluster import fast_config, memory_cluster
from tests.unit.bookie.server.support import wait_for

pytestmark = pytest.mark.anyio


async def test_a_live_writer_is_confirmed() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        await writer.confirm_writer()
        await writer.append(b"first")
        await writer.confirm_writer()


async def test_a_writer_fenced_by_a_recovery_is_told_so() -> None:
    async with (
        memory_cluster(3) as cluster,
        cluster.client() as writer_client,
        cluster.client(seed=2) as recoverer,
    ):
        writer = await writer_client.create_ledger(3, 3, 2)
        await writer.append(b"before the takeover")

        await recoverer.open_ledger(writer.ledger_id)

        with pytest.raises(LedgerFenced):
            await writer.confirm_writer()


async def test_one_bookie_down_still_confirms_with_an_ack_quorum_of_a_write_set() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        await writer.append(b"entry")
        await cluster.stop_bookie(writer.metadata.current_ensemble[0])

        try:
            await writer.confirm_writer()
        except WriterNotConfirmed as error:
            # The writer saw the connection close first and was looking for a
            # replacement (there is none: the change gets deferred, the bookie stays
            # skipped).  Retryable, and callers ask again, as the leader's read
            # confirmation does; once the change has settled it confirms.
            if not error.retryable:
                raise
            await wait_for(lambda: writer.change_deferred)
            await writer.confirm_writer()


async def test_too_few_bookies_cannot_confirm_and_say_it_is_retryable() -> None:
    config = fast_config(read_timeout_ms=300)
    async with memory_cluster(3) as cluster, cluster.client(config=config) as client:
        writer = await client.create_ledger(3, 3, 2)
        await writer.append(b"entry")
        for bookie_id in writer.metadata.current_ensemble[:2]:
            await cluster.stop_bookie(bookie_id)

        with pytest.raises(WriterNotConfirmed) as caught:
            await writer.confirm_writer()
        assert caught.value.retryable


async def test_a_closed_writer_is_not_confirmed() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        writer = await client.create_ledger(3, 3, 2)
        await writer.append(b"entry")
        await writer.close()

        with pytest.raises(LedgerClosed):
            await writer.confirm_writer()
