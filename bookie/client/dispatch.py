"""Core effects -> requests on the wire, and the timer loop that drives a core; shared by
every handle.

The cores (`bookie.core.writer`, `reader`, `recovery`) name bookies and entry
ids; this module turns their `SendAdd` and `SendRead` effects into
`AddRequest`/`ReadRequest`s sent through the `ConnectionPool`, and `drive`
runs a core's timers (speculative reads) between its answers.  It holds no
state.

Rules:

* An ADD is encoded once, under one request id, and that one frame goes to
  every bookie the effect names (the pool's request ids are shared by all its
  connections), so a packet is copied into a frame once, whatever Qw is.
* A fencing READ carries the ledger's master key; a long poll's request
  timeout is the read timeout plus the time the bookie may park it.
* An answer is either the response of the request's own op, or an error
  (`BookieUnavailable`, `ClientTimeout`, `ClientClosed`); a response of another
  op would be a bookie bug and counts as an error, like a timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from bookie.client.bookie_conn import OnResponse
from bookie.client.connections import ConnectionPool, Wakeup
from bookie.clock import loop_clock_ms
from bookie.core.reader import SendRead
from bookie.core.writer import SendAdd
from bookie.errors import BookieError
from bookie.wire.codec import encode_request
from bookie.wire.messages import READ_FLAG_FENCE, AddRequest, ReadRequest, Response


def send_adds(
    pool: ConnectionPool,
    effect: SendAdd,
    *,
    ledger_id: int,
    master_key: bytes,
    on_answer: Callable[[str, int, Response | BookieError], None],
    timeout_ms: int,
) -> None:
    """Send one `SendAdd`; `on_answer(bookie_id, entry_id, outcome)` gets each answer."""
    request_id = pool.next_request_id()
    frame = encode_request(
        AddRequest(request_id, ledger_id, effect.entry_id, master_key, effect.flags, effect.packet)
    )
    entry_id = effect.entry_id
    for bookie_id in effect.bookie_ids:
        pool.submit_frame(
            bookie_id, request_id, frame, partial(on_answer, bookie_id, entry_id), timeout_ms
        )


def send_read(
    pool: ConnectionPool,
    effect: SendRead,
    *,
    ledger_id: int,
    master_key: bytes,
    on_response: OnResponse,
    read_timeout_ms: int,
) -> None:
    """Send one `SendRead` (plain, fencing or long poll)."""
    flags = READ_FLAG_FENCE if effect.fence else 0
    request = ReadRequest(
        0,
        ledger_id,
        effect.entry_id,
        flags,
        master_key if effect.fence else None,
        effect.previous_lac,
        effect.timeout_ms,
    )
    pool.submit(effect.bookie_id, request, on_response, read_timeout_ms + (effect.timeout_ms or 0))


async def drive(
    pool: ConnectionPool,
    wakeup: Wakeup,
    is_done: Callable[[], bool],
    next_tick_ms: Callable[[], int | None],
    tick: Callable[[int], None],
) -> None:
    """Run a core's timers until `is_done()`: `tick(now_ms)` whenever `next_tick_ms()` is
    due, otherwise wait for `wakeup` (set by the answer callbacks after feeding the core,
    and by the pool when the client closes: then `ClientClosed`).

    Every request the core sends has a timeout, so an answer, or its timeout,
    always comes: the wait without a timeout cannot last for ever.
    """
    while not is_done():
        pool.check_open()
        due_ms = next_tick_ms()
        if due_ms is None:
            await wakeup.wait(None)
            continue
        delay_ms = due_ms - loop_clock_ms()
        if delay_ms > 0:
            await wakeup.wait(delay_ms)
            continue
        tick(loop_clock_ms())
