"""Replicas of a Counter over real bookies on loopback: the log is applied identically
everywhere, across segments, restarts and applications."""

from __future__ import annotations

import logging
import random

import anyio
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.clock import system_wall_clock_ms
from bookie.errors import MetadataUnavailable
from bookie.meta.underreplication import Mark, UnderReplication
from bookie.wire.codec import FrameDecoder
from rsm import limits
from rsm.client import connect
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_log
from rsm.core.log_state import SegmentState
from rsm.core.protocol import CallRequest, Response, decode_response, encode_request
from rsm.core.sessions import Outcome
from rsm.errors import BadArguments, CommandFailed, RsmStatus, UnknownCommand
from rsm.runtime.election import Leadership
from rsm.runtime.replica import Replica
from tests.unit.bookie.client.cluster import WAIT_S
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import (
    APP,
    Replicas,
    ledger_config,
    replica_cluster,
    replica_config,
    wait_until,
)

pytestmark = pytest.mark.anyio


async def converged(replicas: Replicas, app: str = APP) -> list[Replica]:
    """Wait until every running replica of `app` applied the same entries; return them."""
    members = [r.replica for r in replicas.running.values() if r.replica.app == app]

    def same_position() -> bool:
        return len({replica.applied_position for replica in members}) == 1

    await wait_until(same_position)
    return members


async def test_commands_apply_identically_on_every_replica() -> None:
    async with replica_cluster() as replicas:
        for name in ("a", "b", "c"):
            await replicas.start(name)
        await replicas.wait_leader()
        async with replicas.client() as client:
            assert await client.call("add", 5) == 5
            rolls = [await client.call("roll", 6) for _ in range(10)]
            assert all(1 <= roll <= 6 for roll in rolls)
            index, time_ms, epoch = await client.call("stamp")
            assert index == client.last_index
            assert time_ms > 0
            assert epoch == 1
            with pytest.raises(CommandFailed) as failed:
                await client.call("fail", "no luck")
            assert (failed.value.type_name, failed.value.message) == ("ValueError", "no luck")
            with pytest.raises(UnknownCommand):
                await client.call("nope")
            with pytest.raises(BadArguments):
                await client.call("add", 1, 2)
            value = await client.query("get")
        assert value == 5 + sum(rolls)
        members = await converged(replicas)
        assert {replica.machine.value for replica in members} == {value}  # type: ignore[attr-defined]
        tables = {repr(replica.session_table.to_plain()) for replica in members}
        assert len(tables) == 1, "the session table is replicated state"


async def test_a_replica_restarted_from_scratch_catches_up_by_replay() -> None:
    async with replica_cluster() as replicas:
        for name in ("a", "b", "c"):
            await replicas.start(name)
        leader = await replicas.wait_leader()
        follower = next(name for name in ("a", "b", "c") if name != leader.replica_id)
        async with replicas.client() as client:
            for _ in range(20):
                await client.call("add", 1)
            await replicas.kill(follower)
            for _ in range(20):
                await client.call("add", 2)
        fresh = await replicas.start(follower)
        assert fresh.applied_index <= leader.applied_index
        members = await converged(replicas)
        assert {replica.machine.value for replica in members} == {60}  # type: ignore[attr-defined]


async def test_rollover_by_entries_closes_segments_and_followers_cross_them() -> None:
    config = replica_config(segment_entries_max=4)
    async with replica_cluster() as replicas:
        for name in ("a", "b", "c"):
            await replicas.start(name, config=config)
        leader = await replicas.wait_leader()
        async with replicas.client() as client:
            for _ in range(40):
                await client.call("add", 1)
        term = leader.term
        assert term is not None
        assert term.rollovers >= 5
        assert term.rollover_pause_ms is not None
        async with replicas.cluster.store_factory() as store:
            log = decode_log((await store.get(AppLayout.of(APP).log)).value)
        assert len(log.segments) >= 6
        assert all(s.state is SegmentState.CLOSED for s in log.segments[:-1])
        assert log.segments[-1].state is SegmentState.OPEN
        assert {s.epoch for s in log.segments} == {term.epoch}, "a rollover keeps the epoch"
        await replicas.start("d", config=config)
        members = await converged(replicas)
        assert {replica.machine.value for replica in members} == {40}  # type: ignore[attr-defined]


