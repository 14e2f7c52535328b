"""A KVStore driven the way a replica drives it, for the kvstore unit tests.

Commands go through the framework's real path (checked and encoded by
`prepare_command`, batched, encoded and decoded as a log entry, applied by
`apply_batch`); queries through `answer_query` with the replica's applied
position, so they see the logged time of the last applied entry.  The clock
is the test's: `advance_ms` moves the time the next batch is logged at.

`Conversation` is one client connection on top of it: each request goes
through `kvstore.connection.dispatch` as the server sends it (MULTI, WATCH, EXEC and
all), and comes back as the bytes the server would write.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kvstore.connection.acl import AccessControl
from kvstore.connection.dispatch import Answer, Execute, Read, WatchRead, Write, finish, plan
from kvstore.connection.server_commands import ClientState, ServerStatus
from kvstore.protocol.commands import Route, resolve
from kvstore.protocol.resp import encode_replies
from kvstore.state_machine import KVStore

from rsm.core.commands import (
    INITIAL_POSITION,
    AppliedPosition,
    answer_query,
    apply_batch,
    prepare_command,
)
from rsm.core.log_format import decode_batch, encode_batch
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
        return self._apply_items(items, seed)

    def command(self, name: str, *args: Any) -> Outcome:
        """Log and apply one `KVStore` command by its logged name (`exec` included)."""
        [outcome] = self._apply_items([prepare_command(KVStore, name, list(args))], 7)
        return outcome

    def query(self, name: str, *args: Any) -> Outcome:
        """Answer one `KVStore` query by name (`position` included)."""
        return answer_query(self.store, name, list(args), applied=self.applied)

    def _apply_items(self, items: list[bytes], seed: int) -> list[Outcome]:
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
        return dict(store.values), dict(store.expire_at_ms), list(store._expiry_queue)


class Server:
    """A fixed `ServerView` for conversations, with the given ACL users."""

    def __init__(self, access: AccessControl | None = None) -> None:
        self.access = access or AccessControl()

    def clock_us(self) -> int:
        return START_MS * 1000

    def status(self) -> ServerStatus:
        return ServerStatus(
            process_id=1,
            tcp_port=6379,
            uptime_ms=0,
            clock_us=START_MS * 1000,
            connected_clients=1,
            replica_role="leader",
            leader_address=None,
            epoch=1,
            applied_index=0,
            caught_up=True,
            lag_entries=0,
            keys=0,
            keys_with_ttl=0,
        )

    def config(self) -> Mapping[str, str]:
        return {"save": ""}

    def access_control(self) -> AccessControl:
        return self.access


class Conversation:
    """One connection's requests, dispatched as the server does, against a `Replica`."""

    def __init__(
        self, replica: Replica, client_id: int = 1, access: AccessControl | None = None
    ) -> None:
        self.replica = replica
        self.server = Server(access)
        self.client = ClientState(client_id, restriction=self.server.access.initial)

    def send(self, *requests: Sequence[Word]) -> bytes:
        """The bytes the server answers `requests` with, in order."""
        replies = []
        for request in requests:
            resp3 = self.client.resp3
            action = plan(words(*request), self.client, self.server)
            if isinstance(action, Answer):
                replies.append(encode_replies([action.reply], self.client.resp3))
                continue
            if type(action) is Write:
                outcome = self.replica.command(action.name, *action.args)
            elif type(action) is Read:
                outcome = self.replica.query(action.name, *action.args)
            elif type(action) is WatchRead:
                outcome = self.replica.query("position")
            else:
                assert type(action) is Execute
                outcome = self.replica.command("exec", action.watched, action.calls)
            replies.append(encode_replies([finish(action, outcome, self.client)], resp3))
        return b"".join(replies)
