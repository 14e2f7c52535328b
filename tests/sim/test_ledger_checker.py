"""The ledger checker catches each kind of violation it names, and accepts a correct history.

Each test feeds `LedgerChecker` a short history by hand, as the simulated
workload would report it, and checks the invariant the checker names; so a
checker that silently stopped checking something fails here, not only in a
simulation that happens to need it.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from bookie.core.metadata import LedgerMetadata, LedgerState, close, new_ledger, start_recovery
from bookie.testing.ledger_checker import InvariantViolation, LedgerChecker
from bookie.testing.simcluster import Trace
from bookie.wire.packet import DigestType

pytestmark = pytest.mark.anyio

PAYLOADS = [b"zero", b"one", b"two!", b"three"]


def open_record() -> LedgerMetadata:
    return new_ledger(
        7,
        ("bookie-1", "bookie-2", "bookie-3"),
        write_quorum=2,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=b"hash",
        ctime_ms=0,
    )


def closed_record(last_entry_id: int) -> LedgerMetadata:
    length = sum(len(payload) for payload in PAYLOADS[: last_entry_id + 1])
    return close(start_recovery(open_record()), last_entry_id, length)


class World:
    """A checker with a writer whose LAC the test sets, and what it reported."""

    def __init__(self) -> None:
        self.writer_lac = -1
        self.violations: list[InvariantViolation] = []
        self.checker = LedgerChecker(
            42, Trace(), replay="replay 42", on_violation=self.violations.append
        )
        self.checker.attach_writer(lambda: self.writer_lac)
        self.checker.on_metadata(open_record(), 0)

    def push_all(self) -> None:
        for entry_id, payload in enumerate(PAYLOADS):
            self.checker.on_pushed(entry_id, payload)

    def acknowledge(self, lac: int) -> None:
        self.writer_lac = lac
        self.checker.on_writer_lac()


def violated(world: World, invariant: str) -> InvariantViolation:
    assert world.violations, "the checker reported nothing"
    violation = world.violations[0]
    assert violation.invariant == invariant
    assert violation.seed == 42
    assert "replay 42" in str(violation)
    return violation


async def test_a_correct_history_passes_every_check() -> None:
    world = World()
    world.push_all()
    world.acknowledge(1)
    world.checker.on_reader_lac("reader", 1, closed=False)
    world.checker.on_reader_entry("reader", 0, PAYLOADS[0], 1, in_order=True)
    world.checker.on_reader_entry("reader", 1, PAYLOADS[1], 1, in_order=True)
    world.checker.on_metadata(start_recovery(open_record()), 1)
    world.checker.on_metadata(closed_record(2), 2)
    world.checker.on_recovered("recoverer", closed_record(2))
    world.checker.on_reader_lac("reader", 2, closed=True)
    world.checker.on_reader_entry("reader", 2, PAYLOADS[2], 2, in_order=True)
    world.checker.on_reader_done("reader")
    world.checker.on_read_back("auditor", 0, PAYLOADS[:3])
    world.checker.check_final()
    assert world.violations == []
    assert world.checker.closed == (2, 4 + 3 + 4)


async def test_an_ack_above_the_close_point_is_caught_even_after_the_close() -> None:
    world = World()
    world.push_all()
    world.acknowledge(1)
    world.checker.on_metadata(closed_record(1), 1)
    with pytest.raises(InvariantViolation):
        world.acknowledge(2)
    violated(world, "no-ack-above-close")


async def test_a_close_below_an_ack_is_caught_when_the_close_is_seen() -> None:
    world = World()
    world.push_all()
    world.acknowledge(3)
    with pytest.raises(InvariantViolation):
        world.checker.on_metadata(closed_record(2), 1)
    violated(world, "no-ack-above-close")


async def test_a_decreasing_writer_lac_is_caught() -> None:
    world = World()
    world.push_all()
    world.acknowledge(2)
    with pytest.raises(InvariantViolation):
        world.acknowledge(1)
    violated(world, "lac-monotonic")


async def test_a_lac_past_the_last_pushed_entry_is_caught() -> None:
    world = World()
    world.checker.on_pushed(0, PAYLOADS[0])
    with pytest.raises(InvariantViolation):
        world.acknowledge(1)
    violated(world, "lac-within-pushed")


async def test_a_fenced_writer_that_gets_another_ack_is_caught() -> None:
    world = World()
    world.push_all()
    world.acknowledge(1)
    world.checker.on_writer_fenced()
    with pytest.raises(InvariantViolation):
        world.acknowledge(2)
    violated(world, "fenced-writer-stays-fenced")


async def test_a_changed_close_point_is_caught() -> None:
    world = World()
    world.push_all()
    world.checker.on_metadata(closed_record(2), 1)
    with pytest.raises(InvariantViolation):
        world.checker.on_metadata(closed_record(3), 2)
    violated(world, "recoverers-agree")


async def test_a_recoverer_that_disagrees_with_the_record_is_caught() -> None:
    world = World()
    world.push_all()
    world.checker.on_metadata(closed_record(2), 1)
    with pytest.raises(InvariantViolation):
        world.checker.on_recovered("recoverer", closed_record(1))
    violated(world, "recoverers-agree")


async def test_a_length_that_does_not_match_the_entries_is_caught() -> None:
    world = World()
    world.push_all()
    with pytest.raises(InvariantViolation):
        world.checker.on_metadata(replace(closed_record(2), length=5), 1)
    violated(world, "close-length")


async def test_a_state_that_goes_back_is_caught() -> None:
    world = World()
    world.checker.on_metadata(start_recovery(open_record()), 1)
    with pytest.raises(InvariantViolation):
        world.checker.on_metadata(replace(open_record(), state=LedgerState.OPEN), 2)
    violated(world, "metadata-transitions")


async def test_an_entry_above_the_readers_lac_is_caught() -> None:
    world = World()
    world.push_all()
    world.acknowledge(2)
    with pytest.raises(InvariantViolation):
        world.checker.on_reader_entry("reader", 0, PAYLOADS[0], -1, in_order=True)
    violated(world, "read-within-lac")


async def test_wrong_bytes_for_an_entry_are_caught() -> None:
    world = World()
    world.push_all()
    world.acknowledge(2)
    with pytest.raises(InvariantViolation):
        world.checker.on_reader_entry("reader", 0, b"other", 2, in_order=True)
    violated(world, "read-bytes")


async def test_a_reader_lac_above_the_writers_is_caught() -> None:
    world = World()
    world.push_all()
    world.acknowledge(1)
    with pytest.raises(InvariantViolation):
        world.checker.on_reader_lac("reader", 2, closed=False)
    violated(world, "reader-lac-confirmed")


async def test_a_reader_that_skips_an_entry_is_caught() -> None:
    world = World()
    world.push_all()
    world.acknowledge(2)
    with pytest.raises(InvariantViolation):
        world.checker.on_reader_entry("reader", 1, PAYLOADS[1], 2, in_order=True)
    violated(world, "reader-order")


async def test_a_closed_ledger_that_reads_back_other_bytes_is_caught() -> None:
    world = World()
    world.push_all()
    world.checker.on_metadata(closed_record(2), 1)
    with pytest.raises(InvariantViolation):
        world.checker.on_read_back("auditor", 1, [PAYLOADS[1], b"two?"])
    violated(world, "acked-in-closed-ledger")


async def test_a_ledger_that_never_closed_fails_the_final_check() -> None:
    world = World()
    with pytest.raises(InvariantViolation):
        world.checker.check_final()
    violated(world, "liveness")


async def test_only_the_first_violation_is_reported() -> None:
    world = World()
    with pytest.raises(InvariantViolation):
        world.checker.check_final()
    with pytest.raises(InvariantViolation):
        world.checker.on_pushed(5, b"")
    assert len(world.violations) == 1
    assert world.checker.violation is world.violations[0]