async def test_a_replica_stands_for_election_only_once_caught_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = replica_config(segment_entries_max=10, candidate_lag_entries_max=3)
    async with replica_cluster() as replicas:
        leader = await replicas.start("a", config=config)
        await replicas.wait_leader()
        for _ in range(100):
            await leader.call("add", 1)
        stood_at: list[int] = []
        original = Leadership.stand

        async def stand(self: Leadership) -> str:
            if self.replica_id == "late":
                stood_at.append(replicas.replica("late").applied_index)
            return await original(self)

        monkeypatch.setattr(Leadership, "stand", stand)
        late = await replicas.start("late", config=config)
        await wait_until(lambda: late.status()["candidate"])
        assert stood_at, "it stood once caught up"
        assert stood_at[0] >= leader.applied_index - 3
        await wait_until(lambda: late.machine.value == 100)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "limit",
    [{"segment_bytes_max": 300}, {"segment_age_ms_max": 50}],
    ids=["bytes", "age"],
)
async def test_rollover_by_bytes_or_age(limit: dict[str, int]) -> None:
    config = replica_config(**limit)
    async with replica_cluster() as replicas:
        for name in ("a", "b"):
            await replicas.start(name, config=config)
        leader = await replicas.wait_leader()
        for _ in range(10):
            await leader.call("add", 1)
        # Age needs no further write: an idle leader's timer rolls the segment.
        await wait_until(lambda: leader.term is not None and leader.term.rollovers >= 1)
        assert await leader.call("add", 1) == 11
        members = await converged(replicas)
        assert {replica.machine.value for replica in members} == {11}  # type: ignore[attr-defined]


async def test_followers_tail_the_open_segment() -> None:
    async with replica_cluster() as replicas:
        for name in ("a", "b", "c"):
            await replicas.start(name)
        leader = await replicas.wait_leader()
        async with replicas.client() as client:
            for amount in range(1, 6):
                await client.call("add", amount)
                # No further write pushes it: the followers' long polls and the
                # leader's explicit LAC bring each entry to them.
                await converged(replicas)
        term = leader.term
        assert term is not None
        assert term.segment.is_open, "the followers read an OPEN ledger, without recovery"


async def test_two_apps_share_the_bookies() -> None:
    async with replica_cluster() as replicas:
        for name in ("a", "b"):
            await replicas.start(name)
        for name in ("x", "y"):
            await replicas.start(name, app="other")
        first = await replicas.wait_leader()
        second = await replicas.wait_leader("other")
        async with replicas.client() as counter, replicas.client("other") as other:
            for _ in range(5):
                await counter.call("add", 1)
                await other.call("add", 10)
            assert await counter.query("get") == 5
            assert await other.query("get") == 50
        assert first.term is not None
        assert second.term is not None
        assert first.term.segment.ledger_id != second.term.segment.ledger_id
        await converged(replicas)
        await converged(replicas, "other")


async def test_one_process_hosts_replicas_of_two_apps() -> None:
    config = ReplicaConfig(retry_delay_ms=20)
    async with (
        replica_cluster() as replicas,
        replicas.cluster.store_factory() as store,
        LedgerClient.open(
            store, root=replicas.cluster.root, rng=random.Random(3), config=ledger_config()
        ) as ledgers,
        Replica(Counter, app="first", store=store, ledgers=ledgers, config=config) as first,
        Replica(Counter, app="second", store=store, ledgers=ledgers, config=config) as second,
    ):
        with anyio.fail_after(WAIT_S):
            await wait_until(lambda: first.is_leader and second.is_leader)
            assert await first.call("add", 3) == 3
            assert await second.call("add", 4) == 4
            async with connect("second", store=store, rng=random.Random(4)) as client:
                assert await client.call("add", 1) == 5
            assert await first.query("get") == 3
            assert first.address != second.address


