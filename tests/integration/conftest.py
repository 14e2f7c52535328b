"""Fixtures shared by the integration tests of the key-value store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from tests.integration.support.tools import redis_server
from tests.unit.kvstore.local_store import Store, running_store

COMMAND_TIMEOUT_MS = 8_000
"""The replicas' command timeout where a test waits for writes to be refused (30 s by
default): how long a write waits for bookies that cannot acknowledge it before it is
answered TRYAGAIN or TIMEOUT."""


@pytest.fixture
def impatient_store(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> Iterator[Store]:
    """A running store whose replicas give up on a command after `COMMAND_TIMEOUT_MS`."""
    with running_store(zookeeper, zk_root, tmp_path, command_timeout_ms=COMMAND_TIMEOUT_MS) as kv:
        yield kv


@pytest.fixture(scope="module")
def real_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real redis-server's port, for the module's tests to send it the same calls."""
    with redis_server(tmp_path_factory.mktemp("redis")) as port:
        yield port
