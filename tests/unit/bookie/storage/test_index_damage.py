"""A damaged index is refused at open, and damage a read meets later is a
`StorageError`, never an absent row, a `TypeError` or a raw sqlite error."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bookie.errors import EntryLogCorrupt, StorageError, StorageIOError
from bookie.storage.entry_log import pack_location
from bookie.storage.index import (
    _SCHEMA,
    INDEX_FILE_NAME,
    SCHEMA_VERSION,
    CheckpointBatch,
    LedgerIndex,
    LedgerRow,
)
from bookie.storage.journal import JournalMark

ENTRIES = 2000
PAGE_BYTES = 4096


def build_index(directory: Path) -> Path:
    """A closed index of one ledger with `ENTRIES` entries (a few dozen pages)."""
    index = LedgerIndex(directory)
    index.commit(
        CheckpointBatch(
            mark=JournalMark(1, 100),
            deleted_ledgers=[],
            ledgers=[LedgerRow(1, b"key", False, -1, -1, None, ENTRIES - 1)],
            entries=[(1, {e: pack_location(0, 16 + 300 * e, 300) for e in range(ENTRIES)})],
            tombstones_added=[],
            tombstones_removed=[],
        )
    )
    index.close()
    return directory / INDEX_FILE_NAME


def entries_root_page(path: Path) -> int:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'entries'"
        ).fetchone()
    finally:
        connection.close()
    return int(row[0])


def zero_tail(data: bytearray, path: Path) -> bytearray:
    data[-3000:] = bytes(3000)
    return data


def cut(data: bytearray, path: Path) -> bytearray:
    return data[: len(data) - 1000]


def bad_page_type(data: bytearray, path: Path) -> bytearray:
    data[(entries_root_page(path) - 1) * PAGE_BYTES] = 0x55
    return data


@pytest.mark.parametrize("damage", [zero_tail, cut, bad_page_type])
def test_a_damaged_index_is_refused_at_open(
    tmp_path: Path, damage: Callable[[bytearray, Path], bytearray]
) -> None:
    path = build_index(tmp_path)
    path.write_bytes(bytes(damage(bytearray(path.read_bytes()), path)))
    with pytest.raises(StorageIOError, match=re.escape(str(path))):
        LedgerIndex(tmp_path)


def test_the_refusal_names_the_first_problem_sqlite_found(tmp_path: Path) -> None:
    path = build_index(tmp_path)
    path.write_bytes(bytes(bad_page_type(bytearray(path.read_bytes()), path)))
    with pytest.raises(StorageIOError) as refused:
        LedgerIndex(tmp_path)
    assert str(refused.value) == (
        f"{path}: the index is damaged (sqlite integrity_check:"
        f" Page {entries_root_page(path)}: btreeInitPage() returns error code 11)"
    )


def test_a_damaged_key_is_refused_at_open(tmp_path: Path) -> None:
    # A bit flip in a key leaves every page well-formed (`PRAGMA quick_check` finds
    # nothing) but puts the key out of order, which hides the entry from lookups:
    # entry 1000 would read as absent.
    path = build_index(tmp_path)
    data = bytearray(path.read_bytes())
    # The record body of entry (1, 1000) at (log 0, offset 300016, size 300): the
    # ledger id 1 and log id 0 are stored in the header only.
    body = (
        (1000).to_bytes(2, "big") + (16 + 300 * 1000).to_bytes(3, "big") + (300).to_bytes(2, "big")
    )
    assert data.count(body) == 1
    data[data.index(body)] ^= 0x01  # entry id 1000 becomes 744
    path.write_bytes(bytes(data))
    with pytest.raises(StorageIOError, match="row not in PRIMARY KEY order for entries"):
        LedgerIndex(tmp_path)


def test_an_intact_index_opens(tmp_path: Path) -> None:
    build_index(tmp_path)
    index = LedgerIndex(tmp_path)
    assert index.entry_ranges(1) == [(0, ENTRIES - 1)]
    index.close()


def test_damage_met_by_listing_entries_is_a_storage_error(tmp_path: Path) -> None:
    path = build_index(tmp_path)
    index = LedgerIndex(tmp_path)
    # Damaged while open (after the check at open): the read connection has not
    # read the table yet, so it reads the damaged page from the file.
    data = bad_page_type(bytearray(path.read_bytes()), path)
    with path.open("r+b") as file:
        file.write(data)
    listing = re.escape(f"index {path}: listing the entries of ledger 1")
    with pytest.raises(EntryLogCorrupt, match=listing):
        index.entry_ranges(1)
    index.close()


def nullable_index(directory: Path) -> sqlite3.Connection:
    """An index whose columns accept NULL (what damage to a cell can read back as),
    which `PRAGMA integrity_check` therefore finds nothing wrong with.  (Primary-key
    columns still refuse NULL; a text value stands in there.)"""
    connection = sqlite3.connect(directory / INDEX_FILE_NAME, isolation_level=None)
    connection.executescript(_SCHEMA.replace(" NOT NULL", ""))
    connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    return connection


READERS: dict[str, Callable[[LedgerIndex], object]] = {
    "load": LedgerIndex.load,
    "lookup": lambda index: index.lookup(1, 0),
    "entry_ranges": lambda index: index.entry_ranges(1),
    "log_usage": LedgerIndex.log_usage,
    "live_offsets": lambda index: index.live_offsets(3, [(1, 0, 10)]),
}


@pytest.mark.parametrize("reader", READERS.values(), ids=READERS.keys())
def test_a_value_of_the_wrong_type_is_a_storage_error(
    tmp_path: Path, reader: Callable[[LedgerIndex], object]
) -> None:
    connection = nullable_index(tmp_path)
    connection.execute("INSERT INTO entries VALUES (1, 0, 3, NULL, NULL)")
    connection.execute("INSERT INTO entries VALUES (1, 'x', 3, 16, 100)")
    connection.execute("INSERT INTO entries VALUES (1, 2, NULL, 16, 100)")
    connection.execute("INSERT INTO ledgers VALUES (1, x'00', 0, NULL, -1, NULL, 0)")
    connection.execute("INSERT INTO mark VALUES (0, 1, 16)")
    connection.close()
    index = LedgerIndex(tmp_path)
    with pytest.raises(StorageError, match=r"damaged row: (None|'x') where an integer belongs"):
        reader(index)
    index.close()


def test_a_null_in_the_mark_is_a_storage_error(tmp_path: Path) -> None:
    connection = nullable_index(tmp_path)
    connection.execute("INSERT INTO mark VALUES (0, NULL, 16)")
    connection.close()
    index = LedgerIndex(tmp_path)
    with pytest.raises(StorageIOError, match="damaged row"):
        index.load()
    index.close()
