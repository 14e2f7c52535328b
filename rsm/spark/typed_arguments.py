"""The `typed_arguments` column of `rsm-log`: commands' arguments as the application typed them.

An application declares, in `StateMachine.spark_arguments`, a Spark DDL
struct per logged command key, one field per argument in order
(`{"incrby": "key BINARY, increment BIGINT"}`).  With the option `machine`
naming its class, `rsm-log` has one more column, `typed_arguments`: a
struct with one field per declared command (named by its key), each that
command's struct, set only in the rows of that command (null elsewhere,
and in every row of an undeclared command, whose `arguments` JSON is the
only form).  So `typed_arguments.incrby.increment` is a number in SQL.

Fields are BINARY, STRING, BIGINT, INT, DOUBLE, BOOLEAN or an ARRAY of
one of them.  Positional arguments fill the fields in order; for a method
taking `*args`, the last field must be an ARRAY and takes every argument
left; a field past the positional arguments takes the keyword argument of
its name, if any.  A value that does not convert is null (the `arguments`
column keeps it as logged): BINARY takes bytes (text as UTF-8), STRING text
or UTF-8 bytes, BIGINT and INT integers or their decimal text (INT within
32 bits), DOUBLE numbers or their text, BOOLEAN booleans.

The declaration is Spark's DDL for a list of fields, restricted to those
types: `name TYPE, name TYPE, ...`, TYPE one of the six (any case) or
`ARRAY<TYPE>`, names letters, digits and `_`.  It is parsed here, without
Spark (a source's schema is asked for in a Python worker that has no
session).  `typed_struct` checks a declaration where the schema is asked
for; `Typer` converts on executors from the column's type alone (the
variadic commands are marked in field metadata, `{"variadic": true}`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from rsm.core.state_machine import StateMachine, commands_by_key
from rsm.errors import InvalidConfig

TYPED_COLUMN: Final = "typed_arguments"
_VARIADIC: Final = "variadic"
_SCALAR_TYPES: Final[dict[str, DataType]] = {
    "binary": BinaryType(),
    "string": StringType(),
    "bigint": LongType(),
    "int": IntegerType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
}
_TYPE_WORD: Final = "|".join(_SCALAR_TYPES)
_FIELD: Final = re.compile(
    rf"(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s+"
    rf"(?:(?i:array)\s*<\s*(?P<array_of>(?i:{_TYPE_WORD}))\s*>|(?P<scalar>(?i:{_TYPE_WORD})))"
)
_INT32: Final = 1 << 31
_INT64: Final = 1 << 63
_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")


def typed_struct(machine_class: type[StateMachine]) -> StructType | None:
    """The type of `typed_arguments` for `machine_class` (None: it declares nothing)."""
    declared = machine_class.spark_arguments
    if not declared:
        return None
    name = f"{machine_class.__module__}:{machine_class.__qualname__}"
    commands = commands_by_key(machine_class)
    fields: list[StructField] = []
    for key, ddl in sorted(declared.items()):
        where = f"{name}.spark_arguments[{key!r}]"
        parsed = _fields(ddl, where)
        variadic = commands[key].positional_max is None
        if variadic and not isinstance(parsed.fields[-1].dataType, ArrayType):
            raise InvalidConfig(f"{where}: {key} takes *args, so its last field must be an ARRAY")
        fields.append(StructField(key, parsed, True, {_VARIADIC: variadic}))
    return StructType(fields)


def _fields(ddl: str, where: str) -> StructType:
    """The struct `ddl` declares (see the module docstring), or `InvalidConfig` naming it."""
    fields: list[StructField] = []
    for part in ddl.split(","):
        match = _FIELD.fullmatch(part.strip())
        if match is None:
            raise InvalidConfig(
                f"{where}: {part.strip()!r} in {ddl!r} is not `name TYPE`; TYPE is binary, "
                "string, bigint, int, double, boolean or ARRAY<one of them>"
            )
        name, array_of, scalar = match.group("name", "array_of", "scalar")
        data_type = _SCALAR_TYPES[(array_of or scalar).lower()]
        fields.append(StructField(name, ArrayType(data_type) if array_of else data_type, True))
    return StructType(fields)


class Typer:
    """A command's arguments as the value of `typed_arguments` (an executor builds one from the
    column's type): a dict for Arrow batches, a tuple for PySpark's tuples."""

    def __init__(self, typed: StructType, *, as_tuples: bool) -> None:
        self._as_tuples = as_tuples
        self._positions = {field.name: position for position, field in enumerate(typed.fields)}
        self._commands: dict[str, tuple[StructType, bool]] = {}
        for field in typed.fields:
            assert isinstance(field.dataType, StructType)
            self._commands[field.name] = (field.dataType, bool(field.metadata.get(_VARIADIC)))
        self._width = len(typed.fields)

    def __call__(self, command: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        declared = self._commands.get(command)
        if declared is None:
            return None
        struct, variadic = declared
        fields = struct.fields
        values: list[Any] = []
        for position, field in enumerate(fields):
            if variadic and position == len(fields) - 1:
                raw: Any = list(args[position:])
            elif position < len(args):
                raw = args[position]
            else:
                raw = kwargs.get(field.name)
            values.append(_convert(raw, field.dataType))
        if self._as_tuples:
            row: list[Any] = [None] * self._width
            row[self._positions[command]] = tuple(values)
            return tuple(row)
        return {command: {field.name: value for field, value in zip(fields, values, strict=True)}}


def _convert(value: Any, data_type: DataType) -> Any:
    if value is None:
        return None
    if isinstance(data_type, ArrayType):
        if not isinstance(value, list | tuple):
            return None
        return [_convert(item, data_type.elementType) for item in value]
    if isinstance(data_type, BinaryType):
        if isinstance(value, bytes):
            return value
        return value.encode() if isinstance(value, str) else None
    if isinstance(data_type, StringType):
        return _text(value)
    if isinstance(data_type, LongType | IntegerType):
        number = _integer(value)
        if number is None or (
            isinstance(data_type, IntegerType) and not -_INT32 <= number < _INT32
        ):
            return None
        if isinstance(data_type, LongType) and not -(1 << 63) <= number < 1 << 63:
            return None
        return number
    if isinstance(data_type, DoubleType):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        text = _text(value)
        try:
            return None if text is None else float(text)
        except ValueError:
            return None
    return value if isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return None
    return None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    text = _text(value)
    if text is None:
        return None
    return int(text) if _DECIMAL.fullmatch(text) else None
