"""The `rsm spark` jobs as functions: export a log to Parquet, answer SQL over it.

`export` writes the `rsm-log` rows of an application to a Parquet dataset
at `to`, partitioned by index block: column `index_from`, the first index of
the block of `block_commands` consecutive indexes (1, 1 + N, 1 + 2N, ...)
that holds the row, so a directory `index_from=100001/` holds indexes
100001 .. 200000.  Beside the data, `_rsm_export.json` (Spark skips files
starting with `_`) records how far the export goes, one JSON object:

    {"v": 1, "app": text, "block_commands": N, "next_index": uint}

`next_index` is one past the highest index exported.  A full export
replaces the whole dataset: over an earlier export it writes a new one
beside it, in the hidden sibling `.NAME.rsm-export-new`, record included,
and only then swaps it in (`to` renamed to `.NAME.rsm-export-old`, the new
one renamed to `to`, the old one deleted), so a run that fails leaves the
earlier export as it was; a run killed between the two renames is finished
by the next `export` to `to` (`_finish_swap`).  An incremental one
(`since_last`, with a record) only adds or rewrites blocks: it writes them,
with their record, in the hidden sibling `.NAME.rsm-export-blocks`, then moves
each into `to` (a block it replaces set aside first, as `.BLOCK.rsm-old`,
which Spark does not read), then the record, then deletes what it set aside
and the sibling (`_move_blocks`).  A run that fails before the moves leaves
the export and its record as they were; one killed among them is finished by
the next `export` to `to` (`_finish_blocks`: the staged blocks are complete
once their record is there).  It rewrites the block holding `next_index` whole: from the block's
start, or, for the rows of that block the log no longer has (truncated
since they were exported), from the export itself (`_carried`, checked to
hold every index once up to where the log now starts), and from there on
from the log.  So rerunning it, even after truncation or after a run that
died before recording `next_index`, gives the same dataset: every index
once.  The record is written after the data, atomically (write then
rename), on the local filesystem (so `to` is a local or mounted path).

Spark's overwrite deletes whatever is at `to`, so `export` first refuses
(`InvalidConfig` naming `to` and what is there) a `to` that is not absent,
an empty directory, or an earlier export, complete or not: a directory
holding only names an export writes (`EXPORT_ENTRIES`).  The command calls
that check, `check_export_path`, before Spark starts.

`audit` registers the log as the temporary view `log` and runs one SQL
query over it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from bookie import limits as bookie_limits
from rsm import limits
from rsm.core.log_state import Log
from rsm.errors import InvalidConfig
from rsm.spark.cluster import Cluster
from rsm.spark.options import log_options
from rsm.spark.sessions import register, session
from rsm.spark.sources import LOG_FORMAT

STATE_FILE: Final = "_rsm_export.json"
STATE_VERSION: Final = 1
BLOCK_COLUMN: Final = "index_from"
VIEW: Final = "log"
EXPORT_ENTRIES: Final = re.compile(
    rf"{re.escape(STATE_FILE)}(\.tmp)?|\._SUCCESS\.crc|_SUCCESS|_temporary|\.spark-staging-.+"
    rf"|\.?{BLOCK_COLUMN}=.+"
)
"""The names an export writes in its directory, ended or not: the record (and its partial
copy), the blocks (and those an incremental run sets aside), and Spark's own (its success
marker and its checksum, the committer's `_temporary` and dynamic partition overwrite's staging
directory, both left by a run that died)."""

__all__ = ["audit", "check_export_path", "export", "read_log", "register", "session"]


@dataclass(frozen=True, slots=True)
class ExportReport:
    app: str
    path: str
    first_index: int
    """The first index of the blocks this run wrote (1 for a full export)."""
    next_index: int
    """One past the highest index exported so far."""
    rows: int
    """Rows this run wrote."""
    blocks: int
    """Blocks (partitions) this run wrote."""


def read_log(
    spark: SparkSession,
    zk: str,
    app: str,
    *,
    ledger_root: str = bookie_limits.metadata_root_default,
    **options: str,
) -> DataFrame:
    """The `rsm-log` rows of `app` (the sources must be registered with `spark`).

    The options and the application are checked now, so that a mistake is
    named before Spark plans anything.
    """
    _checked_log(zk, app, ledger_root, options)
    reader = spark.read.format(LOG_FORMAT).option("zk", zk).option("app", app)
    reader = reader.option("ledgerRoot", ledger_root)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def export(
    spark: SparkSession,
    zk: str,
    app: str,
    to: str,
    *,
    since_last: bool = False,
    block_commands: int = limits.spark_export_block_commands_default,
    ledger_root: str = bookie_limits.metadata_root_default,
    **options: str,
) -> ExportReport:
    """Export `app`'s log to Parquet at `to` (see the module docstring); `options` are more
    `rsm-log` options (the `tls*` ones, say)."""
    if block_commands < 1:
        raise InvalidConfig(f"--block-commands {block_commands} must be at least 1")
    path = Path(to)
    _finish_swap(path)
    _finish_blocks(path)
    check_export_path(to)
    state = _read_state(path) if since_last else None
    if state is not None and state["app"] != app:
        raise InvalidConfig(f"{to} holds an export of {state['app']!r}, not of {app!r}")
    log = _checked_log(zk, app, ledger_root, options)
    out = path
    if state is None:
        # A new export, or a full one: the whole dataset is replaced, written beside an
        # earlier export and swapped in at the end (the module docstring).
        start = 1
        staging = _sibling(path, _NEW)
        if staging is not None and path.is_dir() and any(path.iterdir()):
            out = staging
            shutil.rmtree(out, ignore_errors=True)  # what a failed run left
        frame = _blocks(
            read_log(spark, zk, app, ledger_root=ledger_root, **options), block_commands
        )
        frame.write.partitionBy(BLOCK_COLUMN).mode("overwrite").parquet(str(out))
    else:
        block_commands = state["block_commands"]
        next_index = state["next_index"]
        start = _block_start(next_index, block_commands)
        # The log's first index may have passed the block's start (truncated behind a
        # snapshot): the block's rows below it are taken from the export, not read again.
        read_from = max(start, min(log.first_index, next_index))
        frame = _blocks(
            read_log(
                spark,
                zk,
                app,
                ledger_root=ledger_root,
                **{**options, "startingIndex": str(read_from)},
            ),
            block_commands,
        )
        if read_from > start:
            frame = _carried(spark, path, frame.schema, start, read_from).unionByName(frame)
        # The blocks are staged, then moved in (the module docstring): a failed run leaves
        # the export (and its record) as it was.
        staged = _sibling(path, _BLOCKS)
        if staged is None:
            raise InvalidConfig(f"{to} has no name to stage an incremental export beside")
        out = staged
        frame.write.partitionBy(BLOCK_COLUMN).mode("overwrite").parquet(str(out))
    written = (
        spark.read.schema(frame.schema)
        .parquet(str(out))
        .where(F.col(BLOCK_COLUMN) >= start)
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.max("index").alias("last"),
            F.countDistinct(BLOCK_COLUMN).alias("blocks"),
        )
        .first()
    )
    assert written is not None
    last = written["last"]
    next_index = start if last is None else last + 1
    _write_state(out, {"app": app, "block_commands": block_commands, "next_index": next_index})
    if state is not None:
        _move_blocks(out, path)
    elif out != path:
        _swap_in(out, path)
    return ExportReport(app, str(path), start, next_index, written["rows"], written["blocks"])


def check_export_path(to: str) -> None:
    """Refuse `to` (`InvalidConfig` naming it and what is there) unless an export may replace
    it: it is absent, an empty directory, or a directory holding only `EXPORT_ENTRIES`."""
    path = Path(to)
    if not os.path.lexists(path):
        return
    if not path.is_dir():
        raise InvalidConfig(
            f"{to} exists and is not a directory: an export would delete it (choose another path)"
        )
    foreign = sorted(
        child.name for child in path.iterdir() if not EXPORT_ENTRIES.fullmatch(child.name)
    )
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise InvalidConfig(
            f"{to} is not an earlier export: it holds {foreign[0]!r}{more}, which an export "
            "would delete (export to a new or empty directory)"
        )


def audit(
    spark: SparkSession,
    zk: str,
    app: str,
    sql: str,
    *,
    ledger_root: str = bookie_limits.metadata_root_default,
    **options: str,
) -> DataFrame:
    """The answer of `sql`, run with `app`'s log as the view `log` (read with `options`)."""
    read_log(spark, zk, app, ledger_root=ledger_root, **options).createOrReplaceTempView(VIEW)
    return spark.sql(sql)


