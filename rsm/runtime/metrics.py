"""A replica's metrics: its log position and lag, leadership, batches, snapshots, state hashes.

`replica_metrics` returns the families one scrape exports for one replica,
read from its status and its `ReplicaStats` at the moment of the scrape
(bookie/metrics.py says why); `rsm_metrics` adds its ledger client's
(`ledger_*`, bookie/client/stats.py).  Every series carries the labels `app`
and `replica`, so one Prometheus job can scrape every replica of every
application.  docs/observability.md lists the metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric

from bookie.client.stats import client_metrics
from bookie.metrics import counter, gauge, histogram
from rsm.runtime.replica import Replica

_LABELS = ["app", "replica"]


def rsm_metrics(replica: Replica, wall_clock_ms: Callable[[], int]) -> Iterator[Metric]:
    """The families of one scrape of a replica process: the replica's and its ledger client's."""
    yield from replica_metrics(replica, wall_clock_ms)
    yield from client_metrics(replica.ledgers.stats)
    yield from tls_metrics(replica)


def replica_metrics(replica: Replica, wall_clock_ms: Callable[[], int]) -> Iterator[Metric]:
    status = replica.status()
    key = (replica.app, replica.replica_id)
    stats = replica.stats

    def one(value: float) -> dict[tuple[str, ...], float]:
        return {key: value}

    lag_entries = status["lag_entries"]
    applied_time_ms = status["applied_time_ms"]
    lag_s = 0.0
    if lag_entries and applied_time_ms is not None:
        lag_s = max(0.0, (wall_clock_ms() - applied_time_ms) / 1000)
    yield gauge(
        "rsm_applied_index",
        "Index of the last command applied.",
        one(status["applied_index"]),
        _LABELS,
    )
    yield gauge(
        "rsm_apply_lag_entries",
        "Entries confirmed in the log and not applied here yet (0 on the leader).",
        one(lag_entries),
        _LABELS,
    )
    yield gauge(
        "rsm_apply_lag_seconds",
        "Age of the last applied command while entries wait to be applied (0 when caught up).",
        one(lag_s),
        _LABELS,
    )
    yield gauge(
        "rsm_leader", "1 while this replica leads and serves.", one(status["serving"]), _LABELS
    )
    yield gauge("rsm_epoch", "The epoch this replica knows.", one(status["epoch"]), _LABELS)
    yield gauge(
        "rsm_caught_up",
        "1 while this replica is caught up with the log.",
        one(status["caught_up"]),
        _LABELS,
    )
    yield gauge(
        "rsm_sessions", "Client sessions in the session table.", one(status["sessions"]), _LABELS
    )
    yield counter(
        "rsm_leader_changes",
        "Leaders (or epochs) the leader znode named, as seen here.",
        one(replica.leader_changes),
        _LABELS,
    )
    yield counter("rsm_takeovers", "Takeovers this replica won.", one(status["takeovers"]), _LABELS)
    yield histogram(
        "rsm_failover_seconds",
        "From a takeover's start to serving, per term led here.",
        {key: stats.failover_seconds},
        _LABELS,
    )
    yield counter(
        "rsm_handoffs", "Leadership transfers made by this replica.", one(stats.handoffs), _LABELS
    )
    yield histogram(
        "rsm_handoff_window_seconds",
        "From a transfer's stop of writes to the successor's leader znode.",
        {key: stats.handoff_window_seconds},
        _LABELS,
    )
    yield histogram(
        "rsm_commit_latency_seconds",
        "Per batch: from its oldest command's arrival to the answers (confirmed and applied).",
        {key: stats.commit_seconds},
        _LABELS,
    )
    yield histogram(
        "rsm_batch_commands",
        "Commands per batch (one log entry).",
        {key: stats.batch_commands},
        _LABELS,
    )
    yield histogram(
        "rsm_batch_bytes", "Bytes per batch (one log entry).", {key: stats.batch_bytes}, _LABELS
    )
    auth = replica.client_auth
    yield counter(
        "rsm_auth_failures",
        "AUTH requests with a client token this replica does not know.",
        one(auth.auth_failures),
        _LABELS,
    )
    yield counter(
        "rsm_unauthenticated_requests",
        "Requests refused because their connection presented no known token.",
        one(auth.unauthenticated_requests),
        _LABELS,
    )
    yield counter(
        "rsm_forbidden_requests",
        "Requests refused because their token's role does not allow them.",
        one(auth.forbidden_requests),
        _LABELS,
    )
    yield counter(
        "rsm_session_dedup_hits",
        "Retries answered from the session table, not logged again.",
        one(stats.dedup_hits),
        _LABELS,
    )
    term = status["term"]
    rounds = stats.read_rounds_ended_terms + (term["read_rounds"] if term is not None else 0)
    yield counter(
        "rsm_read_lease_renewals",
        "Confirmation rounds that confirmed (each renews the read lease).",
        one(rounds),
        _LABELS,
    )
    yield gauge(
        "rsm_queued_commands",
        "Commands waiting for a batch (leader).",
        one(term["queued_commands"] if term else 0),
        _LABELS,
    )
    yield gauge(
        "rsm_ensemble_change_deferred",
        "1 while the leader's ledger has a failed bookie without replacement.",
        one(bool(term and term["ensemble_change_deferred"])),
        _LABELS,
    )
    replication = term["replication"] if term is not None else None
    yield gauge(
        "rsm_segment_under_replicated",
        "1 while the leader writes entries that get fewer than Qw copies (degraded, or a "
        "failed bookie not replaced); never fewer than Qa.",
        one(replication is not None and not replication["full"]),
        _LABELS,
    )
    yield gauge(
        "rsm_segment_degraded",
        "1 while the leader's segment was created on fewer bookies than the ensemble size.",
        one(replication is not None and replication["degraded"]),
        _LABELS,
    )
    hashes = status["state_hashes"]
    yield counter(
        "rsm_state_hash_checks",
        "State-hash checks against the log, by result: verified, diverged, failed (not computed).",
        {
            (*key, "verified"): hashes["verified"],
            (*key, "diverged"): hashes["divergences"],
            (*key, "failed"): hashes["failures"],
        },
        [*_LABELS, "result"],
    )
    yield gauge(
        "rsm_diverged",
        "1 once this replica's state differed from the leader's.",
        one(hashes["diverged_at"] is not None),
        _LABELS,
    )
    snapshots = status["snapshots"]
    if snapshots is not None:
        yield counter(
            "rsm_snapshots",
            "Snapshots taken or loaded by this replica.",
            {(*key, "taken"): snapshots["taken"], (*key, "loaded"): snapshots["loaded"]},
            [*_LABELS, "action"],
        )
        last = snapshots["last_taken"] or {}
        yield gauge(
            "rsm_snapshot_last_duration_seconds",
            "How long the last snapshot this replica took lasted.",
            one(last.get("duration_ms", 0) / 1000),
            _LABELS,
        )
        yield gauge(
            "rsm_snapshot_last_bytes",
            "Size of the last snapshot this replica took.",
            one(last.get("size_bytes", 0)),
            _LABELS,
        )


def tls_metrics(replica: Replica) -> Iterator[Metric]:
    """With its port on TLS: the replica's handshakes, accepted and refused by reason."""
    listener = replica.tls_listener
    if listener is None:
        return
    key = (replica.app, replica.replica_id)
    yield counter(
        "rsm_tls_accepted",
        "Connections to the replica's TLS port whose handshake succeeded.",
        {key: listener.accepted},
        _LABELS,
    )
    yield counter(
        "rsm_tls_refused",
        "Connections to the replica's TLS port refused, by reason (docs/security.md).",
        {(*key, reason): count for reason, count in listener.refusals.items()},
        [*_LABELS, "reason"],
    )
