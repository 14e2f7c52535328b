"""Where two states of one class differ: key by key, or byte by byte of their snapshots.

Pure (it only reads the two machines).  `diff_states` compares two instances
of the same class:

* by keys, when the class offers per-key digests (`StateMachine.key_digests`,
  docs/snapshots.md): both sorted `(key, digest)` streams are merged, and a
  key differs when its digests differ or only one state holds it; each
  difference carries both digests (None where absent) and, when the class
  offers `show_key`, both contents as the class shows them;
* otherwise by their snapshot streams (`StateMachine.snapshot()`): the first
  byte offset where they differ (or where the shorter one ends), the chunk
  of each stream holding it, and both sizes.  Chunk boundaries do not matter:
  equal bytes cut differently are equal.

Either way `state_hash()` of both is reported too.  Memory: the key diff
holds the differing keys only; the stream comparison holds one chunk of each
side.

Invariants: `keys` lists differing keys in ascending byte order, each once;
a `StateDiff` is `equal` exactly when no key differs (by keys) or the
streams are byte for byte the same (by streams).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from rsm.core.state_machine import StateMachine

BY_KEYS = "keys"
BY_STREAMS = "streams"


@dataclass(frozen=True, slots=True)
class KeyDifference:
    """One key whose content differs (None: the state does not hold it)."""

    key: bytes
    first: bytes | None
    second: bytes | None
    first_shown: str | None
    second_shown: str | None


@dataclass(frozen=True, slots=True)
class StreamDifference:
    """Where two snapshot streams first differ."""

    offset: int
    """The first byte offset that differs, or the length of the shorter stream."""
    first_chunk: int | None
    second_chunk: int | None
    """The 0-based chunk of each stream holding that offset (None: the stream ended)."""
    first_bytes: int
    second_bytes: int


@dataclass(frozen=True, slots=True)
class StateDiff:
    by: str
    """`BY_KEYS` or `BY_STREAMS`."""
    first_hash: bytes
    second_hash: bytes
    keys: tuple[KeyDifference, ...]
    keys_compared: int | None
    """Distinct keys the two states hold (by keys), else None."""
    stream: StreamDifference | None

    @property
    def equal(self) -> bool:
        return not self.keys if self.by == BY_KEYS else self.stream is None


def diff_states(first: StateMachine, second: StateMachine) -> StateDiff:
    """Compare two states (see the module docstring)."""
    first_keys = first.key_digests()
    second_keys = second.key_digests()
    first_hash, second_hash = first.state_hash(), second.state_hash()
    if first_keys is None or second_keys is None:
        stream = stream_difference(first.snapshot(), second.snapshot())
        return StateDiff(BY_STREAMS, first_hash, second_hash, (), None, stream)
    differences: list[KeyDifference] = []
    compared = 0
    for key, one, other in merged(first_keys, second_keys):
        compared += 1
        if one != other:
            differences.append(
                KeyDifference(key, one, other, first.show_key(key), second.show_key(key))
            )
    return StateDiff(BY_KEYS, first_hash, second_hash, tuple(differences), compared, None)


def merged(
    first: Iterable[tuple[bytes, bytes]], second: Iterable[tuple[bytes, bytes]]
) -> Iterator[tuple[bytes, bytes | None, bytes | None]]:
    """`(key, first digest, second digest)` for every key of either sorted stream, in order
    (None where a stream lacks the key)."""
    left, right = iter(first), iter(second)
    one, other = next(left, None), next(right, None)
    while one is not None or other is not None:
        if other is None or (one is not None and one[0] < other[0]):
            assert one is not None
            yield one[0], one[1], None
            one = next(left, None)
        elif one is None or other[0] < one[0]:
            yield other[0], None, other[1]
            other = next(right, None)
        else:
            yield one[0], one[1], other[1]
            one, other = next(left, None), next(right, None)


class _Cursor:
    """A stream of chunks read a slice at a time, knowing its chunk number and offset."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self.chunk = -1
        self.offset = 0
        self._data = b""
        self._at = 0

    def slice(self) -> bytes:
        """The unread rest of the current chunk (the next non-empty one when it is used up;
        b"" at the end)."""
        while self._at >= len(self._data):
            following = next(self._chunks, None)
            if following is None:
                return b""
            self.chunk += 1
            self._data, self._at = bytes(following), 0
        return self._data[self._at :]

    def skip(self, count: int) -> None:
        self._at += count
        self.offset += count

    def drain(self) -> int:
        """Read to the end; the stream's size."""
        while piece := self.slice():
            self.skip(len(piece))
        return self.offset


def stream_difference(first: Iterable[bytes], second: Iterable[bytes]) -> StreamDifference | None:
    """Where two byte streams first differ, or None when they are equal."""
    left, right = _Cursor(first), _Cursor(second)
    while True:
        one, other = left.slice(), right.slice()
        if not one and not other:
            return None
        common = min(len(one), len(other))
        if one[:common] != other[:common] or not common:
            same = next(i for i in range(common + 1) if i == common or one[i] != other[i])
            left.skip(same)
            right.skip(same)
            offset = left.offset
            chunks = (left.chunk if one else None, right.chunk if other else None)
            return StreamDifference(offset, chunks[0], chunks[1], left.drain(), right.drain())
        left.skip(common)
        right.skip(common)
