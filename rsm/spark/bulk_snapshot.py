"""`rsm spark snapshot`: an application's state computed in Spark, registered as a snapshot.

For a class that declares a Spark reducer (`StateMachine.spark_reducer`,
rsm/spark/reduction.py), on the driver unless said otherwise:

1. The read of indexes `[first, last]` is planned once
   (`Cluster.plan_log`), `last` the last index of the last readable entry,
   and its partitions dealt into one group of consecutive partitions per
   Spark task.  `first` is 1, or for a log truncated below index 1, one
   past the newest registered snapshot the log goes on from, whose state
   and session table are loaded through the snapshot store
   (`Cluster.restore_snapshot`) and reduced on top of; without one, the
   log is `Truncated`, naming the missing range.
2. Each task, on an executor, reads its entries straight from the bookies
   (one ZooKeeper session and ledger client per task), decodes them with
   the framework's decoder and makes them into session columns and the
   reducer's summary (`part_pass`, rsm/spark/part_pass.py); no row goes
   through Spark SQL.
3. `session_pass` (rsm/spark/session_pass.py) decides from the session
   columns, in index order, from the starting snapshot's table if any,
   which commands a replica applies and the session table after `last`.
   Summaries were made with every command let through; the tasks holding a
   command the table did not let through are run again, leaving those out
   (a summary depends only on its own task's commands).
4. The reducer combines the summaries, in log order, over the starting
   snapshot's state if any, into the state after `last` and the outcomes
   the table keeps; or asks every task to summarize again, keeping what
   only the whole log showed it must (steps 2 to 4: rsm/spark/reducing.py).
5. The state and the table are written as a snapshot at `last` through the
   replicas' snapshot store (`Cluster.write_snapshot`): the header's
   position is the entry holding `last` (its epoch, time and (ledger,
   entry)), `replica_id` is `rsm-spark`.  Replicas load it like one of
   their own (the newest snapshot above what they applied).

The snapshot is what replay reaches at `last` when the reducer is exact,
which is the reducer's promise (it refuses with `NotReducible` otherwise;
the refusal of the earliest task is the one raised).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import SparkSession

from bookie import limits as bookie_limits
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core.log_format import Batch
from rsm.core.snapshot_format import CODEC_CUSTOM, CODEC_DEFAULT, SnapshotHeader
from rsm.core.state_machine import StateMachine
from rsm.errors import InvalidConfig, NotReducible, Truncated
from rsm.snapshots.loader import Restored, machine_name
from rsm.spark.cluster import Cluster, LogPartition
from rsm.spark.options import ClusterOptions, SplitOptions, cluster_options
from rsm.spark.part_pass import PartPass, Position, part_pass
from rsm.spark.planning import Bounds, Interval
from rsm.spark.reducing import TaskRun, reduce_tasks
from rsm.spark.reduction import load_named_reducer, load_reducer
from rsm.spark.rows import CorruptEntry
from rsm.spark.session_pass import with_outcomes

REPLICA_ID: Final = "rsm-spark"
"""The `replica_id` of a bulk snapshot's header and manifest."""

_PARTITIONS_PER_TASK: Final = 4
"""Planned partitions per Spark task: smaller pieces balance the tasks' work."""


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
    from_snapshot: int | None
    """The index of the snapshot reduced on top of (None: from index 1)."""
    tasks: int
    rerun_tasks: int
    """Tasks run again: without the commands the table did not let through, or keeping
    what the reducer asked to keep (rsm/spark/reducing.py)."""
    seconds: float
    stages_s: dict[str, float]
    """Wall-clock seconds of each step: plan, read (the tasks), sessions, rerun, combine,
    write."""
    driver_cpu_s: dict[str, float]
    """CPU seconds of this process in each step."""
    tasks_cpu_s: float
    """CPU seconds of the tasks' Python (reads and reruns, all tasks together), as each
    measured its own."""
    registered: bool = True
    """False when nothing was logged after the snapshot a truncated log goes on from: that
    snapshot (the fields above describe it) already holds the state at the readable end,
    and none was written."""


@dataclass(frozen=True, slots=True)
class _Task:
    """What one Spark task reads (indexes `[start, end)` of `partitions`) and leaves out."""

    options: ClusterOptions
    reducer: str
    """`StateMachine.spark_reducer`."""
    start: int
    end: int
    partitions: tuple[LogPartition, ...]
    skipped: frozenset[int]
    keep: frozenset[Any]
    """`PartCommands.keep`."""
    settings: Any = None
    """`PartCommands.settings`."""


