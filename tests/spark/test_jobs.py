"""The jobs (`rsm spark export`, `rsm spark audit`), as functions and through the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal
from pyspark.sql import SparkSession

from rsm.spark import jobs
from rsm.spark.jobs import STATE_FILE
from rsm.tools import cli
from tests.unit.rsm.runtime.test_cli_errors import unused_port

from .frames import parquet_rows
from .history import KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper]


def _blocks(path: Path) -> list[str]:
    return sorted(child.name for child in path.iterdir() if child.is_dir())


def _export(spark: SparkSession, known: KnownCluster, role: str, path: Path, **kwargs: Any) -> Any:
    return jobs.export(
        spark,
        known.zk,
        known.apps[role],
        str(path),
        ledger_root=known.ledger_root,
        **kwargs,
    )


def test_an_export_reads_back_as_the_log(
    spark: SparkSession, known: KnownCluster, tmp_path: Path
) -> None:
    path = tmp_path / "known"
    expected = known.expected["known"].rows
    report = _export(spark, known, "known", path, block_commands=50)
    assert (report.first_index, report.next_index, report.rows) == (1, len(expected) + 1, 120)
    assert _blocks(path) == ["index_from=1", "index_from=101", "index_from=51"]
    assert parquet_rows(spark, path) == expected
    assert json.loads((path / STATE_FILE).read_text()) == {
        "v": 1,
        "app": known.apps["known"],
        "block_commands": 50,
        "next_index": len(expected) + 1,
    }


def test_an_incremental_export_adds_what_is_new_and_reruns_change_nothing(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, tmp_path: Path
) -> None:
    path = tmp_path / "growing"
    expected = known.expected["growing"]
    first = _export(spark, known, "growing", path, since_last=True, block_commands=4)
    assert first.next_index == len(expected.rows) + 1
    portal.call(known.writers["growing"].append, 6)
    second = _export(spark, known, "growing", path, since_last=True)
    assert second.first_index == (first.next_index - 1) // 4 * 4 + 1
    assert second.next_index == len(expected.rows) + 1
    assert parquet_rows(spark, path) == expected.rows
    again = _export(spark, known, "growing", path, since_last=True)
    assert (again.next_index, parquet_rows(spark, path)) == (second.next_index, expected.rows)
    # A run that died before recording where it got to: the rerun writes the same rows.
    (path / STATE_FILE).unlink()
    _export(spark, known, "growing", path, since_last=True, block_commands=4)
    assert parquet_rows(spark, path) == expected.rows


def test_an_export_record_of_another_app_is_refused(
    spark: SparkSession, known: KnownCluster, tmp_path: Path
) -> None:
    path = tmp_path / "mixed"
    _export(spark, known, "truncated", path)
    with pytest.raises(Exception, match="holds an export of 'truncated-"):
        _export(spark, known, "known", path, since_last=True)


def test_audit_answers_sql_over_the_log(spark: SparkSession, known: KnownCluster) -> None:
    frame = jobs.audit(
        spark,
        known.zk,
        known.apps["known"],
        "SELECT epoch, count(*) AS commands FROM log WHERE command IS NOT NULL "
        "GROUP BY epoch ORDER BY epoch",
        ledger_root=known.ledger_root,
    )
    counts = {row.epoch: row.commands for row in frame.collect()}
    rows = known.expected["known"].rows
    assert counts == {
        epoch: sum(1 for row in rows if row[1] == epoch and row[9] is not None) for epoch in (1, 2)
    }


def test_the_command_audits_and_exports(
    spark: SparkSession, known: KnownCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--zk", known.zk, "--ledger-root", known.ledger_root, "--app", known.apps["known"]]
    query = (
        "SELECT get_json_object(arguments, '$.args[0]') AS key, count(*) AS writes FROM log "
        "WHERE command = 'set' GROUP BY key ORDER BY key LIMIT 2"
    )
    assert cli.main(["spark", "audit", *common, "--sql", query, "--json"]) == 0
    keys = [json.loads(line)["key"] for line in capsys.readouterr().out.splitlines()]
    assert keys == ["key-0", "key-1"]
    assert cli.main(["spark", "export", *common, "--to", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["next_index"] == len(known.expected["known"].rows) + 1
    # An earlier export, as Spark left it, may be replaced.
    assert cli.main(["spark", "export", *common, "--to", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == report


def test_the_command_reads_the_bookies_with_tls(
    known: KnownCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--zk", known.zk, "--ledger-root", known.ledger_root, "--app", known.apps["known"]]
    query = "SELECT count(*) AS commands FROM log"
    tls = ["--tls-bookies", "--tls-ca-file", str(known.certs.ca)]
    assert cli.main(["spark", "audit", *common, "--sql", query, "--json", *tls]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    assert json.loads(line)["commands"] == len(known.expected["known"].rows)
    missing = ["--tls-bookies", "--tls-ca-file", str(tmp_path / "none.pem")]
    assert cli.main(["spark", "audit", *common, "--sql", query, *missing]) == 2
    assert "InvalidConfig: TLS: cannot read CA file" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("words", "code", "message"),
    [
        (["--app", "nobody", "--sql", "SELECT 1"], 2, "NoSuchApplication: there is no application"),
        (["--app", "a/b", "--sql", "SELECT 1"], 2, "InvalidConfig: application name 'a/b'"),
        (["--app", "{truncated}", "--sql", "SELECT * FROM log WHERE index < 3"], 0, ""),
        (["--app", "{truncated}", "--sql", "SELECT nothing FROM log"], 2, "AnalysisException: "),
        (["--app", "{truncated}", "--sql", "SELECT * FROM log WHERE ("], 2, "ParseException"),
        (
            ["--app", "{truncated}", "--sql", "SELECT * FROM log", "--ledger-root", "/elsewhere"],
            1,
            "EntryUnreadable: ledger ",
        ),
    ],
)
def test_the_command_names_bad_input(
    known: KnownCluster,
    capsys: pytest.CaptureFixture[str],
    words: list[str],
    code: int,
    message: str,
) -> None:
    words = [word.format(truncated=known.apps["truncated"]) for word in words]
    if "--ledger-root" not in words:
        words += ["--ledger-root", known.ledger_root]
    assert cli.main(["spark", "audit", "--zk", known.zk, *words]) == code
    err = capsys.readouterr().err
    assert message in err
    assert len(err.splitlines()) == (0 if code == 0 else 1)


def test_a_failed_job_is_one_line_without_a_traceback(known: KnownCluster) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rsm.spark.cli", "audit", "--app", known.apps["corrupt"]),
            *("--zk", known.zk, "--ledger-root", known.ledger_root, "--master", "local[1]"),
            *("--sql", "SELECT count(*) FROM log"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1].startswith("error: EntryUnreadable: ledger ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("to", "message"),
    [
        # Refused by the driver: the directory cannot be made.
        ("{tmp}/a-file/export", "ParentNotDirectoryException: Parent path is not a directory: "),
        # Refused to the tasks: /proc takes no new directory, even from root.
        ("/proc/nope/export", "SparkException: [TASK_WRITE_FAILED] Task failed while writing "),
    ],
)
@pytest.mark.usefixtures("spark")
def test_a_failed_write_is_one_line_naming_spark_s_error(
    known: KnownCluster, tmp_path: Path, capfd: pytest.CaptureFixture[str], to: str, message: str
) -> None:
    (tmp_path / "a-file").write_text("")
    common = ["--zk", known.zk, "--ledger-root", known.ledger_root, "--app", known.apps["known"]]
    assert cli.main(["spark", "export", *common, "--to", to.format(tmp=tmp_path)]) == 1
    out, err = capfd.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"error: {message}")


def test_an_unreachable_zookeeper_is_one_line_before_spark_starts() -> None:
    """Found by the command's own ZooKeeper session, which waits the commands' bound, not
    by Spark's sources: no line of Spark's start-up, nor of kazoo's."""
    zk = f"127.0.0.1:{unused_port()}"
    done = subprocess.run(
        [
            *(sys.executable, "-m", "rsm.spark.cli", "audit", "--zk", zk, "--app", "kv"),
            *("--sql", "SELECT 1"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: MetadataUnavailable: no ZooKeeper session with {zk} ")
