"""Shared fixtures: a real ZooKeeper server for the whole test session, and a
fresh metadata root per test so tests never see each other's znodes."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper

_roots = itertools.count(1)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    """A real standalone ZooKeeper on a free loopback port, for the whole session."""
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def zk_root() -> str:
    """A metadata root path no other test uses."""
    return f"/t{os.getpid()}-{next(_roots)}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path
