"""A snapshot no bookie can serve (every copy of a chunk corrupt: `DigestMismatch`) does not
hold a starting replica up forever: after `limits.snapshot_load_data_errors_max` loads in a row
it is skipped for the next older snapshot, when the log still holds what follows that one;
otherwise the replica keeps trying (and says why) until a bookie serves the chunk again."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

import anyio
import pytest

from bookie.logs import record_fields
from rsm import limits
from tests.unit.rsm.runtime.harness import Replicas, replica_cluster, wait_until
from tests.unit.rsm.snapshots.support import app_view, snapshot_config

pytestmark = pytest.mark.anyio

SERVICE_LOGGER = "rsm.runtime.snapshot_service"


def corrupt_every_copy(replicas: Replicas, ledger_id: int, entry_id: int) -> dict[str, bytes]:
    """Flip a byte of the entry on every bookie that holds it (bit rot everywhere, the
    length kept); the good copies, by bookie, to put back."""
    cluster = replicas.cluster
    good: dict[str, bytes] = {}
    for bookie_id in cluster.holders(ledger_id, entry_id):
        storage = cluster.storage(bookie_id)
        packet = storage.read_entry(ledger_id, entry_id)
        assert packet is not None
        good[bookie_id] = packet
        storage.add_entry(ledger_id, entry_id, packet[:-1] + bytes([packet[-1] ^ 0xFF]))
    assert good
    return good


def events(caplog: pytest.LogCaptureFixture, name: str) -> list[Mapping[str, object]]:
    """The fields of each `name` event logged."""
    return [fields for event, fields in map(record_fields, caplog.records) if event == name]


def levels(caplog: pytest.LogCaptureFixture, name: str) -> set[int]:
    return {r.levelno for r in caplog.records if record_fields(r)[0] == name}


async def test_a_snapshot_no_bookie_serves_is_skipped_for_the_previous_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = snapshot_config(truncation=False)
    caplog.set_level(logging.WARNING, logger=SERVICE_LOGGER)
    async with replica_cluster() as replicas:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        for _ in range(20):
            await leader.call("add", 1)
        older = await leader.take_snapshot()
        for _ in range(20):
            await leader.call("add", 1)
        newer = await leader.take_snapshot()
        corrupt_every_copy(replicas, newer["ledger_id"], 0)

        with anyio.fail_after(20):
            late = await replicas.start("b", config=config)
        assert late.snapshots.skipped == 1
        assert late.snapshots.last_loaded is not None
        assert late.snapshots.last_loaded["index"] == older["index"] < newer["index"]
        (skipped,) = events(caplog, "rsm.snapshot_skipped")
        assert levels(caplog, "rsm.snapshot_skipped") == {logging.ERROR}
        assert skipped["index"] == newer["index"]
        assert "DigestMismatch" in str(skipped["error"])
        retried = events(caplog, "rsm.snapshot_unreadable")
        assert len(retried) == limits.snapshot_load_data_errors_max - 1
        await wait_until(lambda: late.applied_index == leader.applied_index)
        assert late.machine.value == 40  # type: ignore[attr-defined]
        assert late.machine.state_hash() == leader.machine.state_hash()


async def test_an_unreadable_snapshot_is_waited_for_when_the_log_behind_older_ones_is_gone(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = snapshot_config()
    caplog.set_level(logging.WARNING, logger=SERVICE_LOGGER)
    async with replica_cluster() as replicas, app_view(replicas) as view:
        await replicas.start("a", config=config)
        leader = await replicas.wait_leader()
        for _ in range(30):
            await leader.call("add", 1)
        older = await leader.take_snapshot()
        for _ in range(30):
            await leader.call("add", 1)
        newer = await leader.take_snapshot()

        await view.wait_truncated_past(older["index"] + 1)
        good = corrupt_every_copy(replicas, newer["ledger_id"], 0)

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(functools.partial(replicas.start, "b", config=config))

            def why() -> list[Mapping[str, object]]:
                return [f for f in events(caplog, "rsm.snapshot_unreadable") if "reason" in f]

            await wait_until(lambda: bool(why()))
            assert "b" not in replicas.running
            assert not events(caplog, "rsm.snapshot_skipped")
            assert logging.ERROR in levels(caplog, "rsm.snapshot_unreadable")
            assert "truncated" in str(why()[0]["reason"])
            # The bookies serve the chunk again: the replica starts from the newer snapshot.
            for bookie_id, packet in good.items():
                replicas.cluster.storage(bookie_id).add_entry(newer["ledger_id"], 0, packet)
            await wait_until(lambda: "b" in replicas.running)
        late = replicas.replica("b")
        assert late.snapshots.last_loaded is not None
        assert late.snapshots.last_loaded["index"] == newer["index"]
        await wait_until(lambda: late.applied_index == leader.applied_index)
        assert late.machine.value == 60  # type: ignore[attr-defined]
