"""A bookie process's metrics: what its server, journal, storage, disks and GC count.

`bookie_metrics` returns the families one scrape exports; every value is read
from the component that keeps it at the moment of the scrape (bookie/metrics.py
says why).  Names start with `bookie_`; docs/observability.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from bookie.metrics import counter, gauge, histogram
from bookie.server.disk_monitor import used_fraction
from bookie.server.gc import GarbageCollector
from bookie.server.server import BookieServer
from bookie.storage.file import FileLedgerStorage


def bookie_metrics(
    server: BookieServer, storage: FileLedgerStorage, collector: GarbageCollector
) -> Iterator[Metric]:
    """The families of one scrape of one bookie."""
    processor = server.processor
    journal = storage.journal
    yield histogram(
        "bookie_add_latency_seconds",
        "Adds from request to answer after the journal sync, by result.",
        {(result,): observed for result, observed in processor.add_seconds.items()},
        ["result"],
    )
    yield histogram(
        "bookie_read_latency_seconds",
        "Reads answered at once (long polls excluded), from request to answer, by result.",
        {(result,): observed for result, observed in processor.read_seconds.items()},
        ["result"],
    )
    yield counter(
        "bookie_rejected_requests",
        "Requests refused by back-pressure (ETOOMANYREQUESTS).",
        {(): processor.rejected_requests},
    )
    handler = server.handler
    yield counter(
        "bookie_auth_failures",
        "AUTH requests with a client token the bookie does not know.",
        {(): handler.auth_failures},
    )
    yield counter(
        "bookie_unauthenticated_requests",
        "Requests refused because their connection presented no known token.",
        {(): handler.unauthenticated_requests},
    )
    yield counter(
        "bookie_forbidden_requests",
        "Requests refused because their token's role does not allow them.",
        {(): handler.forbidden_requests},
    )
    yield histogram(
        "bookie_journal_sync_latency_seconds",
        "Time to write and fsync one journal group.",
        {(): journal.sync_seconds},
    )
    yield histogram(
        "bookie_journal_group_entries",
        "Journal records made durable by one fsync.",
        {(): journal.group_records},
    )
    yield histogram(
        "bookie_journal_group_bytes", "Bytes made durable by one fsync.", {(): journal.group_bytes}
    )
    yield gauge(
        "bookie_journal_unsynced_bytes",
        "Journal bytes appended and not yet durable (queue depth of the journal).",
        {(): journal.unsynced_bytes},
    )
    yield gauge(
        "bookie_pending_requests",
        "Requests whose answer waits for a journal sync (in flight).",
        {(): processor.pending_total},
    )
    yield gauge(
        "bookie_pending_request_bytes",
        "Bytes of the requests waiting for a journal sync.",
        {(): processor.pending_bytes},
    )
    yield gauge("bookie_connections", "Open client connections.", {(): server.connection_count})
    yield gauge("bookie_parked_long_polls", "Long-poll reads waiting.", {(): server.parked_reads})
    yield gauge(
        "bookie_queued_answer_bytes",
        "Answer bytes the connections hold, not yet taken by the kernel.",
        {(): server.queued_answer_bytes},
    )
    yield gauge(
        "bookie_read_only", "1 while the bookie refuses adds (read-only).", {(): server.read_only}
    )
    yield gauge(
        "bookie_storage_bytes",
        "Bytes of the storage's files by kind (journal, entry_log, index).",
        {(kind,): size for kind, size in storage.file_bytes().items()},
        ["kind"],
    )
    usage = storage.disk_usage()
    yield gauge(
        "bookie_disk_used_bytes",
        "Used bytes of the file system of each data directory.",
        {(str(path),): used for path, (used, _, _) in usage.items()},
        ["directory"],
    )
    yield gauge(
        "bookie_disk_total_bytes",
        "Size of the file system of each data directory.",
        {(str(path),): total for path, (_, total, _) in usage.items()},
        ["directory"],
    )
    # The fraction the disk monitor compares with `disk_usage_threshold`: used / (used +
    # available), as df reports it.  Not used / total: root's reserve (and on some file
    # systems much more) is neither, so that ratio can stay far below the threshold while
    # the bookie turns read-only.
    yield gauge(
        "bookie_disk_usage_ratio",
        "Used fraction of the file system of each data directory, as df and the read-only "
        "threshold (disk_usage_threshold) count it: used / (used + available).",
        {
            (str(path),): used_fraction(used, available)
            for path, (used, _, available) in usage.items()
        },
        ["directory"],
    )
    gc = collector.metrics
    yield counter("bookie_gc_runs", "Garbage-collection rounds.", {(): gc.rounds})
    yield counter("bookie_gc_errors", "Garbage-collection rounds that failed.", {(): gc.errors})
    yield counter(
        "bookie_gc_deleted_ledgers",
        "Ledgers deleted by garbage collection.",
        {(): gc.ledgers_deleted},
    )
    yield counter(
        "bookie_compaction_logs",
        "Entry logs deleted whole or compacted, by action.",
        {("deleted",): gc.logs_deleted, ("compacted",): gc.logs_compacted},
        ["action"],
    )
    yield counter(
        "bookie_gc_reclaimed_bytes",
        "Bytes reclaimed by garbage collection and compaction.",
        {(): gc.bytes_reclaimed},
    )
    tls = server.tls_server
    if tls is not None:
        yield counter(
            "bookie_tls_accepted",
            "Connections to the TLS listener whose handshake succeeded.",
            {(): tls.accepted},
        )
        yield counter(
            "bookie_tls_refused",
            "Connections to the TLS listener refused, by reason (docs/security.md).",
            {(reason,): count for reason, count in tls.refusals.items()},
            ["reason"],
        )
