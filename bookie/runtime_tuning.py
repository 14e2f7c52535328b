"""Interpreter settings for the processes that carry entries (bookies, replicas, benchmarks).

`tune_for_throughput()` is for a process's entry point, never for library
code.  An application embedding the ledger client can call it the same way.
It changes two CPython defaults that cost those processes throughput:

The garbage collector.  CPython runs a young collection every 700 net
container allocations and, every 10 x 10 of those, a pass over the older
generations that walks every tracked object they hold.  A bookie or a
replica allocates a few short-lived tuples, messages and callbacks per entry
and keeps a large long-lived heap (ledger indexes, pending requests, the
state machine), so under load the collector runs thousands of times a second
and its older passes walk that whole heap.  Nearly everything is freed by
reference counting the moment it is dropped; the collector is only needed
for the rare reference cycle, which it still collects, later.  So: the
objects alive at start-up (modules, configuration) move to the permanent
generation, which no collection walks, and collections get rarer
(`limits.gc_young_collection_allocations`, `limits.gc_older_collection_ratio`);
the cyclic garbage held meanwhile is bounded by the threshold, a few
megabytes.

The GIL switch interval.  A bookie's journal thread comes back from each
fdatasync needing the GIL to hand the group's completion to the event loop;
while the loop is busy, CPython makes it wait up to the switch interval (5 ms
by default) before the loop must let go, and every add of that group waits
with it.  `limits.gil_switch_interval_us` bounds that wait to half a
millisecond.

docs/operations.md ("Interpreter settings") has what each setting gained.
"""

from __future__ import annotations

import gc
import sys

from bookie import limits


def tune_for_throughput() -> None:
    """Freeze what start-up allocated, make collections rarer and shorten the GIL switch
    interval (see the module docstring)."""
    gc.collect()
    gc.freeze()
    ratio = limits.gc_older_collection_ratio
    gc.set_threshold(limits.gc_young_collection_allocations, ratio, ratio)
    sys.setswitchinterval(limits.gil_switch_interval_us / 1_000_000)
