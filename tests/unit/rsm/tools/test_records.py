"""Records of commands: coordinates, their parsing, and their JSON form."""

from __future__ import annotations

import pytest

from rsm.core.log_format import Batch, CommandItem, LeaderStart, StateHash
from rsm.errors import InvalidConfig
from rsm.tools.determinism import first_mismatch
from rsm.tools.log_commands import record_row
from rsm.tools.records import Coordinate, LoggedEntry, Record, record_plain, records


def test_every_record_carries_both_coordinates() -> None:
    batch = Batch(
        2,
        10,
        1_000,
        5,
        (LeaderStart("r1"), CommandItem("put", [b"k", b"\xff"], {}, b"\x01", 3, 2)),
        StateHash(9, b"\xab"),
    )
    first, second = records(LoggedEntry(7, 4, batch, 99))
    assert (first.index, first.ledger_id, first.entry_id, first.slot) == (10, 7, 4, 0)
    assert (second.index, second.ledger_id, second.entry_id, second.slot) == (11, 7, 4, 1)
    assert first.state_hash == StateHash(9, b"\xab")
    assert second.state_hash is None
    assert record_plain(second) == {
        "schema": 1,
        "index": 11,
        "epoch": 2,
        "ledger_id": 7,
        "entry_id": 4,
        "slot": 1,
        "time_ms": 1_000,
        "seed": 5,
        "command": "put",
        "args": ["k", {"hex": "ff"}],
        "kwargs": {},
        "client_id": "01",
        "seq": 3,
        "ack_seq": 2,
        "state_hash": None,
    }
    assert record_plain(first)["replica_id"] == "r1"
    assert record_plain(first)["state_hash"] == {"index": 9, "digest": "ab"}


def test_positions_parse_as_an_index_or_ledger_entry_slot() -> None:
    assert Coordinate.parse("12") == Coordinate(index=12)
    assert Coordinate.parse("7:4") == Coordinate(ledger_id=7, entry_id=4, slot=0)
    assert Coordinate.parse("7:4:1") == Coordinate(ledger_id=7, entry_id=4, slot=1)
    for text in ("0", "x", "1:2:3:4", "-1:2", ""):
        with pytest.raises(InvalidConfig, match="neither an index"):
            Coordinate.parse(text)


def test_the_first_differing_digest_line_is_found_and_a_short_run_differs_too() -> None:
    one = [{"index": 1, "state": "a"}, {"index": 3, "state": "b"}]
    assert first_mismatch(one, list(one)) is None
    other = [{"index": 1, "state": "a"}, {"index": 3, "state": "c"}]
    found = first_mismatch(one, other)
    assert found is not None
    assert found.first["index"] == 3
    assert found.what == "state"
    short = first_mismatch(one, one[:1])
    assert short is not None
    assert short.first["index"] == 3
    assert short.second == {"index": None}


def test_a_dump_row_quotes_the_texts_that_would_run_together() -> None:
    item = CommandItem("set", [b"sp ace", b"v", b"", 'say "hi"', 5], {"px": b"a b"})
    record = Record(1, 1, 0, 0, 0, 0, 0, item, None)
    assert record_row(record)[-1] == '"sp ace" v "" "say \\"hi\\"" 5 px="a b"'
