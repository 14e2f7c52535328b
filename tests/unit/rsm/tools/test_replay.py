"""The replay engine on an exported file: whole entries and single commands give the same
state, sessions, outcomes and hashes as a replica's `Applier`; verification of logged hashes;
lockstep and stepping."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsm.config import ReplicaConfig
from rsm.core.commands import apply_batch
from rsm.core.log_format import decode_batch, encode_batch, encode_command, encode_leader_start
from rsm.core.log_state import Segment, SegmentState
from rsm.core.sessions import SessionTable
from rsm.core.state_machine import command
from rsm.errors import RsmStatus
from rsm.runtime.applier import Applier
from rsm.tools.export_format import ExportedEntry, ExportHeader, ExportWriter
from rsm.tools.lockstep import first_divergence
from rsm.tools.records import LoggedEntry
from rsm.tools.replay import Replay, replay_to, stepping
from rsm.tools.source import FileSource
from tests.unit.rsm.core.counter import Counter

pytestmark = pytest.mark.anyio

CONFIG = ReplicaConfig(state_hash_every_commands=3, session_ttl_ms=50)
CLIENT = b"\x07"


class Doubled(Counter):
    """A "new version" whose `add` of 5 adds 10."""

    @command
    def add(self, amount: int = 1) -> int:
        self.value += amount * 2 if amount == 5 else amount
        return self.value


def payloads() -> list[bytes]:
    """Six entries: a marker, sessions (one expires by logged time), random, a failure; the
    state hashes a leader would log with `CONFIG`."""
    leader = Applier(Counter(), CONFIG)
    commands = [
        [encode_leader_start("r1")],
        [
            encode_command("add", [2], client_id=CLIENT, seq=1, ack_seq=0),
            encode_command("add", [5]),
        ],
        [
            encode_command("roll", [6]),
            encode_command("add", [5], client_id=CLIENT, seq=1, ack_seq=0),
        ],
        [encode_command("stamp"), encode_command("fail", ["no"]), encode_command("add", [1])],
        [encode_command("add", [1], client_id=CLIENT, seq=2, ack_seq=1)],
        [encode_command("add", [5]), encode_command("roll", [20])],
    ]
    out: list[bytes] = []
    next_index = 1
    for number, items in enumerate(commands):
        logged = leader.hashes.unlogged()
        if logged is not None:
            leader.hashes.logged(logged.index)
        payload = encode_batch(
            epoch=1,
            first_index=next_index,
            timestamp_ms=1_000 + 40 * number,
            seed=number,
            items=items,
            state_hash=logged,
        )
        batch = decode_batch(payload)
        leader.apply(batch, 9, number)
        next_index = batch.next_index
        out.append(payload)
    return out


def export(path: Path, logged: list[bytes] | None = None) -> Path:
    """An exported file of one segment holding `logged` (default: `payloads()`)."""
    logged = payloads() if logged is None else logged
    entries = [decode_batch(payload) for payload in logged]
    header = ExportHeader(
        app="counter",
        segments=(Segment(9, 1, 1, SegmentState.CLOSED, entries[-1].next_index - 1),),
        first_index=1,
        last_index=entries[-1].next_index - 1,
        exported_ms=0,
        source="test",
    )
    with path.open("wb") as stream:
        writer = ExportWriter(stream, header)
        for entry_id, (payload, batch) in enumerate(zip(logged, entries, strict=True)):
            writer.add(ExportedEntry(9, entry_id, batch.first_index, len(batch.items), payload))
        writer.finish()
    return path


@pytest.fixture
def source(tmp_path: Path) -> FileSource:
    return FileSource(export(tmp_path / "counter.rsmlog"))


def test_one_command_at_a_time_equals_whole_entries_equals_a_replica() -> None:
    replica = Applier(Counter(), CONFIG)
    whole = Replay(Counter, CONFIG)
    single = Replay(Counter, CONFIG)
    for entry_id, payload in enumerate(payloads()):
        batch = decode_batch(payload)
        entry = LoggedEntry(9, entry_id, batch, len(payload))
        expected = replica.apply(batch, 9, entry_id)
        assert whole.apply(entry) == expected
        assert [outcome for _record, outcome in single.steps(entry)] == expected
        for replay in (whole, single):
            assert replay.machine.state_hash() == replica.machine.state_hash()
            assert replay.applier.sessions.to_plain() == replica.sessions.to_plain()
            assert replay.position == replica.position
            assert replay.applier.cursor == replica.cursor
    assert [check.matches for check in whole.checks] == [True, True, True]
    assert [check.index for check in single.checks] == [check.index for check in whole.checks]
    assert all(check.matches for check in single.checks)


def test_the_session_table_and_its_expiry_are_the_replicas() -> None:
    table = SessionTable(ttl_ms=50, sessions_max=10, evict_idle_ms=60_000, results_max=10)
    outcomes = []
    for payload in payloads():
        outcomes += apply_batch(Counter(), decode_batch(payload), table)
    replay = Replay(Counter, CONFIG)
    got = []
    for entry_id, payload in enumerate(payloads()):
        got += replay.apply(LoggedEntry(9, entry_id, decode_batch(payload), len(payload)))
    # Index 9 is seq 2 of a session idle for 80 ms of logged time (TTL 50): refused.
    assert got[8].status == RsmStatus.SESSION_EXPIRED
    assert [outcome.status for outcome in got] == [outcome.status for outcome in outcomes]


async def test_replay_to_any_index_from_a_file_and_stepping_shows_each_state(
    source: FileSource,
) -> None:
    full = await replay_to(source, Counter, CONFIG, to_index=None)
    assert full.index == 11
    for target in range(1, 12):
        partial = await replay_to(source, Counter, CONFIG, to_index=target)
        assert partial.index == target
    replay = Replay(Counter, CONFIG)
    seen: list[tuple[int, int]] = []
    async with stepping(source, replay, 7) as steps:
        async for record, _outcome in steps:
            seen.append((record.index, replay.machine.value))
    assert [index for index, _value in seen] == list(range(1, 8))
    assert seen[2] == (3, 7)  # 2 then 5 added
    assert replay.index == 7


async def test_lockstep_names_the_first_changed_result_with_both_coordinates(
    source: FileSource,
) -> None:
    assert (await first_divergence(source, Counter, Counter, CONFIG)).divergence is None
    found = (await first_divergence(source, Counter, Doubled, CONFIG)).divergence
    assert found is not None
    assert found.kind == "result"
    record = found.record
    assert (record.index, record.ledger_id, record.entry_id, record.slot) == (3, 9, 1, 1)
    assert (found.old.value, found.new.value) == (7, 12)


async def test_the_file_source_reads_without_a_cluster(source: FileSource) -> None:
    assert source.app == "counter"
    assert await source.end_index() == 11
