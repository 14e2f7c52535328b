"""`rsm spark`: an application's log in Apache Spark (also `python -m rsm.spark.cli`).

    rsm spark export --app NAME --zk HOSTS --to PATH [--since-last] [--on-data-loss fail|snapshot]
                     [--block-commands 100000] [--ledger-root /ledgers] [--master local[*]] [--json]
    rsm spark audit  --app NAME --zk HOSTS --sql QUERY [--limit 1000]
                     [--ledger-root /ledgers] [--master local[*]] [--json]
    rsm spark snapshot --app NAME --zk HOSTS --machine MODULE:CLASS [--app-dir DIR]
                     [--ledger-root /ledgers] [--master local[*]] [--json]

Each takes the bookie TLS flags (`--tls-bookies --tls-ca-file CA
[--tls-cert-file CERT] [--tls-key-file KEY]`, bookie/net/tls_flags.py), given
to the sources as their `tls*` options: the files must be readable where the
executors run.

`export` writes the log to Parquet (rsm/spark/jobs.py has the layout);
`--since-last` exports only what the last export of PATH did not hold, and
rerunning it is harmless.  `audit` runs QUERY with the log as the view
`log` (columns in docs/spark.md) and prints its rows as a table, or one JSON
object per row with `--json`.  `snapshot` computes the state at the log's
readable end with the class's Spark reducer and registers it as a snapshot
replicas start from (rsm/spark/bulk_snapshot.py); `--app-dir` (default: the
current directory) goes first on the import path, as for `rsm run`.
`--master` is any Spark master URL (`local[*]`, `spark://HOST:PORT`, ...).

`export` refuses a PATH that is neither absent, an empty directory, nor an
earlier export (rsm/spark/jobs.py, `check_export_path`), before Spark starts.

Exit status: 0 on success, 1 when the job failed (`error: <Type>: <message>`
on stderr, the cause as the framework named it, not Spark's traceback; a
failure of Spark's own, such as a write that failed, is the Java exception's
class and the first line of its message), 2 for a usage error or bad input
(bad options, an unknown application, an export PATH that is not an export,
a query Spark cannot parse or resolve).  kazoo's warnings (a line per
reconnect attempt to an unreachable ZooKeeper) are hidden: the error says it.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
from collections.abc import Sequence
from typing import Any, Final

import anyio

from bookie import errors as bookie_errors
from bookie import limits as bookie_limits
from bookie.errors import BookieError
from bookie.net.tls_flags import add_bookie_tls_arguments, bookie_tls_context
from bookie.tools.stdout import program_main
from rsm import errors, limits
from rsm.core.layout import AppLayout
from rsm.errors import InvalidConfig, NoSuchApplication, RsmError
from rsm.host import aligned, command_zk_store, quiet_kazoo
from rsm.machines import add_app_dir, load_machine

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
_SPARK_ERROR_LOGGERS: Final = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""PySpark's loggers that print a failed query's error as it is raised."""

_ERROR_NAMES: Final = sorted(
    name
    for module, root in ((errors, RsmError), (bookie_errors, BookieError))
    for name, value in vars(module).items()
    if isinstance(value, type) and issubclass(value, root)
)
_FRAMEWORK_ERROR: Final = re.compile(
    r"(?:rsm\.errors\.)?\b(" + "|".join(_ERROR_NAMES) + r"): ([^\n]+)"
)
"""How an error of the framework or of the ledger layer raised in a Spark worker reads inside
Spark's exception text."""


def main(argv: Sequence[str] | None = None) -> int:
    return program_main("error: ", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    arguments = _parser().parse_args(argv)
    # PySpark is an optional extra: imported here, so that its absence is a clear message.
    try:
        from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]  # noqa: PLC0415
        from pyspark.errors import AnalysisException, PySparkException  # noqa: PLC0415

        from rsm.spark import bulk_snapshot, jobs  # noqa: PLC0415
    except ImportError as error:
        print(f"error: PySpark is missing ({error}): install the spark extra", file=sys.stderr)
        return EXIT_USAGE
    try:
        with quiet_kazoo():
            if arguments.command == "snapshot":
                return _snapshot(jobs, bulk_snapshot, arguments)
            return _run(jobs, arguments)
    except (RsmError, BookieError, OSError) as error:
        return _failed(type(error).__name__, str(error))
    except (PySparkException, Py4JJavaError) as error:
        found = _FRAMEWORK_ERROR.findall(str(error))
        if found:
            name, message = found[-1]
            return _failed(name, message)
        if isinstance(error, Py4JJavaError):
            # A JVM exception PySpark does not convert (a failed write): its class and message.
            java = error.java_exception
            return _failed(java.getClass().getSimpleName(), _first_line(java.getMessage()))
        # A query Spark cannot parse or resolve is bad input.
        usage = isinstance(error, AnalysisException)
        return _failed(type(error).__name__, _first_line(str(error)), usage=usage)


def _first_line(message: str | None) -> str:
    lines = (message or "").strip().splitlines()
    return lines[0] if lines else ""


