"""The shells' two clocks, in milliseconds; pure cores never read either, they are fed.

* `loop_clock_ms()` is the running event loop's clock, read through anyio:
  monotonic, and virtual under simulation (bookie/testing/simloop.py), so a
  shell that measures timeouts and deadlines by it stays deterministic.  It
  needs a running loop.  Every `now_ms` handed to a core comes from it.
  `loop_clock_ms_reader()` reads the same clock with the loop looked up once,
  for the asyncio protocols' per-message paths (a lookup through anyio costs
  more than the reading).
* `system_wall_clock_ms()` is the system's time since the Unix epoch: only
  for timestamps people read (a ledger's creation time, the last GC run),
  never for measuring time.  Components whose timestamps reach a simulated
  run take a wall clock as a parameter, with this one as the default.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import anyio


def loop_clock_ms() -> int:
    """The event loop's clock in milliseconds (monotonic, virtual under simulation)."""
    return int(anyio.current_time() * 1000)


def loop_clock_ms_reader() -> Callable[[], int]:
    """`loop_clock_ms` bound to the running loop: call it once, read it often."""
    loop_time_s = asyncio.get_running_loop().time
    return lambda: int(loop_time_s() * 1000)


def system_wall_clock_ms() -> int:
    """Milliseconds since the Unix epoch, from the system's clock."""
    return time.time_ns() // 1_000_000
