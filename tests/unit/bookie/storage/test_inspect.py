"""Read-only inspection helpers for `bookie shell`."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.storage.file import FileLedgerStorage
from bookie.storage.format import FILE_HEADER_BYTES, JournalKind
from bookie.storage.inspect import (
    EntryLogRecordInfo,
    FileTail,
    JournalRecordInfo,
    checkpoint_mark,
    entry_log_records,
    journal_records,
)

from .helpers import KEY, make_config, make_packet, snapshot_tree, wait_synced


@pytest.fixture
async def bookie_root(tmp_path: Path) -> Path:
    root = tmp_path / "bookie"
    async with FileLedgerStorage.open(make_config(root)) as storage:
        storage.set_master_key(5, KEY)
        for entry_id in range(3):
            storage.add_entry(5, entry_id, make_packet(5, entry_id))
        storage.fence(5)
        await wait_synced(storage)
    return root


@pytest.mark.anyio
async def test_journal_records_list_every_record(bookie_root: Path) -> None:
    before = snapshot_tree(bookie_root)
    items = list(journal_records(bookie_root / "journal"))
    assert [(item.kind, item.ledger_id, item.argument) for item in items] == [  # type: ignore[union-attr]
        (JournalKind.MASTER_KEY, 5, 0),
        (JournalKind.ENTRY, 5, 0),
        (JournalKind.ENTRY, 5, 1),
        (JournalKind.ENTRY, 5, 2),
        (JournalKind.FENCE, 5, 0),
    ]
    first = items[1]
    assert isinstance(first, JournalRecordInfo)
    assert first.payload_bytes == len(make_packet(5, 0))
    assert first.size_bytes == first.payload_bytes + 25
    assert first.offset == FILE_HEADER_BYTES + 25 + len(KEY)
    assert snapshot_tree(bookie_root) == before


@pytest.mark.anyio
async def test_a_damaged_journal_ends_with_a_tail_item(bookie_root: Path) -> None:
    path = max((bookie_root / "journal").iterdir())
    valid = path.stat().st_size
    with path.open("ab") as file:
        file.write(b"\x00\x00\x00\x30junk")
    items = list(journal_records(path))
    assert items[-1] == FileTail(path, valid, valid + 8, None, header_ok=True, zeros=False)


@pytest.mark.anyio
async def test_entry_log_records_and_the_mark(bookie_root: Path) -> None:
    items = list(entry_log_records(bookie_root / "ledgers"))
    assert all(isinstance(item, EntryLogRecordInfo) for item in items)
    assert [(item.ledger_id, item.entry_id) for item in items] == [(5, 0), (5, 1), (5, 2)]  # type: ignore[union-attr]
    mark = checkpoint_mark([bookie_root / "ledgers"])
    assert mark is not None
    journal = max((bookie_root / "journal").iterdir())
    assert mark.offset == journal.stat().st_size
    assert checkpoint_mark([bookie_root / "ledgers", bookie_root / "missing"]) is None
