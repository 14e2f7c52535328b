"""The session table of a bulk snapshot, decided from the log's session columns alone.

Pure.  A replica's `apply_batch` expires sessions at each batch's time, then
per command asks the table (`SessionTable.begin`) whether to apply it, and
records its outcome.  Which commands pass and which outcomes the table keeps
depend only on the logged times and session fields, never on the state, so
one pass over those columns (`session_pass`) gives the whole table, with the
index of each kept outcome standing in for the outcome; `with_outcomes`
puts the real ones in once the reducer computed them.

Expiring at every change of time instead of at every batch gives the same
table: an expiry at a time already expired at drops nothing (every session
active since then is at least as recent).  A batch without commands (a
barrier) expires at its time too, but the next batch's expiry, at a time
no earlier, drops the same sessions, and no command comes between; so only
the batches holding rows matter, up to the last one.

A pass may start from a snapshot's table (`start`): its kept outcomes are
real ones, so they become stand-ins too, with negative numbers, and
`carried` holds them until `with_outcomes` puts them back.

Invariants: the table is the one a replica holds after the batch of the
last row; `skipped` and `wanted` are disjoint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsm.config import ReplicaConfig
from rsm.core.sessions import Outcome, SessionTable
from rsm.errors import NotReducible, RsmStatus


@dataclass(frozen=True, slots=True)
class SessionPass:
    table: SessionTable
    """The table, each kept outcome standing in as `Outcome(OK, index)`."""
    skipped: frozenset[int]
    """Indexes of the commands the table did not let through."""
    wanted: frozenset[int]
    """Indexes of the commands whose outcomes the table keeps (of `rows`)."""
    carried: Mapping[int, Outcome] = field(default_factory=dict)
    """Stand-in number (negative) -> an outcome of the starting table the table still keeps."""


def new_table(config: ReplicaConfig) -> SessionTable:
    return SessionTable(
        ttl_ms=config.session_ttl_ms,
        sessions_max=config.sessions_max,
        evict_idle_ms=config.session_evict_idle_ms,
        results_max=config.session_results_max,
    )


def session_pass(
    rows: Iterable[tuple[int, int, bytes | None, int | None, int | None]],
    config: ReplicaConfig,
    start: SessionTable | None = None,
) -> SessionPass:
    """The table after `rows`: `(index, time_ms, client_id, seq, ack_seq)` of every logged
    item, in index order (client_id None: a command without a session, or a marker), from
    table `start` (None: an empty one)."""
    carried: dict[int, Outcome] = {}
    table = new_table(config) if start is None else _stand_ins(start, config, carried)
    skipped: set[int] = set()
    time_seen = None
    for index, time_ms, client_id, seq, ack_seq in rows:
        if time_ms != time_seen:
            table.expire(time_ms)
            time_seen = time_ms
        if client_id is None:
            continue
        assert seq is not None
        assert ack_seq is not None
        if table.begin(client_id, seq, ack_seq, time_ms) is None:
            table.record(client_id, seq, Outcome(RsmStatus.OK, index))
        else:
            skipped.add(index)
    kept = [outcome[1] for session in table.plain_sessions() for _seq, outcome in session[3]]
    wanted = frozenset(number for number in kept if number > 0)
    still = {number: carried[number] for number in kept if number < 0}
    return SessionPass(table, frozenset(skipped), wanted, still)


def _stand_ins(
    start: SessionTable, config: ReplicaConfig, carried: dict[int, Outcome]
) -> SessionTable:
    """`start` with each kept outcome replaced by a stand-in numbered -1, -2, ..., noted in
    `carried`."""
    plain: dict[str, Any] = start.to_plain()
    for session in plain["sessions"]:
        for result in session[3]:
            number = -1 - len(carried)
            carried[number] = Outcome.from_plain(result[1])
            result[1] = Outcome(RsmStatus.OK, number).to_plain()
    return _table(plain, config)


def with_outcomes(
    passed: SessionPass, outcomes: Mapping[int, Outcome], config: ReplicaConfig
) -> SessionTable:
    """The table of `passed` with each stand-in replaced by the outcome of its index."""
    missing = sorted(passed.wanted - outcomes.keys())
    if missing:
        raise NotReducible(
            f"the reducer gave no outcome for index {missing[0]} (and {len(missing) - 1} "
            "more), which the session table keeps"
        )
    plain: dict[str, Any] = passed.table.to_plain()
    every = {**outcomes, **passed.carried}
    plain["sessions"] = [
        [
            client_id,
            last_active_ms,
            floor_seq,
            [[seq, every[number].to_plain()] for seq, (_ok, number) in results],
        ]
        for client_id, last_active_ms, floor_seq, results in plain["sessions"]
    ]
    return _table(plain, config)


def _table(plain: dict[str, Any], config: ReplicaConfig) -> SessionTable:
    return SessionTable.from_plain(
        plain,
        ttl_ms=config.session_ttl_ms,
        sessions_max=config.sessions_max,
        evict_idle_ms=config.session_evict_idle_ms,
        results_max=config.session_results_max,
    )