def bulk_snapshot(
    spark: SparkSession,
    zk: str,
    app: str,
    machine_class: type[StateMachine],
    *,
    ledger_root: str = bookie_limits.metadata_root_default,
    config: ReplicaConfig | None = None,
    tls_options: Mapping[str, str] | None = None,
) -> SnapshotReport:
    """Reduce `app`'s log with `machine_class`'s reducer and register the snapshot (above).

    `config` holds the replicas' session settings (default: the defaults); `tls_options`
    the sources' `tls*` options (docs/spark.md), for bookies reached with TLS.
    """
    started = time.perf_counter()
    stages: dict[str, float] = {}
    driver_cpu: dict[str, float] = {}
    clock = [started, time.process_time()]

    def stage(name: str) -> None:
        now, cpu = time.perf_counter(), time.process_time()
        stages[name] = round(now - clock[0], 3)
        driver_cpu[name] = round(cpu - clock[1], 3)
        clock[:] = [now, cpu]

    config = ReplicaConfig() if config is None else config
    reducer = load_reducer(machine_class)
    target = machine_class.spark_reducer
    assert target is not None
    options = cluster_options({"zk": zk, "ledgerRoot": ledger_root, **(tls_options or {})})
    parallelism = spark.sparkContext.defaultParallelism
    with Cluster.open(options) as cluster:
        log = cluster.log(app)
        end = cluster.readable_end(app)
        restored = None
        if log.first_index > 1:
            restored = cluster.restore_snapshot(
                app, machine_class(), config, at_least=log.first_index - 1, below=end
            )
            if restored is None:
                raise _truncated(app, log.first_index)
        start = 1 if restored is None else restored.manifest.index + 1
        if restored is not None and end <= start:
            # Nothing new: that snapshot is the state at the readable end, as a rerun on an
            # untruncated log finds the snapshot it registered before.
            stage("plan")
            return _unchanged(app, restored, time.perf_counter() - started, stages, driver_cpu)
        if end <= start:
            raise InvalidConfig(f"{app!r} has logged nothing readable yet")
        plan = cluster.plan_log(
            app,
            Bounds(index=Interval(start, end)),
            SplitOptions(
                min_partitions=parallelism * _PARTITIONS_PER_TASK,
                max_entries_per_partition=limits.spark_entries_per_partition_max_default,
                arrow=True,
            ),
        )
    # The reducer's settings come from the machine it reduces for: the starting snapshot's
    # state (what replicas run with once they load it), else the class built with its
    # defaults (offline jobs know no other settings).
    settings = None
    if reducer.settings is not None:
        settings = reducer.settings(machine_class() if restored is None else restored.machine)
    stage("plan")
    tasks = [
        _Task(options, target, start, end, group, frozenset(), frozenset(), settings)
        for group in _deal(plan, parallelism)
    ]
    tasks_cpu_s = 0.0

    def run(runs: Sequence[TaskRun]) -> list[PartPass]:
        nonlocal tasks_cpu_s
        chosen = [
            dataclasses.replace(tasks[task.number], skipped=task.skipped, keep=task.keep)
            for task in runs
        ]
        passes = _run_tasks(spark, chosen)
        tasks_cpu_s += sum(part.cpu_s for part in passes)
        return passes

    with _without_gc():
        reduction = reduce_tasks(
            run,
            len(tasks),
            reducer=reducer,
            config=config,
            last_index=end - 1,
            start=None if restored is None else (restored.machine, restored.sessions),
            on_step=stage,
            machine_class=machine_class,
            settings=settings,
        )
    passed, reduced = reduction.passed, reduction.reduced
    position = next((part.position for part in reversed(reduction.passes) if part.position), None)
    if position is None or position.index != end - 1:
        raise NotReducible(f"index {end - 1} was not read")
    machine = reduced.machine
    if type(machine) is not machine_class:
        raise InvalidConfig(
            f"{target} gave a {type(machine).__qualname__}, not a {machine_class.__qualname__}"
        )
    session_table = with_outcomes(passed, reduced.outcomes, config)
    header = _header(app, position, machine_class, session_table.clock_ms, len(session_table))
    with Cluster.open(options) as cluster:
        manifest = cluster.write_snapshot(machine, header, session_table, config)
    stage("write")
    return SnapshotReport(
        app=app,
        index=manifest.index,
        ledger_id=manifest.ledger_id,
        state_hash=manifest.state_hash.hex(),
        size_bytes=manifest.size_bytes,
        sessions=len(session_table),
        skipped=len(passed.skipped),
        from_snapshot=None if restored is None else restored.manifest.index,
        tasks=len(tasks),
        rerun_tasks=reduction.reruns,
        seconds=round(time.perf_counter() - started, 3),
        stages_s=stages,
        driver_cpu_s=driver_cpu,
        tasks_cpu_s=round(tasks_cpu_s, 3),
    )


