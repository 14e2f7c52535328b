"""The log as the tools see it: entries with their coordinates, and one record per command.

Pure.  Every tool reads the log as a stream of `LoggedEntry` (a decoded
batch and where it is: ledger id, entry id, payload size) and looks at it
command by command as `Record`s.  A command has two coordinates and every
record carries both: its global `index`, and `(ledger_id, entry_id, slot)`,
the ledger entry that holds it and its position in that entry's batch.
`Coordinate` parses either from the command line (`1234`, or `L:E` /
`L:E:S`).

`record_plain` is the JSON form of a record (`--json` of `rsm log dump` and
of every report that names a command), versioned by `SCHEMA_VERSION`; bytes
are shown as text when they are UTF-8, else as `{"hex": ...}`, so that a
key-value store's keys and values read as what a client sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from rsm.core.log_format import Batch, CommandItem, LeaderStart, StateHash
from rsm.errors import InvalidConfig

SCHEMA_VERSION: Final = 1
"""Version of every JSON object the tools print (its key "schema")."""

LEADER_START: Final = "(leader-start)"
"""The command name a record of the leader-start marker shows."""


@dataclass(frozen=True, slots=True)
class LoggedEntry:
    """One ledger entry of the log, decoded."""

    ledger_id: int
    entry_id: int
    batch: Batch
    size_bytes: int

    @property
    def last_index(self) -> int:
        """The index of its last command (`first_index - 1` when it holds none)."""
        return self.batch.next_index - 1


@dataclass(frozen=True, slots=True)
class Record:
    """One command of the log with both its coordinates and what it was logged with."""

    index: int
    epoch: int
    ledger_id: int
    entry_id: int
    slot: int
    time_ms: int
    seed: int
    item: CommandItem | LeaderStart
    state_hash: StateHash | None
    """The state hash the entry carries, on the record of its first command only."""

    @property
    def name(self) -> str:
        return LEADER_START if isinstance(self.item, LeaderStart) else self.item.name

    @property
    def client_id(self) -> bytes | None:
        return None if isinstance(self.item, LeaderStart) else self.item.client_id

    @property
    def where(self) -> str:
        """Both coordinates, for messages: "index 12 (ledger 7, entry 3, slot 1)"."""
        return (
            f"index {self.index} (ledger {self.ledger_id}, entry {self.entry_id}, slot {self.slot})"
        )


def records(entry: LoggedEntry) -> Iterator[Record]:
    """The records of an entry's commands, in index order."""
    batch = entry.batch
    for slot, item in enumerate(batch.items):
        yield Record(
            index=batch.first_index + slot,
            epoch=batch.epoch,
            ledger_id=entry.ledger_id,
            entry_id=entry.entry_id,
            slot=slot,
            time_ms=batch.timestamp_ms,
            seed=batch.seed,
            item=item,
            state_hash=batch.state_hash if slot == 0 else None,
        )


def plain_value(value: Any) -> Any:
    """A decoded CBOR value as JSON can carry it (see the module docstring)."""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return {"hex": value.hex()}
    if isinstance(value, list | tuple):
        return [plain_value(element) for element in value]
    if isinstance(value, dict):
        return {str(key): plain_value(element) for key, element in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def record_plain(record: Record) -> dict[str, Any]:
    """The JSON object of one record (schema `SCHEMA_VERSION`)."""
    item = record.item
    plain: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "index": record.index,
        "epoch": record.epoch,
        "ledger_id": record.ledger_id,
        "entry_id": record.entry_id,
        "slot": record.slot,
        "time_ms": record.time_ms,
        "seed": record.seed,
        "command": record.name,
    }
    if isinstance(item, LeaderStart):
        plain.update(args=[], kwargs={}, client_id=None, seq=None, ack_seq=None)
        plain["replica_id"] = item.replica_id
    else:
        plain.update(
            args=plain_value(item.args),
            kwargs=plain_value(item.kwargs),
            client_id=None if item.client_id is None else item.client_id.hex(),
            seq=item.seq,
            ack_seq=item.ack_seq,
        )
    logged = record.state_hash
    plain["state_hash"] = None if logged is None else hash_plain(logged)
    return plain


def hash_plain(logged: StateHash) -> dict[str, Any]:
    return {"index": logged.index, "digest": logged.digest.hex()}


_CONTROL: Final = {code: repr(chr(code))[1:-1] for code in (*range(0x20), 0x7F)}
"""Control characters as Python escapes them (`\\n`, `\\x00`): a table cell stays one line."""


def short_value(value: Any, chars_max: int = 40) -> str:
    """A value for a table cell: its plain form, control characters escaped, cut."""
    plain = plain_value(value)
    text = (plain if isinstance(plain, str) else repr(plain)).translate(_CONTROL)
    return text if len(text) <= chars_max else text[: chars_max - 3] + "..."


@dataclass(frozen=True, slots=True)
class Coordinate:
    """An index, or a position `(ledger_id, entry_id, slot)` in the log."""

    index: int | None = None
    ledger_id: int | None = None
    entry_id: int | None = None
    slot: int = 0

    @classmethod
    def parse(cls, text: str) -> Coordinate:
        """`I` (an index >= 1) or `L:E` / `L:E:S` (ledger, entry, slot); `InvalidConfig`."""
        parts = text.split(":")
        try:
            numbers = [int(part) for part in parts]
        except ValueError:
            numbers = []
        if len(numbers) == 1 and numbers[0] >= 1:
            return cls(index=numbers[0])
        if len(numbers) in (2, 3) and all(number >= 0 for number in numbers):
            slot = numbers[2] if len(numbers) == 3 else 0
            return cls(ledger_id=numbers[0], entry_id=numbers[1], slot=slot)
        raise InvalidConfig(
            f"{text!r} is neither an index (1, 2, ...) nor a position LEDGER:ENTRY[:SLOT]"
        )
