"""`IoThread`: one long-lived thread that makes blocking calls for the event loop.

The journal hands the group commits (a write and an fdatasync) it does not run
on the loop to a thread (bookie/storage/journal.py), so that the loop keeps
serving while the disk works: hundreds of calls a second under load.
`anyio.to_thread.run_sync` costs, per call, a capacity-limiter token, a cancel
scope and worker-pool lookups through context variables: more CPU than the
write itself under a heavy write load.  This thread takes its calls
from a `queue.SimpleQueue` and answers through the loop's
`call_soon_threadsafe`: one queue put and one loop wake-up per call.

Calls run one at a time, in the order made.  A caller cancelled while its call
runs stops waiting; the call itself finishes (a thread cannot be interrupted),
and its result is dropped.  A call that finishes after its event loop closed
(a storage abandoned with its loop) ends the thread: nobody can wait any
more, and the loop cannot be told.  `stop()` lets the thread end after the calls
already made; the thread is a daemon so that a storage never closed does not
keep the interpreter alive.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

_T = TypeVar("_T")

_Call = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any], asyncio.AbstractEventLoop]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the loop: hand the outcome to the caller, unless it stopped waiting."""
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class IoThread:
    """A thread for blocking calls, started by the first call."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False

    async def call(self, function: Callable[..., _T], *args: Any) -> _T:
        """Run `function(*args)` in the thread and return (or raise) what it did."""
        assert not self._stopped, "the thread was stopped"
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._calls.put((function, args, future, loop))
        return await future

    def stop(self) -> None:
        """End the thread once the calls already made are done."""
        if not self._stopped:
            self._stopped = True
            self._calls.put(None)

    def _run(self) -> None:
        calls = self._calls
        while (call := calls.get()) is not None:
            function, args, future, loop = call
            result: Any = None
            error: BaseException | None = None
            try:
                result = function(*args)
            except BaseException as raised:  # handed to the caller, whatever it is
                error = raised
            try:
                loop.call_soon_threadsafe(_settle, future, result, error)
            except RuntimeError:
                return  # the loop is closed: nobody waits any more
