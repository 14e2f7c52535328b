"""SIGKILL during compaction: nothing acknowledged is lost, nothing deleted comes back,
and start-up removes what the interrupted compaction left behind.

This module is also the child process: `python -m tests.unit.bookie.storage.test_compaction_kill9
ROOT MODE`.  Modes:

* `stream`: rounds of adds to a keeper ledger and a garbage ledger per round,
  deletion of the previous round's garbage ledger, and a compaction pass, with
  checkpoints every few tens of milliseconds; the parent kills it at seeded
  random moments.  It prints `synced LEDGER ENTRY` once an entry's ticket is
  synced and `deleted LEDGER` once a deletion is.
* one of `POINTS`: a fixed data set, then a compaction that SIGKILLs itself at
  that point of the protocol, printing the log ids involved first.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from bookie.storage import compaction
from bookie.storage.entry_log import entry_log_path
from bookie.storage.file import FileLedgerStorage, StorageConfig
from bookie.storage.index import INDEX_FILE_NAME, LedgerIndex

from .helpers import KEY, make_config, make_packet, wait_synced

REPOSITORY = Path(__file__).resolve().parents[4]
CHILD_TIMEOUT_S = 60
KEEPER = 1
ROUNDS_MAX = 10_000
ROUND_ENTRIES = 150
POINTS = ("copying", "synced", "committed", "deleting")
FIXED_LEDGERS = (1, 2, 3, 4, 5)
FIXED_DELETED = (1, 2, 5)
FIXED_ENTRIES = 150


def child_config(root: Path) -> StorageConfig:
    return make_config(
        root,
        ledger_dirs=(root / "ledgers0", root / "ledgers1"),
        journal_file_size_bytes_max=64 * 1024,
        journal_files_kept=0,
        entry_log_size_bytes_max=64 * 1024,
        entry_log_write_buffer_bytes=8 * 1024,
        checkpoint_interval_ms=30,
        compaction_live_fraction_threshold=0.6,
        compaction_rate_bytes_per_s=1 << 30,
        compaction_free_bytes_reserve=0,
    )


def entry_packet(ledger_id: int, entry_id: int) -> bytes:
    return make_packet(ledger_id, entry_id, size=100 + (entry_id * 37) % 300)


def say(*lines: str) -> None:
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


# --- the child ----------------------------------------------------------------------------------


async def stream(root: Path) -> None:
    async with FileLedgerStorage.open(child_config(root)) as storage:
        pending: list[tuple[int, str]] = []

        def report(synced: int) -> None:
            done = [line for ticket, line in pending if ticket <= synced]
            if done:
                del pending[: len(done)]
                say(*done)

        storage.add_sync_listener(report)
        if KEEPER not in storage.ledger_ids():
            storage.set_master_key(KEEPER, KEY)
        next_entry = storage.last_entry_id(KEEPER) + 1
        previous: int | None = None
        first_garbage = 1000 + max([0, *storage.ledger_ids()])
        for garbage in range(first_garbage, first_garbage + ROUNDS_MAX):
            storage.set_master_key(garbage, KEY)
            for entry_id in range(ROUND_ENTRIES):
                for ledger_id, eid in ((KEEPER, next_entry + entry_id), (garbage, entry_id)):
                    ticket = storage.add_entry(ledger_id, eid, entry_packet(ledger_id, eid))
                    pending.append((ticket, f"synced {ledger_id} {eid}"))
            next_entry += ROUND_ENTRIES
            if previous is not None:
                pending.append((storage.delete_ledger(previous), f"deleted {previous}"))
            previous = garbage
            await wait_synced(storage)
            await storage.compact()


async def fixed(root: Path, point: str) -> None:
    """Write the fixed data set, then compact and die at `point`."""
    config = child_config(root)
    async with FileLedgerStorage.open(config) as storage:
        for ledger_id in FIXED_LEDGERS:
            storage.set_master_key(ledger_id, KEY)
        for entry_id in range(FIXED_ENTRIES):
            for ledger_id in FIXED_LEDGERS:
                storage.add_entry(ledger_id, entry_id, entry_packet(ledger_id, entry_id))
        for ledger_id in FIXED_DELETED:
            storage.delete_ledger(ledger_id)
        await wait_synced(storage)
        say("synced")
        die_at(point)
        await storage.compact()
    say("survived")


def die_at(point: str) -> None:
    """Patch compaction so that the process SIGKILLs itself at `point`."""

    def die(*lines: str) -> None:
        say(*lines)
        os.kill(os.getpid(), signal.SIGKILL)

    output_class: Any = compaction._Output
    index_class: Any = LedgerIndex
    if point == "copying":
        append = output_class.append

        def append_then_die(output: Any, source_log_id: int, record: Any) -> None:
            append(output, source_log_id, record)
            if output.entries == 50:
                output.flush()
                die(f"output {output.directory.name} {output.log_id}")

        output_class.append = append_then_die
    elif point == "synced":
        sync = output_class.sync

        def sync_then_die(output: Any) -> None:
            sync(output)
            die(f"output {output.directory.name} {output.log_id}")

        output_class.sync = sync_then_die
    elif point == "committed":
        repoint = index_class.repoint

        def repoint_then_die(
            index: LedgerIndex, output_log_id: int, moves: Any, sources: Iterable[int]
        ) -> int:
            sources = list(sources)
            moved = repoint(index, output_log_id, moves, sources)
            die(
                f"output {index.path.parent.name} {output_log_id}",
                *(f"source {index.path.parent.name} {log_id}" for log_id in sources),
            )
            return int(moved)

        index_class.repoint = repoint_then_die
    else:
        assert point == "deleting"
        forget = index_class.forget_doomed

        def forget_after_deleting(index: LedgerIndex, log_ids: Iterable[int]) -> None:
            log_ids = list(log_ids)
            if log_ids:
                die(*(f"source {index.path.parent.name} {log_id}" for log_id in log_ids))
            forget(index, log_ids)

        index_class.forget_doomed = forget_after_deleting


def main() -> None:
    root, mode = Path(sys.argv[1]), sys.argv[2]
    if mode == "stream":
        anyio.run(stream, root)
    else:
        anyio.run(fixed, root, mode)


# --- the parent ---------------------------------------------------------------------------------


def start_child(root: Path, mode: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.unit.bookie.storage.test_compaction_kill9", str(root), mode],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
    )


def doomed_marks(config: StorageConfig) -> int:
    count = 0
    for directory in config.ledger_dirs:
        connection = sqlite3.connect(f"file:{directory / INDEX_FILE_NAME}?mode=ro", uri=True)
        try:
            count += connection.execute("SELECT COUNT(*) FROM doomed_logs").fetchone()[0]
        finally:
            connection.close()
    return count


def kill_after(root: Path, lines: int) -> list[str]:
    """Run the stream child and SIGKILL it after `lines` lines; return every line."""
    child = start_child(root, "stream")
    assert child.stdout is not None
    seen: list[str] = []
    try:
        while len(seen) < lines:
            line = child.stdout.readline()
            assert line, f"child exited early with {child.wait()}"
            seen.append(line.decode().strip())
    finally:
        child.send_signal(signal.SIGKILL)
        rest, _ = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == -signal.SIGKILL
    # Lines written before the kill were acknowledged too.
    return seen + [text.strip() for text in rest.decode().splitlines() if text.strip()]


@pytest.mark.slow
def test_sigkill_during_compaction_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(20240611)
    root = tmp_path / "bookie"
    config = child_config(root)
    synced: set[tuple[int, int]] = set()
    deleted: set[int] = set()
    for _ in range(4):
        for line in kill_after(root, rng.randrange(500, 6_000)):
            words = line.split()
            if words[0] == "synced":
                synced.add((int(words[1]), int(words[2])))
            elif words[0] == "deleted":
                deleted.add(int(words[1]))

        async def check() -> None:
            async with FileLedgerStorage.open(config) as storage:
                assert doomed_marks(config) == 0
                held = set(storage.ledger_ids())
                assert not held & deleted, "a deletion was acknowledged and undone"
                for ledger_id, entry_id in synced:
                    if ledger_id in deleted:
                        continue
                    assert storage.read_entry(ledger_id, entry_id) == entry_packet(
                        ledger_id, entry_id
                    ), f"entry {ledger_id}:{entry_id} was acknowledged and is lost"
                assert len(storage.entry_ranges(KEEPER)) == 1

        anyio.run(check)
    assert deleted, "no round finished: the kills came too early to test compaction"


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_step_of_a_compaction(tmp_path: Path, point: str) -> None:
    root = tmp_path / "bookie"
    config = child_config(root)
    child = start_child(root, point)
    output, _ = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == -signal.SIGKILL, output
    lines = output.decode().split("\n")
    assert lines[0] == "synced"
    outputs = [words[1:] for words in map(str.split, lines) if words[:1] == ["output"]]
    sources = [words[1:] for words in map(str.split, lines) if words[:1] == ["source"]]

    async def check() -> None:
        async with FileLedgerStorage.open(config) as storage:
            assert doomed_marks(config) == 0
            assert storage.ledger_ids() == sorted(set(FIXED_LEDGERS) - set(FIXED_DELETED))
            for ledger_id in storage.ledger_ids():
                assert storage.entry_ranges(ledger_id) == [(0, FIXED_ENTRIES - 1)]
                for entry_id in range(FIXED_ENTRIES):
                    assert storage.read_entry(ledger_id, entry_id) == entry_packet(
                        ledger_id, entry_id
                    )
            # What the interrupted compaction left behind is gone, what it
            # committed stays.
            committed = point in ("committed", "deleting")
            for directory, log_id in outputs:
                assert entry_log_path(root / directory, int(log_id)).exists() == committed
            for directory, log_id in sources:
                assert not entry_log_path(root / directory, int(log_id)).exists()
            # And compaction carries on from there.
            report = await storage.compact()
            assert report.errors == ()

    anyio.run(check)
    assert outputs or sources


if __name__ == "__main__":
    main()
