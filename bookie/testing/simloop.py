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

Sets of objects that hash by identity leak too, even within one process: their
order follows memory addresses.  anyio keeps a cancel scope's tasks and nested
scopes in such sets and delivers a cancellation in their order, which decides
the order in which cancelled tasks resume (closing a client cancels all of its
connection tasks at once, say).  So on this loop every task, and during
`run_simulation` every anyio cancel scope, hashes as its creation number.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import selectors
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import anyio._backends._asyncio as _anyio_asyncio

T = TypeVar("T")


class SimulationEscape(RuntimeError):
    """Simulated code tried to use a real thread, socket or blocking wait."""


class SimulationDeadlock(RuntimeError):
    """Every task is blocked and no timer is pending: the program can never progress."""


class DeterminismUnavailable(RuntimeError):
    """The installed anyio does not let the simulation order cancellations reproducibly."""


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


class _NumberedTask(asyncio.Task):  # type: ignore[type-arg]
    """A task that hashes as its creation number on its loop.

    anyio keeps the tasks of a cancel scope in a `set` and cancels them in
    the set's iteration order, which follows the hashes; a task's default
    hash is its memory address, which differs from run to run, so the order
    in which cancelled tasks resume would too.  Creation numbers make that
    order a function of the program alone.
    """

    __slots__ = ("_number",)

    def __init__(self, coro: Any, *, loop: VirtualTimeLoop, context: Any = None) -> None:
        # Numbered before the base initialiser runs: it already hashes the task
        # (asyncio registers every task in a weak set).
        self._number = next(loop._task_numbers)
        super().__init__(coro, loop=loop, context=context)

    def __hash__(self) -> int:
        return self._number


def _create_numbered_task(loop: Any, coro: Any, *, context: Any = None) -> _NumberedTask:
    return _NumberedTask(coro, loop=loop, context=context)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """asyncio loop whose clock only moves when nothing is ready to run."""

    def __init__(self) -> None:
        self._virtual_clock = [0.0]
        self._task_numbers = itertools.count(1)
        super().__init__(_VirtualSelector(self._virtual_clock))
        self.set_task_factory(_create_numbered_task)

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
    with _numbered_cancel_scopes():
        try:
            asyncio.set_event_loop(loop)
            return loop.run_until_complete(main())
        finally:
            try:
                _cancel_leftovers(loop)
            finally:
                asyncio.set_event_loop(None)
                loop.close()


@contextlib.contextmanager
def _numbered_cancel_scopes() -> Iterator[None]:
    """anyio's cancel scopes hash as their creation number for the duration of the block.

    The same reason as `_NumberedTask`: anyio delivers a cancellation to the
    nested scopes of a scope in the iteration order of a `set` of them, so by
    memory address unless the scopes hash otherwise.  anyio's asyncio
    backend creates every scope through its module-level `CancelScope` name,
    which is replaced here by a subclass for the block (and restored after);
    if anyio ever stops creating scopes that way, this raises rather than
    letting runs silently diverge.
    """
    # Typed loosely on purpose: this reaches into anyio's private backend module.
    backend: Any = _anyio_asyncio
    base = getattr(backend, "CancelScope", None)
    if not isinstance(base, type) or "_child_scopes" not in getattr(base, "__slots__", ()):
        raise DeterminismUnavailable(
            "anyio's asyncio backend no longer has a slotted CancelScope class to number"
        )
    numbers = itertools.count(1)

    class NumberedCancelScope(base):  # type: ignore[misc, valid-type]
        __slots__ = ("_number",)

        def __init__(self, deadline: float = math.inf, shield: bool = False) -> None:
            self._number = next(numbers)
            super().__init__(deadline=deadline, shield=shield)

        def __hash__(self) -> int:
            return self._number

    backend.CancelScope = NumberedCancelScope
    try:
        yield
    finally:
        backend.CancelScope = base


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
