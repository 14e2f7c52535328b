"""Helpers shared by the storage unit tests: configs in a temporary directory,
entry packets, waiting for durability, and crash images."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from bookie.storage.file import FileLedgerStorage, StorageConfig
from bookie.wire.packet import Digest, DigestType

KEY = b"k" * 32
DIGEST = Digest(DigestType.CRC32C, b"password")
WAIT_S = 10


def make_packet(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    return DIGEST.build_entry(ledger_id, entry_id, entry_id - 1, 0, bytes([entry_id % 251]) * size)


def make_config(root: Path, **overrides: Any) -> StorageConfig:
    """A config under `root` with the periodic checkpoint effectively off."""
    config = StorageConfig(
        journal_dir=root / "journal",
        ledger_dirs=(root / "ledgers",),
        checkpoint_interval_ms=3_600_000,
    )
    return replace(config, **overrides)


async def wait_synced(storage: FileLedgerStorage) -> None:
    """Wait until every mutation issued so far is durable."""
    target = storage.last_ticket
    synced = anyio.Event()

    def listener(ticket: int) -> None:
        if ticket >= target:
            synced.set()

    unsubscribe = storage.add_sync_listener(listener)
    try:
        with anyio.fail_after(WAIT_S):
            if storage.synced_ticket < target:
                await synced.wait()
    finally:
        unsubscribe()


def crash_image(source: Path, target: Path) -> Path:
    """The bytes a SIGKILL would leave now (take it while no checkpoint runs)."""
    shutil.copytree(source, target)
    return target


def snapshot_tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its content, to prove nothing changed.

    sqlite's `-shm` file is left out: it is the shared-memory index of the WAL,
    which any reader rebuilds from the WAL after a crash; it holds no data.
    """
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.name.endswith("-shm")
    }
