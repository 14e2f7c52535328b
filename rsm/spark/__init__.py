"""Reading applications' logs and raw ledgers in Apache Spark (docs/spark.md).

    import rsm.spark
    spark = rsm.spark.session()            # or any SparkSession of your own
    rsm.spark.register(spark)
    spark.read.format("rsm-log").option("zk", "127.0.0.1:2181").option("app", "kv").load()

`register` adds the `rsm-log` and `ledger` sources to a session, with filter
pushdown when the session allows it (`spark.sql.python.filterPushdown.enabled`,
which `session` turns on).
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from rsm.spark.session import PUSHDOWN_SETTING, session
from rsm.spark.sources import LedgerSource, LogSource, PushdownLogSource

__all__ = ["register", "session"]


def register(spark: SparkSession) -> None:
    """Register the sources with `spark`; call again after changing the pushdown setting."""
    pushdown = spark.conf.get(PUSHDOWN_SETTING, "false") == "true"
    spark.dataSource.register(PushdownLogSource if pushdown else LogSource)
    spark.dataSource.register(LedgerSource)