async def test_a_batch_waiting_for_answered_clients_goes_after_the_linger() -> None:
    """Eight concurrent calls are answered; the leader's next batch then waits for eight
    commands.  One alone comes: it is logged once the linger runs out, not before, and not
    only when something else happens (the leader's loop times the wait)."""
    linger_ms = 300
    async with replica_cluster() as replicas:
        await replicas.start("a", config=replica_config(batch_linger_ms=linger_ms))
        await replicas.wait_leader()
        async with replicas.client() as client:
            async with anyio.create_task_group() as calls:
                for _ in range(8):
                    calls.start_soon(client.call, "add", 1)
            started_s = anyio.current_time()
            # Ten lingers: without its own timer the wait lasted until the client's retry.
            with anyio.fail_after(linger_ms * 10 / 1000):
                assert await client.call("add", 1) == 9
            assert anyio.current_time() - started_s >= linger_ms / 1000 * 0.9


class IdleCounter(Counter):
    """A Counter that notes the value it holds each time the leader lets it be idle."""

    def __init__(self) -> None:
        super().__init__()
        self._idle_values: list[int] = []
        self._idle_fails = False

    def idle(self) -> None:
        self._idle_values.append(self.value)
        if self._idle_fails:
            raise RuntimeError("idle went wrong")


async def _idle_counter_leader(replicas: Replicas) -> tuple[Replica, IdleCounter]:
    """Replica "a" of an `IdleCounter`, started and leading, with its machine."""
    replica = await replicas.start("a", machine=IdleCounter)
    await replicas.wait_leader()
    machine = replica.machine
    assert isinstance(machine, IdleCounter)
    return replica, machine


class _Answers:
    """An in-process caller of `LeaderTerm.submit_call`: keeps every answer."""

    def __init__(self) -> None:
        self.outcomes: list[Outcome] = []

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        self.outcomes.append(outcome)


