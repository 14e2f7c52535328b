"""The session pass decides exactly what a replica's apply_batch decides, from the columns alone."""

from __future__ import annotations

import random

import pytest

from rsm.config import ReplicaConfig
from rsm.core.commands import apply_batch
from rsm.core.log_format import Batch, CommandItem, LeaderStart
from rsm.core.sessions import Outcome
from rsm.core.state_machine import StateMachine, command
from rsm.errors import NotReducible, RsmStatus
from rsm.spark.session_pass import new_table, session_pass, with_outcomes

CONFIG = ReplicaConfig(
    session_ttl_ms=5_000, sessions_max=3, session_evict_idle_ms=2_000, session_results_max=4
)


class Log(StateMachine):
    def __init__(self) -> None:
        self.applied: list[int] = []

    @command
    def note(self) -> int:
        self.applied.append(self.context.index)
        return self.context.index * 10


def _batches(seed: int) -> list[Batch]:
    rng = random.Random(seed)
    batches: list[Batch] = []
    index, time_ms = 1, 1_000
    seqs: dict[bytes, int] = {}
    for _ in range(120):
        time_ms += rng.choice([0, 100, 1_500, 6_000])
        items: list[CommandItem | LeaderStart] = []
        for _ in range(rng.randrange(0, 4)):
            draw = rng.random()
            client = b"c%d" % rng.randrange(6)
            if draw < 0.05:
                items.append(LeaderStart("r"))
            elif draw < 0.15:
                items.append(CommandItem("note", [], {}))
            elif draw < 0.3 and seqs.get(client):
                seq = rng.randrange(1, seqs[client] + 1)  # a retry, maybe forgotten
                items.append(CommandItem("note", [], {}, client, seq, max(0, seq - 2)))
            else:
                seq = seqs[client] = seqs.get(client, 0) + 1
                ack = rng.choice([0, max(0, seq - 1), max(0, seq - 3)])
                items.append(CommandItem("note", [], {}, client, seq, ack))
        batches.append(Batch(1, index, time_ms, 0, tuple(items)))
        index += len(items)
    while batches[-1].is_barrier:
        batches.pop()  # a snapshot is at the entry of its last command; these come after it
    return batches


@pytest.mark.parametrize("seed", range(20))
def test_the_pass_gives_the_replicas_table_and_what_they_apply(seed: int) -> None:
    machine = Log()
    table = new_table(CONFIG)
    rows = []
    for batch in _batches(seed):
        apply_batch(machine, batch, table)
        for offset, item in enumerate(batch.items):
            session = item if isinstance(item, CommandItem) else None
            rows.append(
                (
                    batch.first_index + offset,
                    batch.timestamp_ms,
                    None if session is None else session.client_id,
                    None if session is None else session.seq,
                    None if session is None else session.ack_seq,
                )
            )
    passed = session_pass(rows, CONFIG)
    commands = {index for index, *_ in rows} - {
        index
        for (index, _time, client, _seq, _ack), item in zip(rows, _items(seed), strict=True)
        if isinstance(item, LeaderStart) or (client is not None and index in passed.skipped)
    }
    assert sorted(commands) == machine.applied
    outcomes = {index: Outcome(RsmStatus.OK, index * 10) for index in passed.wanted}
    assert with_outcomes(passed, outcomes, CONFIG).to_plain() == table.to_plain()


def _items(seed: int) -> list[CommandItem | LeaderStart]:
    return [item for batch in _batches(seed) for item in batch.items]


def test_an_outcome_the_reducer_did_not_give_is_named() -> None:
    rows = [(1, 1_000, b"c", 1, 0), (2, 1_000, b"c", 2, 0)]
    passed = session_pass(rows, CONFIG)
    assert passed.wanted == {1, 2}
    with pytest.raises(NotReducible, match="no outcome for index 2"):
        with_outcomes(passed, {1: Outcome(RsmStatus.OK, 1)}, CONFIG)
