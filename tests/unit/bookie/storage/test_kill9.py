"""SIGKILL at random points: every entry reported synced reads back byte-identical.

A child process (storage_child.py, mode `stream`) adds entries to three
ledgers with small journal files, small entry logs and checkpoints every few
tens of milliseconds, printing each entry once its ticket is synced.  The
parent kills it after a seeded-random number of reports, reopens the same
directories, checks every reported entry, and starts the child again on them.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import anyio

from bookie.storage.file import FileLedgerStorage

from .storage_child import LEDGERS, child_config, entry_packet

REPOSITORY = Path(__file__).resolve().parents[4]
ROUNDS = 3


def run_until_killed(root: Path, reports: int) -> list[tuple[int, int]]:
    """Start the child, SIGKILL it after `reports` synced entries; return them all."""
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.unit.bookie.storage.storage_child", str(root), "stream"],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
    )
    assert child.stdout is not None
    synced: list[tuple[int, int]] = []
    try:
        while len(synced) < reports:
            line = child.stdout.readline()
            assert line, f"child exited early with {child.wait()}"
            _, ledger_id, entry_id = line.split()
            synced.append((int(ledger_id), int(entry_id)))
    finally:
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate()
    # Lines written before the kill count as acknowledged too.
    for text in rest.decode().splitlines():
        parts = text.split()
        if len(parts) == 3:
            synced.append((int(parts[1]), int(parts[2])))
    assert child.returncode == -signal.SIGKILL
    return synced


async def check_entries(root: Path, synced: list[tuple[int, int]]) -> None:
    async with FileLedgerStorage.open(child_config(root)) as storage:
        for ledger_id, entry_id in synced:
            assert storage.read_entry(ledger_id, entry_id) == entry_packet(ledger_id, entry_id), (
                f"entry {ledger_id}:{entry_id} was acknowledged and is lost"
            )
        for ledger_id in LEDGERS:
            ranges = storage.entry_ranges(ledger_id)
            assert ranges[0][0] == 0
            assert len(ranges) == 1, f"ledger {ledger_id} has holes: {ranges}"


def test_sigkill_loses_no_synced_entry(tmp_path: Path) -> None:
    rng = random.Random(20240607)
    root = tmp_path / "bookie"
    acknowledged: list[tuple[int, int]] = []
    for _ in range(ROUNDS):
        acknowledged += run_until_killed(root, rng.randrange(100, 3000))
        anyio.run(check_entries, root, acknowledged)
