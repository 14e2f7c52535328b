"""Identity on a real bookie process: a cookie mismatch refuses to start, with a message
that says what differs and what to do, and a non-zero exit status (3).

Each test creates a bookie (first start writes its cookies), stops it cleanly, changes
one thing, and starts it again: a wiped ledger dir, a changed dir list, another cluster
instance, another bookie id.  Starting again unchanged works.
"""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.meta.bookies import read_cookie
from bookie.meta.zk import ZkMetadataStore
from bookie.server.identity import COOKIE_FILE
from bookie.server.node import EXIT_REFUSED

from .support.processes import BookieCluster, BookieProcess, BookieSetup

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]


async def created(cluster: BookieCluster) -> BookieSetup:
    """A bookie that started once (cookies written) and stopped cleanly."""
    setup = cluster.add_bookie()
    bookie = await cluster.start(setup)
    assert bookie.named("bookie.cookies_written")
    bookie.send(signal.SIGTERM)
    assert await bookie.wait_exit() == 0
    for directory in (setup.journal_dir, *setup.ledger_dirs):
        assert (directory / COOKIE_FILE).is_file()
    return setup


def refusal(bookie: BookieProcess) -> str:
    assert bookie.process.returncode == EXIT_REFUSED, bookie.tail()
    events = bookie.named("bookie.refused")
    assert len(events) == 1, bookie.tail()
    reason = events[0]["reason"]
    assert isinstance(reason, str)
    assert not bookie.named("bookie.listening"), "a refused bookie must not serve"
    return reason


async def test_restart_unchanged_is_accepted(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        BookieCluster(zookeeper, zk_root, tmp_path) as cluster,
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
    ):
        setup = await created(cluster)
        found = await read_cookie(store, setup.bookie_id, zk_root)
        assert found is not None
        assert found[0].ledger_dirs == tuple(str(path) for path in setup.ledger_dirs)
        bookie = await cluster.start(setup, wait_for="bookie.ready")
        assert not bookie.named("bookie.cookies_written")


async def test_wiped_ledger_dir_refuses(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await created(cluster)
        wiped = setup.ledger_dirs[1]
        shutil.rmtree(wiped)
        reason = refusal(await cluster.run_to_exit(setup))
        assert f"ledger dir {wiped} is new or was wiped" in reason
        assert "its cookie is missing while ZooKeeper has one" in reason
        assert "if this bookie lost its data" in reason.lower()
        assert str(setup.ledger_dirs[0]) not in reason
        # Refusing changed nothing: the directory was not re-created.
        assert not wiped.exists()


async def test_changed_ledger_dir_list_refuses(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await created(cluster)
        extra = setup.directory / "ledgers-new"
        cluster.write_config(setup, ledger_dirs=[*setup.ledger_dirs, extra])
        reason = refusal(await cluster.run_to_exit(setup))
        assert "ledger_dirs are" in reason
        assert str(extra) in reason
        assert "restore the previous list" in reason
        cluster.write_config(setup, ledger_dirs=list(reversed(setup.ledger_dirs)))
        assert "reordering" in refusal(await cluster.run_to_exit(setup))


async def test_other_cluster_instance_refuses(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await created(cluster)
        cluster.write_config(setup, zk_root=f"{zk_root}-elsewhere")
        reason = refusal(await cluster.run_to_exit(setup))
        assert "belong to cluster instance" in reason
        assert f"{zk_root}-elsewhere" in reason
        assert "Check zk_servers and zk_root" in reason


async def test_other_bookie_id_refuses(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await created(cluster)
        cluster.write_config(setup, bookie_id="renamed")
        reason = refusal(await cluster.run_to_exit(setup))
        assert f"belong to bookie '{setup.bookie_id}', not 'renamed'" in reason
        assert f'bookie_id = "{setup.bookie_id}"' in reason


async def test_new_address_with_explicit_id_rewrites_cookies(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with (
        BookieCluster(zookeeper, zk_root, tmp_path) as cluster,
        ZkMetadataStore.connect(zookeeper.connect_string) as store,
    ):
        setup = cluster.add_bookie(config={"bookie_id": "stable"})
        bookie = await cluster.start(setup)
        bookie.send(signal.SIGTERM)
        assert await bookie.wait_exit() == 0
        moved = f"127.0.0.1:{free_port()}"
        cluster.write_config(setup, bookie_id="stable", listen_address=moved)
        bookie = await cluster.start(setup, wait_for="bookie.ready")
        written = bookie.named("bookie.cookies_written")
        assert written[0]["note"] == f"advertised address changed from {setup.address} to {moved}"
        found = await read_cookie(store, "stable", zk_root)
        assert found is not None
        assert found[0].advertised_address == moved
