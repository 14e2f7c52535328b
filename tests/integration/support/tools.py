"""Outside programs the integration tests drive (Debian's redis-server and redis-tools).

`redis_server` runs a real redis-server (no persistence) for the block and
gives its port once it answers PING.

`make test` installs them (`scripts/bootstrap.sh redis-server redis-tools`), so a
missing one is a broken set-up: the test fails and says how to install it, rather
than skipping and leaving the comparison with a real Redis untested.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bookie.local.zookeeper import free_port
from tests.unit.kvstore.local_store import WAIT_S, wait_for


def required_tool(name: str) -> str:
    """The path of program `name`; fails the test when it is not installed."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make test`, or scripts/bootstrap.sh "
            "redis-server redis-tools"
        )
    return path


@contextlib.contextmanager
def redis_server(directory: Path, *options: str) -> Iterator[int]:
    """A real redis-server's port for the block (`options` added to its command line)."""
    binary = required_tool("redis-server")
    port = free_port()
    process = subprocess.Popen(
        [
            *(binary, "--port", str(port), "--save", "", "--appendonly", "no"),
            *("--dir", str(directory), *options),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = redis.Redis(port=port)
        wait_for(lambda: _answers(client))
        client.close()
        yield port
    finally:
        process.terminate()
        process.wait(timeout=WAIT_S)


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
