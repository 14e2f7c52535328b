"""When a leader's open segment counts as under-replicated, when a rollover to a
full-size ledger is due, when one settles autorecovery's mark of the segment, and what a
segment ledger's custom metadata names (rsm/runtime/segment_ledger.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerMetadata, new_ledger
from bookie.core.open_ledgers import WRITER_KEY, declared_writer
from bookie.wire.packet import DigestType
from rsm.config import ReplicaConfig
from rsm.runtime.segment_ledger import (
    create_segment_ledger,
    fully_replicated,
    is_degraded,
    mark_settled_by_rollover,
    replication_status,
    restorable,
)
from tests.unit.bookie.client.cluster import memory_cluster

CONFIG = ReplicaConfig(ensemble_size=3, write_quorum=3, ack_quorum=2)


@dataclass
class Handle:
    """What the decisions read of a `WriteHandle`."""

    metadata: LedgerMetadata
    change_deferred: bool = False
    failed_bookie_returned: bool = False


def ledger(bookies: int) -> LedgerMetadata:
    return new_ledger(
        1,
        [f"b{number}" for number in range(bookies)],
        write_quorum=min(3, bookies),
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=b"\0" * 32,
        ctime_ms=0,
    )


def handle(bookies: int, *, deferred: bool = False, returned: bool = False) -> WriteHandle:
    return cast(WriteHandle, Handle(ledger(bookies), deferred, returned))


@given(st.sampled_from([2, 3]), st.booleans(), st.booleans(), st.integers(0, 5))
def test_a_rollover_is_due_only_when_it_gives_the_configured_copies_back(
    bookies: int, deferred: bool, returned: bool, writable: int
) -> None:
    writer = handle(bookies, deferred=deferred, returned=returned)
    due = restorable(writer, CONFIG, writable)
    if writable < 3:
        assert not due, "a new ledger would not be full-size either"
    elif bookies < 3:
        assert due, "degraded, and E bookies are writable"
    else:
        # Full-size: only a deferred replacement whose bookie came back makes it due; one
        # still registered but dead would put the new ledger in the same state.
        assert due == (deferred and returned)
    assert fully_replicated(writer, CONFIG) == (bookies == 3 and not deferred)


def test_a_mark_of_bookies_back_in_the_segment_is_settled_by_a_rollover() -> None:
    assert mark_settled_by_rollover({"b1"}, handle(3), {"b0", "b1", "b2"})
    assert not mark_settled_by_rollover({"b1"}, handle(3), {"b0", "b2"}), "b1 is still away"
    assert not mark_settled_by_rollover({"x"}, handle(3), {"b0", "b1", "b2", "x"}), (
        "a bookie of an earlier segment: autorecovery repairs that one itself"
    )


def test_the_status_names_the_sizes_and_the_configured_ones() -> None:
    assert is_degraded(ledger(2), CONFIG)
    assert replication_status(handle(2), CONFIG) == {
        "full": False,
        "degraded": True,
        "ensemble_change_deferred": False,
        "ensemble_size": 2,
        "write_quorum": 2,
        "ack_quorum": 2,
        "configured_ensemble_size": 3,
        "configured_write_quorum": 3,
    }
    status = replication_status(handle(3, deferred=True), CONFIG)
    assert (status["full"], status["degraded"], status["ensemble_change_deferred"]) == (
        False,
        False,
        True,
    )
    assert replication_status(handle(3), CONFIG)["full"]


@pytest.mark.anyio
async def test_a_segment_ledger_names_its_application_epoch_and_writer_znode() -> None:
    async with memory_cluster(3) as cluster, cluster.client() as client:
        handle = await create_segment_ledger(
            client, CONFIG, app="kv", epoch=4, writer="/rsm/kv/replicas/r1"
        )
        metadata = await client.ledger_metadata(handle.ledger_id)
        assert metadata.custom == {
            "rsm.app": b"kv",
            "rsm.epoch": b"4",
            WRITER_KEY: b"/rsm/kv/replicas/r1",
        }
        assert declared_writer(metadata) == "/rsm/kv/replicas/r1"
