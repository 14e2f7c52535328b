"""`rsm spark export` and `rsm spark snapshot` with `--master spark://...`: a standalone cluster.

A Spark master and one worker are started from the PySpark installation
(`bin/spark-class`) on loopback; the export and the bulk snapshot run as the
command line would, their executors started by the worker: the Parquet
written reads back as the log, and the snapshot registered has the state
hash replay reaches.  Everything binds to 127.0.0.1 (`SPARK_LOCAL_IP`).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest
from anyio.from_thread import BlockingPortal
from kvstore.state_machine import KVStore
from pyspark.sql import SparkSession

from bookie.local.zookeeper import free_port
from rsm.config import ReplicaConfig
from rsm.tools.replay import Replay, replay_to
from rsm.tools.source import ClusterSource

from .frames import parquet_rows
from .history import KnownCluster
from .kv_log import blind_commands, interleaved, kv_commands, kv_writer

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
HOST = "127.0.0.1"
WAIT_S = 90.0


def _environment() -> dict[str, str]:
    """This environment, with `PYTHONPATH` absolute: executors run in the worker's directory."""
    path = os.environ.get("PYTHONPATH")
    absolute = (
        {}
        if not path
        else {
            "PYTHONPATH": os.pathsep.join(
                str(Path(entry).resolve()) for entry in path.split(os.pathsep) if entry
            )
        }
    )
    return {**os.environ, **absolute, "SPARK_LOCAL_IP": HOST, "PYSPARK_PYTHON": sys.executable}


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


def _rsm(*words: str) -> subprocess.CompletedProcess[str]:
    """The `rsm` command, run as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "rsm.tools.cli", *words],
        capture_output=True,
        text=True,
        timeout=240,
        env=_environment(),
        check=False,
    )


def test_export_and_the_bulk_snapshot_run_on_a_standalone_cluster(
    spark: SparkSession, known: KnownCluster, portal: BlockingPortal, tmp_path: Path
) -> None:
    kv_app = f"kv-standalone-{os.getpid()}"
    with kv_writer(known.zk, known.ledger_root, portal, kv_app) as writer:
        portal.call(writer.segment, interleaved(kv_commands(200, 11), blind_commands(200, 12), 13))
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
        where = ("--zk", known.zk, "--ledger-root", known.ledger_root, "--master", master_url)
        done = _rsm(
            *("spark", "export", "--app", known.apps["known"], *where),
            *("--to", str(target), "--block-commands", "50"),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        snapshot = _rsm(
            *("spark", "snapshot", "--app", kv_app, *where),
            *("--machine", "kvstore.state_machine:KVStore", "--json"),
        )
        assert snapshot.returncode == 0, snapshot.stderr[-3000:]
    replayed = portal.call(_replay, known, kv_app)
    assert json.loads(snapshot.stdout)["state_hash"] == replayed.state_hash().hex()
    rows = known.expected["known"].rows
    assert done.stdout.strip().endswith(f"next index {len(rows) + 1}")
    assert parquet_rows(spark, target) == rows
    # The executors ran on the worker: it kept their logs.
    assert list((tmp_path / "work").glob("app-*/*/stderr"))


async def _replay(known: KnownCluster, app: str) -> Replay:
    async with ClusterSource.connect(known.zk, app, ledger_root=known.ledger_root) as source:
        return await replay_to(source, KVStore, ReplicaConfig(), to_index=None, from_snapshot=False)