async def test_the_wait_work_of_a_term_that_ended_after_sending_a_batch_is_harmless(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The decoding and `idle` queued behind a batch's writes can run after the term
    ended: they find nothing in flight, raise nothing, and the replica, leading again,
    holds exactly what the recovered log holds."""
    caplog.set_level(logging.ERROR)
    async with replica_cluster() as replicas:
        replica, machine = await _idle_counter_leader(replicas)
        async with replicas.client() as client:
            assert await client.call("add", 1) == 1
        term = replica.term
        assert term is not None
        answers = _Answers()
        idle_calls = len(machine._idle_values)
        term.submit_call(CallRequest(1, "add", [10], {}), answers)
        term.pump()
        term.step_down("the test ends the term between a send and its wait work")
        assert [outcome.status for outcome in answers.outcomes] == [RsmStatus.OUTCOME_UNKNOWN]
        assert len(machine._idle_values) == idle_calls  # still queued
        await wait_until(lambda: len(machine._idle_values) > idle_calls or None)
        assert machine._idle_values[idle_calls] == 1
        await wait_until(lambda: (replica.term is not None and replica.term is not term) or None)
        async with replicas.client() as client:
            value = await client.call("add", 0)
        assert value in (1, 11)  # the recovery decides whether the sent entry is in the log
        follower = await replicas.start("b", machine=IdleCounter)
        await converged(replicas)
        assert isinstance(follower.machine, IdleCounter)
        assert follower.machine.value == value
    assert not caplog.records


async def test_the_leader_lets_the_machine_be_idle_while_each_batch_is_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`idle` runs once the batch is sent and before it is applied (it sees the value
    without the batch); one that raises is reported and the leader serves on."""
    caplog.set_level(logging.ERROR, logger="rsm.runtime.leader_term")
    async with replica_cluster() as replicas:
        _, machine = await _idle_counter_leader(replicas)
        async with replicas.client() as client:
            for expected in range(1, 6):
                before = len(machine._idle_values)
                assert await client.call("add", 1) == expected
                assert machine._idle_values[before:] == [expected - 1]
            machine._idle_fails = True
            assert await client.call("add", 1) == 6
            assert await client.call("add", 1) == 7
    failures = [r for r in caplog.records if r.getMessage() == "rsm.idle_failed"]
    assert len(failures) == 2


async def test_a_mark_of_the_open_segment_naming_bookies_back_is_settled_by_a_rollover(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Autorecovery's mark of the open segment's ledger naming a writable bookie of its
    ensemble: the leader rolls over, from a segment with entries and from one with none
    yet.  While the mark cannot be read, it logs that, does not roll over, and serves on."""
    monkeypatch.setattr(limits, "segment_mark_check_interval_ms", 20)
    unreadable = True
    original = UnderReplication.read_mark
    own: list[UnderReplication] = []
    """The test's own marker, which always reads."""

    async def read_mark(self: UnderReplication, ledger_id: int) -> Mark | None:
        if unreadable and self not in own:
            raise MetadataUnavailable("the test's ZooKeeper is away")
        return await original(self, ledger_id)

    monkeypatch.setattr(UnderReplication, "read_mark", read_mark)
    caplog.set_level(logging.WARNING, logger="rsm.runtime.leader_term")
    async with replica_cluster() as replicas:
        leader = await replicas.start("a")
        await replicas.wait_leader()
        assert await leader.call("add", 1) == 1
        term = leader.term
        assert term is not None
        bookie_id = replicas.cluster.bookie_ids[0]
        async with replicas.cluster.store_factory() as store:
            marks = UnderReplication(store, replicas.cluster.root)
            own.append(marks)
            written = term.segment.ledger_id
            await marks.mark(written, {bookie_id})

            def read_failures() -> int:
                return sum(r.getMessage() == "rsm.mark_read_failed" for r in caplog.records)

            await wait_until(lambda: read_failures() >= 2)
            assert term.rollovers == 0
            assert await leader.call("add", 1) == 2
            applied = leader.applied_index
            unreadable = False
            await wait_until(lambda: term.rollovers == 1)
            empty = term.segment.ledger_id
            assert empty != written
            await marks.mark(empty, {bookie_id})
            await wait_until(lambda: term.rollovers == 2)
            log = decode_log((await store.get(AppLayout.of(APP).log)).value)
        by_ledger = {segment.ledger_id: segment for segment in log.segments}
        assert by_ledger[written].state is SegmentState.CLOSED
        assert by_ledger[written].last_index == applied
        assert by_ledger[empty].state is SegmentState.CLOSED
        assert by_ledger[empty].first_index == applied + 1
        assert by_ledger[empty].last_index == applied, "closed with no entry"
        assert await leader.call("add", 1) == 3


async def test_a_forward_step_of_the_leader_s_clock_expires_no_session_within_its_term() -> None:
    """An NTP step of 11 minutes (past the session TTL) on the leader: the retry of a
    session's first command still finds its recorded outcome and is not applied again."""
    step_ms = 0

    def wall_clock_ms() -> int:
        return system_wall_clock_ms() + step_ms

    async with replica_cluster() as replicas:
        leader = await replicas.start("a", wall_clock_ms=wall_clock_ms)
        await replicas.wait_leader()
        first = await exchange(leader.address, CallRequest(1, "add", [1], {}, b"C" * 16, 1, 0))
        assert (first.status, first.value) == (RsmStatus.OK, 1)
        step_ms = limits.session_ttl_ms_default + 60_000
        other = await exchange(leader.address, CallRequest(2, "add", [0], {}, b"D" * 16, 1, 0))
        assert other.status is RsmStatus.OK
        retry = await exchange(leader.address, CallRequest(3, "add", [1], {}, b"C" * 16, 1, 0))
        assert (retry.status, retry.value) == (RsmStatus.OK, 1), "the recorded outcome"
        assert leader.machine.value == 1  # type: ignore[attr-defined]


async def exchange(address: str, request: CallRequest) -> Response:
    """One request on a connection of its own; its response."""
    host, port = address.rsplit(":", 1)
    async with await anyio.connect_tcp(host, int(port)) as stream:
        await stream.send(encode_request(request))
        decoder = FrameDecoder(limits.frame_bytes_max)
        with anyio.fail_after(WAIT_S):
            while True:
                for body in decoder.feed(await stream.receive()):
                    return decode_response(body)
