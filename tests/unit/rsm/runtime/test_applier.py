"""The one apply step: entries must continue the log exactly, and each applies once."""

from __future__ import annotations

import pytest

from rsm.config import ReplicaConfig
from rsm.core.commands import prepare_command
from rsm.core.log_format import Batch, decode_batch, encode_batch
from rsm.core.sessions import Outcome
from rsm.errors import MalformedValue, RsmStatus
from rsm.runtime.applier import Applier, Read
from tests.unit.rsm.core.counter import Counter


def batch(first_index: int, commands: int) -> Batch:
    items = [prepare_command(Counter, "add", [1]) for _ in range(commands)]
    payload = encode_batch(epoch=1, first_index=first_index, timestamp_ms=5, seed=1, items=items)
    return decode_batch(payload)


class Answers:
    def __init__(self) -> None:
        self.seen: list[tuple[int, Outcome, int]] = []

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        self.seen.append((request_id, outcome, index))


def test_entries_apply_in_order_and_once() -> None:
    applier = Applier(Counter(), ReplicaConfig())
    outcomes = applier.apply(batch(1, 2), 7, 0)
    assert outcomes == [Outcome(RsmStatus.OK, 1), Outcome(RsmStatus.OK, 2)]
    assert applier.apply(batch(1, 2), 7, 0) is None, "the same entry again is skipped"
    assert applier.apply(batch(3, 0), 7, 1) == []
    assert applier.applied_index == 2
    assert applier.position.time_ms == 5


@pytest.mark.parametrize("first_index", [2, 4])
def test_an_entry_that_does_not_continue_the_log_is_refused(first_index: int) -> None:
    applier = Applier(Counter(), ReplicaConfig())
    applier.apply(batch(1, 2), 7, 0)
    with pytest.raises(MalformedValue, match="gap or an overlap"):
        applier.apply(batch(first_index, 1), 7, 1)
    assert applier.applied_index == 2


def test_a_read_waits_until_its_index_is_applied() -> None:
    applier = Applier(Counter(), ReplicaConfig())
    answers = Answers()
    ticket = applier.read_at(3, Read(answers, 11, "get", [], {}))
    assert ticket is not None
    assert applier.read_at(0, Read(answers, 12, "get", [], {})) is None
    assert [request_id for request_id, _, _ in answers.seen] == [12]
    applier.apply(batch(1, 2), 7, 0)
    assert len(answers.seen) == 1
    applier.apply(batch(3, 1), 7, 1)
    assert answers.seen[-1] == (11, Outcome(RsmStatus.OK, 3), 3)
    assert applier.waiting_reads == 0
