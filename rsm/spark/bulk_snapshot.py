"""`rsm spark snapshot`: an application's state computed in Spark, registered as a snapshot.

For a class that declares a Spark reducer (`StateMachine.spark_reducer`):

1. The log is read once, from index 1 to its readable end, the last index
   `last` of the last readable entry, and cached.  A log truncated below
   index 1 is `Truncated`, naming the missing range and the registered
   snapshot that covers it (a reducer starts from the empty state).
2. `session_pass` (rsm/spark/session_pass.py) decides, from the session
   columns in index order on the driver, which commands a replica applies
   and the session table after `last`.
3. The reducer computes the state after `last` from the log (skipping what
   the table did not let through) and the outcomes the table keeps.
4. The state and the table are written as a snapshot at `last` through the
   replicas' snapshot store (`Cluster.write_snapshot`): the header's
   position is the entry holding `last` (its epoch, time and (ledger,
   entry)), `replica_id` is `rsm-spark`.  Replicas load it like one of
   their own (the newest snapshot above what they applied).

The snapshot is what replay reaches at `last` when the reducer is exact,
which is the reducer's promise (it refuses with `NotReducible` otherwise).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bookie import limits as bookie_limits
from rsm.config import ReplicaConfig
from rsm.core.snapshot_format import CODEC_CUSTOM, CODEC_DEFAULT, SnapshotHeader
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, NotReducible, Truncated
from rsm.snapshots.loader import machine_name
from rsm.spark.cluster import Cluster
from rsm.spark.jobs import read_log
from rsm.spark.options import ClusterOptions
from rsm.spark.reduction import Reduced, Reducer, ReduceRequest, load_reducer
from rsm.spark.session_pass import SessionPass, session_pass, with_outcomes

REPLICA_ID: Final = "rsm-spark"
"""The `replica_id` of a bulk snapshot's header and manifest."""

_PANDAS_WARNING: Final = "PySpark does not yet fully support pandas"
_SESSION_COLUMNS: Final = ("index", "leader_time", "client_id", "client_seq", "client_ack_seq")
_POSITION_COLUMNS: Final = ("epoch", "ledger_id", "entry_id")


@dataclass(frozen=True, slots=True)
class SnapshotReport:
    app: str
    index: int
    ledger_id: int
    """The snapshot's ledger."""
    state_hash: str
    """Hex."""
    size_bytes: int
    sessions: int
    skipped: int
    """Commands the session table did not let through (retries of applied ones, ...)."""
    seconds: float


def bulk_snapshot(
    spark: SparkSession,
    zk: str,
    app: str,
    machine_class: type[StateMachine],
    *,
    ledger_root: str = bookie_limits.metadata_root_default,
    config: ReplicaConfig | None = None,
) -> SnapshotReport:
    """Reduce `app`'s log with `machine_class`'s reducer and register the snapshot (above).

    `config` holds the replicas' session settings (default: the defaults).
    """
    started = time.perf_counter()
    config = ReplicaConfig() if config is None else config
    reducer = load_reducer(machine_class)
    with Cluster.open(ClusterOptions(zk, ledger_root)) as cluster:
        log = cluster.log(app)
        end = cluster.readable_end(app)
        if log.first_index > 1:
            raise _truncated(app, log.first_index, cluster.covering_snapshot(app, log.first_index))
        if end <= 1:
            raise InvalidConfig(f"{app!r} has logged nothing readable yet")
        frame = read_log(spark, zk, app, ledger_root=ledger_root, endingIndex=str(end)).cache()
        try:
            with warnings.catch_warnings():
                # PySpark's Arrow paths (toArrow, mapInArrow) check the pandas version and
                # warn about pandas 3, which they do not use.
                warnings.filterwarnings("ignore", _PANDAS_WARNING, FutureWarning)
                last_row, passed, reduced = _reduce(frame, end - 1, reducer, config)
        finally:
            frame.unpersist()
        machine = reduced.machine
        if type(machine) is not machine_class:
            raise InvalidConfig(
                f"{machine_class.spark_reducer} gave a {type(machine).__qualname__}, not a "
                f"{machine_class.__qualname__}"
            )
        session_table = with_outcomes(passed, reduced.outcomes, config)
        header = SnapshotHeader(
            app=app,
            index=end - 1,
            time_ms=last_row["time_ms"],
            epoch=last_row["epoch"],
            cursor=(last_row["ledger_id"], last_row["entry_id"]),
            machine=machine_name(machine_class),
            codec=CODEC_DEFAULT
            if machine_class.snapshot is StateMachine.snapshot
            else CODEC_CUSTOM,
            clock_ms=session_table.clock_ms,
            sessions=len(session_table),
            replica_id=REPLICA_ID,
            created_ms=int(time.time() * 1000),
        )
        manifest = cluster.write_snapshot(machine, header, session_table, config)
    return SnapshotReport(
        app=app,
        index=manifest.index,
        ledger_id=manifest.ledger_id,
        state_hash=manifest.state_hash.hex(),
        size_bytes=manifest.size_bytes,
        sessions=len(session_table),
        skipped=len(passed.skipped),
        seconds=round(time.perf_counter() - started, 3),
    )


def _truncated(app: str, first_index: int, covering: int | None) -> Truncated:
    where = (
        "no registered snapshot covers it"
        if covering is None
        else f"the snapshot at index {covering} covers it (replicas start from it)"
    )
    return Truncated(
        f"indexes [1, {first_index}) of {app!r} were truncated away; {where}: a bulk snapshot "
        "reduces the log from index 1"
    )


def _reduce(
    frame: DataFrame, last: int, reducer: Reducer, config: ReplicaConfig
) -> tuple[dict[str, Any], SessionPass, Reduced]:
    """The entry holding `last` (its epoch, ledger, entry and time), the session pass and
    the reducer's answer (steps 2 and 3).  The session columns come to the driver unsorted
    and are sorted there: Spark's sort would cost a sampling job and a shuffle."""
    columns = frame.select(
        *_SESSION_COLUMNS[:1],
        F.unix_millis("leader_time").alias("leader_time"),
        *_SESSION_COLUMNS[2:],
        *_POSITION_COLUMNS,
    ).toArrow()
    table = columns.sort_by("index")
    if table.num_rows == 0 or table.column("index")[-1].as_py() != last:
        raise NotReducible(f"index {last} was not read")
    position = {name: table.column(name)[-1].as_py() for name in _POSITION_COLUMNS}
    position["time_ms"] = table.column("leader_time")[-1].as_py()
    passed = session_pass(
        zip(*(table.column(name).to_pylist() for name in _SESSION_COLUMNS), strict=True), config
    )
    reduced = reducer(
        ReduceRequest(log=frame, last_index=last, skipped=passed.skipped, wanted=passed.wanted)
    )
    return position, passed, reduced
