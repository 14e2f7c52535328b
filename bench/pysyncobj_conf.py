"""PySyncObj's configuration for the benchmarks' baselines (bench/rsm_bench.py and
bench/kvstore_bench.py), so both run it the same way.

PySyncObj is imported when a configuration is made: it is a benchmark extra, and only
the baseline's node processes need it.
"""

from __future__ import annotations

from typing import Any

CONNECTION_RETRY_S = 0.1
"""PySyncObj retries a refused connection after 5 s by default: a node that starts before
its peers listen stays cut off, runs elections, and deposes the first leader seconds into
the run.  Retrying sooner lets start-up settle; it changes nothing once all are connected."""


def baseline_conf(**options: Any) -> Any:
    """A `SyncObjConf` with `options` and the connection retry above."""
    from pysyncobj import SyncObjConf

    return SyncObjConf(connectionRetryTime=CONNECTION_RETRY_S, **options)
