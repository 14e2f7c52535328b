"""StateMachine declarations: the registry, argument checks and the context."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rsm.core.state_machine import (
    Context,
    StateMachine,
    command,
    commands_by_key,
    query,
    resolve_command,
    resolve_query,
)
from rsm.errors import BadArguments, BadStateMachine, ContextUnavailable, UnknownCommand
from tests.unit.rsm.core.counter import Counter


def test_registry_is_built_at_class_creation() -> None:
    assert resolve_command(Counter, "add").key == "add"
    assert resolve_query(Counter, "get").name == "get"
    assert commands_by_key(Counter).get("fail") is not None
    assert commands_by_key(Counter).get("get") is None
    with pytest.raises(UnknownCommand, match=r"no command 'get'; 'get' is a query \("):
        resolve_command(Counter, "get")
    with pytest.raises(UnknownCommand, match=r"no query 'add'; 'add' is a command \("):
        resolve_query(Counter, "add")
    with pytest.raises(UnknownCommand, match=r"no query 'nope'$"):
        resolve_query(Counter, "nope")


def test_versions_log_under_their_own_key_and_new_calls_use_the_newest() -> None:
    class Store(StateMachine):
        @command(name="put")
        def put_v1(self, key: str) -> None: ...

        @command(name="put", version=3)
        def put(self, key: str, value: int) -> None: ...

    assert resolve_command(Store, "put").key == "put@3"
    assert commands_by_key(Store).get("put") is not None
    assert commands_by_key(Store).get("put").function is Store.put_v1  # type: ignore[union-attr]
    assert commands_by_key(Store).get("put@3").function is Store.put  # type: ignore[union-attr]
    assert commands_by_key(Store).get("put_v1") is None


def test_subclasses_inherit_and_override_operations() -> None:
    class Doubling(Counter):
        @command
        def add(self, amount: int = 1) -> int:
            self.value += 2 * amount
            return self.value

        @command
        def reset(self) -> None:
            self.value = 0

    assert commands_by_key(Doubling).get("add").function is Doubling.add  # type: ignore[union-attr]
    assert commands_by_key(Doubling).get("roll") is not None
    assert commands_by_key(Doubling).get("reset") is not None
    assert commands_by_key(Counter).get("reset") is None


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(BadStateMachine, match="twice"):

        class Twice(StateMachine):
            @command(name="x")
            def a(self) -> None: ...

            @command(name="x")
            def b(self) -> None: ...


@pytest.mark.parametrize(
    "method", ["snapshot", "restore", "state_hash", "key_digests", "idle", "context"]
)
def test_the_framework_methods_cannot_be_commands_or_queries(method: str) -> None:
    with pytest.raises(BadStateMachine, match="framework's method"):
        type("Shadowing", (StateMachine,), {method: command(lambda self: None)})
    with pytest.raises(BadStateMachine, match="framework's method"):
        type("Shadowing", (StateMachine,), {method: query(lambda self: None)})


def test_per_key_digests_are_not_offered_by_default() -> None:
    assert Counter().key_digests() is None
    assert Counter().key_digests([b"value"]) is None


def test_command_and_query_may_not_share_a_name() -> None:
    with pytest.raises(BadStateMachine, match="both"):

        class Clash(StateMachine):
            @command
            def x(self) -> None: ...

            @query(name="x")
            def read_x(self) -> None: ...


def test_async_methods_are_refused() -> None:
    with pytest.raises(BadStateMachine, match="async"):

        class Async(StateMachine):
            @command
            async def x(self) -> None: ...


def test_non_functions_are_refused() -> None:
    with pytest.raises(BadStateMachine, match="plain methods"):

        class Static(StateMachine):
            @command
            @staticmethod
            def x() -> None: ...


def test_methods_need_self() -> None:
    with pytest.raises(BadStateMachine, match="self"):

        class NoSelf(StateMachine):
            @command
            def x(*args: Any) -> None: ...


@pytest.mark.parametrize(
    ("name", "version"), [("", 1), ("a@b", 1), ("ok", 0), ("ok", True), ("x" * 200, 1)]
)
def test_bad_names_and_versions_are_refused(name: str, version: int) -> None:
    with pytest.raises(BadStateMachine):

        class Bad(StateMachine):
            @command(name=name, version=version)
            def x(self) -> None: ...


class Signatures(StateMachine):
    @command
    def fixed(self, a: int, b: int = 0) -> None: ...

    @command
    def variadic(self, a: int, *rest: int) -> None: ...

    @command
    def keyword_only(self, a: int, *, flag: bool) -> None: ...

    @command
    def anything(self, *args: Any, **kwargs: Any) -> None: ...


@pytest.mark.parametrize(
    ("name", "args", "kwargs", "fits"),
    [
        ("fixed", [1], {}, True),
        ("fixed", [1, 2], {}, True),
        ("fixed", [], {"a": 1, "b": 2}, True),
        ("fixed", [], {}, False),
        ("fixed", [1, 2, 3], {}, False),
        ("fixed", [1], {"c": 3}, False),
        ("fixed", [1], {"a": 1}, False),
        ("variadic", [1, 2, 3, 4], {}, True),
        ("variadic", [], {}, False),
        ("keyword_only", [1], {"flag": True}, True),
        ("keyword_only", [1], {}, False),
        ("anything", [1, 2], {"x": 1}, True),
    ],
)
def test_arguments_are_bound_against_the_signature(
    name: str, args: list[Any], kwargs: dict[str, Any], fits: bool
) -> None:
    operation = resolve_command(Signatures, name)
    if fits:
        operation.check_arguments(args, kwargs)
    else:
        with pytest.raises(BadArguments, match=name):
            operation.check_arguments(args, kwargs)


def test_context_is_unavailable_outside_apply() -> None:
    counter = Counter()
    with pytest.raises(ContextUnavailable):
        _ = counter.context
    with pytest.raises(ContextUnavailable):
        counter.roll(6)


@given(
    st.integers(1, 2**62),
    st.integers(0, 2**40),
    st.integers(1, 2**20),
    st.integers(0, 2**64 - 1),
)
def test_context_randomness_depends_only_on_seed_and_index(
    index: int, time_ms: int, epoch: int, seed: int
) -> None:
    first = Context(index, time_ms, epoch, seed)
    second = Context(index, time_ms + 1, epoch + 1, seed)
    assert [first.random.random() for _ in range(3)] == [second.random.random() for _ in range(3)]
    neighbour = Context(index + 1, time_ms, epoch, seed)
    fresh = Context(index, time_ms, epoch, seed)
    assert fresh.random.getrandbits(64) != neighbour.random.getrandbits(64)
    assert (first.index, first.time_ms, first.epoch) == (index, time_ms, epoch)
