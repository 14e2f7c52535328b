"""The session table: exactly-once under retries and duplicates, expiry by logged time, bounds."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.core.sessions import Outcome, SessionTable
from rsm.errors import (
    CommandFailed,
    MalformedValue,
    Overloaded,
    RsmStatus,
    SessionExpired,
    StaleRequest,
)


def apply(table: SessionTable, client: bytes, seq: int, ack: int, now_ms: int = 0) -> Outcome:
    """Run one logged command through the table the way the apply step does."""
    early = table.begin(client, seq, ack, now_ms)
    if early is not None:
        return early
    outcome = Outcome(RsmStatus.OK, [client.hex(), seq])
    table.record(client, seq, outcome)
    return outcome


class Client:
    """A client as the table sees it: seqs sent, answers received, ack_seq derived from them."""

    def __init__(self, client_id: bytes) -> None:
        self.client_id = client_id
        self.next_seq = 1
        self.answers: dict[int, Outcome] = {}
        self.sent_acks: dict[int, list[int]] = {}

    @property
    def ack_seq(self) -> int:
        ack = 0
        while ack + 1 in self.answers:
            ack += 1
        return ack


@settings(max_examples=150)
@given(st.data())
def test_each_seq_is_applied_at_most_once_and_every_answer_is_the_first(data: Any) -> None:
    table = SessionTable(results_max=10_000)
    clients = [Client(bytes([n + 1]) * 4) for n in range(3)]
    applied: dict[tuple[bytes, int], int] = {}
    first: dict[tuple[bytes, int], Outcome] = {}

    def log(client: Client, seq: int, ack: int) -> None:
        early = table.begin(client.client_id, seq, ack, 0)
        key = (client.client_id, seq)
        if early is None:
            applied[key] = applied.get(key, 0) + 1
            outcome = Outcome(RsmStatus.OK, [client.client_id, seq])
            table.record(client.client_id, seq, outcome)
        else:
            outcome = early
        if outcome.status is RsmStatus.STALE_REQUEST:
            # Only a seq whose answer the client already had can be stale.
            assert seq in client.answers
            return
        assert outcome.ok
        first.setdefault(key, outcome)
        assert outcome == first[key]
        if data.draw(st.booleans(), label="answer reaches the client"):
            client.answers.setdefault(seq, outcome)

    for _ in range(data.draw(st.integers(1, 50), label="steps")):
        client = data.draw(st.sampled_from(clients))
        action = data.draw(st.sampled_from(["new", "retry", "late duplicate", "lost"]))
        if action in ("new", "lost"):
            seq = client.next_seq
            client.next_seq += 1
            ack = client.ack_seq
            client.sent_acks[seq] = [ack]
            if action == "new":
                log(client, seq, ack)
        elif client.sent_acks:
            seq = data.draw(st.sampled_from(sorted(client.sent_acks)))
            if action == "retry":
                ack = client.ack_seq
                if seq <= ack:
                    continue  # a client never retries what it has the answer to
                client.sent_acks[seq].append(ack)
            else:
                ack = data.draw(st.sampled_from(client.sent_acks[seq]))
            log(client, seq, ack)
    assert all(count == 1 for count in applied.values())


def test_duplicate_returns_the_recorded_outcome_and_stale_below_the_ack() -> None:
    table = SessionTable()
    client = b"c1"
    outcome = apply(table, client, 1, 0)
    assert table.begin(client, 1, 0, 0) == outcome
    assert table.recorded(client, 1) == outcome
    apply(table, client, 2, 1)
    assert table.recorded(client, 1) is None
    stale = table.begin(client, 1, 0, 0)
    assert stale is not None
    assert stale.status is RsmStatus.STALE_REQUEST
    assert isinstance(stale.error, StaleRequest)


def test_error_outcomes_are_recorded_like_values() -> None:
    table = SessionTable()
    failed = Outcome.failure(CommandFailed("nope", "ValueError"))
    assert table.begin(b"c", 1, 0, 0) is None
    table.record(b"c", 1, failed)
    assert table.begin(b"c", 1, 0, 0) == failed
    with pytest.raises(CommandFailed, match="nope"):
        failed.unwrap()


def test_unknown_client_that_acknowledged_something_has_an_expired_session() -> None:
    table = SessionTable()
    outcome = table.begin(b"ghost", 5, 4, 0)
    assert outcome is not None
    assert isinstance(outcome.error, SessionExpired)
    assert b"ghost" not in table


def test_sessions_expire_by_logged_time_only() -> None:
    table = SessionTable(ttl_ms=100)
    apply(table, b"a", 1, 0, now_ms=0)
    apply(table, b"b", 1, 0, now_ms=50)
    assert table.expire(100) == 0
    assert table.expire(101) == 1
    assert b"a" not in table
    assert b"b" in table
    # Time that goes backwards is held still, so nothing is revived or reordered.
    assert table.expire(10) == 0
    assert table.clock_ms == 101
    expired = table.begin(b"a", 2, 1, 200)
    assert expired is not None
    assert expired.status is RsmStatus.SESSION_EXPIRED


def test_activity_keeps_a_session_alive() -> None:
    table = SessionTable(ttl_ms=100)
    apply(table, b"a", 1, 0, now_ms=0)
    apply(table, b"b", 1, 0, now_ms=10)
    apply(table, b"a", 2, 1, now_ms=90)
    assert table.expire(150) == 1
    assert b"a" in table
    assert b"b" not in table


def test_the_least_recently_active_session_is_evicted_at_the_bound_once_idle_long_enough() -> None:
    table = SessionTable(sessions_max=2, evict_idle_ms=10)
    apply(table, b"a", 1, 0, now_ms=1)
    apply(table, b"b", 1, 0, now_ms=2)
    apply(table, b"a", 2, 1, now_ms=3)
    assert apply(table, b"c", 1, 0, now_ms=12).ok
    assert len(table) == 2
    assert b"b" not in table
    assert b"a" in table


def test_a_new_session_is_refused_while_every_session_is_recent() -> None:
    table = SessionTable(sessions_max=2, evict_idle_ms=100)
    apply(table, b"a", 1, 0, now_ms=0)
    apply(table, b"b", 1, 0, now_ms=10)
    refused = apply(table, b"c", 1, 0, now_ms=99)
    assert refused.status is RsmStatus.OVERLOADED
    assert isinstance(refused.error, Overloaded)
    assert b"c" not in table
    assert table.recorded(b"a", 1) is not None
    # Once the least recently active session has been idle long enough, it makes room.
    assert apply(table, b"c", 1, 0, now_ms=100) == Outcome(RsmStatus.OK, [b"c".hex(), 1])
    assert b"a" not in table
    assert b"b" in table


def test_a_retry_of_a_first_command_is_not_applied_again_when_the_table_fills() -> None:
    # "a" never had an answer (ack_seq 0): had its session been evicted, its
    # retry would have started a new session and applied seq 1 again.
    table = SessionTable(sessions_max=2, evict_idle_ms=100)
    first = apply(table, b"a", 1, 0, now_ms=0)
    apply(table, b"b", 1, 0, now_ms=20)
    assert apply(table, b"c", 1, 0, now_ms=40).status is RsmStatus.OVERLOADED
    assert table.begin(b"a", 1, 0, 60) == first


@settings(max_examples=200)
@given(st.data())
def test_commands_retried_within_the_eviction_idle_time_are_applied_once(data: Any) -> None:
    evict_idle_ms = 100
    table = SessionTable(sessions_max=2, evict_idle_ms=evict_idle_ms, results_max=10_000)
    applied: dict[tuple[bytes, int], int] = {}
    first_sent_ms: dict[tuple[bytes, int], int] = {}
    next_seq = dict.fromkeys((b"a", b"b", b"c", b"d"), 1)
    now_ms = 0
    for _ in range(data.draw(st.integers(1, 60), label="steps")):
        now_ms += data.draw(st.integers(0, 40), label="ms passing")
        table.expire(now_ms)
        client = data.draw(st.sampled_from(sorted(next_seq)), label="client")
        # A client retries a command until its deadline, shorter than the eviction idle
        # time; it never has an answer, so every command goes with ack_seq 0.
        retryable = [
            seq
            for (who, seq), sent_ms in first_sent_ms.items()
            if who == client and now_ms - sent_ms < evict_idle_ms
        ]
        if retryable and data.draw(st.booleans(), label="retry"):
            seq = data.draw(st.sampled_from(retryable), label="seq")
        else:
            seq = next_seq[client]
            next_seq[client] += 1
            first_sent_ms[(client, seq)] = now_ms
        early = table.begin(client, seq, 0, now_ms)
        if early is None:
            applied[(client, seq)] = applied.get((client, seq), 0) + 1
            table.record(client, seq, Outcome(RsmStatus.OK, seq))
        else:
            assert early.status in (RsmStatus.OK, RsmStatus.OVERLOADED)
        assert len(table) <= 2
    assert all(count == 1 for count in applied.values())


def test_results_per_session_are_bounded_and_the_floor_rises() -> None:
    table = SessionTable(results_max=2)
    for seq in (1, 2, 3):
        apply(table, b"a", seq, 0)
    assert table.recorded(b"a", 1) is None
    assert table.recorded(b"a", 3) is not None
    stale = table.begin(b"a", 1, 0, 0)
    assert stale is not None
    assert stale.status is RsmStatus.STALE_REQUEST


def test_out_of_order_seqs_are_applied_once_each() -> None:
    table = SessionTable()
    apply(table, b"a", 3, 0)
    assert table.begin(b"a", 2, 0, 0) is None
    table.record(b"a", 2, Outcome(RsmStatus.OK, 2))
    assert table.begin(b"a", 3, 0, 0) == Outcome(RsmStatus.OK, ["61", 3])


commands = st.lists(
    st.tuples(
        st.sampled_from([b"a", b"b", b"c", b"d"]),
        st.integers(1, 6),
        st.integers(0, 5),
        st.integers(0, 80),
    ),
    max_size=80,
)


def run(log: list[tuple[bytes, int, int, int]]) -> SessionTable:
    table = SessionTable(ttl_ms=100, sessions_max=3, results_max=3)
    now_ms = 0
    for client, seq, ack, step_ms in log:
        now_ms += step_ms
        table.expire(now_ms)
        apply(table, client, seq, min(ack, seq - 1), now_ms)
    return table


@given(commands)
def test_identical_logs_give_identical_tables_and_bounds_hold(
    log: list[tuple[bytes, int, int, int]],
) -> None:
    table = run(log)
    assert table.to_plain() == run(log).to_plain()
    plain = table.to_plain()
    assert len(plain["sessions"]) <= 3
    actives = [session[1] for session in plain["sessions"]]
    assert actives == sorted(actives)
    assert all(table.clock_ms - active <= 100 for active in actives)
    for _, _, floor_seq, results in plain["sessions"]:
        assert len(results) <= 3
        assert all(seq > floor_seq for seq, _ in results)


@given(commands)
def test_plain_form_round_trips_through_cbor(log: list[tuple[bytes, int, int, int]]) -> None:
    table = run(log)
    plain = cbor2.loads(cbor2.dumps(table.to_plain()))
    restored = SessionTable.from_plain(plain, ttl_ms=100, sessions_max=3, results_max=3)
    assert restored.to_plain() == table.to_plain()
    # The restored table goes on exactly like the original.
    later_ms = table.clock_ms + 50
    for copy in (table, restored):
        copy.expire(later_ms)
        apply(copy, b"a", 7, 0, later_ms)
    assert restored.to_plain() == table.to_plain()


@pytest.mark.parametrize(
    "plain",
    [
        None,
        [],
        {"v": 2, "clock_ms": 0, "sessions": []},
        {"v": 1, "clock_ms": -1, "sessions": []},
        {"v": 1, "clock_ms": 0, "sessions": {}},
        {"v": 1, "clock_ms": 0, "sessions": [], "extra": 1},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 9, 0, []]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 0, []], [b"b", 2, 0, []]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 0, []], [b"a", 4, 0, []]]},
        {"v": 1, "clock_ms": 5, "sessions": [["a", 3, 0, []]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 2, [[2, [0, 1]]]]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 0, [[1, [0, 1]], [1, [0, 2]]]]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 0, [[1, [99, "m", None]]]]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 0, [[1, [False, 1]]]]]},
        {"v": 1, "clock_ms": 5, "sessions": [[b"a", 3, 0, [[1, [10, 1, None]]]]]},
    ],
)
def test_malformed_plain_forms_are_rejected(plain: Any) -> None:
    with pytest.raises(MalformedValue):
        SessionTable.from_plain(plain)
