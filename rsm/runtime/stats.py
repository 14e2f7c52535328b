"""What a replica counts for its metrics beyond its status (exported by rsm/runtime/metrics.py).

One `ReplicaStats` per replica, shared with each leader term it runs.  The
term observes once per batch, never per command: a batch's size in commands
and bytes, and its commit latency, from the arrival of the oldest command it
carries (when a batch is cut short by its bounds, the commands left over are
dated from that cut) to the answers, after confirmation and apply.
"""

from __future__ import annotations

from bookie.metrics import COUNT_BUCKETS, SIZE_BUCKETS_BYTES, Histogram


class ReplicaStats:
    def __init__(self) -> None:
        self.commit_seconds = Histogram()
        self.batch_commands = Histogram(COUNT_BUCKETS)
        self.batch_bytes = Histogram(SIZE_BUCKETS_BYTES)
        self.dedup_hits = 0
        """Retries the leader answered from the session table, without logging them again."""
        self.failover_seconds = Histogram()
        """Per term this replica led: from its takeover's start to serving."""
        self.handoffs = 0
        """Leadership transfers this replica made as the leader."""
        self.handoff_window_seconds = Histogram()
        """From a transfer's stop of writes to the successor's leader znode."""
        self.reads = 0
        """Queries answered or taken (`Replica.handle_query`, `read_now`, `read_applied`)."""
        self.read_rounds_ended_terms = 0
        """Confirmation rounds (read-lease renewals) of the terms that ended."""
