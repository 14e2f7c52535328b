"""`bookie shell` against a real bookie: over the network (bookieinfo, readentry,
listentries) and on its files (lastmark, readjournal), human output and `--json`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.local.zookeeper import LocalZooKeeper

from .support.entries import KEY, PASSWORD, packet, payload
from .support.processes import HOST, BookieCluster, BookieSetup

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGER = 77
ENTRIES = 5


async def shell(*arguments: str, check: bool = True) -> tuple[int, str, str]:
    result = await anyio.run_process(
        [sys.executable, "-m", "bookie.tools.cli", "shell", *arguments], check=False
    )
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    if check:
        assert result.returncode == 0, stderr
    return result.returncode, stdout, stderr


async def shell_json(*arguments: str) -> Any:
    _, stdout, _ = await shell(*arguments, "--json")
    return json.loads(stdout)


async def written(cluster: BookieCluster) -> BookieSetup:
    setup = cluster.add_bookie(ledger_dirs=1)
    await cluster.start(setup)
    async with BookieConnection.connect(HOST, setup.port) as connection:
        for entry_id in range(ENTRIES):
            await connection.add(LEDGER, entry_id, KEY, packet(LEDGER, entry_id))
    return setup


async def test_network_commands(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await written(cluster)
        info = await shell_json("bookieinfo", setup.address)
        assert info["read_only"] is False
        assert 0 < info["free_bytes"] <= info["total_bytes"]

        entry = await shell_json("readentry", setup.address, str(LEDGER), "2")
        assert entry["entry_id"] == 2
        assert entry["entry_lac"] == 1
        assert entry["digest"] == "ok"
        assert entry["payload_bytes"] == 100
        assert bytes.fromhex(entry["payload_preview"]) == payload(LEDGER, 2)[:64]
        wrong = await shell_json(
            "readentry",
            setup.address,
            str(LEDGER),
            "2",
            "--digest",
            "hmac_sha256",
            "--password",
            PASSWORD.decode(),
        )
        assert wrong["digest"].startswith("MISMATCH"), "the ledger's digest is CRC32C"

        _, last, _ = await shell("readentry", setup.address, str(LEDGER), "-1")
        assert "entry_id       4" in last
        assert "digest         ok" in last

        _, human, _ = await shell("listentries", setup.address, str(LEDGER))
        assert f"ranges     0-{ENTRIES - 1}" in human

        code, _, error = await shell("readentry", setup.address, "999", "0", check=False)
        assert code == 1
        assert "answered ENOLEDGER" in error
        code, _, error = await shell("bookieinfo", "127.0.0.1:1", check=False)
        assert code == 1
        assert "Is it running" in error


async def test_offline_commands(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await written(cluster)
        config = str(setup.config_file)
        marks = await shell_json("lastmark", "--config", config)
        assert set(marks["ledger_dirs"]) == {str(path) for path in setup.ledger_dirs}
        journal = await shell_json("readjournal", "--config", config, "--ledger", str(LEDGER))
        kinds = [record["kind"] for record in journal["records"]]
        assert kinds == ["MASTER_KEY"] + ["ENTRY"] * ENTRIES
        assert [record["argument"] for record in journal["records"][1:]] == list(range(ENTRIES))
        # The running bookie's newest journal file has space allocated ahead, nothing else.
        newest = str(max(setup.journal_dir.glob("*.journal")))
        assert [(tail["file"], tail["verdict"].split(":")[0]) for tail in journal["tails"]] == [
            (newest, "zeros")
        ]
        _, human, _ = await shell("readjournal", "--journal-dir", str(setup.journal_dir))
        assert f"{ENTRIES + 1} records" in human
        _, human, _ = await shell("lastmark", "--ledger-dirs", *map(str, setup.ledger_dirs))
        assert "replay starts at" in human
