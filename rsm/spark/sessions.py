"""A SparkSession set up for the `rsm-log` and `ledger` sources, and registering them.

Executors run Python data sources in Python workers: `session` makes them
use this interpreter (so they import this installation of `rsm`), turns on
PySpark's filter pushdown for Python sources, reads and writes timestamps
in UTC, and leaves Spark's web UI off.  Any other SparkSession works as well
when its workers can import `rsm` (docs/spark.md, "Running on a cluster").
"""

from __future__ import annotations

import os
import sys
from typing import Final

from pyspark.sql import SparkSession

from rsm.spark.sources import LedgerSource, LogSource, PushdownLogSource

PUSHDOWN_SETTING: Final = "spark.sql.python.filterPushdown.enabled"
DEFAULT_MASTER: Final = "local[*]"
_LOOPBACK: Final = "127.0.0.1"


def session(master: str = DEFAULT_MASTER, app_name: str = "rsm") -> SparkSession:
    """The active session if there is one, else a new one on `master`.

    PySpark takes the workers' interpreter from `PYSPARK_PYTHON` (this one
    unless already set); a `local` master keeps Spark on the loopback
    interface.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder: SparkSession.Builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config(PUSHDOWN_SETTING, "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "8")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", _LOOPBACK).config(
            "spark.driver.bindAddress", _LOOPBACK
        )
    return builder.getOrCreate()


def register(spark: SparkSession) -> None:
    """Register the sources with `spark`, the log source with filter pushdown when the session
    allows it; call again after changing `spark.sql.python.filterPushdown.enabled`."""
    pushdown = spark.conf.get(PUSHDOWN_SETTING, "false") == "true"
    spark.dataSource.register(PushdownLogSource if pushdown else LogSource)
    spark.dataSource.register(LedgerSource)
