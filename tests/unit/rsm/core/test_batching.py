"""Adaptive group commit: lone commands go at once, batches grow under load, the next batch
waits a little for the clients just answered, nothing lost."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rsm.core.batching import Batcher, OutgoingBatch
from rsm.core.log_format import (
    CommandItem,
    LeaderStart,
    decode_batch,
    decoded_command,
    encode_command,
    encode_leader_start,
)
from rsm.errors import BadRequest, Overloaded


def item(number: int, size_bytes: int = 0) -> bytes:
    return encode_command("op", [number, b"x" * size_bytes])


def drain(batcher: Batcher[int], now_ms: int = 0) -> list[OutgoingBatch[int]]:
    rng = random.Random(0)
    cut: list[OutgoingBatch[int]] = []
    while (batch := batcher.cut(now_ms, rng)) is not None:
        cut.append(batch)
    return cut


def test_a_lone_command_is_cut_at_once() -> None:
    batcher: Batcher[int] = Batcher(epoch=4, next_index=17)
    assert drain(batcher) == []
    batcher.submit(item(1), 1)
    [batch] = drain(batcher, now_ms=1234)
    assert batch.tickets == (1,)
    assert batch.first_index == 17
    decoded = decode_batch(batch.payload)
    assert (decoded.epoch, decoded.first_index, decoded.timestamp_ms) == (4, 17, 1234)
    assert decoded.items == (CommandItem("op", [1, b""], {}),)
    assert batcher.next_index == 18


def test_batches_grow_while_the_pipeline_is_full() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, pipeline_batches_max=2)
    for number in range(2):
        batcher.submit(item(number), number)
        assert len(drain(batcher)) == 1
    for number in range(2, 52):
        batcher.submit(item(number), number)
    assert drain(batcher) == []
    assert batcher.pending_count == 50
    first = batcher.acknowledged(0)
    assert first.tickets == (0,)
    [grown] = drain(batcher)
    assert grown.tickets == tuple(range(2, 52))
    assert grown.first_index == 3


def test_full_batches_pass_the_pipeline_depth_up_to_the_hard_bound() -> None:
    batcher: Batcher[int] = Batcher(
        epoch=1,
        next_index=1,
        pipeline_batches_max=1,
        outstanding_batches_max=3,
        batch_commands_max=10,
    )
    batcher.submit(item(0), 0)
    assert len(drain(batcher)) == 1
    for number in range(1, 26):
        batcher.submit(item(number), number)
    cut = drain(batcher)
    assert [len(batch.tickets) for batch in cut] == [10, 10]
    assert batcher.outstanding_count == 3
    assert batcher.pending_count == 5


def test_batches_respect_the_byte_bound() -> None:
    size = len(item(0, 30))
    batcher: Batcher[int] = Batcher(
        epoch=1, next_index=1, pipeline_batches_max=8, outstanding_batches_max=8,
        batch_bytes_max=2 * size + 1,
    )  # fmt: skip
    for number in range(5):
        batcher.submit(item(number, 30), number)
    assert [len(batch.tickets) for batch in drain(batcher)] == [2, 2, 1]


def test_bounds_refuse_rather_than_grow() -> None:
    batcher: Batcher[int] = Batcher(
        epoch=1, next_index=1, batch_commands_max=2, batch_bytes_max=100,
        pending_commands_max=2, pending_bytes_max=1000,
    )  # fmt: skip
    with pytest.raises(BadRequest):
        batcher.submit(b"x" * 101, 0)
    batcher.submit(item(1), 1)
    batcher.submit(item(2), 2)
    with pytest.raises(Overloaded):
        batcher.submit(item(3), 3)
    assert batcher.pending_count == 2


def test_nothing_queued_nothing_cut() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=9)
    assert drain(batcher) == []
    batcher.submit(item(1), 1)
    [write] = drain(batcher)
    assert (write.first_index, write.tickets) == (9, (1,))


def test_a_read_time_is_never_earlier_than_a_logged_one_and_later_batches_follow_it() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, timestamp_ms=500)
    assert batcher.advance_time(400) == 500
    assert batcher.advance_time(800) == 800
    batcher.submit(item(1), 1)
    [batch] = drain(batcher, now_ms=700)
    assert decode_batch(batch.payload).timestamp_ms == 800


def test_timestamps_never_decrease() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, timestamp_ms=500)
    stamps = []
    for number, now_ms in enumerate([100, 700, 600, 900]):
        batcher.submit(item(number), number)
        [batch] = drain(batcher, now_ms=now_ms)
        batcher.acknowledged(batch.sequence)
        stamps.append(decode_batch(batch.payload).timestamp_ms)
    assert stamps == [500, 700, 700, 900]


def test_abandon_separates_unsent_from_in_flight() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, pipeline_batches_max=1)
    batcher.submit(item(1), 1)
    drain(batcher)
    batcher.submit(item(2), 2)
    assert batcher.abandon() == ([2], [1])
    assert (batcher.pending_count, batcher.outstanding_count) == (0, 0)


def answer_a_batch(
    batcher: Batcher[int],
    rng: random.Random,
    commands: int,
    queued_meanwhile: tuple[int, ...] = (),
) -> None:
    """Submit `commands` (tickets 0, 1, ...), cut them into one batch, submit the tickets
    `queued_meanwhile` while it is in flight, then acknowledge it."""
    for number in range(commands):
        batcher.submit(item(number), number)
    batch = batcher.cut(0, rng, linger_clock_ms=0)
    assert batch is not None
    assert len(batch.tickets) == commands
    for number in queued_meanwhile:
        batcher.submit(item(number), number)
    batcher.acknowledged(batch.sequence)


def test_the_next_cut_waits_for_the_clients_just_answered() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, linger_ms=4)
    rng = random.Random(0)
    answer_a_batch(batcher, rng, 3, queued_meanwhile=(3, 4))
    # Waits for the 2 queued plus the 3 answered clients.
    assert batcher.cut(0, rng, linger_clock_ms=101) is None
    assert batcher.linger_until_ms == 105
    for number in (5, 6):
        batcher.submit(item(number), number)
        assert batcher.cut(0, rng, linger_clock_ms=102) is None
    batcher.submit(item(7), 7)
    second = batcher.cut(0, rng, linger_clock_ms=102)
    assert second is not None
    assert second.tickets == (3, 4, 5, 6, 7)
    assert batcher.linger_until_ms is None


def test_the_wait_ends_after_linger_ms() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, linger_ms=4)
    rng = random.Random(0)
    answer_a_batch(batcher, rng, 3)
    batcher.submit(item(3), 3)
    assert batcher.cut(0, rng, linger_clock_ms=50) is None  # the wait starts at its first refusal
    assert batcher.cut(0, rng, linger_clock_ms=53) is None
    late = batcher.cut(0, rng, linger_clock_ms=54)
    assert late is not None
    assert late.tickets == (3,)


def test_a_lone_client_does_not_wait() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, linger_ms=4)
    rng = random.Random(0)
    for number in range(3):
        batcher.submit(item(number), number)
        batch = batcher.cut(0, rng, linger_clock_ms=0)
        assert batch is not None
        assert batch.tickets == (number,)
        batcher.acknowledged(batch.sequence)


def test_a_full_batch_does_not_wait_and_abandon_ends_the_wait() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1, linger_ms=4, batch_commands_max=2)
    rng = random.Random(0)
    answer_a_batch(batcher, rng, 2, queued_meanwhile=(2, 3))  # a full batch queued meanwhile
    # 2 queued + 2 answered are awaited, but waiting could not make the batch bigger.
    full = batcher.cut(0, rng, linger_clock_ms=0)
    assert full is not None
    assert full.tickets == (2, 3)
    batcher.acknowledged(full.sequence)
    batcher.submit(item(4), 4)
    assert batcher.cut(0, rng, linger_clock_ms=0) is None
    assert batcher.abandon() == ([4], [])
    assert batcher.linger_until_ms is None


@settings(max_examples=120)
@given(st.data())
def test_every_command_is_sent_once_in_order_with_dense_indexes(data: Any) -> None:
    pipeline_max = data.draw(st.integers(1, 4))
    batcher: Batcher[int] = Batcher(
        epoch=2,
        next_index=data.draw(st.integers(1, 1000)),
        pipeline_batches_max=pipeline_max,
        outstanding_batches_max=pipeline_max + data.draw(st.integers(0, 3)),
        batch_commands_max=data.draw(st.integers(1, 8)),
        batch_bytes_max=data.draw(st.integers(200, 400)),
        linger_ms=(linger_ms := data.draw(st.sampled_from([0, 0, 3]))),
    )
    clock_ms = 0
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    submitted: list[int] = []
    sent: list[OutgoingBatch[int]] = []
    acked = 0
    now_ms = 0
    expected_index = batcher.next_index
    for _ in range(data.draw(st.integers(1, 40))):
        action = data.draw(st.sampled_from(["submit", "cut", "ack"]))
        now_ms += data.draw(st.integers(-5, 10))
        if action == "submit":
            for _ in range(data.draw(st.integers(1, 5))):
                number = len(submitted)
                batcher.submit(item(number, data.draw(st.integers(0, 40))), number)
                submitted.append(number)
        elif action == "cut":
            had_room = batcher.outstanding_count < pipeline_max
            had_work = batcher.pending_count > 0
            clock_ms += data.draw(st.integers(0, 2))
            due = batcher.due(clock_ms)
            batch = batcher.cut(now_ms, rng, linger_clock_ms=clock_ms)
            assert (batch is not None) == due
            # Room and work mean a batch now, unless waiting for answered clients
            # (and never past the linger).
            if had_room and had_work and batch is None:
                until_ms = batcher.linger_until_ms
                assert linger_ms
                assert until_ms is not None
                assert clock_ms < until_ms <= clock_ms + linger_ms
            if not had_work:
                assert batch is None
            if batch is not None:
                assert batch.first_index == expected_index
                expected_index = batch.next_index
                decoded = decode_batch(batch.payload)
                assert [i.args[0] for i in decoded.items] == list(batch.tickets)  # type: ignore[union-attr]
                assert decoded.first_index == batch.first_index
                if sent:
                    assert decoded.timestamp_ms >= decode_batch(sent[-1].payload).timestamp_ms
                sent.append(batch)
        elif batcher.outstanding_count:
            batch = batcher.acknowledged(sent[acked].sequence)
            assert batch is sent[acked]
            acked += 1
        assert batcher.outstanding_count == len(sent) - acked
    while batcher.outstanding_count or batcher.pending_count:
        if batcher.outstanding_count:
            batcher.acknowledged(sent[acked].sequence)
            acked += 1
        clock_ms += linger_ms
        batch = batcher.cut(now_ms, rng, linger_clock_ms=clock_ms)
        if batch is not None:
            assert batch.first_index == expected_index
            expected_index = batch.next_index
            sent.append(batch)
    delivered = [ticket for batch in sent for ticket in batch.tickets]
    assert delivered == submitted
    assert [batch.sequence for batch in sent] == list(range(len(sent)))


def test_a_batch_of_items_submitted_with_their_decoded_form_is_given_decoded() -> None:
    batcher: Batcher[int] = Batcher(epoch=3, next_index=9, pipeline_batches_max=1)
    batcher.submit(encode_leader_start("r1"), 0, LeaderStart("r1"))
    [marker] = drain(batcher, now_ms=5)
    batcher.acknowledged(marker.sequence)
    for number in range(1, 4):
        args = [b"key%d" % number, b"v" * number]
        encoded = encode_command("set", args, client_id=b"c", seq=number, ack_seq=number - 1)
        batcher.submit(
            encoded,
            number,
            decoded_command("set", args, None, client_id=b"c", seq=number, ack_seq=number - 1),
        )
    [commands] = drain(batcher, now_ms=6)
    for batch in (marker, commands):
        assert batch.batch is not None
        assert batch.batch == decode_batch(batch.payload)  # seed and timestamp included


def test_a_batch_with_an_item_of_unknown_decoding_is_left_to_decode() -> None:
    batcher: Batcher[int] = Batcher(epoch=1, next_index=1)
    batcher.submit(
        encode_command("op", [b"k"]),
        1,
        decoded_command("op", [b"k"], None, client_id=None, seq=None, ack_seq=None),
    )
    batcher.submit(item(2), 2)
    [batch] = drain(batcher)
    assert batch.tickets == (1, 2)
    assert batch.batch is None
