"""What one autorecovery process counts, and the metric families a bookie hosting it exports.

The auditor and the worker count into one `AutoRecoveryStats` they share (plain
attributes, set on the event loop); `autorecovery_metrics` turns it into
Prometheus families at scrape time (bookie/metrics.py's pattern).  Every worker
lists the marks at each round, so every bookie that hosts autorecovery exports
how many ledgers are marked: an alert takes the highest across bookies.  Only
the elected auditor counts lost bookies and audits.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric

from bookie.metrics import counter, gauge


@dataclass(slots=True)
class AutoRecoveryStats:
    """The counts and states of one process's auditor and worker."""

    enabled: bool | None = None
    """Whether autorecovery was enabled at the worker's last round (None: no round yet)."""
    marked_ledgers: int | None = None
    """Ledgers marked under-replicated at the worker's last round (None: no round yet)."""
    auditor: bool = False
    """Whether this process is the elected auditor now."""
    lost_bookies: int = 0
    """Bookies the auditor counts as lost (0 when it is not the auditor)."""
    audits: int = 0
    ledgers_marked: int = 0
    """Marks this process's auditor made (its audits and presence checks)."""
    ledgers_repaired: int = 0
    repairs_failed: int = 0
    entries_copied: int = 0


def autorecovery_metrics(stats: AutoRecoveryStats) -> Iterator[Metric]:
    """The families of one scrape (docs/observability.md lists them)."""
    if stats.enabled is not None:
        yield gauge(
            "bookie_autorecovery_enabled",
            "1 while autorecovery is enabled cluster-wide, as of this worker's last round.",
            {(): float(stats.enabled)},
        )
    if stats.marked_ledgers is not None:
        yield gauge(
            "bookie_autorecovery_marked_ledgers",
            "Ledgers marked under-replicated, waiting for repair, as of this worker's last round.",
            {(): stats.marked_ledgers},
        )
    yield gauge(
        "bookie_autorecovery_auditor",
        "1 while this process is the elected auditor.",
        {(): float(stats.auditor)},
    )
    yield gauge(
        "bookie_autorecovery_lost_bookies",
        "Bookies the auditor counts as lost (gone past the grace period); 0 elsewhere.",
        {(): stats.lost_bookies},
    )
    yield counter(
        "bookie_autorecovery_audits", "Audits this process ran as auditor.", {(): stats.audits}
    )
    yield counter(
        "bookie_autorecovery_ledgers_marked",
        "Ledgers this process's auditor marked under-replicated.",
        {(): stats.ledgers_marked},
    )
    yield counter(
        "bookie_autorecovery_ledgers_repaired",
        "Ledgers this process's worker brought back to full replication.",
        {(): stats.ledgers_repaired},
    )
    yield counter(
        "bookie_autorecovery_repairs_failed",
        "Repairs of a ledger that failed here (retried later, with back-off).",
        {(): stats.repairs_failed},
    )
    yield counter(
        "bookie_autorecovery_entries_copied",
        "Entries this process's worker copied to bookies that lacked them.",
        {(): stats.entries_copied},
    )
