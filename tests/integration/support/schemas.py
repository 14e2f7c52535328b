"""The JSON the investigation tools print, as their tests check it: keys and value types.

`RECORD_SCHEMA` is one record of a command (`rsm log dump --json`, and the
records inside other reports); `check_schema` checks an object against a
schema: every key present with a value of one of its types, no other key
but the optional ones, and `"schema": 1` where the schema has that key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Schema = Mapping[str, tuple[type, ...]]

RECORD_SCHEMA: Schema = {
    "schema": (int,),
    "index": (int,),
    "epoch": (int,),
    "ledger_id": (int,),
    "entry_id": (int,),
    "slot": (int,),
    "time_ms": (int,),
    "seed": (int,),
    "command": (str,),
    "args": (list,),
    "kwargs": (dict,),
    "client_id": (str, type(None)),
    "seq": (int, type(None)),
    "ack_seq": (int, type(None)),
    "state_hash": (dict, type(None)),
}
"""A leader-start marker's record has `replica_id` besides (`RECORD_OPTIONAL`)."""

RECORD_OPTIONAL: Schema = {"replica_id": (str,)}


def check_schema(value: dict[str, Any], schema: Schema, optional: Schema | None = None) -> None:
    optional = optional or {}
    extra = set(value) - set(schema) - set(optional)
    assert not extra, f"keys outside the schema: {extra}"
    for key, types in [*schema.items(), *optional.items()]:
        assert key in value or key in optional, f"missing {key}"
        if key in value:
            assert isinstance(value[key], types), (key, value[key])
    if "schema" in schema:
        assert value["schema"] == 1
