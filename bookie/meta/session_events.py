"""Session state transitions, fanned out to every reader of `session_events()`.

Both metadata stores publish each transition of their session here (on the
event loop); each call of `subscribe` returns an independent async iterator
that sees every transition published after it was created, in order.

Bounds.  A reader's buffer holds at most
`limits.metadata_session_events_buffered_max` transitions.  A reader that
falls that far behind is not allowed to grow memory or to stall the store, so
its buffer is coalesced instead: it keeps one LOST if any transition in it was
LOST, followed by the latest state if that is not LOST.  This keeps the only
two facts a slow reader acts on: "your session (and its ephemeral nodes) was
lost at least once" and "this is the state now".  Transitions are never
reordered and a LOST is never dropped.

A reader that is garbage-collected unsubscribes by itself (the feed holds its
readers weakly); `aclose` unsubscribes at once.  After `close` every reader
ends (StopAsyncIteration) once it has drained its buffer.
"""

from __future__ import annotations

import weakref
from collections import deque

import anyio

from bookie import limits
from bookie.meta.api import SessionState


class SessionEvents:
    """One reader's view of the feed: an async iterator of `SessionState`."""

    __slots__ = ("__weakref__", "_closed", "_feed", "_pending", "_wakeup")

    def __init__(self, feed: SessionEventFeed) -> None:
        self._feed = feed
        self._pending: deque[SessionState] = deque()
        self._wakeup: anyio.Event | None = None
        self._closed = False

    def __aiter__(self) -> SessionEvents:
        return self

    async def __anext__(self) -> SessionState:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            self._wakeup = anyio.Event()
            await self._wakeup.wait()
        return self._pending.popleft()

    async def aclose(self) -> None:
        """Stop receiving transitions; the iterator ends after what is already buffered."""
        self._feed.unsubscribe(self)
        self._end()

    def _push(self, state: SessionState) -> None:
        assert not self._closed
        if len(self._pending) >= limits.metadata_session_events_buffered_max:
            lost = SessionState.LOST in self._pending or state is SessionState.LOST
            self._pending.clear()
            if lost:
                self._pending.append(SessionState.LOST)
            if state is not SessionState.LOST:
                self._pending.append(state)
        else:
            self._pending.append(state)
        assert len(self._pending) <= limits.metadata_session_events_buffered_max
        self._wake()

    def _end(self) -> None:
        self._closed = True
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()


class SessionEventFeed:
    """The publishing side: one per store."""

    __slots__ = ("_closed", "_readers")

    def __init__(self) -> None:
        self._readers: weakref.WeakSet[SessionEvents] = weakref.WeakSet()
        self._closed = False

    def subscribe(self) -> SessionEvents:
        """A new reader that sees every transition from now on (and ends at `close`)."""
        reader = SessionEvents(self)
        if self._closed:
            reader._end()
        else:
            self._readers.add(reader)
        return reader

    def unsubscribe(self, reader: SessionEvents) -> None:
        self._readers.discard(reader)

    def publish(self, state: SessionState) -> None:
        """Hand `state` to every current reader (call on the event loop thread only)."""
        assert not self._closed, "publish after close"
        for reader in list(self._readers):
            reader._push(state)

    def close(self) -> None:
        """End every reader; later `subscribe` calls return readers that are already ended."""
        self._closed = True
        for reader in list(self._readers):
            reader._end()
        self._readers.clear()


class SessionDowntime:
    """How long a session was away, for the line that says it is back: fed each transition
    with the loop's time, `observe` returns the milliseconds since the first transition
    away from CONNECTED when the session is connected again, else None."""

    __slots__ = ("_down_since_s",)

    def __init__(self) -> None:
        self._down_since_s: float | None = None

    def observe(self, state: SessionState, now_s: float) -> int | None:
        if state is not SessionState.CONNECTED:
            if self._down_since_s is None:
                self._down_since_s = now_s
            return None
        if self._down_since_s is None:
            return None
        down_ms = round((now_s - self._down_since_s) * 1000)
        self._down_since_s = None
        return down_ms
