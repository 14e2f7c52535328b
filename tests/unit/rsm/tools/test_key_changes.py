"""Following one key through a replay: every command that changed its digest, and only those,
even when a later command of the same entry puts it back."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from rsm.config import ReplicaConfig
from rsm.core.log_format import encode_batch, encode_command
from rsm.core.state_machine import StateMachine, command
from rsm.errors import InvalidConfig
from rsm.tools.key_changes import key_changes, key_digest
from rsm.tools.replay import Replay
from rsm.tools.source import FileSource
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.tools.test_replay import export

pytestmark = pytest.mark.anyio

CONFIG = ReplicaConfig()


class Cells(StateMachine):
    def __init__(self) -> None:
        self.cells: dict[str, str] = {}

    @command
    def put(self, key: str, value: str) -> None:
        self.cells[key] = value

    @command
    def drop(self, key: str) -> None:
        self.cells.pop(key, None)

    def key_digests(self, keys: Iterable[bytes] | None = None) -> Iterator[tuple[bytes, bytes]]:
        names = sorted(self.cells) if keys is None else sorted(k.decode() for k in keys)
        return iter([(n.encode(), self.cells[n].encode()) for n in names if n in self.cells])

    def show_key(self, key: bytes) -> str:
        return self.cells.get(key.decode(), "(none)")


def logged(*entries: list[tuple[str, list[str]]]) -> list[bytes]:
    out: list[bytes] = []
    first = 1
    for number, items in enumerate(entries):
        encoded = [encode_command(name, args) for name, args in items]
        out.append(
            encode_batch(epoch=1, first_index=first, timestamp_ms=number, seed=0, items=encoded)
        )
        first += len(items)
    return out


async def test_every_change_is_found_even_one_undone_within_its_entry(tmp_path: Path) -> None:
    path = export(
        tmp_path / "cells.rsmlog",
        logged(
            [("put", ["k", "a"]), ("put", ["o", "x"])],
            [("put", ["k", "b"]), ("put", ["o", "y"]), ("put", ["k", "a"])],
            [("put", ["k", "a"]), ("drop", ["k"])],
            [("drop", ["k"]), ("put", ["k", "c"])],
        ),
    )
    replay = Replay(Cells, CONFIG)
    async with key_changes(FileSource(path), replay, b"k", 9) as found:
        changes = [change async for change in found]
    assert [(c.record.index, c.shown) for c in changes] == [
        (1, "a"),
        (3, "b"),
        (5, "a"),
        (7, "(none)"),
        (9, "c"),
    ]
    assert [(c.before, c.after) for c in changes][:2] == [(None, b"a"), (b"a", b"b")]
    assert (changes[3].before, changes[3].after) == (b"a", None)
    assert replay.index == 9


async def test_a_class_without_key_digests_is_refused() -> None:
    with pytest.raises(InvalidConfig, match="Counter offers no per-key digests"):
        key_digest(Counter(), b"k")