def _checked_log(zk: str, app: str, ledger_root: str, options: Mapping[str, str]) -> Log:
    """`app`'s log as its znode holds it now, once the options are checked."""
    checked = log_options({"zk": zk, "app": app, "ledgerRoot": ledger_root, **options})
    with Cluster.open(checked.cluster) as cluster:
        return cluster.log(app)


def _blocks(frame: DataFrame, block_commands: int) -> DataFrame:
    """`frame` with the column `index_from`, the first index of each row's block."""
    return frame.withColumn(
        BLOCK_COLUMN, F.expr(f"(index - 1) div {block_commands} * {block_commands} + 1")
    )


def _carried(
    spark: SparkSession, path: Path, schema: StructType, start: int, end: int
) -> DataFrame:
    """The rows of indexes `[start, end)` the export at `path` holds, all in the block of
    `start`: an incremental run writes them back with that block.  They are checked first:
    every index from the lowest one held to `end - 1`, once each (`InvalidConfig`, naming
    the block, when the export lost some: only a full export can write them again)."""
    rows = (
        spark.read.schema(schema)
        .parquet(str(path))
        .where((F.col(BLOCK_COLUMN) == start) & (F.col("index") < end))
    )
    held = rows.agg(
        F.count(F.lit(1)).alias("rows"),
        F.countDistinct("index").alias("indexes"),
        F.min("index").alias("low"),
        F.max("index").alias("high"),
    ).first()
    assert held is not None
    count, low, high = held["rows"], held["low"], held["high"]
    if count and (high != end - 1 or count != held["indexes"] or count != high - low + 1):
        raise InvalidConfig(
            f"{path}/{BLOCK_COLUMN}={start} should hold every index from its lowest up to "
            f"{end - 1}, once each, but holds {count} rows of indexes {low} .. {high}: the "
            "log no longer has the rest, so an incremental export cannot write the block "
            "again (a full export, without --since-last, writes what the log holds)"
        )
    return rows


