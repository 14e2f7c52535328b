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
"""

from __future__ import annotations

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
