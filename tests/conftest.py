"""Shared fixtures: a real ZooKeeper server for the whole test session (and, for the tests
that ask, a second one serving TLS only), a fresh metadata root per test so tests
never see each other's znodes, and the process's logging set back after every test."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.local.certificates import DevelopmentCertificates, development_certificates
from bookie.local.zookeeper import LocalZooKeeper, ZooKeeperTls

_roots = itertools.count(1)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def process_logging_restored() -> Iterator[None]:
    """The root logger's handlers and level, and kazoo's level, as they were before the
    test: a command's `main` run in process configures logging (`bookie.logs.configure`)
    onto the test's captured stderr, which is closed once pytest ends, and a library
    logging at exit (py4j closing Spark's gateway) would then fail to write there."""
    root, kazoo = logging.getLogger(), logging.getLogger("kazoo")
    handlers, level, kazoo_level = list(root.handlers), root.level, kazoo.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
    kazoo.setLevel(kazoo_level)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalZooKeeper]:
    """A real standalone ZooKeeper on a free loopback port, for the whole session."""
    server = LocalZooKeeper(tmp_path_factory.mktemp("zookeeper"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tls_zookeeper(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[LocalZooKeeper, DevelopmentCertificates]]:
    """A real standalone ZooKeeper serving mutual TLS only (no plain port), started for the
    first test that asks, and its certificates: `node` is the server's, `client` a
    client's, `ca` what both are from."""
    certificates = development_certificates(tmp_path_factory.mktemp("zookeeper-tls-certs"))
    server = LocalZooKeeper(
        tmp_path_factory.mktemp("zookeeper-tls"),
        tls=ZooKeeperTls(certificates.node, certificates.ca, require_client_cert=True),
    )
    server.start()
    try:
        yield server, certificates
    finally:
        server.stop()


@pytest.fixture
def zk_root() -> str:
    """A metadata root path no other test uses."""
    return f"/t{os.getpid()}-{next(_roots)}"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path
