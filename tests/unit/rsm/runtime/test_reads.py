"""Read consistency per call: linearizable on the leader after a shared confirmation
round (no entry appended) or under the read lease such a round gave, read_your_writes on
any replica once it applied the token, stale at once."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from rsm import limits
from rsm.config import ReplicaConfig
from rsm.errors import NotLeader, Timeout, Unavailable
from rsm.runtime.replica import Replica
from tests.unit.rsm.runtime.harness import (
    WAIT_S,
    Replicas,
    replica_cluster,
    replica_config,
    wait_until,
)
from tests.unit.rsm.runtime.test_failover import start_three
from tests.unit.rsm.runtime.test_transfer import everyone_stands

pytestmark = pytest.mark.anyio


async def test_linearizable_reads_run_on_the_leader_share_rounds_and_append_nothing() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas, replica_config(read_lease_ms=0))
        follower = next(r.replica for r in replicas.running.values() if r.replica is not leader)
        async with replicas.client() as client:
            for _ in range(3):
                await client.call("add", 1)
            term = leader.term
            assert term is not None
            entries_before = term.handle.last_add_pushed
            rounds_before = term.read_rounds
            answers: list[int] = []

            async def read() -> None:
                answers.append(await client.query("get"))

            async with anyio.create_task_group() as task_group:
                for _ in range(100):
                    task_group.start_soon(read)
            assert answers == [3] * 100
            assert term.handle.last_add_pushed == entries_before, "reads append no entry"
            rounds = term.read_rounds - rounds_before
            assert 1 <= rounds <= 10, f"100 reads took {rounds} confirmation rounds"
        with pytest.raises(NotLeader) as raised:
            await follower.query("get")
        assert raised.value.leader_address == leader.address


async def test_a_linearizable_read_sees_every_write_acknowledged_before_it() -> None:
    async with replica_cluster() as replicas:
        await start_three(replicas)
        async with replicas.client() as writer, replicas.client() as reader:
            for expected in range(1, 11):
                await writer.call("add", 1)
                assert await reader.query("get") == expected


async def test_read_your_writes_waits_on_a_follower_until_the_token_is_applied() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        follower: Replica = next(
            r.replica for r in replicas.running.values() if r.replica is not leader
        )
        assert await leader.call("add", 1) == 1
        token = leader.applied_index + 3
        answers: list[int] = []

        async def read() -> None:
            answers.append(
                await follower.query("get", consistency="read_your_writes", min_index=token)
            )

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(read)
            await wait_until(lambda: follower.status()["waiting_reads"] == 1)
            for _ in range(3):
                await leader.call("add", 10)
        assert answers == [31], "answered only once the follower applied the token"
        assert follower.applied_index >= token


async def test_a_read_waiting_for_an_index_that_never_comes_times_out_on_the_replica(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Abandoned by its client (whose attempts time out) on a connection that stays open: the
    replica answers it `Timeout` after `waiting_read_ms_max` and holds no waiter for it."""
    monkeypatch.setattr(limits, "waiting_read_ms_max", 2_000)
    monkeypatch.setattr(limits, "waiting_read_check_interval_ms", 50)
    async with replica_cluster() as replicas:
        leader = await replicas.start("a")
        await replicas.wait_leader()
        async with replicas.client(attempt_timeout_ms=100, deadline_ms=250) as client:
            assert await client.call("add", 1) == 1
            for _ in range(3):
                with pytest.raises(Timeout):
                    await client.query("get", consistency="read_your_writes", min_index=10**9)
            assert leader.status()["waiting_reads"] > 0
            await wait_until(lambda: leader.status()["waiting_reads"] == 0)
            assert await client.call("add", 1) == 2, "the connection serves on"


async def test_a_client_reads_its_own_writes_on_any_replica() -> None:
    async with replica_cluster() as replicas:
        await start_three(replicas)
        async with replicas.client() as client:
            for expected in range(1, 6):
                await client.call("add", 1)
                for running in list(replicas.running.values()):
                    replica = running.replica
                    value = await client.query(
                        "get", consistency="read_your_writes", replica=replica.address
                    )
                    assert value == expected


