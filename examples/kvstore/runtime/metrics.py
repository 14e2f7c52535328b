"""A key-value store replica's own metrics: its Redis commands, error replies, clients and keys.

`kvstore_metrics(node)` yields the families one scrape of the replica's
admin API adds to the framework's (rsm/admin.py serves them at `/metrics`),
read at the moment of the scrape from the RESP server's counts (the
connections count into plain dicts of their own, folded here:
kvstore/connection/command_stats.py) and the replica's state.  Nothing
while the node has no server yet.  docs/observability.md lists them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric

from bookie.metrics import counter, gauge
from kvstore.runtime.node import KvNode, replica_info


def kvstore_metrics(node: KvNode) -> Iterator[Metric]:
    server = node.server
    if server is None:
        return
    stats = server.command_stats()
    by_result: dict[tuple[str, ...], float] = {}
    for name, calls in stats.calls.items():
        failed = stats.failed.get(name, 0)
        by_result[(name, "ok")] = calls - failed
        by_result[(name, "failed")] = failed
    for name, rejected in stats.rejected.items():
        by_result[(name, "rejected")] = rejected
    yield counter(
        "kvstore_commands",
        "Redis commands by name and result: ok, failed (ran and answered an error), "
        "rejected (refused before running).",
        by_result,
        ["command", "result"],
    )
    yield counter(
        "kvstore_error_replies",
        "Error replies by error code (the first word: ERR, WRONGTYPE, TRYAGAIN...).",
        {(code,): count for code, count in stats.errors.items()},
        ["code"],
    )
    received, refused = server.connection_totals
    yield gauge("kvstore_connections", "Open client connections.", {(): server.connection_count})
    yield counter(
        "kvstore_connections_received", "Client connections accepted or refused.", {(): received}
    )
    yield counter(
        "kvstore_connections_rejected",
        "Client connections refused (too many clients, or too many from one address).",
        {(): refused},
    )
    info = replica_info(node.replica)
    yield gauge("kvstore_keys", "Keys in this replica's state.", {(): info.keys})
    yield gauge("kvstore_keys_with_ttl", "Keys with a time to live.", {(): info.keys_with_ttl})
