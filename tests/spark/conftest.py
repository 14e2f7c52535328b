"""One Spark session and one cluster with known logs, shared by every Spark test.

Starting a JVM and three bookies costs seconds, so both live as long as this
package's tests, and no longer: the cluster's ZooKeeper client runs threads
that use the global `random`, which Hypothesis, in the tests that come after,
would take for a strategy depending on outside state.  The fixtures:
`spark` is a `local[2]` session with the sources registered (filter pushdown
on), `known` the cluster of tests/spark/history.py, kept running on an
event loop in a thread of its own (an anyio blocking portal) because Spark's
calls are synchronous.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from anyio.from_thread import BlockingPortal, start_blocking_portal
from pyspark.sql import SparkSession

import rsm.spark
from bookie.local.zookeeper import LocalZooKeeper

from .history import KnownCluster, known_cluster


@pytest.fixture(scope="package")
def spark() -> Iterator[SparkSession]:
    session = rsm.spark.session("local[2]", app_name="rsm-tests")
    rsm.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="package")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as running:
        yield running


_setups = itertools.count(1)
"""Numbers each setup of `known`: pytest sets a package's fixtures up again when the
package's tests are run apart (other files named between them), and a second
cluster must not meet the first one's znodes."""


@pytest.fixture(scope="package")
def known(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory, portal: BlockingPortal
) -> Iterator[KnownCluster]:
    directory = tmp_path_factory.mktemp("spark-bookies")
    suffix = f"{os.getpid()}-{next(_setups)}"
    manager: Any = known_cluster(zookeeper, directory, f"/spark{suffix}", suffix)
    with portal.wrap_async_context_manager(manager) as cluster:
        yield cluster
