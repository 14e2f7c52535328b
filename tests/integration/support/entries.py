"""Entries for process-level tests: deterministic packets, a pipelined add stream, read-back.

Every packet is a function of (ledger id, entry id), so a test can check any
entry it ever wrote byte for byte without remembering the bytes, and rewriting
an entry after a crash stores exactly what was there before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieError, StatusError
from bookie.wire.messages import (
    ADD_FLAG_RECOVERY,
    AddRequest,
    ReadRequest,
    ReadResponse,
    Response,
)
from bookie.wire.packet import Digest, DigestType, master_key

PASSWORD = b"integration"
KEY = master_key(PASSWORD)
DIGEST = Digest(DigestType.CRC32C, PASSWORD)
WAIT_S = 30.0
REQUEST_TIMEOUT_MS = 10_000
READ_WINDOW = 1_000


def payload(ledger_id: int, entry_id: int, size_bytes: int = 100) -> bytes:
    seed = f"{ledger_id}:{entry_id}|".encode()
    return (seed * (size_bytes // len(seed) + 1))[:size_bytes]


def packet(ledger_id: int, entry_id: int, size_bytes: int = 100) -> bytes:
    """Entry `entry_id` of `ledger_id`, carrying LAC `entry_id - 1` as a writer would."""
    return DIGEST.build_entry(
        ledger_id,
        entry_id,
        entry_id - 1,
        size_bytes * (entry_id + 1),
        payload(ledger_id, entry_id, size_bytes),
    )


def add_request(ledger_id: int, entry_id: int, *, recovery: bool = False) -> AddRequest:
    flags = ADD_FLAG_RECOVERY if recovery else 0
    return AddRequest(0, ledger_id, entry_id, KEY, flags, packet(ledger_id, entry_id))


class AddStream:
    """Adds to several ledgers through one connection with `window` adds in flight.

    Each answer is recorded (`acked` per ledger; `failed` counts errors,
    including the connection's loss) and, unless `stop()` was called or the
    connection failed, replaced by the next add.  No task per add: the
    connection's callbacks drive it.
    """

    def __init__(
        self,
        connection: BookieConnection,
        next_entry: dict[int, int],
        *,
        window: int,
    ) -> None:
        self._connection = connection
        self._next_entry = dict(next_entry)
        self._ledgers = list(next_entry)
        self._turn = 0
        self._window = window
        self._stopped = False
        self.acked: dict[int, list[int]] = {ledger_id: [] for ledger_id in next_entry}
        self.errors: list[BookieError | Response] = []
        self.submitted = 0
        self.answered = 0
        self._changed = anyio.Event()

    @property
    def acked_count(self) -> int:
        return sum(len(entries) for entries in self.acked.values())

    @property
    def next_entry(self) -> dict[int, int]:
        return dict(self._next_entry)

    def start(self) -> None:
        for _ in range(self._window):
            self._submit_next()

    def stop(self) -> None:
        self._stopped = True

    def _submit_next(self) -> None:
        if self._stopped or not self._connection.is_usable:
            return
        ledger_id = self._ledgers[self._turn % len(self._ledgers)]
        self._turn += 1
        entry_id = self._next_entry[ledger_id]
        self._next_entry[ledger_id] = entry_id + 1

        def on_response(outcome: Response | BookieError) -> None:
            self.answered += 1
            if isinstance(outcome, BookieError) or outcome.status != 0:
                self.errors.append(outcome)
            else:
                self.acked[ledger_id].append(entry_id)
                self._submit_next()
            self._changed.set()
            self._changed = anyio.Event()

        try:
            self._connection.submit(
                add_request(ledger_id, entry_id), on_response, REQUEST_TIMEOUT_MS
            )
        except BookieError as error:
            self.errors.append(error)
            return
        self.submitted += 1

    async def wait_acked(self, count: int, timeout_s: float = WAIT_S) -> None:
        with anyio.fail_after(timeout_s):
            while self.acked_count < count:
                assert not self.errors, f"adds failed: {self.errors[:3]}"
                await self._changed.wait()

    async def wait_answered(self, timeout_s: float = WAIT_S) -> None:
        """Return once every submitted add has its answer (ack, error or connection loss)."""
        with anyio.fail_after(timeout_s):
            while self.answered < self.submitted:
                await self._changed.wait()


async def read_all(
    connection: BookieConnection,
    entries: Iterable[tuple[int, int]],
    *,
    window: int = READ_WINDOW,
    timeout_s: float = WAIT_S,
) -> dict[tuple[int, int], Response | BookieError]:
    """Read every (ledger, entry) on one connection, `window` reads in flight; the raw
    outcomes."""
    outcomes: dict[tuple[int, int], Response | BookieError] = {}
    wanted = list(entries)
    position = 0
    done = anyio.Event()

    def submit_next() -> None:
        nonlocal position
        key = wanted[position]
        position += 1

        def on_response(outcome: Response | BookieError) -> None:
            outcomes[key] = outcome
            if position < len(wanted):
                submit_next()
            elif len(outcomes) == len(wanted):
                done.set()

        request = ReadRequest(0, key[0], key[1], 0, None, None, None)
        connection.submit(request, on_response, REQUEST_TIMEOUT_MS)

    for _ in range(min(window, len(wanted))):
        submit_next()
    if wanted:
        with anyio.fail_after(timeout_s):
            await done.wait()
    return outcomes


async def check_durable(connection: BookieConnection, acked: dict[int, list[int]]) -> None:
    """Every acknowledged entry reads back byte-identical, and the bookie's LAC of each
    ledger covers what its last acknowledged entry carried."""
    wanted = [(ledger_id, entry_id) for ledger_id, ids in acked.items() for entry_id in ids]
    outcomes = await read_all(connection, wanted)
    for key in wanted:
        outcome = outcomes[key]
        assert isinstance(outcome, ReadResponse), f"entry {key}: {outcome!r}"
        assert outcome.status == 0, f"acknowledged entry {key} is lost: {outcome.message}"
        assert outcome.packet == packet(*key), f"acknowledged entry {key} changed"
    for ledger_id, ids in acked.items():
        if ids:
            response = await connection.read(ledger_id, max(ids))
            assert response.lac is not None
            assert response.lac >= max(ids) - 1, (
                f"ledger {ledger_id}: LAC {response.lac} < {max(ids) - 1}, which entry "
                f"{max(ids)} carried"
            )


async def expect_status(coroutine: Any, error_type: type[StatusError]) -> StatusError:
    """Await a request that must fail with `error_type`; return the error."""
    try:
        await coroutine
    except error_type as error:
        return error
    raise AssertionError(f"expected {error_type.__name__}")
