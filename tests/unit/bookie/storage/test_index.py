"""The sqlite index of a ledger directory: one-transaction checkpoints, reads, marks."""

from __future__ import annotations

from pathlib import Path

from bookie.storage.entry_log import pack_location
from bookie.storage.index import CheckpointBatch, LedgerIndex, LedgerRow, read_checkpoint_mark
from bookie.storage.journal import JournalMark


def row(ledger_id: int, **changes: object) -> LedgerRow:
    values: dict[str, object] = {
        "ledger_id": ledger_id,
        "master_key": b"key",
        "fenced": False,
        "lac": -1,
        "explicit_lac": -1,
        "explicit_lac_packet": None,
        "last_entry_id": -1,
    }
    values.update(changes)
    return LedgerRow(**values)  # type: ignore[arg-type]


def batch(mark: int, **changes: object) -> CheckpointBatch:
    values: dict[str, object] = {
        "mark": JournalMark(1, mark),
        "deleted_ledgers": [],
        "ledgers": [],
        "entries": [],
        "tombstones_added": [],
        "tombstones_removed": [],
    }
    values.update(changes)
    return CheckpointBatch(**values)  # type: ignore[arg-type]


def test_a_new_index_is_empty(tmp_path: Path) -> None:
    index = LedgerIndex(tmp_path)
    contents = index.load()
    assert contents.mark is None
    assert contents.ledgers == []
    assert contents.tombstones == []
    index.close()
    assert read_checkpoint_mark(tmp_path) is None


def test_a_checkpoint_is_stored_and_read_back(tmp_path: Path) -> None:
    index = LedgerIndex(tmp_path)
    locations = {entry_id: pack_location(3, 16 + 100 * entry_id, 100) for entry_id in (0, 1, 2, 5)}
    index.commit(
        batch(
            40,
            ledgers=[row(1, fenced=True, lac=4, explicit_lac=4, explicit_lac_packet=b"p")],
            entries=[(1, locations)],
            tombstones_added=[(9, 0)],
        )
    )
    assert index.lookup(1, 5) == locations[5]
    assert index.lookup(1, 3) is None
    assert index.entry_ranges(1) == [(0, 2), (5, 5)]
    index.close()
    reopened = LedgerIndex(tmp_path)
    contents = reopened.load()
    assert contents.mark == JournalMark(1, 40)
    assert contents.ledgers == [
        row(1, fenced=True, lac=4, explicit_lac=4, explicit_lac_packet=b"p")
    ]
    assert contents.tombstones == [(0, 9)]
    reopened.close()
    assert read_checkpoint_mark(tmp_path) == JournalMark(1, 40)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["index.sqlite"]


def test_deletions_apply_before_new_rows(tmp_path: Path) -> None:
    index = LedgerIndex(tmp_path)
    index.commit(batch(20, ledgers=[row(1)], entries=[(1, {0: pack_location(0, 16, 50)})]))
    index.commit(
        batch(
            30,
            deleted_ledgers=[1],
            ledgers=[row(1, master_key=b"new")],
            entries=[(1, {4: pack_location(1, 16, 50)})],
            tombstones_removed=[9],
        )
    )
    assert index.lookup(1, 0) is None
    assert index.entry_ranges(1) == [(4, 4)]
    assert index.load().ledgers == [row(1, master_key=b"new")]
    index.close()
