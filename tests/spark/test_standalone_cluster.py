"""`rsm spark export --master spark://...`: the same job on a standalone Spark cluster.

A Spark master and one worker are started from the PySpark installation
(`bin/spark-class`) on loopback; the export runs as the command line would,
its executors started by the worker, and the Parquet it writes reads back as
the log.  Everything binds to 127.0.0.1 (`SPARK_LOCAL_IP`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from pyspark.sql import SparkSession

from bookie.local.zookeeper import free_port

from .frames import parquet_rows
from .history import KnownCluster

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
HOST = "127.0.0.1"
WAIT_S = 90.0


def _environment() -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": HOST, "PYSPARK_PYTHON": sys.executable}


@contextlib.contextmanager
def _daemon(log_file: Path, ready: str, *words: str) -> Iterator[subprocess.Popen[bytes]]:
    """A Spark daemon, once its log shows `ready`; killed when the block ends."""
    with log_file.open("wb") as log:
        process = subprocess.Popen(
            [str(SPARK_CLASS), *words],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_environment(),
        )
    try:
        deadline = time.monotonic() + WAIT_S
        while ready not in log_file.read_text(errors="replace"):
            assert process.poll() is None, log_file.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, f"no {ready!r} in {log_file}"
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.1)
        yield process
    finally:
        process.kill()
        process.wait()


def test_export_runs_on_a_standalone_cluster(
    spark: SparkSession, known: KnownCluster, tmp_path: Path
) -> None:
    port = free_port(HOST)
    master_url = f"spark://{HOST}:{port}"
    master_args = ["--host", HOST, "--port", str(port), "--webui-port", str(free_port(HOST))]
    worker_args = ["--host", HOST, "--webui-port", str(free_port(HOST)), "--cores", "2"]
    with (
        _daemon(
            tmp_path / "master.log",
            "New state: ALIVE",
            "org.apache.spark.deploy.master.Master",
            *master_args,
        ),
        _daemon(
            tmp_path / "worker.log",
            "Successfully registered with master",
            "org.apache.spark.deploy.worker.Worker",
            *worker_args,
            "--memory",
            "1g",
            "--work-dir",
            str(tmp_path / "work"),
            master_url,
        ),
    ):
        target = tmp_path / "export"
        done = subprocess.run(
            [
                *(sys.executable, "-m", "rsm.tools.cli", "spark", "export"),
                *("--app", known.apps["known"], "--zk", known.zk),
                *("--ledger-root", known.ledger_root, "--to", str(target)),
                *("--master", master_url, "--block-commands", "50"),
            ],
            capture_output=True,
            text=True,
            timeout=240,
            env=_environment(),
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    rows = known.expected["known"].rows
    assert done.stdout.strip().endswith(f"next index {len(rows) + 1}")
    assert parquet_rows(spark, target) == rows
    # The executors ran on the worker: it kept their logs.
    assert list((tmp_path / "work").glob("app-*/*/stderr"))