def _failed(name: str, message: str, *, usage: bool = False) -> int:
    print(f"error: {name}: {message}", file=sys.stderr)
    named = getattr(errors, name, None)
    bad_input = isinstance(named, type) and issubclass(named, InvalidConfig)
    return EXIT_USAGE if usage or bad_input else EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rsm spark", description="An application's log in Apache Spark: export, audit."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="write the log to Parquet")
    _common(export)
    export.add_argument("--to", required=True, help="the Parquet dataset's directory")
    export.add_argument(
        "--since-last", action="store_true", help="only what the last export did not hold"
    )
    export.add_argument(
        "--on-data-loss",
        choices=("fail", "snapshot"),
        default="fail",
        help="indexes to export the log truncated away: fail, or go on from its first index "
        "when a registered snapshot covers them (the source's onDataLoss)",
    )
    export.add_argument(
        "--block-commands",
        type=int,
        default=limits.spark_export_block_commands_default,
        help="indexes per partition directory (a new export only)",
    )
    audit = commands.add_parser("audit", help="answer a SQL query over the view `log`")
    _common(audit)
    audit.add_argument("--sql", required=True, help="the query; the log is the view `log`")
    audit.add_argument("--limit", type=int, default=1000, help="most rows printed")
    snapshot = commands.add_parser(
        "snapshot", help="compute the state with the class's Spark reducer; register it"
    )
    _common(snapshot)
    snapshot.add_argument("--machine", required=True, help="the application's MODULE:CLASS")
    snapshot.add_argument("--app-dir", default=".", help="put first on the import path")
    return parser


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--app", required=True, help="the application's name")
    parser.add_argument("--zk", required=True, help="ZooKeeper HOST:PORT[,...][/chroot]")
    parser.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)
    parser.add_argument("--master", default="local[*]", help="Spark master URL")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_bookie_tls_arguments(parser)


def _tls_options(arguments: argparse.Namespace) -> dict[str, str]:
    """The sources' `tls*` options the TLS flags give (checked here, before Spark starts:
    `InvalidConfig` naming the flag or the file)."""
    if bookie_tls_context(arguments) is None:
        return {}
    files = {
        "tlsCaFile": arguments.tls_ca_file,
        "tlsCertFile": arguments.tls_cert_file,
        "tlsKeyFile": arguments.tls_key_file,
    }
    return {option: str(path) for option, path in files.items() if path is not None}


def _check_application(arguments: argparse.Namespace) -> None:
    """`NoSuchApplication`, or `MetadataUnavailable` after `limits.cli_zk_connect_timeout_ms`,
    before Spark starts: Spark's sources would find either only after Spark's start-up
    lines, and an unreachable ZooKeeper after a whole session timeout."""

    async def check() -> None:
        layout = AppLayout.of(arguments.app)
        async with command_zk_store(arguments.zk) as store:
            if await store.exists(layout.log) is None:
                raise NoSuchApplication(arguments.app)

    anyio.run(check)


def _spark(jobs: Any, arguments: argparse.Namespace) -> Any:
    for name in _SPARK_ERROR_LOGGERS:
        logging.getLogger(name).disabled = True  # the error is reported once, by `main`
    spark = jobs.session(arguments.master, app_name=f"rsm spark {arguments.command}")
    spark.sparkContext.setLogLevel("FATAL")  # failures are reported once, below
    jobs.register(spark)
    return spark


def _snapshot(jobs: Any, bulk_snapshot: Any, arguments: argparse.Namespace) -> int:
    add_app_dir(arguments.app_dir)
    machine_class = load_machine(arguments.machine)
    bulk_snapshot.load_reducer(machine_class)  # no reducer: said before Spark starts
    tls_options = _tls_options(arguments)
    _check_application(arguments)
    report = bulk_snapshot.bulk_snapshot(
        _spark(jobs, arguments),
        arguments.zk,
        arguments.app,
        machine_class,
        ledger_root=arguments.ledger_root,
        tls_options=tls_options,
    )
    if arguments.json:
        print(json.dumps(vars_of(report), sort_keys=True))
    elif not report.registered:
        print(
            f"nothing logged after the snapshot of {report.app} at index {report.index} (ledger "
            f"{report.ledger_id}, state hash {report.state_hash}): it is the state at the "
            "log's readable end; no snapshot written"
        )
    else:
        start = (
            "" if report.from_snapshot is None else f" on top of the one at {report.from_snapshot}"
        )
        print(
            f"registered a snapshot of {report.app} at index {report.index}{start} (ledger "
            f"{report.ledger_id}, {report.size_bytes} bytes, {report.sessions} sessions, state "
            f"hash {report.state_hash}) in {report.seconds} s"
        )
    return EXIT_OK


def _run(jobs: Any, arguments: argparse.Namespace) -> int:
    tls_options = _tls_options(arguments)
    if arguments.command == "export":
        jobs.check_export_path(arguments.to)  # a PATH an export must not delete: said at once
    _check_application(arguments)
    spark = _spark(jobs, arguments)
    if arguments.command == "export":
        report = jobs.export(
            spark,
            arguments.zk,
            arguments.app,
            arguments.to,
            since_last=arguments.since_last,
            block_commands=arguments.block_commands,
            ledger_root=arguments.ledger_root,
            onDataLoss=arguments.on_data_loss,
            **tls_options,
        )
        if arguments.json:
            print(json.dumps(vars_of(report), sort_keys=True))
        else:
            print(
                f"exported {report.app} to {report.path}: {report.rows} rows in "
                f"{report.blocks} blocks from index {report.first_index}; next index "
                f"{report.next_index}"
            )
        return EXIT_OK
    frame = jobs.audit(
        spark,
        arguments.zk,
        arguments.app,
        arguments.sql,
        ledger_root=arguments.ledger_root,
        **tls_options,
    )
    rows = [row.asDict(recursive=True) for row in frame.limit(arguments.limit).collect()]
    if arguments.json:
        for row in rows:
            print(json.dumps(row, default=_jsonable, sort_keys=False, ensure_ascii=False))
    else:
        print(render_table(frame.columns, rows))
    return EXIT_OK


def vars_of(report: Any) -> dict[str, Any]:
    return {name: getattr(report, name) for name in report.__slots__}


def render_table(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> str:
    """Rows under their column names, in aligned columns."""
    return "\n".join(
        aligned([list(columns)] + [[_cell(row[name]) for name in columns] for row in rows])
    )


def _cell(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return str(value)


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return bytes(value).hex()
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
