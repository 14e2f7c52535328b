"""Fan-out of session transitions: order, independence of readers, bounded coalescing."""

from __future__ import annotations

import gc

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.meta.api import SessionState
from bookie.meta.session_events import SessionDowntime, SessionEventFeed, SessionEvents

pytestmark = pytest.mark.anyio

LOST, CONNECTED, SUSPENDED = SessionState.LOST, SessionState.CONNECTED, SessionState.SUSPENDED


async def _drain(reader: SessionEvents) -> list[SessionState]:
    """Everything buffered in `reader` (the feed must be closed so the reader ends)."""
    with anyio.fail_after(1):
        return [state async for state in reader]


async def test_each_reader_sees_what_was_published_after_it_subscribed() -> None:
    feed = SessionEventFeed()
    early = feed.subscribe()
    feed.publish(SUSPENDED)
    late = feed.subscribe()
    feed.publish(CONNECTED)
    feed.close()
    assert await _drain(early) == [SUSPENDED, CONNECTED]
    assert await _drain(late) == [CONNECTED]
    assert await _drain(feed.subscribe()) == []


async def test_a_waiting_reader_is_woken() -> None:
    feed = SessionEventFeed()
    reader = feed.subscribe()
    received: list[SessionState] = []

    async def read_one() -> None:
        received.append(await anext(reader))

    with anyio.fail_after(1):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(read_one)
            await anyio.wait_all_tasks_blocked()
            feed.publish(LOST)
    assert received == [LOST]


async def test_aclose_unsubscribes() -> None:
    feed = SessionEventFeed()
    reader = feed.subscribe()
    await reader.aclose()
    feed.publish(SUSPENDED)
    assert await _drain(reader) == []


async def test_a_dropped_reader_is_forgotten() -> None:
    feed = SessionEventFeed()
    feed.subscribe()
    gc.collect()
    assert len(feed._readers) == 0


@given(st.lists(st.sampled_from(SessionState), max_size=60))
def test_slow_reader_keeps_order_every_loss_and_the_last_state(
    states: list[SessionState],
) -> None:
    async def run() -> list[SessionState]:
        feed = SessionEventFeed()
        reader = feed.subscribe()
        for state in states:
            feed.publish(state)
        feed.close()
        return await _drain(reader)

    received = anyio.run(run)
    assert len(received) <= limits.metadata_session_events_buffered_max
    if len(states) <= limits.metadata_session_events_buffered_max:
        assert received == states
        return
    if LOST in states:
        assert LOST in received
    if states:
        assert received[-1] == states[-1]
    # What was kept is a subsequence of what was published (LOSTs may merge).
    remaining = iter(states)
    assert all(any(state == published for published in remaining) for state in received)


def test_downtime_counts_from_the_first_transition_away_until_connected() -> None:
    downtime = SessionDowntime()
    assert downtime.observe(SessionState.CONNECTED, 1.0) is None, "never away"
    assert downtime.observe(SessionState.SUSPENDED, 2.0) is None
    assert downtime.observe(SessionState.LOST, 3.5) is None
    assert downtime.observe(SessionState.CONNECTED, 4.25) == 2250
    assert downtime.observe(SessionState.CONNECTED, 5.0) is None, "counted once"
    assert downtime.observe(SessionState.SUSPENDED, 6.0) is None
    assert downtime.observe(SessionState.CONNECTED, 6.5) == 500
