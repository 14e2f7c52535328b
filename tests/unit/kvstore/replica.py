"""A KVStore driven the way a replica drives it, for the kvstore unit tests.

Commands go through the framework's real path (checked and encoded by
`prepare_command`, batched, encoded and decoded as a log entry, applied by
`apply_batch`); queries through `answer_query` with the replica's applied
position, so they see the logged time of the last applied entry.  The clock
is the test's: `advance_ms` moves the time the next batch is logged at.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvstore.commands import Route, resolve
from kvstore.state_machine import KVStore

from rsm.core.commands import (
    INITIAL_POSITION,
    AppliedPosition,
    answer_query,
    apply_batch,
    prepare_command,
)
from rsm.core.entry_format import decode_batch, encode_batch
from rsm.core.sessions import Outcome, SessionTable
from rsm.errors import RsmStatus

START_MS = 1_700_000_000_000
"""Logged time of the first batch: a plausible Unix time in ms."""

Word = bytes | str | int


def words(*parts: Word) -> list[bytes]:
    """Redis words as a client sends them: everything is bytes."""
    return [part if isinstance(part, bytes) else str(part).encode() for part in parts]


class CommandError(Exception):
    """A recorded `RedisError` outcome, raised so tests can look at its message."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Replica:
    """One KVStore, its session table, its log position and a test-controlled clock."""

    def __init__(self, store: KVStore | None = None, *, start_ms: int = START_MS) -> None:
        self.store = store or KVStore()
        self.sessions = SessionTable()
        self.applied = INITIAL_POSITION
        self.time_ms = start_ms
        self.epoch = 1

    def advance_ms(self, delta_ms: int) -> None:
        assert delta_ms >= 0
        self.time_ms += delta_ms

    def apply(self, calls: Sequence[Sequence[bytes]], *, seed: int = 7) -> list[Outcome]:
        """Log write commands (each [name, arg, ...]) as one batch at the current time, apply it."""
        items = []
        for call in calls:
            spec = resolve(call)
            assert spec.route is Route.COMMAND, f"{spec.name} is not a write command"
            items.append(prepare_command(KVStore, spec.name, list(call[1:])))
        data = encode_batch(
            epoch=self.epoch,
            first_index=self.applied.index + 1,
            timestamp_ms=self.time_ms,
            seed=seed,
            items=items,
        )
        batch = decode_batch(data)
        outcomes = apply_batch(self.store, batch, self.sessions)
        self.applied = AppliedPosition.after(batch)
        return outcomes

    def barrier(self) -> None:
        """Apply an empty batch (a linearizable read's barrier) at the current time."""
        self.apply([])

    def outcome(self, *parts: Word) -> Outcome:
        """Route a call as the server would and return its outcome."""
        call = words(*parts)
        spec = resolve(call)
        assert spec.route is not Route.SERVER, f"{spec.name} is answered by the server"
        if spec.route is Route.QUERY:
            return answer_query(self.store, spec.name, call[1:], applied=self.applied)
        [outcome] = self.apply([call])
        return outcome

    def run(self, *parts: Word) -> Any:
        """The reply to a call; `CommandError` when the store answered a Redis error."""
        outcome = self.outcome(*parts)
        if outcome.ok:
            return outcome.value
        assert outcome.status is RsmStatus.COMMAND_FAILED, outcome
        assert outcome.detail == "RedisError", outcome
        raise CommandError(outcome.message)

    def error(self, *parts: Word) -> str:
        """The Redis error message a call is answered with (the call must fail)."""
        try:
            value = self.run(*parts)
        except CommandError as error:
            return error.message
        raise AssertionError(f"{parts!r} answered {value!r}, not an error")

    def state(self) -> tuple[dict[bytes, bytes], dict[bytes, int], list[tuple[int, bytes]]]:
        """Everything the store holds, for comparing replicas."""
        store = self.store
        return dict(store.values), dict(store.expire_at_ms), list(store.expiry_queue)