_NEW: Final = "new"
_OLD: Final = "old"
_BLOCKS: Final = "blocks"
_SET_ASIDE: Final = ".rsm-old"


def _sibling(path: Path, kind: str) -> Path | None:
    """The hidden sibling of export `path` where a full export stages (`_NEW`) or sets the
    one it replaces aside (`_OLD`), or an incremental one stages its blocks (`_BLOCKS`); None
    for a path without a name (`/`)."""
    absolute = path.absolute()
    return absolute.with_name(f".{absolute.name}.rsm-export-{kind}") if absolute.name else None


def _swap_in(new: Path, path: Path) -> None:
    """Replace the export at `path` with the complete one at `new` (same file system)."""
    old = _sibling(path, _OLD)
    assert old is not None, "a path with a staged export has a name"
    shutil.rmtree(old, ignore_errors=True)
    os.rename(path, old)
    os.rename(new, path)
    shutil.rmtree(old)


def _finish_swap(path: Path) -> None:
    """Finish a swap that a killed run left between its renames (`path` absent, the earlier
    export set aside): the new export when it is complete (it has its record), else the
    earlier one, goes back to `path`."""
    old, new = _sibling(path, _OLD), _sibling(path, _NEW)
    if old is None or new is None or os.path.lexists(path) or not old.is_dir():
        return
    if (new / STATE_FILE).is_file():
        os.rename(new, path)
        shutil.rmtree(old)
    else:
        os.rename(old, path)


def _move_blocks(staged: Path, path: Path) -> None:
    """Move the complete incremental run staged at `staged` (its record written) into the
    export at `path`: each block, replacing the block of its name, then the record; then
    delete what was replaced and `staged`.  Each step leaves what `_finish_blocks` finishes,
    and running this again over what a killed run left goes on from where it stopped."""
    for block in sorted(staged.iterdir()):
        if not block.name.startswith(f"{BLOCK_COLUMN}="):
            continue
        target, aside = path / block.name, path / f".{block.name}{_SET_ASIDE}"
        if target.exists():
            shutil.rmtree(aside, ignore_errors=True)  # set aside by a run that ended
            os.rename(target, aside)
        os.rename(block, target)
    os.replace(staged / STATE_FILE, path / STATE_FILE)
    _drop_set_aside(path)
    shutil.rmtree(staged)


def _finish_blocks(path: Path) -> None:
    """Finish what an incremental run killed in `_move_blocks` left: its staged blocks, when
    complete (their record is there), go on into the export; else they are dropped (the run
    died before its moves, or after its record was moved in), and so is what it set aside."""
    staged = _sibling(path, _BLOCKS)
    if staged is None or not staged.is_dir():
        return
    if (staged / STATE_FILE).is_file() and path.is_dir():
        _move_blocks(staged, path)
        return
    _drop_set_aside(path)
    shutil.rmtree(staged)


def _drop_set_aside(path: Path) -> None:
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.name.startswith(f".{BLOCK_COLUMN}=") and child.name.endswith(_SET_ASIDE):
            shutil.rmtree(child)


def _block_start(index: int, block_commands: int) -> int:
    return (index - 1) // block_commands * block_commands + 1


def _read_state(path: Path) -> dict[str, Any] | None:
    state_file = path / STATE_FILE
    try:
        text = state_file.read_text()
    except FileNotFoundError:
        return None
    try:
        state = json.loads(text)
        valid = (
            isinstance(state, dict)
            and state.get("v") == STATE_VERSION
            and isinstance(state.get("app"), str)
            and type(state.get("block_commands")) is int
            and state["block_commands"] >= 1
            and type(state.get("next_index")) is int
            and state["next_index"] >= 1
        )
    except ValueError:
        valid = False
    if not valid:
        raise InvalidConfig(f"{state_file} is not an export record ({text[:80]!r})")
    return dict(state)


def _write_state(path: Path, state: dict[str, Any]) -> None:
    state_file = path / STATE_FILE
    partial = path / (STATE_FILE + ".tmp")
    partial.write_text(json.dumps({"v": STATE_VERSION, **state}, sort_keys=True) + "\n")
    os.replace(partial, state_file)