async def follower_that_applied_4(replicas: Replicas) -> Replica:
    """Three replicas started, 4 added through the leader: a follower once it applied it."""
    leader = await start_three(replicas)
    follower = next(r.replica for r in replicas.running.values() if r.replica is not leader)
    assert await leader.call("add", 4) == 4
    await wait_until(lambda: follower.machine.value == 4)  # type: ignore[attr-defined]
    return follower


async def test_stale_reads_answer_at_once_from_local_state() -> None:
    async with replica_cluster() as replicas:
        follower = await follower_that_applied_4(replicas)
        # A stale read ignores any token: it never waits.
        assert await follower.query("get", consistency="stale", min_index=10**9) == 4
        async with replicas.client() as client:
            assert await client.query("get", consistency="stale", replica=follower.address) == 4


async def test_reads_a_program_answers_from_a_followers_state_are_timed_and_counted() -> None:
    async with replica_cluster() as replicas:
        follower = await follower_that_applied_4(replicas)
        reads, waited_s = follower.stats.reads, follower.stats.read_wait_seconds
        applied_ms = follower.read_applied_time_ms(0, reads=3, waited_s=0.5)
        assert applied_ms > 0, "an earlier time reads at the last applied entry's"
        assert follower.read_applied_time_ms(applied_ms + 7, reads=1) == applied_ms + 7
        assert follower.stats.reads == reads + 4
        assert follower.stats.read_wait_seconds == pytest.approx(waited_s + 1.5)


async def test_reads_under_the_read_lease_take_no_round() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas, replica_config(read_lease_ms=60_000))
        term = leader.term
        assert term is not None
        assert await leader.call("add", 2) == 2
        assert await leader.query("get") == 2, "the first read waits for a round"
        rounds_before = term.read_rounds
        assert rounds_before >= 1
        async with replicas.client() as client:
            answers = [await client.query("get") for _ in range(50)]
            assert await client.call("add", 1) == 3
            assert await client.query("get") == 3, "a lease read sees every acknowledged write"
        assert answers == [2] * 50
        assert term.read_rounds == rounds_before, "no round while the lease holds"
        status = term.status()
        assert status["read_lease_ms"] == 60_000
        assert status["read_lease_held"] is True


async def test_a_successor_waits_out_the_lease_of_a_leader_that_missed_its_session_expiry() -> None:
    """The old leader is cut off from ZooKeeper and its ZooKeeper client tells it nothing
    (starved, paused), so it still serves; the successor must not acknowledge anything
    while the old leader's lease could still answer a read without the newer write."""
    async with replica_cluster() as replicas:
        old = await start_three(replicas, replica_config(read_lease_ms=500))
        assert await old.call("add", 1) == 1
        assert await old.query("get") == 1, "a round: the old leader holds a lease from here"
        store = replicas.memory_store(old.replica_id)
        store.hold_session_events()
        store.suspend()  # cut off from ZooKeeper, and never told
        store.expire_session()
        new = await replicas.wait_leader(exclude=old.replica_id)
        await wait_until(lambda: new.term is not None and new.term.accepting)
        assert await new.call("add", 1) == 2
        assert old.is_leader, "it still knows nothing"
        with pytest.raises(NotLeader):
            await old.query("get")  # not 1: its lease ran out before the write above
        store.release_session_events()


