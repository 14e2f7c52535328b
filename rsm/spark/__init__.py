"""Reading applications' logs (batch and streaming) and raw ledgers in Spark (docs/spark.md).

    import rsm.spark
    spark = rsm.spark.session()            # or any SparkSession of your own
    rsm.spark.register(spark)
    spark.read.format("rsm-log").option("zk", "127.0.0.1:2181").option("app", "kv").load()

`register` adds the `rsm-log` and `ledger` sources to a session, with filter
pushdown when the session allows it (`spark.sql.python.filterPushdown.enabled`,
which `session` turns on).  Both come from `rsm/spark/sessions.py`, loaded on
first use, so that importing `rsm.spark.cli` without PySpark installed can say
so instead of failing.

For an application's Spark reducer (`StateMachine.spark_reducer`, the bulk
snapshot): `SparkReducer`, `PartCommands`, `LoggedCommand`, `CombineRequest`,
`Reduced`, `Rerun` and `apply_logged` (rsm/spark/reduction.py), and `Outcome`, which
load without PySpark.
"""

from __future__ import annotations

from typing import Any

from rsm.core.sessions import Outcome
from rsm.spark.reduction import (
    CombineRequest,
    LoggedCommand,
    PartCommands,
    Reduced,
    Rerun,
    SparkReducer,
    apply_logged,
)

__all__ = [
    "CombineRequest",
    "LoggedCommand",
    "Outcome",
    "PartCommands",
    "Reduced",
    "Rerun",
    "SparkReducer",
    "apply_logged",
    "register",
    "session",
]
_LAZY = ("register", "session")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from rsm.spark import sessions  # noqa: PLC0415 (PySpark loads on first use)

        return getattr(sessions, name)
    raise AttributeError(f"module 'rsm.spark' has no attribute {name!r}")
