"""Typed arguments: declarations parsed without Spark, values converted or null."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import pytest

pytest.importorskip("pyspark")

from rsm import StateMachine, command
from rsm.errors import BadStateMachine, InvalidConfig
from rsm.spark.typed_arguments import Typer, typed_struct


class Typed(StateMachine):
    spark_arguments: ClassVar[Mapping[str, str]] = {
        "put": "key binary, count BIGINT, small Int, ratio double, flag boolean, note string",
        "tag": "key BINARY, tags array< STRING >",
    }

    @command
    def put(
        self, key: bytes, count: bytes, small: bytes, ratio: bytes, *, flag: bool, note: bytes
    ) -> None:
        """Typed field by field."""

    @command
    def tag(self, key: bytes, *tags: bytes) -> None:
        """A variadic command: the last field takes the rest."""

    @command
    def untyped(self) -> None:
        """Not declared."""


def test_values_convert_by_field_or_become_null() -> None:
    typed = typed_struct(Typed)
    assert typed is not None
    assert typed["tag"].dataType.simpleString() == "struct<key:binary,tags:array<string>>"
    typer = Typer(typed, as_tuples=False)
    put = typer("put", [b"k", b"-12", b"99999999999", b"2.5", True, b"\xff"], {})
    assert put == {
        "put": {
            "key": b"k",
            "count": -12,
            "small": None,  # past 32 bits
            "ratio": 2.5,
            "flag": True,
            "note": None,  # not UTF-8
        }
    }
    assert typer("put", [b"k", b"1_0", b"x"], {"note": "keyword"})["put"]["count"] is None
    assert typer("put", [b"k"], {"note": "keyword"})["put"]["note"] == "keyword"
    assert typer("tag", [b"k", b"a", b"b"], {}) == {"tag": {"key": b"k", "tags": ["a", "b"]}}
    assert typer("untyped", [], {}) is None
    as_tuples = Typer(typed, as_tuples=True)
    assert as_tuples("tag", [b"k"], {}) == (None, (b"k", []))  # fields in key order


def test_a_declaration_outside_the_grammar_is_named() -> None:
    class Mapped(StateMachine):
        spark_arguments: ClassVar[Mapping[str, str]] = {"go": "key BINARY, how DECIMAL(10,2)"}

        @command
        def go(self, key: bytes, how: bytes) -> None:
            """Declared with a type the column does not take."""

    with pytest.raises(InvalidConfig, match=r"spark_arguments\['go'\]: 'how DECIMAL\(10' in"):
        typed_struct(Mapped)


def test_a_variadic_command_needs_an_array_last() -> None:
    class Flat(StateMachine):
        spark_arguments: ClassVar[Mapping[str, str]] = {"go": "key BINARY, rest BINARY"}

        @command
        def go(self, key: bytes, *rest: bytes) -> None:
            """Variadic, declared without an array."""

    with pytest.raises(InvalidConfig, match="takes \\*args, so its last field must be an ARRAY"):
        typed_struct(Flat)


def test_a_key_that_is_no_command_is_refused_at_class_creation() -> None:
    with pytest.raises(BadStateMachine, match="spark_arguments maps 'nope'"):

        class Wrong(StateMachine):
            spark_arguments: ClassVar[Mapping[str, str]] = {"nope": "key BINARY"}