async def test_a_failed_renewal_does_not_extend_the_lease() -> None:
    """Two of three bookies stop: renewal rounds fail.  Reads go on under the lease until
    it ends, never after: then a read waits for a round, which succeeds once the bookies
    are back."""
    async with replica_cluster() as replicas:
        leader = await start_three(replicas, replica_config(read_lease_ms=400))
        term = leader.term
        assert term is not None
        assert await leader.call("add", 1) == 1
        assert await leader.query("get") == 1
        stopped = term.handle.metadata.current_ensemble[1:]
        for bookie_id in stopped:
            await replicas.cluster.stop_bookie(bookie_id)
        rounds = term.read_rounds

        # Reads under the lease keep asking for renewals (each round fails); the
        # first read the lease no longer covers gets None: it would need a round.
        with anyio.fail_after(WAIT_S):
            while (outcome := term.read_now("get", [], {})) is not None:
                assert outcome.value == 1
                await anyio.lowlevel.checkpoint()  # the renewal rounds run meanwhile
        assert term.status()["read_lease_held"] is False
        assert term.read_rounds == rounds, "no round succeeded"
        with anyio.move_on_after(0.3) as waiting:
            await leader.query("get")
        assert waiting.cancelled_caught, "no lease, no round: the read waits"
        for bookie_id in stopped:
            await replicas.cluster.restart_bookie(bookie_id)
        with anyio.fail_after(WAIT_S):
            assert await leader.query("get") == 1
        assert term.read_rounds > rounds
        assert term.status()["read_lease_held"] is True


async def test_reads_waiting_through_failing_rounds_are_refused_each_after_its_own_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two of three bookies stop and nothing is written: every round fails, and only a
    write's failure would end the term.  A read waits through `read_rounds_failing_ms_max`
    of failing rounds, then is answered Unavailable (not applied: clients send it again);
    the next read waits its own time, not counted from the first failure.  Once the bookies
    are back, reads are answered."""
    failing_ms_max = 300
    monkeypatch.setattr(limits, "read_rounds_failing_ms_max", failing_ms_max)
    async with replica_cluster() as replicas:
        leader = await start_three(replicas, replica_config(read_lease_ms=0))
        term = leader.term
        assert term is not None
        assert await leader.call("add", 1) == 1
        stopped = term.handle.metadata.current_ensemble[1:]
        for bookie_id in stopped:
            await replicas.cluster.stop_bookie(bookie_id)
        for _ in range(2):
            started_s = anyio.current_time()
            with anyio.fail_after(WAIT_S), pytest.raises(Unavailable):
                await leader.query("get")
            assert anyio.current_time() - started_s >= failing_ms_max / 1000
        assert leader.term is term, "reads alone do not end the term"
        for bookie_id in stopped:
            await replicas.cluster.restart_bookie(bookie_id)
        with anyio.fail_after(WAIT_S):
            while True:
                try:
                    assert await leader.query("get") == 1
                    break
                except Unavailable:
                    continue  # refused before the bookies answered again


async def test_a_handover_ends_the_lease_and_its_successor_serves_without_waiting() -> None:
    async with replica_cluster() as replicas:
        # A minute's lease: a successor that waited for it would not serve within the test.
        old = await start_three(replicas, replica_config(read_lease_ms=60_000))
        await everyone_stands(replicas)
        assert await old.call("add", 1) == 1
        assert await old.query("get") == 1
        term = old.term
        assert term is not None
        assert term.status()["read_lease_held"] is True
        await old.transfer_leadership()
        assert term.status()["read_lease_held"] is False, "revoked when the term ended"
        with pytest.raises(NotLeader):
            await old.query("get")
        new = await replicas.wait_leader(exclude=old.replica_id)
        await wait_until(lambda: new.term is not None and new.term.accepting)
        assert await new.call("add", 1) == 2


async def test_a_fenced_leader_answers_no_linearizable_read_and_steps_down() -> None:
    async with replica_cluster() as replicas:
        # Without a lease: the read's own round finds the fence at once.
        leader = await start_three(replicas, replica_config(read_lease_ms=0))
        await leader.call("add", 1)
        term = leader.term
        assert term is not None
        async with replicas.cluster.client() as intruder:
            # A successor's recovery would do exactly this before writing anything.
            await intruder.open_ledger(term.segment.ledger_id, ReplicaConfig().ledger_password)
        with pytest.raises(NotLeader):
            await leader.query("get")
        assert not leader.is_leader
