"""A deterministic event loop with virtual time, for whole-cluster simulation.

The simulation runs the *real* async shells (ledger client, bookie server,
replicas) rather than re-implementations of them: the orchestration in those
shells (compare-and-set loops, ensemble changes, takeover) is where subtle
bugs live, so that is what must be simulated.  Two things make it
reproducible from a seed:

* Time is virtual.  `VirtualTimeLoop.time()` is a counter; when no callback is
  ready, the loop jumps the counter straight to the next timer instead of
  sleeping (trio's MockClock autojump, for asyncio).  A simulated hour takes as
  long as the work done in it.
* Nothing outside the loop makes scheduling decisions.  asyncio runs ready
  callbacks in FIFO order, so with no real sockets, no threads and no wall
  clock, the same program with the same seed makes the same moves.  The
  simulated network (`bookie.testing.simnet`) and the in-memory storage and
  metadata store are plain callbacks on this loop.

Code under simulation must therefore read time through anyio
(`anyio.current_time`, `anyio.sleep`, `anyio.fail_after`) and take its
randomness from an injected `random.Random`.  Anything that starts a thread or
opens a real socket raises `SimulationEscape` here, loudly, instead of making
the run silently nondeterministic.  Iterating a `set` of strings is the other
classic leak (string hashing is randomised per process): the cores use dicts
and sorted lists.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class SimulationEscape(RuntimeError):
    """Simulated code tried to use a real thread, socket or blocking wait."""


class SimulationDeadlock(RuntimeError):
    """Every task is blocked and no timer is pending: the program can never progress."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector with no file descriptors: `select` advances virtual time instead of blocking.

    asyncio registers its self-pipe here; it is never signalled, because no
    thread may call into the loop during a simulation.
    """

    def __init__(self, loop_clock: list[float]) -> None:
        self._clock = loop_clock
        self._keys: dict[Any, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        key = selectors.SelectorKey(fileobj, id(fileobj), events, data)
        self._keys[fileobj] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._keys.pop(fileobj)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise SimulationDeadlock("every task is blocked and no timer is pending")
        self._clock[0] += max(timeout, 0.0)
        return []

    def get_map(self) -> dict[Any, selectors.SelectorKey]:
        return self._keys

    def close(self) -> None:
        self._keys.clear()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """asyncio loop whose clock only moves when nothing is ready to run."""

    def __init__(self) -> None:
        self._virtual_clock = [0.0]
        super().__init__(_VirtualSelector(self._virtual_clock))

    def time(self) -> float:
        return self._virtual_clock[0]

    def run_in_executor(self, executor: Any, func: Any, *args: Any) -> Any:  # type: ignore[override]
        raise SimulationEscape(f"a thread was requested for {func!r} during a simulation")

    async def create_connection(self, *args: Any, **kwargs: Any) -> Any:
        raise SimulationEscape("a real network connection was requested during a simulation")

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:
        raise SimulationEscape("a real server socket was requested during a simulation")

    async def sock_connect(self, *args: Any, **kwargs: Any) -> Any:
        raise SimulationEscape("a real socket connect was requested during a simulation")


def run_simulation(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `main()` to completion on a fresh `VirtualTimeLoop` and return its result."""
    loop = VirtualTimeLoop()
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main())
    finally:
        try:
            _cancel_leftovers(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
    loop.run_until_complete(loop.shutdown_asyncgens())


def call_at_virtual(when_s: float, callback: Callable[[], object]) -> asyncio.TimerHandle:
    """Schedule `callback` at virtual time `when_s` on the running loop."""
    return asyncio.get_running_loop().call_at(when_s, callback)