def _unchanged(
    app: str,
    restored: Restored,
    seconds: float,
    stages: dict[str, float],
    driver_cpu: dict[str, float],
) -> SnapshotReport:
    """The report of a run that found nothing logged after the snapshot `restored`."""
    manifest = restored.manifest
    return SnapshotReport(
        app=app,
        index=manifest.index,
        ledger_id=manifest.ledger_id,
        state_hash=manifest.state_hash.hex(),
        size_bytes=manifest.size_bytes,
        sessions=len(restored.sessions),
        skipped=0,
        from_snapshot=manifest.index,
        tasks=0,
        rerun_tasks=0,
        seconds=round(seconds, 3),
        stages_s=stages,
        driver_cpu_s=driver_cpu,
        tasks_cpu_s=0.0,
        registered=False,
    )


def _deal(plan: Sequence[LogPartition], tasks: int) -> list[tuple[LogPartition, ...]]:
    """`plan` cut into at most `tasks` groups of consecutive partitions, of near-equal count."""
    count = max(1, min(tasks, len(plan)))
    size, longer = divmod(len(plan), count)
    groups: list[tuple[LogPartition, ...]] = []
    first = 0
    for number in range(count):
        length = size + (1 if number < longer else 0)
        groups.append(tuple(plan[first : first + length]))
        first += length
    return groups


@contextlib.contextmanager
def _without_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block: the passes build millions of
    small objects that live to its end, which the collector would walk again and again.
    They hold no cycles to collect."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _run_tasks(spark: SparkSession, tasks: list[_Task]) -> list[PartPass]:
    """Each task's pass, in order, one Spark task each."""
    passes: list[PartPass] = (
        spark.sparkContext.parallelize(tasks, len(tasks)).map(_read_task).collect()
    )
    return passes


def _read_task(task: _Task) -> PartPass:
    """On an executor: the pass over the task's partitions (rsm/spark/part_pass.py)."""
    cpu_before = time.process_time()
    reducer = load_named_reducer(task.reducer, task.reducer)
    with Cluster.open(task.options) as cluster, _without_gc():
        part = part_pass(
            _entries(cluster, task.partitions),
            task.start,
            task.end,
            reducer.summarize,
            task.skipped,
            keep=task.keep,
            settings=task.settings,
        )
    return dataclasses.replace(part, cpu_s=time.process_time() - cpu_before)


def _entries(
    cluster: Cluster, partitions: Sequence[LogPartition]
) -> Iterator[tuple[int, int, Batch]]:
    """`(ledger id, entry id, batch)` of each entry of `partitions`, in order."""
    for partition in partitions:
        for chunk in cluster.log_entries(partition):
            for entry in chunk:
                assert not isinstance(entry, CorruptEntry)  # read without mode=PERMISSIVE
                entry_id, batch, _size = entry
                yield partition.segment.ledger_id, entry_id, batch


def _header(
    app: str, position: Position, machine_class: type[StateMachine], clock_ms: int, sessions: int
) -> SnapshotHeader:
    return SnapshotHeader(
        app=app,
        index=position.index,
        time_ms=position.time_ms,
        epoch=position.epoch,
        cursor=(position.ledger_id, position.entry_id),
        machine=machine_name(machine_class),
        codec=CODEC_DEFAULT if machine_class.snapshot is StateMachine.snapshot else CODEC_CUSTOM,
        clock_ms=clock_ms,
        sessions=sessions,
        replica_id=REPLICA_ID,
        created_ms=int(time.time() * 1000),
    )


def _truncated(app: str, first_index: int) -> Truncated:
    return Truncated(
        f"indexes [1, {first_index}) of {app!r} were truncated away and no registered snapshot "
        "covers them: a bulk snapshot reduces the log from index 1 or from a snapshot the log "
        "goes on from"
    )
