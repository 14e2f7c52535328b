"""The key-value store's Spark reducer against replay, without Spark: the same passes in process.

Each log is cut into tasks at seeded places; each task's batches go through
`part_pass` with the reducer's `summarize`, and the driver's steps
(`reduce_tasks`: the session pass, the tasks passing again, `combine`) give
the state, as `rsm spark snapshot` does on executors and the driver
(tests/spark/test_bulk_snapshot.py runs it on Spark).  The state (dict
orders, TTLs and tombstones included, and the `snapshot()` bytes), the
session table and the state hash must be replay's.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from typing import Any

import pytest
from kvstore import limits as kvstore_limits
from kvstore.spark_reducer import REDUCER
from kvstore.state_machine import KVStore

from rsm.config import ReplicaConfig
from rsm.core.commands import apply_batch
from rsm.core.log_format import Batch, decode_batch
from rsm.core.sessions import SessionTable
from rsm.errors import NotReducible
from rsm.spark.part_pass import PartPass, part_pass
from rsm.spark.reducing import TaskRun, reduce_tasks
from rsm.spark.session_pass import new_table, with_outcomes
from tests.spark.kv_log import KvLog, blind_commands, interleaved, kv_commands

CONFIG = ReplicaConfig()


def _batches(*segments: list[Any], seed: int = 7) -> list[Batch]:
    log = KvLog(rng=random.Random(seed))
    return [decode_batch(entry) for commands in segments for entry in log.segment(commands)]


def _bulk(
    batches: list[Batch], tasks: int, seed: int, start: tuple[KVStore, SessionTable] | None = None
) -> tuple[KVStore, Any, int]:
    """The reduced machine, the session table and how many tasks passed again; with `start`,
    on top of that state and table (those of the index before `batches`)."""
    cuts = sorted(random.Random(seed).sample(range(1, len(batches)), tasks - 1))
    groups = [batches[a:b] for a, b in itertools.pairwise([0, *cuts, len(batches)])]
    first = batches[0].first_index
    end = batches[-1].first_index + len(batches[-1].items)

    def run(runs: Sequence[TaskRun]) -> list[PartPass]:
        return [
            part_pass(
                ((1, number, batch) for number, batch in enumerate(groups[task.number])),
                first,
                end,
                REDUCER.summarize,
                task.skipped,
                keep=task.keep,
            )
            for task in runs
        ]

    reduction = reduce_tasks(
        run,
        len(groups),
        reducer=REDUCER,
        config=CONFIG,
        last_index=end - 1,
        start=start,
        on_step=lambda _step: None,
    )
    machine = reduction.reduced.machine
    assert isinstance(machine, KVStore)
    table = with_outcomes(reduction.passed, reduction.reduced.outcomes, CONFIG)
    return machine, table, reduction.reruns


def _replay(
    batches: list[Batch], start: tuple[KVStore, SessionTable] | None = None
) -> tuple[KVStore, SessionTable]:
    machine, sessions = (KVStore(), new_table(CONFIG)) if start is None else start
    for batch in batches:
        apply_batch(machine, batch, sessions)
    return machine, sessions


def _state(machine: KVStore, sessions: Any) -> tuple[Any, ...]:
    return (
        list(machine.values.items()),
        list(machine.versions.items()),
        list(machine.tombstones.items()),
        machine.expire_at_ms,
        sessions.to_plain(),
        machine.state_hash(),
        b"".join(machine.snapshot()),
    )


@pytest.mark.parametrize(("seed", "tasks"), [(1, 1), (2, 2), (3, 3), (4, 7)])
def test_the_reduced_state_is_replays_however_the_log_is_cut(seed: int, tasks: int) -> None:
    batches = _batches(
        interleaved(kv_commands(700, seed=seed), blind_commands(900, seed + 10), seed),
        blind_commands(400, seed + 20),
        kv_commands(200, seed=seed + 30),
    )

    machine, sessions, rerun = _bulk(batches, tasks, seed)

    replayed, replayed_sessions = _replay(batches)
    assert _state(machine, sessions) == _state(replayed, replayed_sessions)
    assert rerun > 0  # retries were skipped, so some task passed again
    assert replayed.tombstones
    assert replayed.values
    assert sessions.to_plain()["sessions"]


@pytest.mark.parametrize("seed", [5, 6])
def test_reduced_on_top_of_a_snapshot_the_state_is_replays_from_it(seed: int) -> None:
    batches = _batches(
        interleaved(kv_commands(500, seed=seed), blind_commands(500, seed + 10), seed),
        interleaved(kv_commands(300, seed=seed + 1), blind_commands(500, seed + 11), seed),
    )
    cut = len(batches) // 2
    snapshot = _replay(batches[:cut])

    machine, sessions, _rerun = _bulk(batches[cut:], 2, seed, _copy(*snapshot))

    replayed, replayed_sessions = _replay(batches[cut:], _copy(*snapshot))
    assert _state(machine, sessions) == _state(replayed, replayed_sessions)
    assert snapshot[0].values  # the starting state had something to build on
    assert snapshot[0].tombstones
    assert any(session[3] for session in snapshot[1].to_plain()["sessions"])


def _copy(machine: KVStore, sessions: SessionTable) -> tuple[KVStore, SessionTable]:
    """Both, through their snapshot forms, as a snapshot loads them."""
    copied = KVStore()
    copied.restore(list(machine.snapshot()))
    plain = sessions.to_plain()
    return copied, SessionTable.from_plain(
        plain,
        ttl_ms=CONFIG.session_ttl_ms,
        sessions_max=CONFIG.sessions_max,
        evict_idle_ms=CONFIG.session_evict_idle_ms,
        results_max=CONFIG.session_results_max,
    )


def test_a_log_of_blind_commands_alone_keeps_only_the_open_ones() -> None:
    batches = _batches(blind_commands(600, 5), blind_commands(600, 6))

    machine, sessions, _rerun = _bulk(batches, 2, 5)

    assert _state(machine, sessions) == _state(*_replay(batches))


@pytest.mark.parametrize(("seed", "tasks"), [(21, 1), (22, 2), (23, 5)])
def test_ttls_are_reduced_to_replays_expiries(seed: int, tasks: int) -> None:
    batches = _batches(
        interleaved(kv_commands(900, seed=seed, ttl=True), blind_commands(600, seed + 10), seed),
        blind_commands(300, seed + 20),
        kv_commands(300, seed=seed + 30, ttl=True),
    )

    machine, sessions, rerun = _bulk(batches, tasks, seed)

    replayed, replayed_sessions = _replay(batches)
    assert _state(machine, sessions) == _state(replayed, replayed_sessions)
    assert rerun >= tasks  # the keys given TTLs were found, and every task passed again
    assert replayed.expire_at_ms  # some keys expire after the last index
    expired = [key for key, (_index, at) in replayed.tombstones.items() if at is not None]
    assert expired  # and some before it, deleted for expiring
    assert list(machine.expire_at_ms) == list(replayed.expire_at_ms)


def test_ttls_of_a_starting_snapshot_go_on_expiring() -> None:
    batches = _batches(
        kv_commands(500, seed=31, ttl=True),
        interleaved(kv_commands(300, 32), blind_commands(300, 33), 3),
    )
    cut = len(batches) // 2
    snapshot = _replay(batches[:cut])
    assert snapshot[0].expire_at_ms

    machine, sessions, _rerun = _bulk(batches[cut:], 2, 31, _copy(*snapshot))

    assert _state(machine, sessions) == _state(*_replay(batches[cut:], _copy(*snapshot)))


def test_a_command_the_reducer_cannot_reduce_is_refused_naming_it() -> None:
    batches = _batches(kv_commands(40, seed=4, extra=("rename", [b"k1", b"k2"])))

    with pytest.raises(NotReducible, match=r"^index \d+: .* does not reduce RENAME"):
        _bulk(batches, 2, 4)


def test_more_deletions_than_watch_remembers_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = _batches(blind_commands(120, seed=14))
    monkeypatch.setattr(kvstore_limits, "watch_tombstones_max", 0)

    with pytest.raises(NotReducible, match=r"^[1-9]\d* deletions, more than 0: "):
        _bulk(batches, 2, 14)
