"""Garbage-collector settings for the processes that carry entries (bookies, replicas, benches).

Why this exists: CPython's cyclic collector runs a young collection every 700
net container allocations and, every 10 x 10 of those, a pass over older
generations that walks every tracked object they hold.  A bookie or a replica
allocates a few short-lived tuples, messages and callbacks per entry and keeps
a large long-lived heap (ledger indexes, pending requests, the state machine),
so under load the collector runs thousands of times a second and its passes
over the older generations walk that whole heap.  Measured with
`bench/ledger_bench.py` (1 KiB entries, E3/Qw3/Qa2, window 1,000, three bookie
processes, 2 cores, three alternating runs each): 10,400-11,400 entries/s,
p99 144-177 ms with the defaults; 11,900-12,900 entries/s, p99 129-156 ms
with `tune_for_throughput` in the bookies and the client.

Nearly everything these processes allocate is freed by reference counting the
moment it is dropped; the collector is only needed for the rare reference
cycle, which it still collects, later.  The garbage it may hold meanwhile is
bounded by `limits.gc_young_collection_allocations` containers per
generation, a few megabytes.

`tune_for_throughput()` is for a process's entry point, never for library
code: it moves the objects alive at start-up (modules, configuration) to the
permanent generation, which no collection walks, and raises the thresholds.
An application embedding the ledger client can call it the same way.
"""

from __future__ import annotations

import gc

from bookie import limits


def tune_for_throughput() -> None:
    """Freeze what start-up allocated and make collections rarer (see the module docstring)."""
    gc.collect()
    gc.freeze()
    ratio = limits.gc_older_collection_ratio
    gc.set_threshold(limits.gc_young_collection_allocations, ratio, ratio)
