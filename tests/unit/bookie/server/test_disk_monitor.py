"""Read-only decisions (hysteresis between the two disk marks, forced and failed storage)
and disk measurement."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import DiskFull, MetadataUnavailable, StorageError
from bookie.server.disk_monitor import DiskMonitor, ReadOnlyState, measure

THRESHOLD = 0.9
LOW_WATER = 0.8


def after(state: ReadOnlyState, usage: float, *, failed: bool = False) -> ReadOnlyState:
    return state.after_check(usage, THRESHOLD, LOW_WATER, storage_failed=failed)


def test_threshold_and_low_water_mark() -> None:
    state = ReadOnlyState()
    state = after(state, 0.85)
    assert not state.read_only
    state = after(state, 0.9)
    assert state.read_only
    assert state.reasons == ["disk_full"]
    state = after(state, 0.85)
    assert state.read_only, "between the marks a full bookie stays read-only"
    state = after(state, 0.79)
    assert not state.read_only


@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=40))
def test_disk_full_follows_the_last_mark_crossed(usages: list[float]) -> None:
    state = ReadOnlyState()
    last_crossed: bool | None = None
    for usage in usages:
        state = after(state, usage)
        if usage >= THRESHOLD:
            last_crossed = True
        elif usage < LOW_WATER:
            last_crossed = False
        assert state.disk_full == bool(last_crossed)
        assert not state.forced
        assert not state.storage_failed


def test_forced_and_failed_override_the_disks() -> None:
    forced = after(ReadOnlyState(forced=True), 0.1)
    assert forced.read_only
    assert forced.reasons == ["forced"]
    failed = after(ReadOnlyState(), 0.1, failed=True)
    assert failed.reasons == ["storage_failed"]
    assert after(failed, 0.1).storage_failed, "a failed storage never recovers in-process"


def test_measure_counts_each_file_system_once(tmp_path: Path) -> None:
    first = tmp_path / "a"
    second = tmp_path / "b"
    first.mkdir()
    second.mkdir()
    one = measure([first])
    both = measure([first, second])
    assert both.total_bytes == one.total_bytes
    status = os.statvfs(first)
    assert one.total_bytes == status.f_blocks * status.f_frsize
    assert 0.0 <= one.used_fraction <= 1.0
    assert both.fullest_dir in (first, second)
    with pytest.raises(FileNotFoundError):
        measure([tmp_path / "missing"])


@pytest.mark.anyio
async def test_monitor_applies_changes_and_retries_failed_ones(tmp_path: Path) -> None:
    failure: list[StorageError] = []
    monitor = DiskMonitor(
        [tmp_path],
        threshold=1.0,
        low_water_mark=0.999,
        interval_ms=10,
        forced=False,
        storage_failure=lambda: failure[0] if failure else None,
    )
    assert monitor.initial_state().read_only is False
    applied: list[bool] = []
    refusals = [MetadataUnavailable("zk down")]
    changed = anyio.Event()

    async def apply(value: bool) -> None:
        if refusals:
            raise refusals.pop()
        applied.append(value)
        changed.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(monitor.run, apply)
        monitor.reconfigure(threshold=1.0, low_water_mark=0.999, forced=True)
        with anyio.fail_after(5):
            await changed.wait()
        assert applied == [True]
        assert monitor.applied is True
        changed = anyio.Event()
        monitor.reconfigure(threshold=1.0, low_water_mark=0.999, forced=False)
        with anyio.fail_after(5):
            await changed.wait()
        assert applied == [True, False]
        changed = anyio.Event()
        failure.append(DiskFull("no space"))
        with anyio.fail_after(5):
            await changed.wait()
        assert applied == [True, False, True]
        assert monitor.state.reasons == ["storage_failed"]
        tasks.cancel_scope.cancel()
