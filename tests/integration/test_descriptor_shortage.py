"""A bookie or replica process that runs out of file descriptors serves on: its accept loop
logs `net.accept_failed`, waits, and accepts again once descriptors are free
(bookie/net/accepting.py); before, the accept's EMFILE ended the listener and the process.

The shortage is real: the running process's descriptor limit is lowered (`prlimit`) to
what it uses plus a few, and the test holds more connections open than that leaves."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import anyio.abc
import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieError
from bookie.local.zookeeper import LocalZooKeeper

from .support.processes import HOST, BookieCluster
from .support.rsm_processes import RsmProcesses, wait_for

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.integration,
    pytest.mark.zookeeper,
    pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors in /proc"),
]

SPARE = 4
"""Descriptors the process may open beyond those it has when the limit is lowered."""
HELD = 8
"""Connections the test holds open: more than `SPARE`, so some accepts fail."""


@contextlib.asynccontextmanager
async def out_of_descriptors(pid: int, port: int) -> AsyncIterator[list[anyio.abc.SocketStream]]:
    """Process `pid` limited to the descriptors it has plus `SPARE`, and `HELD` connections to
    its `port` held open for the block (then closed, the limit left as it is)."""
    used = len(os.listdir(f"/proc/{pid}/fd"))
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (used + SPARE, hard))
    held: list[anyio.abc.SocketStream] = []
    try:
        for _ in range(HELD):
            held.append(await anyio.connect_tcp(HOST, port))  # the backlog takes the refused
        yield held
    finally:
        for stream in held:
            await stream.aclose()


async def test_a_bookie_out_of_descriptors_serves_on(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = cluster.add_bookie(ledger_dirs=1)
        bookie = await cluster.start(setup, wait_for="bookie.ready")
        async with out_of_descriptors(bookie.pid, setup.port) as held:
            # The event loop (uvloop's libuv) accepts what it has no descriptor for with one
            # it keeps in reserve and closes it at once: the connections past the limit end.
            ended: list[anyio.abc.SocketStream] = []

            async def watch(stream: anyio.abc.SocketStream) -> None:
                with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                    await stream.receive()  # the bookie never writes first: only an end
                ended.append(stream)

            async with anyio.create_task_group() as watching:
                for stream in held:
                    watching.start_soon(watch, stream)
                await wait_for(lambda: ended)
                watching.cancel_scope.cancel()

        async def answers() -> bool:
            try:
                async with BookieConnection.connect(HOST, setup.port) as connection:
                    await connection.bookie_info()
            except BookieError:
                return False  # while the bookie notices the held connections are gone
            return True

        assert await wait_for(answers)
        assert bookie.process.returncode is None


async def test_a_replica_out_of_descriptors_serves_on(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await cluster.start_bookies()
        replica = await cluster.start_replica("r1")
        await cluster.wait_leader()
        port = int(replica.address.rpartition(":")[2])
        async with out_of_descriptors(replica.process.pid, port):
            await replica.wait_event("net.accept_failed")
        async with cluster.client() as client:
            assert await client.call("add", "c1", 1) == 1
        assert replica.running
