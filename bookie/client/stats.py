"""What one ledger client counts for its metrics (exported by `client_metrics`).

Write handles observe each entry's latency from `append_nowait` to its
confirmation (an entry of the replicated log is a whole batch of commands, so
this is per batch, not per command) and count their ensemble changes; reads
count the speculative reads their timer sends; recoveries count themselves.
Pending adds are read at scrape time from the write handles still open.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.metrics_core import Metric

from bookie.metrics import Histogram, counter, gauge, histogram

if TYPE_CHECKING:
    from bookie.client.write_handle import WriteHandle


class ClientStats:
    def __init__(self) -> None:
        self.add_seconds = Histogram()
        self.ensemble_changes = 0
        self.ensemble_changes_deferred = 0
        self.recoveries = 0
        self.speculative_reads = 0
        self.handles: weakref.WeakSet[WriteHandle] = weakref.WeakSet()
        """The write handles of the client, for their pending adds."""

    @property
    def pending_adds(self) -> int:
        return sum(
            handle.last_add_pushed - handle.last_add_confirmed
            for handle in self.handles
            if not handle.is_closed
        )


def client_metrics(stats: ClientStats) -> Iterator[Metric]:
    """The families of one scrape of one ledger client."""
    yield histogram(
        "ledger_add_latency_seconds",
        "Entries from append to confirmation by an ack quorum.",
        {(): stats.add_seconds},
    )
    yield gauge(
        "ledger_pending_adds", "Entries appended, not yet confirmed.", {(): stats.pending_adds}
    )
    yield counter(
        "ledger_ensemble_changes",
        "Ensemble changes, by outcome: done, or deferred (no replacement bookie).",
        {("done",): stats.ensemble_changes, ("deferred",): stats.ensemble_changes_deferred},
        ["outcome"],
    )
    yield counter("ledger_recoveries", "Ledger recoveries run.", {(): stats.recoveries})
    yield counter(
        "ledger_speculative_reads",
        "Reads sent to another replica because the first was slow.",
        {(): stats.speculative_reads},
    )
