"""State machines for the replay tools' tests: a real one and its deliberately wrong twins.

* `Notes`: keys to text values and counters; the class that wrote the logs.
* `NotesBumped`: a "new version" whose `incr` of key "b" adds 2: its results
  and its state part from `Notes` at the first such command.
* `NotesShadow`: a "new version" that returns the same results but keeps
  key "c" upper-cased: only the state parts (`rsm bisect` and `rsm verify`
  must find the command by hashing after each command).
* `NotesWithoutTags`: an "old version" with no `tag` command.
* `NotesUnordered`: `tag` keeps its words in set order, which depends on
  PYTHONHASHSEED: non-deterministic across processes.
* `NotesByKey`: `Notes` with per-key digests and `show_key` (`rsm diff` and
  `rsm blame` compare it key by key); a key is the UTF-8 of a name of any of
  the three maps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from rsm.core.state_machine import StateMachine, command, query


class NotesWithoutTags(StateMachine):
    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.counters: dict[str, int] = {}
        self.tags: dict[str, list[str]] = {}

    @command
    def put(self, key: str, value: str) -> str | None:
        old = self.values.get(key)
        self.values[key] = self.stored(key, value)
        return old

    def stored(self, key: str, value: str) -> str:
        return value

    @command
    def incr(self, key: str) -> int:
        self.counters[key] = self.counters.get(key, 0) + self.step(key)
        return self.counters[key]

    def step(self, key: str) -> int:
        return 1

    @query
    def get(self, key: str) -> str | None:
        return self.values.get(key)

    @query
    def count(self, key: str) -> int:
        return self.counters.get(key, 0)


class Notes(NotesWithoutTags):
    @command
    def tag(self, key: str, *words: str) -> int:
        self.tags[key] = self.ordered(set(words))
        return len(self.tags[key])

    def ordered(self, words: set[str]) -> list[str]:
        return sorted(words)


class NotesBumped(Notes):
    def step(self, key: str) -> int:
        return 2 if key == "b" else 1


class NotesShadow(Notes):
    def stored(self, key: str, value: str) -> str:
        return value.upper() if key == "c" else value


class NotesUnordered(Notes):
    def ordered(self, words: set[str]) -> list[str]:
        return list(words)


class NotesByKey(Notes):
    def key_digests(self, keys: Iterable[bytes] | None = None) -> Iterator[tuple[bytes, bytes]]:
        present = {*self.values, *self.counters, *self.tags}
        names = present if keys is None else {k.decode() for k in keys} & present
        chosen = sorted(name.encode() for name in names)
        return iter([(key, hashlib.sha256(self._content(key).encode()).digest()) for key in chosen])

    def show_key(self, key: bytes) -> str:
        return self._content(key) or "(none)"

    def _content(self, key: bytes) -> str:
        name = key.decode()
        parts = []
        if name in self.values:
            parts.append(repr(self.values[name]))
        if name in self.counters:
            parts.append(f"count {self.counters[name]}")
        if name in self.tags:
            parts.append("tags " + ",".join(self.tags[name]))
        return " ".join(parts)
