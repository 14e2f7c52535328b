"""Journal replay over real files: torn and junk tails are truncated, damage before
the tail raises `JournalCorrupt` and changes nothing."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bookie.errors import JournalCorrupt
from bookie.storage.file import FileLedgerStorage
from bookie.storage.format import FILE_HEADER_BYTES, JournalKind, append_journal_record
from bookie.storage.index import read_checkpoint_mark
from bookie.storage.inspect import JournalRecordInfo, journal_records
from bookie.storage.journal import (
    JournalMark,
    JournalWriter,
    journal_file_path,
    journal_files,
    replay_journal,
    scan_journal,
    truncate_junk_tails,
)

from .helpers import KEY, crash_image, make_config, make_packet, snapshot_tree, wait_synced

Record = tuple[JournalKind, int, int, bytes]
RECORDS: list[Record] = [
    (JournalKind.MASTER_KEY, 1, 0, KEY),
    *((JournalKind.ENTRY, 1, entry_id, make_packet(1, entry_id)) for entry_id in range(5)),
    (JournalKind.FENCE, 1, 0, b""),
]


def write_journal(directory: Path, file_id: int, records: list[Record]) -> list[int]:
    """A journal file holding `records`; returns the offset of each."""
    directory.mkdir(parents=True, exist_ok=True)
    writer = JournalWriter(directory, file_id, 1 << 30)
    previous = journal_file_path(directory, file_id - 1)
    writer.create(previous.stat().st_size if previous.exists() else None)
    start = writer.end
    group = bytearray()
    offsets = []
    for record in records:
        offsets.append(start + len(group))
        append_journal_record(group, *record)
    if group:
        writer.write_group(group)
    writer.close()
    return offsets


START = JournalMark(0, 0)


def replay(directory: Path, mark: JournalMark = START) -> list[Record]:
    scans = scan_journal(directory, mark)
    truncate_junk_tails(directory, scans)
    applied: list[Record] = []
    replay_journal(scans, lambda *record: applied.append(record))
    return applied


def append_bytes(path: Path, data: bytes) -> None:
    with path.open("ab") as file:
        file.write(data)


def test_a_clean_journal_replays_every_record(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, RECORDS[:3])
    write_journal(tmp_path, 2, RECORDS[3:])
    assert replay(tmp_path) == RECORDS


def test_replay_starts_at_the_mark(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, RECORDS[:3])
    offsets = write_journal(tmp_path, 2, RECORDS[3:])
    assert replay(tmp_path, JournalMark(2, offsets[1])) == RECORDS[4:]
    assert replay(tmp_path, JournalMark(1, 1 << 20)) == RECORDS[3:]
    assert replay(tmp_path, JournalMark(2, 1 << 20)) == []


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b"\xde\xad\xbe\xef" * 50, id="junk"),
        pytest.param(b"\x00\x00\x01\x00\x12\x34\x56\x78" + b"x" * 30, id="length-past-eof"),
        pytest.param(b"\x00\x01", id="partial-length"),
    ],
)
def test_a_junk_tail_is_truncated_with_a_warning(
    tmp_path: Path, tail: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    write_journal(tmp_path, 1, RECORDS)
    path = journal_file_path(tmp_path, 1)
    size = path.stat().st_size
    append_bytes(path, tail)
    with caplog.at_level(logging.WARNING):
        assert replay(tmp_path) == RECORDS
    assert path.stat().st_size == size
    assert "torn or junk tail" in caplog.text


@pytest.mark.parametrize("zeros", [2, 4096, 1 << 20])
def test_a_zero_tail_is_trimmed_without_a_warning(
    tmp_path: Path, zeros: int, caplog: pytest.LogCaptureFixture
) -> None:
    # What space allocated ahead and never written leaves (and many torn tails).
    write_journal(tmp_path, 1, RECORDS)
    path = journal_file_path(tmp_path, 1)
    size = path.stat().st_size
    append_bytes(path, bytes(zeros))
    with caplog.at_level(logging.INFO):
        assert replay(tmp_path) == RECORDS
    assert path.stat().st_size == size
    assert "unused space after its last record" in caplog.text
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_partial_final_record_is_truncated(tmp_path: Path) -> None:
    offsets = write_journal(tmp_path, 1, RECORDS)
    path = journal_file_path(tmp_path, 1)
    with path.open("r+b") as file:
        file.truncate(offsets[-1] + 10)
    assert replay(tmp_path) == RECORDS[:-1]
    assert path.stat().st_size == offsets[-1]


def test_an_all_junk_journal_is_truncated_to_its_header(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, [])
    path = journal_file_path(tmp_path, 1)
    append_bytes(path, b"\x07" * 1000)
    assert replay(tmp_path) == []
    assert path.stat().st_size == FILE_HEADER_BYTES


def test_a_newest_file_without_its_header_is_removed(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, RECORDS)
    torn = journal_file_path(tmp_path, 2)
    torn.write_bytes(b"BKJ")
    assert replay(tmp_path) == RECORDS
    assert not torn.exists()


def test_damage_before_the_tail_raises_and_changes_nothing(tmp_path: Path) -> None:
    offsets = write_journal(tmp_path, 1, RECORDS)
    path = journal_file_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    data[offsets[2] + 30] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match=f"{path.name}: damaged record at offset {offsets[2]}"):
        replay(tmp_path)
    assert path.read_bytes() == bytes(data)


def test_a_damaged_tail_in_an_older_file_is_corruption(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, RECORDS[:3])
    write_journal(tmp_path, 2, RECORDS[3:])
    append_bytes(journal_file_path(tmp_path, 1), b"\x01junk")
    with pytest.raises(JournalCorrupt, match="a newer file follows"):
        replay(tmp_path)


def test_a_bad_header_in_an_older_file_is_corruption(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, RECORDS[:3])
    write_journal(tmp_path, 2, RECORDS[3:])
    path = journal_file_path(tmp_path, 1)
    path.write_bytes(b"XXXX" + path.read_bytes()[4:])
    with pytest.raises(JournalCorrupt, match="bad journal header"):
        replay(tmp_path)


def test_an_older_file_cut_on_a_record_boundary_is_corruption_and_changes_nothing(
    tmp_path: Path,
) -> None:
    offsets = write_journal(tmp_path, 1, RECORDS[:3])
    write_journal(tmp_path, 2, RECORDS[3:])
    path = journal_file_path(tmp_path, 1)
    ended = path.stat().st_size
    # Every record left is whole: without file 2's PREVIOUS_FILE record, nothing shows
    # that the third record is gone.
    with path.open("r+b") as file:
        file.truncate(offsets[2])
    before = snapshot_tree(tmp_path)
    with pytest.raises(
        JournalCorrupt,
        match=rf"{path.name}: lost its end: its records end at byte {offsets[2]}, but"
        rf" 0000000000000002\.journal was started when it ended at byte {ended}",
    ):
        replay(tmp_path)
    assert snapshot_tree(tmp_path) == before


def test_an_older_file_that_grew_after_its_successor_started_is_corruption(
    tmp_path: Path,
) -> None:
    write_journal(tmp_path, 1, RECORDS[:3])
    write_journal(tmp_path, 2, RECORDS[3:])
    record = bytearray()
    append_journal_record(record, JournalKind.FENCE, 1, 0, b"")
    append_bytes(journal_file_path(tmp_path, 1), bytes(record))
    with pytest.raises(JournalCorrupt, match=r"0000000000000001\.journal: grew"):
        replay(tmp_path)


def test_a_file_naming_another_predecessor_is_corruption(tmp_path: Path) -> None:
    write_journal(tmp_path, 1, RECORDS[:3])
    write_journal(tmp_path, 2, RECORDS[3:])
    second = journal_file_path(tmp_path, 2)
    start = bytearray()
    append_journal_record(
        start, JournalKind.PREVIOUS_FILE, 7, journal_file_path(tmp_path, 1).stat().st_size, b""
    )
    data = bytearray(second.read_bytes())
    data[FILE_HEADER_BYTES : FILE_HEADER_BYTES + len(start)] = start
    second.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match="names journal file 0000000000000007"):
        replay(tmp_path)


def test_files_without_a_previous_file_record_replay_unchecked(tmp_path: Path) -> None:
    # Journal files written before the record existed: the predecessor cannot be checked,
    # and replay goes on as it did.
    for file_id, records in ((1, RECORDS[:3]), (2, RECORDS[3:])):
        writer = JournalWriter(tmp_path, file_id, 1 << 30)
        writer.create(None)
        group = bytearray()
        for record in records:
            append_journal_record(group, *record)
        writer.write_group(group)
        writer.close()
    assert replay(tmp_path) == RECORDS


# --- through FileLedgerStorage ----------------------------------------------------------------


@pytest.mark.anyio
async def test_storage_recovers_synced_entries_over_a_torn_tail(tmp_path: Path) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(20):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    image_config = make_config(image)
    newest = max((image_config.journal_dir).iterdir())
    append_bytes(newest, b"\x00\x00\x00\x40" + b"\x99" * 20)
    async with FileLedgerStorage.open(image_config) as restarted:
        assert [restarted.read_entry(1, e) for e in range(20)] == [
            make_packet(1, e) for e in range(20)
        ]


@pytest.mark.anyio
async def test_storage_refuses_to_open_over_corruption_and_changes_nothing(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(20):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    newest = max((image / "journal").iterdir())
    data = bytearray(newest.read_bytes())
    data[FILE_HEADER_BYTES + 200] ^= 0x01
    newest.write_bytes(bytes(data))
    before = snapshot_tree(image)
    with pytest.raises(JournalCorrupt, match=newest.name):
        async with FileLedgerStorage.open(make_config(image)):
            pass
    assert snapshot_tree(image) == before


@pytest.mark.anyio
async def test_storage_refuses_an_older_journal_file_cut_on_a_record_boundary(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path / "bookie", journal_file_size_bytes_max=4096)
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(30):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    files = journal_files(image / "journal")
    assert len(files) >= 2
    older = files[0][1]
    last = list(journal_records(older))[-1]
    assert isinstance(last, JournalRecordInfo)
    assert last.kind is JournalKind.ENTRY
    with older.open("r+b") as file:
        file.truncate(last.offset)
    before = snapshot_tree(image)
    with pytest.raises(JournalCorrupt, match=f"{older.name}: lost its end"):
        async with FileLedgerStorage.open(make_config(image)):
            pass
    assert snapshot_tree(image) == before


@pytest.mark.anyio
async def test_a_start_records_where_the_crashed_file_ended(tmp_path: Path) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        storage.add_entry(1, 0, make_packet(1, 0))
        await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    async with FileLedgerStorage.open(make_config(image)):
        (crashed_id, crashed), (started_id, started) = journal_files(image / "journal")[-2:]
        first = next(iter(journal_records(started)))
    assert isinstance(first, JournalRecordInfo)
    assert (first.kind, first.ledger_id) == (JournalKind.PREVIOUS_FILE, crashed_id)
    assert started_id == crashed_id + 1
    # The crashed file's space allocated ahead was trimmed before the new file began.
    assert first.argument == crashed.stat().st_size


# --- missing files ----------------------------------------------------------------------------


def test_a_missing_mark_file_is_corruption_and_changes_nothing(tmp_path: Path) -> None:
    # What a damaged index whose mark rolled back to a deleted file looks like.
    write_journal(tmp_path, 2, RECORDS[:3])
    write_journal(tmp_path, 3, RECORDS[3:])
    before = snapshot_tree(tmp_path)
    with pytest.raises(JournalCorrupt, match=r"0000000000000001\.journal: missing, yet the"):
        scan_journal(tmp_path, JournalMark(1, FILE_HEADER_BYTES + 40))
    assert snapshot_tree(tmp_path) == before


@pytest.mark.parametrize("mark", [START, JournalMark(1, FILE_HEADER_BYTES)], ids=str)
def test_a_missing_file_after_the_mark_is_corruption(tmp_path: Path, mark: JournalMark) -> None:
    write_journal(tmp_path, 1, RECORDS[:2])
    write_journal(tmp_path, 2, RECORDS[2:4])
    write_journal(tmp_path, 3, RECORDS[4:])
    journal_file_path(tmp_path, 2).unlink()
    with pytest.raises(JournalCorrupt, match=r"0000000000000002\.journal: missing between"):
        scan_journal(tmp_path, mark)


def test_a_fresh_journal_directory_has_nothing_to_replay(tmp_path: Path) -> None:
    assert scan_journal(tmp_path, START) == []


def test_files_kept_before_the_mark_are_not_replayed(tmp_path: Path) -> None:
    write_journal(tmp_path, 4, RECORDS[:2])
    offsets = write_journal(tmp_path, 6, RECORDS[2:])
    assert replay(tmp_path, JournalMark(6, offsets[1])) == RECORDS[3:]


def test_a_mark_file_without_its_header_is_corruption(tmp_path: Path) -> None:
    # A mark is taken only after its file's header is durable: removing the file as
    # "never written" would leave the next start a mark naming a missing file.
    write_journal(tmp_path, 1, RECORDS)
    journal_file_path(tmp_path, 2).write_bytes(bytes(FILE_HEADER_BYTES))
    with pytest.raises(JournalCorrupt, match=r"0000000000000002\.journal: bad journal header"):
        scan_journal(tmp_path, JournalMark(2, FILE_HEADER_BYTES))


@pytest.mark.anyio
async def test_a_newest_file_without_its_header_is_replaced_and_later_starts_succeed(
    tmp_path: Path,
) -> None:
    config = make_config(tmp_path / "bookie")
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(20):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
        await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    # A start that trimmed the newest file, then crashed creating its own journal
    # file before the header was durable.
    truncate_junk_tails(image / "journal", scan_journal(image / "journal", START))
    newest = max(file_id for file_id, _ in journal_files(image / "journal"))
    journal_file_path(image / "journal", newest + 1).write_bytes(b"BKJ")
    async with FileLedgerStorage.open(make_config(image)) as restarted:
        assert restarted.read_entry(1, 19) == make_packet(1, 19)
        assert max(file_id for file_id, _ in journal_files(image / "journal")) == newest + 1
        restarted.set_master_key(2, KEY)
        await wait_synced(restarted)
        again = crash_image(image, tmp_path / "again")
    async with FileLedgerStorage.open(make_config(again)) as restarted:
        assert [restarted.read_entry(1, e) for e in range(20)] == [
            make_packet(1, e) for e in range(20)
        ]


@pytest.mark.anyio
async def test_journal_files_kept_before_the_mark_do_not_stop_a_start(tmp_path: Path) -> None:
    config = make_config(
        tmp_path / "bookie", journal_file_size_bytes_max=4096, journal_files_kept=2
    )
    async with FileLedgerStorage.open(config) as storage:
        storage.set_master_key(1, KEY)
        for entry_id in range(100):
            storage.add_entry(1, entry_id, make_packet(1, entry_id))
            await wait_synced(storage)
            if entry_id % 10 == 9:
                await storage.checkpoint()
        storage.add_entry(1, 100, make_packet(1, 100))
        await wait_synced(storage)
        image = crash_image(tmp_path / "bookie", tmp_path / "image")
    mark = read_checkpoint_mark(image / "ledgers")
    assert mark is not None
    ids = [file_id for file_id, _ in journal_files(image / "journal")]
    assert ids[:3] == [mark.file_id - 2, mark.file_id - 1, mark.file_id]
    async with FileLedgerStorage.open(make_config(image)) as restarted:
        assert [restarted.read_entry(1, e) for e in range(101)] == [
            make_packet(1, e) for e in range(101)
        ]
