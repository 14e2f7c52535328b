"""A child process that writes to a FileLedgerStorage until it is killed.

Run as `python -m tests.unit.bookie.storage.storage_child ROOT MODE`.  It prints
`synced LEDGER ENTRY` (flushed) for every entry once its ticket is synced, so
the parent knows exactly which entries were acknowledged when it sends SIGKILL.

Modes:
* `stream`: add entries to three ledgers for ever, with small journal files,
  small entry logs and frequent checkpoints, so kills land in every phase.
* `kill-in-commit`: add entries, wait for them to be synced, then start a
  checkpoint and SIGKILL itself inside the index commit of the LAST ledger
  directory: the entry logs are fsynced and the other directories committed.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import anyio

from bookie.storage.file import FileLedgerStorage
from bookie.storage.index import CheckpointBatch, LedgerIndex

from .helpers import KEY, make_config, make_packet, wait_synced

LEDGERS = (1, 2, 3)
ENTRIES_MAX = 200_000


def entry_packet(ledger_id: int, entry_id: int) -> bytes:
    return make_packet(ledger_id, entry_id, size=20 + (entry_id * 37) % 300)


def child_config(root: Path):  # type: ignore[no-untyped-def]
    return make_config(
        root,
        ledger_dirs=(root / "ledgers0", root / "ledgers1"),
        journal_file_size_bytes_max=64 * 1024,
        journal_files_kept=0,
        entry_log_size_bytes_max=128 * 1024,
        entry_log_write_buffer_bytes=16 * 1024,
        checkpoint_interval_ms=30,
        checkpoint_pending_entries_max=500,
    )


async def stream(root: Path) -> None:
    async with FileLedgerStorage.open(child_config(root)) as storage:
        start = storage.last_entry_id(LEDGERS[0]) + 1
        for ledger_id in LEDGERS:
            storage.set_master_key(ledger_id, KEY)
        pending: list[tuple[int, int, int]] = []

        def report(synced: int) -> None:
            done = [item for item in pending if item[0] <= synced]
            if done:
                del pending[: len(done)]
                sys.stdout.write("".join(f"synced {lid} {eid}\n" for _, lid, eid in done))
                sys.stdout.flush()

        storage.add_sync_listener(report)
        for entry_id in range(start, start + ENTRIES_MAX):
            for ledger_id in LEDGERS:
                ticket = storage.add_entry(ledger_id, entry_id, entry_packet(ledger_id, entry_id))
                pending.append((ticket, ledger_id, entry_id))
            if entry_id % 20 == 0:
                await wait_synced(storage)


async def kill_in_commit(root: Path) -> None:
    config = make_config(root, ledger_dirs=(root / "ledgers0", root / "ledgers1"))
    async with FileLedgerStorage.open(config) as storage:
        for ledger_id in LEDGERS:
            storage.set_master_key(ledger_id, KEY)
            for entry_id in range(100):
                storage.add_entry(ledger_id, entry_id, entry_packet(ledger_id, entry_id))
        await wait_synced(storage)
        sys.stdout.write("synced\n")
        sys.stdout.flush()
        commit = LedgerIndex.commit
        last_directory = config.ledger_dirs[-1]

        def commit_or_die(index: LedgerIndex, batch: CheckpointBatch) -> None:
            if index.path.parent == last_directory:
                os.kill(os.getpid(), signal.SIGKILL)
            commit(index, batch)

        LedgerIndex.commit = commit_or_die  # type: ignore[method-assign,assignment]
        await storage.checkpoint()


def main() -> None:
    root, mode = Path(sys.argv[1]), sys.argv[2]
    anyio.run(stream if mode == "stream" else kill_in_commit, root)


if __name__ == "__main__":
    main()
