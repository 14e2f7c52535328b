"""The apply step: deterministic results and errors, exactly-once, context only during apply."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm import limits
from rsm.core.commands import answer_query, apply_batch, prepare_command
from rsm.core.log_format import (
    Batch,
    CommandItem,
    decode_batch,
    encode_batch,
    encode_command,
    encode_leader_start,
)
from rsm.core.sessions import Outcome, SessionTable
from rsm.core.state_machine import StateMachine, command, query
from rsm.errors import (
    BadArguments,
    CommandFailed,
    ContextUnavailable,
    RsmStatus,
    SessionExpired,
    UnknownCommand,
)
from tests.unit.rsm.core.counter import Counter


def batch(
    items: Sequence[bytes],
    first_index: int = 1,
    timestamp_ms: int = 1000,
    seed: int = 7,
    epoch: int = 1,
) -> Batch:
    """A batch as replicas see it: encoded by the leader, decoded from the log."""
    data = encode_batch(
        epoch=epoch, first_index=first_index, timestamp_ms=timestamp_ms, seed=seed, items=items
    )
    return decode_batch(data)


def call(
    name: str, *args: Any, client: bytes | None = None, seq: int | None = None, ack: int = 0
) -> bytes:
    if client is None:
        return prepare_command(Counter, name, args)
    return prepare_command(Counter, name, args, client_id=client, seq=seq, ack_seq=ack)


def replica() -> tuple[Counter, SessionTable]:
    return Counter(), SessionTable()


def test_commands_apply_in_index_order_with_results() -> None:
    counter, sessions = replica()
    outcomes = apply_batch(counter, batch([call("add", 2), call("add", 3)]), sessions)
    assert [o.unwrap() for o in outcomes] == [2, 5]
    assert counter.value == 5


def test_an_exception_is_a_deterministic_result_not_a_crash() -> None:
    counter, sessions = replica()
    [failed, bad_type] = apply_batch(
        counter, batch([call("fail", "boom"), call("add", "x")]), sessions
    )
    assert failed == Outcome(RsmStatus.COMMAND_FAILED, None, "boom", "ValueError")
    assert bad_type.status is RsmStatus.COMMAND_FAILED
    assert bad_type.detail == "TypeError"
    with pytest.raises(CommandFailed, match="boom") as raised:
        failed.unwrap()
    assert raised.value.type_name == "ValueError"
    assert counter.value == 0


class Awkward(StateMachine):
    def __init__(self) -> None:
        self.items: list[int] = []

    @command
    def unencodable(self) -> object:
        return object()

    @command
    def grow(self, number: int) -> list[int]:
        self.items.append(number)
        return self.items

    @command
    def tuple_result(self) -> tuple[int, int]:
        return (1, 2)

    @command
    def long_message(self) -> None:
        raise KeyError("k" * 10_000)

    @command
    def unprintable(self) -> None:
        raise Unprintable

    @command
    def exhaust(self) -> None:
        raise MemoryError

    @query
    def peek(self) -> int:
        return len(self.items)

    @query
    def when(self) -> int:
        return self.context.time_ms

    @command
    def take(self, name: str) -> None:
        raise KeyError(f"no item {name!r}")

    @query
    def find(self, name: str) -> None:
        raise KeyError(f"no item {name!r}")


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no")


def awkward_batch(*names: str, **kwargs: Any) -> Batch:
    return batch([prepare_command(Awkward, name, **kwargs) for name in names])


def test_a_non_encodable_result_becomes_the_same_error_everywhere() -> None:
    outcomes = [
        apply_batch(Awkward(), awkward_batch("unencodable"), SessionTable())[0] for _ in range(2)
    ]
    assert outcomes[0] == outcomes[1]
    assert outcomes[0].status is RsmStatus.COMMAND_FAILED
    assert "not CBOR" in outcomes[0].message


def test_container_results_are_detached_from_state_and_cbor_shaped() -> None:
    machine = Awkward()
    sessions = SessionTable()
    items = [
        prepare_command(Awkward, "grow", [1], client_id=b"c", seq=1, ack_seq=0),
        prepare_command(Awkward, "grow", [2], client_id=b"c", seq=2, ack_seq=0),
        prepare_command(Awkward, "tuple_result"),
    ]
    first, second, pair = apply_batch(machine, batch(items), sessions)
    assert first.value == [1]
    assert second.value == [1, 2]
    assert pair.value == [1, 2]
    assert sessions.recorded(b"c", 1) == Outcome(RsmStatus.OK, [1])


class Dumper(StateMachine):
    """A command that changes the state and returns as much as asked for."""

    def __init__(self) -> None:
        self.dumps = 0

    @command
    def dump(self, size: int, as_list: bool) -> str | list[str]:
        self.dumps += 1
        return ["x" * (size // 2)] * 2 if as_list else "x" * size

    @query
    def read(self, size: int) -> str:
        return "x" * size


@pytest.mark.parametrize("as_list", [False, True], ids=["text", "list"])
def test_a_result_no_answer_could_carry_is_recorded_as_applied_and_failed(as_list: bool) -> None:
    machine, sessions = Dumper(), SessionTable()
    too_large = limits.result_bytes_max + 1
    items = [
        prepare_command(Dumper, "dump", [too_large, as_list], client_id=b"c", seq=1, ack_seq=0),
        prepare_command(Dumper, "dump", [limits.result_bytes_max - 16, as_list]),
    ]
    failed, fitting = apply_batch(machine, batch(items), sessions)
    assert (failed.status, failed.detail) == (RsmStatus.COMMAND_FAILED, "ResultTooLarge")
    assert "'dump' was applied" in failed.message
    assert machine.dumps == 2, "both applied"
    assert sessions.recorded(b"c", 1) == failed
    assert fitting.status is RsmStatus.OK
    answer = answer_query(machine, "read", [too_large])
    assert answer.status is RsmStatus.OK, "a query's answer is refused by its encoding instead"


def test_failure_messages_are_cut_and_never_crash() -> None:
    long_failure, unprintable = apply_batch(
        Awkward(), awkward_batch("long_message", "unprintable"), SessionTable()
    )
    assert long_failure.detail == "KeyError"
    assert len(long_failure.message) == 4096
    assert unprintable.detail == "Unprintable"
    assert "could not be formatted" in unprintable.message


def test_machine_dependent_errors_propagate_and_leave_no_context_behind() -> None:
    machine = Awkward()
    with pytest.raises(MemoryError):
        apply_batch(machine, awkward_batch("exhaust"), SessionTable())
    assert "_rsm_context" not in vars(machine)
    with pytest.raises(ContextUnavailable):
        _ = machine.context


def test_a_duplicate_returns_the_recorded_result_without_applying() -> None:
    counter, sessions = replica()
    first = call("add", 5, client=b"c", seq=1)
    outcomes = apply_batch(counter, batch([first, first]), sessions)
    later = apply_batch(counter, batch([first], first_index=3), sessions)
    assert [o.unwrap() for o in outcomes + later] == [5, 5, 5]
    assert counter.value == 5


def test_context_exists_only_while_a_command_applies() -> None:
    counter, sessions = replica()
    items = [encode_leader_start("r1"), call("stamp"), call("stamp")]
    marker, first, second = apply_batch(
        counter, batch(items, first_index=41, timestamp_ms=777, epoch=3), sessions
    )
    assert marker == Outcome(RsmStatus.OK, None)
    assert first.value == [42, 777, 3]
    assert second.value == [43, 777, 3]
    assert vars(counter) == {"value": 0}
    with pytest.raises(ContextUnavailable):
        _ = counter.context
    outcome = answer_query(Awkward(), "when")
    assert outcome.status is RsmStatus.COMMAND_FAILED
    assert outcome.detail == "ContextUnavailable"


def test_a_query_key_error_message_is_its_text_and_a_command_s_is_recorded_as_before() -> None:
    queried = answer_query(Awkward(), "find", ["pen"])
    assert (queried.detail, queried.message) == ("KeyError", "no item 'pen'")
    [commanded] = apply_batch(Awkward(), awkward_batch("take", args=["pen"]), SessionTable())
    # What a replica records for a command is what every version records: str() of the error.
    assert (commanded.detail, commanded.message) == ("KeyError", str(KeyError("no item 'pen'")))


def test_an_unknown_logged_command_is_a_recorded_error() -> None:
    counter, sessions = replica()
    item = encode_command("vanished", [], client_id=b"c", seq=1, ack_seq=0)
    [outcome] = apply_batch(counter, batch([item]), sessions)
    assert isinstance(outcome.error, UnknownCommand)
    assert sessions.recorded(b"c", 1) == outcome


def test_idle_sessions_expire_at_the_batch_timestamp() -> None:
    counter, sessions = replica()
    apply_batch(counter, batch([call("add", 1, client=b"c", seq=1)], timestamp_ms=0), sessions)
    late = batch([call("add", 1, client=b"c", seq=2, ack=1)], first_index=2, timestamp_ms=10**9)
    [outcome] = apply_batch(counter, late, sessions)
    assert isinstance(outcome.error, SessionExpired)
    assert counter.value == 1


def test_calls_are_checked_before_logging() -> None:
    with pytest.raises(UnknownCommand):
        prepare_command(Counter, "nope")
    with pytest.raises(UnknownCommand):
        prepare_command(Counter, "get")
    with pytest.raises(BadArguments):
        prepare_command(Counter, "add", [1, 2])
    with pytest.raises(BadArguments):
        prepare_command(Counter, "add", [], {"amount": 1, "other": 2})
    with pytest.raises(BadArguments, match="CBOR"):
        prepare_command(Counter, "add", [object()])


def test_queries_read_local_state() -> None:
    counter, sessions = replica()
    apply_batch(counter, batch([call("add", 4)]), sessions)
    assert answer_query(counter, "get") == Outcome(RsmStatus.OK, 4)
    with pytest.raises(UnknownCommand):
        answer_query(counter, "add")
    with pytest.raises(BadArguments):
        answer_query(counter, "get", [1])


operations = st.one_of(
    st.tuples(st.just("add"), st.integers(-100, 100)),
    st.tuples(st.just("add"), st.just("not a number")),
    st.tuples(st.just("roll"), st.integers(1, 20)),
    st.tuples(st.just("fail"), st.text(max_size=5)),
    st.tuples(st.just("stamp"), st.none()),
)


calls = st.lists(
    st.tuples(
        st.sampled_from([b"alice", b"bob", None]),
        operations,
        st.none() | st.integers(0, 100),
    ),
    min_size=1,
    max_size=30,
)
"""Each call: its client (None: no session), what it does, and whether it is instead a
retry of an earlier logged command (which one, modulo how many were logged)."""

cuts = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 1000), st.integers(0, 2**64 - 1)))
"""How the log is cut into batches: (commands, time step, seed); 0 commands is a barrier."""


def log_of(planned: list[tuple[bytes | None, tuple[str, Any], int | None]]) -> list[bytes]:
    next_seq: dict[bytes, int] = {}
    sent: list[bytes] = []
    for client, (name, argument), retry in planned:
        if retry is not None and sent:
            sent.append(sent[retry % len(sent)])
            continue
        args = [] if argument is None else [argument]
        if client is None:
            sent.append(prepare_command(Counter, name, args))
            continue
        seq = next_seq[client] = next_seq.get(client, 0) + 1
        sent.append(prepare_command(Counter, name, args, client_id=client, seq=seq, ack_seq=0))
    return sent


def batches_of(sent: list[bytes], plan: list[tuple[int, int, int]]) -> list[Batch]:
    cut: list[Batch] = []
    index, timestamp_ms, position = 1, 0, 0
    for size, step_ms, seed in plan:
        timestamp_ms += step_ms
        cut.append(batch(sent[position : position + size], index, timestamp_ms, seed))
        index += len(sent[position : position + size])
        position += size
    cut.append(batch(sent[position:], index, timestamp_ms + 1, 0))
    return cut


@settings(max_examples=150)
@given(calls, cuts)
def test_replicas_applying_the_same_batches_agree_and_apply_each_seq_once(
    planned: list[tuple[bytes | None, tuple[str, Any], int | None]],
    plan: list[tuple[int, int, int]],
) -> None:
    sent = log_of(planned)
    batches = batches_of(sent, plan)
    replicas = [replica() for _ in range(2)]
    results = [
        [o for b in batches for o in apply_batch(counter, b, sessions)]
        for counter, sessions in replicas
    ]
    assert results[0] == results[1]
    assert vars(replicas[0][0]) == vars(replicas[1][0])
    assert replicas[0][1].to_plain() == replicas[1][1].to_plain()
    # Exactly once: the counter moved by each distinct successful add or roll once.
    items = [item for b in batches for item in b.items]
    moved: dict[object, int] = {}
    for position, (item, outcome) in enumerate(zip(items, results[0], strict=True)):
        assert isinstance(item, CommandItem)
        key = position if item.client_id is None else (item.client_id, item.seq)
        if outcome.ok and item.name == "add":
            moved.setdefault(key, item.args[0])
        elif outcome.ok and item.name == "roll":
            moved.setdefault(key, outcome.value)
    assert replicas[0][0].value == sum(moved.values())
