"""Sequential specifications: register, counter, and the key-value store's Redis semantics."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.errors import HistoryError
from rsm.testing import UNKNOWN, Counter, Keyed, KvModel, Register, kv_key
from rsm.testing.history import Value
from rsm.testing.models import KV_ERROR, KV_OPERATIONS, KvValue
from tests.unit.rsm.testing.histories import op


def test_register_reads_what_was_written_and_cas_compares() -> None:
    register = Register(0)
    state = register.init()
    assert register.apply(state, "read", None) == (0, 0)
    assert register.apply(state, "write", 5) == (None, 5)
    assert register.apply(5, "cas", (5, 6)) == (True, 6)
    assert register.apply(5, "cas", (4, 6)) == (False, 5)


def test_step_checks_the_output_and_keeps_the_state_when_illegal() -> None:
    register = Register(0)
    assert register.step(3, "read", None, 3) == (True, 3)
    assert register.step(3, "read", None, 4) == (False, 3)
    assert register.step(3, "cas", (3, 9), False) == (False, 3)
    assert register.step(3, "cas", (3, 9), UNKNOWN) == (True, 9)


def test_register_refuses_what_it_does_not_know() -> None:
    with pytest.raises(HistoryError, match="no operation 'pop'"):
        Register().apply(None, "pop", None)
    with pytest.raises(HistoryError, match="expected, new"):
        Register().apply(None, "cas", 1)


def test_counter_answers_the_value_after_adding() -> None:
    counter = Counter(10)
    assert counter.apply(counter.init(), "add", 5) == (15, 15)
    assert counter.apply(15, "read", None) == (15, 15)
    with pytest.raises(HistoryError, match="takes an int"):
        counter.apply(0, "add", True)
    assert counter.is_read_only("read")
    assert not counter.is_read_only("add")


# --- the key-value store -------------------------------------------------------------------------

KV_CASES: list[tuple[KvValue, str, tuple[Value, ...], Value, KvValue]] = [
    (None, "get", (), None, None),
    ("v", "get", (), "v", "v"),
    (None, "set", ("v",), "OK", "v"),
    ("old", "set", ("v",), "OK", "v"),
    ("v", "del", (), 1, None),
    (None, "del", (), 0, None),
    ("v", "exists", (), 1, "v"),
    (None, "exists", (), 0, None),
    (None, "incr", (), 1, "1"),
    ("41", "incr", (), 42, "42"),
    ("-1", "incr", (), 0, "0"),
    ("0", "decr", (), -1, "-1"),
    ("10", "incrby", (-15,), -5, "-5"),
    ("10", "decrby", (3,), 7, "7"),
    ("abc", "incr", (), KV_ERROR, "abc"),
    (" 1", "incr", (), KV_ERROR, " 1"),
    ("+1", "incr", (), KV_ERROR, "+1"),
    ("01", "incr", (), KV_ERROR, "01"),
    ("-0", "incr", (), KV_ERROR, "-0"),
    ("", "incr", (), KV_ERROR, ""),
    ("1" * 25, "incr", (), KV_ERROR, "1" * 25),
    (str(2**63 - 1), "incr", (), KV_ERROR, str(2**63 - 1)),
    (str(-(2**63)), "decr", (), KV_ERROR, str(-(2**63))),
    (str(2**63 - 2), "incr", (), 2**63 - 1, str(2**63 - 1)),
    ("0", "incrby", (2**63,), KV_ERROR, "0"),
    (None, "append", ("ab",), 2, "ab"),
    ("ab", "append", ("é",), 4, "abé"),
    (None, "cas", (None, "1"), True, "1"),
    ("1", "cas", (None, "2"), False, "1"),
    ("1", "cas", ("1", "2"), True, "2"),
    ("1", "cas", ("1", None), True, None),
    ("1", "cas", ("3", "2"), False, "1"),
]


@pytest.mark.parametrize(("state", "kind", "arguments", "answer", "after"), KV_CASES)
def test_kv_operations_follow_redis_string_semantics(
    state: KvValue, kind: str, arguments: tuple[Value, ...], answer: Value, after: KvValue
) -> None:
    model = KvModel()
    assert model.apply(state, kind, ("key", *arguments)) == (answer, after)


@pytest.mark.parametrize(
    ("kind", "input_value", "message"),
    [
        ("set", ("k",), "takes 1 argument"),
        ("set", ("k", 5), "str value"),
        ("get", ("k", "extra"), "takes 0 argument"),
        ("incrby", ("k", "5"), "int increment"),
        ("decrby", ("k", 1.5), "int decrement"),
        ("get", (), "start with the key"),
        ("get", "k", "start with the key"),
        ("lpush", ("k", "v"), "no operation 'lpush'"),
    ],
)
def test_kv_refuses_malformed_operations(kind: str, input_value: Value, message: str) -> None:
    with pytest.raises(HistoryError, match=message):
        KvModel().apply(None, kind, input_value)


def test_kv_takes_extra_operations() -> None:
    def strlen(state: KvValue, arguments: tuple[Value, ...]) -> tuple[Value, KvValue]:
        return len((state or "").encode()), state

    model = KvModel({**KV_OPERATIONS, "strlen": strlen}, frozenset({"get", "exists", "strlen"}))
    assert model.apply("abc", "strlen", ("k",)) == (3, "abc")
    assert model.is_read_only("strlen")
    assert not model.is_read_only("set")


def test_kv_key_is_the_first_input_item() -> None:
    assert kv_key(op(0, "a", "get", ("k",), None, 1, 2)) == "k"
    with pytest.raises(HistoryError, match="starts with the key"):
        kv_key(op(0, "a", "read", None, None, 1, 2))


def test_keyed_keeps_keys_apart_and_states_canonical() -> None:
    model = Keyed(KvModel())
    state = model.init()
    _, state = model.apply(state, "set", ("a", "1"))
    answer, state = model.apply(state, "incr", ("b",))
    assert answer == 1
    assert model.apply(state, "get", ("a",))[0] == "1"
    _, state = model.apply(state, "del", ("a",))
    _, state = model.apply(state, "del", ("b",))
    assert state == model.init()
    assert model.is_read_only("get")


kv_calls = st.tuples(
    st.sampled_from(["a", "b", "c"]),
    st.sampled_from(["get", "set", "del", "incr", "append", "cas"]),
    st.sampled_from(["1", "x", None]),
)


@settings(max_examples=100)
@given(st.lists(kv_calls, max_size=30))
def test_keyed_answers_as_one_model_per_key(calls: list[tuple[str, str, Any]]) -> None:
    keyed = Keyed(KvModel())
    single = KvModel()
    state = keyed.init()
    states: dict[str, KvValue] = {}
    for key, kind, value in calls:
        arguments: tuple[Value, ...] = {
            "set": (value or "v",),
            "append": (value or "v",),
            "cas": (value, "1"),
        }.get(kind, ())
        answer, state = keyed.apply(state, kind, (key, *arguments))
        expected, states[key] = single.apply(states.get(key), kind, (key, *arguments))
        assert answer == expected
    assert dict(state) == {key: value for key, value in states.items() if value is not None}
