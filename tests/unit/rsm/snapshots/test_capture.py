"""Capture strategies: fork and inline write the same bytes of the state as it was at the
capture, whatever happens to it afterwards; a failing child is reported; a capture given up
half-way leaves no child behind."""

from __future__ import annotations

import os
import threading
from collections.abc import AsyncIterator

import anyio
import pytest

from rsm.core.sessions import Outcome, SessionTable
from rsm.core.snapshot_format import (
    SECTION_STATE,
    FrameworkDecoder,
    SnapshotHeader,
    SnapshotReader,
)
from rsm.core.snapshot_state import restore_state
from rsm.core.state_machine import StateMachine
from rsm.errors import BadSnapshotState
from rsm.snapshots.capture import FORK, INLINE, capture

pytestmark = pytest.mark.anyio

CHUNK_BYTES = 4096


class Store(StateMachine):
    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}


def store_with(count: int) -> Store:
    machine = Store()
    machine.values = {n.to_bytes(4, "big"): b"v" * 50 for n in range(count)}
    return machine


def sessions() -> SessionTable:
    table = SessionTable()
    table.begin(b"client", 1, 0, 5)
    table.record(b"client", 1, Outcome(value=7))
    return table


HEADER = SnapshotHeader(
    app="app",
    index=42,
    time_ms=5,
    epoch=1,
    cursor=(3, 9),
    machine="tests:Store",
    codec="default",
    clock_ms=5,
    sessions=1,
    replica_id="r",
    created_ms=0,
)


async def collect(payloads: AsyncIterator[bytes]) -> list[bytes]:
    return [payload async for payload in payloads]


@pytest.mark.parametrize("strategy", [FORK, INLINE])
async def test_the_capture_is_the_state_at_that_moment(strategy: str) -> None:
    machine = store_with(5_000)
    expected = dict(machine.values)
    async with capture(strategy, machine, HEADER, sessions(), CHUNK_BYTES) as captured:
        # The replica goes on applying while the snapshot is written.
        machine.values.clear()
        machine.values[b"new"] = b"state"
        payloads = await collect(captured.payloads())
    result = captured.result
    assert result is not None
    assert result.summary.chunk_count == len(payloads) > 10
    reader = SnapshotReader()
    framework = FrameworkDecoder()
    state = bytearray()
    for payload in payloads:
        section, data = reader.take(payload)
        if section == SECTION_STATE:
            state += data
        else:
            framework.feed(data)
    summary = reader.finish(
        result.summary.chunk_count, result.summary.size_bytes, result.summary.content_sha256
    )
    assert framework.finish() == HEADER
    assert framework.sessions[0][0] == b"client"
    restored = Store()
    restore_state(restored, [bytes(state)])
    assert restored.values == expected
    assert result.state_hash == summary.state_sha256 == restored.state_hash()
    assert captured.pause_ms >= 0


async def test_fork_and_inline_write_the_same_bytes() -> None:
    machine = store_with(3_000)
    written: dict[str, list[bytes]] = {}
    for strategy in (FORK, INLINE):
        async with capture(strategy, machine, HEADER, sessions(), CHUNK_BYTES) as captured:
            written[strategy] = await collect(captured.payloads())
    assert written[FORK] == written[INLINE]


class Broken(StateMachine):
    def __init__(self) -> None:
        self.lock = threading.Lock()


@pytest.mark.parametrize("strategy", [FORK, INLINE])
async def test_a_state_that_cannot_be_encoded_fails_the_capture(strategy: str) -> None:
    with pytest.raises(BadSnapshotState, match="lock"):
        async with capture(strategy, Broken(), HEADER, sessions(), CHUNK_BYTES) as captured:
            await collect(captured.payloads())


class Custom(StateMachine):
    """Its own stream and hash: the capture calls its state_hash."""

    def __init__(self) -> None:
        self.text = "hello"

    def snapshot(self):  # type: ignore[no-untyped-def]
        yield self.text.encode()

    def state_hash(self) -> bytes:
        return b"custom-" + self.text.encode()


async def test_an_application_hash_is_taken_at_the_capture() -> None:
    machine = Custom()
    async with capture(FORK, machine, HEADER, sessions(), CHUNK_BYTES) as captured:
        machine.text = "changed"
        await collect(captured.payloads())
    assert captured.result is not None
    assert captured.result.state_hash == b"custom-hello"


def children() -> set[int]:
    """The pids of this process's children (Linux /proc)."""
    pid = os.getpid()
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listing:
            found |= {int(child) for child in listing.read().split()}
    return found


async def test_a_capture_given_up_half_way_leaves_no_child() -> None:
    before = children()
    machine = store_with(50_000)
    with anyio.move_on_after(30):
        async with capture(FORK, machine, HEADER, sessions(), CHUNK_BYTES) as captured:
            async for _payload in captured.payloads():
                break
    assert captured.result is None
    assert children() <= before
