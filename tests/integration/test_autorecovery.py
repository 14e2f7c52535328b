"""Autorecovery with real bookie processes and a real ZooKeeper: a bookie holding fragments
of several closed ledgers is killed with SIGKILL, the elected auditor marks its ledgers,
and the workers inside the other bookies copy every fragment to the spare bookie; each
entry is then read, digest checked, from every bookie of its new write set.  The shell
commands show the marks, the auditor, and pause and resume the workers.  A standalone
`bookie autorecovery` process stands for auditor and stops on SIGTERM.  Decommissioning a
stopped bookie moves its data and removes its cookie.  An open ledger whose writer's
znode is gone is fenced, recovered and repaired."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from bookie.client.copies import CopyReader
from bookie.client.ledger_client import LedgerClient
from bookie.core.copies import CopyState
from bookie.core.metadata import LedgerMetadata
from bookie.core.open_ledgers import WRITER_KEY
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import init_cluster
from bookie.meta.zk import ZkMetadataStore
from tests.unit.bookie.server.support import eventually as wait_eventually

from .support.ledgers import PASSWORD, entry_payload, ledger_client, start_bookies
from .support.processes import WAIT_S, BookieCluster
from .support.shell import shell, shell_json

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGERS = 4
ENTRIES = 30
POLL_S = 0.1
AUTORECOVERY_COMMAND = (sys.executable, "-m", "bookie.tools.cli", "autorecovery")
AUTORECOVERY = {
    "autorecovery_grace_ms": 500,
    "autorecovery_poll_interval_ms": 100,
    "autorecovery_password": PASSWORD.decode(),
}


async def eventually(check: Callable[[], Awaitable[bool]]) -> None:
    await wait_eventually(check, poll_s=POLL_S, timeout_s=WAIT_S)


async def write_closed_ledgers(client: LedgerClient) -> list[int]:
    ledger_ids = []
    for _ in range(LEDGERS):
        async with await client.create_ledger(3, 2, 2, password=PASSWORD) as ledger:
            for number in range(ENTRIES):
                await ledger.wait_for_capacity()
                ledger.append_nowait(entry_payload(number))
            ledger_ids.append(ledger.ledger_id)
    return ledger_ids


async def assert_every_copy_readable(client: LedgerClient, metadata: LedgerMetadata) -> None:
    assert metadata.last_entry_id == ENTRIES - 1
    async with CopyReader.open(metadata, PASSWORD, client.bookie_address) as reader:
        for entry_id in range(ENTRIES):
            copies = await reader.read(entry_id)
            assert len(copies) == metadata.write_quorum
            for copy in copies:
                assert copy.state is CopyState.OK, (metadata.ledger_id, entry_id, copy)
                assert copy.payload == entry_payload(entry_id)


async def test_a_killed_bookies_ledgers_return_to_full_replication(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setups = [cluster.add_bookie(ledger_dirs=1, config=AUTORECOVERY) for _ in range(4)]
        processes = await start_bookies(cluster, setups[:3])
        where = ("--zk", cluster.zk_servers, "--zk-root", zk_root)
        async with ledger_client(cluster, seed=7) as client:
            ledger_ids = await write_closed_ledgers(client)
            await start_bookies(cluster, setups[3:])
            spare = setups[3].bookie_id
            auditor = await shell_json("whoisauditor", *where)
            assert auditor["candidates"] == 4
            assert auditor["auditor"] in {setup.bookie_id for setup in setups}

            # Paused workers: the auditor marks, nothing is repaired.
            assert (await shell_json("autorecovery", "disable", *where))["enabled"] is False
            victim = processes[0]
            lost = victim.setup.bookie_id
            before = {
                ledger_id: await client.ledger_metadata(ledger_id) for ledger_id in ledger_ids
            }
            assert all(lost in metadata.ensembles[0][1] for metadata in before.values())
            victim.kill()

            async def all_marked() -> bool:
                report = await shell_json("listunderreplicated", *where)
                return {entry["ledger_id"] for entry in report["ledgers"]} == set(ledger_ids)

            await eventually(all_marked)
            report = await shell_json("listunderreplicated", *where)
            assert report["enabled"] is False
            assert all(entry["missing"] == [lost] for entry in report["ledgers"])
            for ledger_id in ledger_ids:
                assert await client.ledger_metadata(ledger_id) == before[ledger_id]

            assert (await shell_json("autorecovery", "enable", *where))["enabled"] is True

            async def all_repaired() -> bool:
                report = await shell_json("listunderreplicated", *where)
                return not report["ledgers"]

            await eventually(all_repaired)
            for ledger_id in ledger_ids:
                after = await client.ledger_metadata(ledger_id)
                ensemble = after.ensembles[0][1]
                assert lost not in ensemble
                assert spare in ensemble
                assert ensemble == tuple(
                    spare if bookie_id == lost else bookie_id
                    for bookie_id in before[ledger_id].ensembles[0][1]
                )
                await assert_every_copy_readable(client, after)
                reader = await client.open_ledger(ledger_id, PASSWORD, recovery=False)
                assert await reader.read(0, ENTRIES - 1) == [
                    entry_payload(number) for number in range(ENTRIES)
                ]


async def test_standalone_autorecovery_stands_for_auditor_and_stops_on_sigterm(
    zookeeper: LocalZooKeeper, zk_root: str
) -> None:
    async with ZkMetadataStore.connect(zookeeper.connect_string) as store:
        await init_cluster(store, zk_root)
    where = ("--zk", zookeeper.connect_string, "--zk-root", zk_root)
    bad = await anyio.run_process(
        [*AUTORECOVERY_COMMAND, *where[:2], "--zk-root", "x"], check=False
    )
    assert bad.returncode == 2
    assert b"--zk-root 'x'" in bad.stderr
    process = await anyio.open_process(
        [*AUTORECOVERY_COMMAND, *where, "--id", "standalone-1", "--poll-interval-ms", "100"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    async with process:

        async def elected() -> bool:
            return (await shell_json("whoisauditor", *where)) == {
                "auditor": "standalone-1",
                "candidates": 1,
            }

        await eventually(elected)
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(WAIT_S):
            assert await process.wait() == 0
    assert (await shell_json("whoisauditor", *where))["auditor"] is None


async def test_decommission_moves_a_stopped_bookies_data_and_removes_its_cookie(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    config = {**AUTORECOVERY, "autorecovery_grace_ms": 600_000}  # the auditor stays out of it
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setups = [cluster.add_bookie(ledger_dirs=1, config=config) for _ in range(4)]
        processes = await start_bookies(cluster, setups[:3])
        where = ("--zk", cluster.zk_servers, "--zk-root", zk_root)
        async with ledger_client(cluster, seed=11) as client:
            ledger_ids = await write_closed_ledgers(client)
            await start_bookies(cluster, setups[3:])
            leaving = setups[0].bookie_id
            code, _, error = await shell("recover", "nobody", *where, check=False)
            assert (code, "not a member" in error) == (2, True)
            code, _, error = await shell("decommission", leaving, *where, check=False)
            assert code == 2
            assert "stop it first" in error
            processes[0].send(signal.SIGTERM)
            assert await processes[0].wait_exit() == 0
            assert (await shell_json("triggeraudit", *where))["triggered"] is True

            report = await shell_json("decommission", leaving, *where, "--timeout-s", "30")
            assert report == {
                "bookie_id": leaving,
                "ledgers_marked": ledger_ids,
                "cookie_removed": True,
                "problems": [],
            }
            bookies = await shell_json("listbookies", *where)
            assert leaving not in [bookie["bookie_id"] for bookie in bookies["down"]]
            for ledger_id in ledger_ids:
                metadata = await client.ledger_metadata(ledger_id)
                assert leaving not in metadata.ensembles[0][1]
                await assert_every_copy_readable(client, metadata)
            code, _, error = await shell("decommission", leaving, *where, check=False)
            assert code == 2
            assert "not a member" in error


async def test_an_open_ledger_whose_writer_died_is_fenced_recovered_and_repaired(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    config = {**AUTORECOVERY, "autorecovery_open_ledger_grace_ms": 500}
    writer_znode = f"{zk_root}-writers/w1"
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setups = [cluster.add_bookie(ledger_dirs=1, config=config) for _ in range(4)]
        processes = await start_bookies(cluster, setups[:3])
        where = ("--zk", cluster.zk_servers, "--zk-root", zk_root)
        async with ledger_client(cluster, seed=5) as client:
            async with ZkMetadataStore.connect(zookeeper.connect_string) as writer_session:
                await writer_session.create(writer_znode, b"", ephemeral=True, make_parents=True)
                writer = await client.create_ledger(
                    3, 2, 2, password=PASSWORD, custom_metadata={WRITER_KEY: writer_znode.encode()}
                )
                for number in range(ENTRIES):
                    await writer.append(entry_payload(number))
            # The writer's session is over (its znode gone); its ledger stays open.
            processes += await start_bookies(cluster, setups[3:])
            lost = processes[0].setup.bookie_id
            assert lost in (await client.ledger_metadata(writer.ledger_id)).current_ensemble
            processes[0].kill()

            async def closed_and_repaired() -> bool:
                report = await shell_json("listunderreplicated", *where)
                metadata = await client.ledger_metadata(writer.ledger_id)
                return not report["ledgers"] and metadata.is_closed

            await eventually(closed_and_repaired)
            after = await client.ledger_metadata(writer.ledger_id)
            assert all(lost not in ensemble for _, ensemble in after.ensembles)
            await assert_every_copy_readable(client, after)
            fenced = [
                event
                for process in processes[1:]
                for event in process.named("autorecovery.ledger_fenced")
            ]
            assert fenced
            assert {event["writer"] for event in fenced} == {"gone"}
