"""`rsm-log` with `machine`: the `typed_arguments` column of the commands the class types."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest
from anyio.from_thread import BlockingPortal
from kvstore.state_machine import KVStore
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from rsm import StateMachine, command

from .history import KnownCluster
from .kv_log import KvLogWriter, kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]

MACHINE = "kvstore.state_machine:KVStore"


class BadlyTyped(StateMachine):
    spark_arguments: ClassVar[Mapping[str, str]] = {"put": "key BINARY, value MAP<STRING, INT>"}

    @command
    def put(self, key: bytes, value: bytes) -> None:
        """A command whose declared type the column does not take."""


@pytest.fixture(scope="module")
def kv_log(known: KnownCluster, portal: BlockingPortal) -> Iterator[KvLogWriter]:
    with kv_writer(known.zk, known.ledger_root, portal, "typed-kv") as writer:
        portal.call(writer.segment, kv_commands(300, seed=5, extra=("expire", [b"k1", b"30"])))
        yield writer


def _read(spark: SparkSession, known: KnownCluster, **options: str) -> DataFrame:
    return (
        spark.read.format("rsm-log")
        .options(zk=known.zk, ledgerRoot=known.ledger_root, app="typed-kv", **options)
        .load()
    )


def _expected(command: str, args: list[bytes]) -> dict[str, Any] | None:
    """What the KV store's declaration makes of a command (oracle, written out by hand)."""
    numbers = {"incrby": "increment", "decrby": "decrement"}
    if command in numbers:
        return {"key": args[0], numbers[command]: int(args[1])}
    if command == "set":
        return {
            "key": args[0] if args else None,
            "value": args[1] if len(args) > 1 else None,
            "options": [option.decode() for option in args[2:]],
        }
    if command in ("del", "unlink"):
        return {"keys": args}
    if command == "expire":
        return {"key": args[0], "seconds": int(args[1]), "options": []}
    if command == "incrbyfloat":
        return {"key": args[0], "increment": float(args[1])}
    return None


@pytest.mark.parametrize("arrow", ["true", "false"])
def test_declared_commands_have_their_arguments_typed(
    spark: SparkSession, known: KnownCluster, kv_log: KvLogWriter, arrow: str
) -> None:
    frame = _read(spark, known, machine=MACHINE, arrow=arrow)

    typed = frame.schema["typed_arguments"].dataType
    assert set(typed.names) == set(KVStore.spark_arguments)
    assert typed["incrby"].dataType.simpleString() == "struct<key:binary,increment:bigint>"
    rows = frame.selectExpr("command", "arguments", "typed_arguments").collect()
    checked = 0
    for row in rows:
        if row.command is None:
            assert row.typed_arguments is None
            continue
        value = row.typed_arguments[row.command].asDict()
        others = [name for name in typed.names if name != row.command]
        assert all(row.typed_arguments[name] is None for name in others)
        args = [arg.encode() for arg in json.loads(row.arguments)["args"]]
        expected = _expected(row.command, args)
        if expected is not None:
            assert {k: _plain(v) for k, v in value.items()} == expected
            checked += 1
    assert checked > 50
    total = frame.selectExpr("sum(typed_arguments.decrby.decrement) AS total").first()
    decrements = [r for r in rows if r.command == "decrby"]
    assert total is not None
    assert total["total"] == sum(int(r.typed_arguments["decrby"]["decrement"]) for r in decrements)


def _plain(value: Any) -> Any:
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def test_without_a_machine_there_is_no_typed_column(
    spark: SparkSession, known: KnownCluster, kv_log: KvLogWriter
) -> None:
    assert "typed_arguments" not in _read(spark, known).columns


def test_a_declaration_the_column_cannot_hold_is_named(
    spark: SparkSession, known: KnownCluster, kv_log: KvLogWriter
) -> None:
    machine = f"{__name__}:BadlyTyped"
    with pytest.raises(PySparkException, match=r"'value MAP<STRING' in .* is not `name TYPE`"):
        _read(spark, known, machine=machine).collect()
