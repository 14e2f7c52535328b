"""Read-only decisions (hysteresis between the two disk marks, forced and failed storage)
and disk measurement."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import anyio
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import DiskFull, MetadataUnavailable, StorageError
from bookie.logs import record_fields
from bookie.server import disk_monitor
from bookie.server.disk_monitor import DiskMonitor, DiskUsage, ReadOnlyState, measure

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


def fake_statvfs(blocks: int, free: int, available: int) -> os.statvfs_result:
    """A file system of 4 KiB blocks: `free` counts root's reserve, `available` does not."""
    return os.statvfs_result((4096, 4096, blocks, free, available, 100, 50, 50, 0, 255))


@pytest.mark.parametrize(
    ("free", "available", "expected"),
    [
        (1000, 1000, 0.0),
        (525, 475, 0.5),
        (60, 10, 940 / 950),  # df: 99%; 0.94 if root's reserve counted as free
        (50, 0, 1.0),  # only root's reserve left: df 100%, and the bookie's writes fail
    ],
)
def test_measure_counts_usage_as_df_does(
    tmp_path: Path, free: int, available: int, expected: float
) -> None:
    # 1000 blocks, 50 of them (5%, ext4's default) reserved for root: a bookie that
    # is not root gets ENOSPC once `available` is 0, whatever `free` says.
    usage = measure([tmp_path], statvfs=lambda _: fake_statvfs(1000, free, available))
    assert usage.used_fraction == pytest.approx(expected)
    assert usage.free_bytes == available * 4096
    assert usage.total_bytes == 1000 * 4096


def test_threshold_reached_before_unprivileged_writes_fail(tmp_path: Path) -> None:
    """What the operations review saw: df 99%, yet the bookie stayed writable at 0.95."""
    usage = measure([tmp_path], statvfs=lambda _: fake_statvfs(1000, 60, 10))
    state = ReadOnlyState().after_check(usage.used_fraction, 0.95, 0.9, storage_failed=False)
    assert state.reasons == ["disk_full"]


class _Events(logging.Handler):
    """The disk monitor's events, in a stream a test awaits."""

    def __init__(self, send: MemoryObjectSendStream[tuple[str, Mapping[str, object]]]) -> None:
        super().__init__(logging.DEBUG)
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        self._send.send_nowait(record_fields(record))


@pytest.fixture
def monitor_events() -> Iterator[MemoryObjectReceiveStream[tuple[str, Mapping[str, object]]]]:
    send, receive = anyio.create_memory_object_stream[tuple[str, Mapping[str, object]]](math.inf)
    handler = _Events(send)
    monitor_logger = logging.getLogger(disk_monitor.__name__)
    level = monitor_logger.level
    monitor_logger.setLevel(logging.INFO)
    monitor_logger.addHandler(handler)
    try:
        yield receive
    finally:
        monitor_logger.removeHandler(handler)
        monitor_logger.setLevel(level)
        send.close()
        receive.close()


@pytest.mark.anyio
async def test_a_change_of_reasons_alone_is_logged(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    monitor_events: MemoryObjectReceiveStream[tuple[str, Mapping[str, object]]],
) -> None:
    """Read-only for `disk_full`, then storage fails, then space is freed: the flag
    never flips, but each change of the reasons is an event an operator can wait for."""
    used = [0.99]

    def fake_measure(dirs: Iterable[Path]) -> DiskUsage:
        return DiskUsage(used[0], tmp_path, 0, 1)

    monkeypatch.setattr(disk_monitor, "measure", fake_measure)
    failure: list[StorageError] = []
    monitor = DiskMonitor(
        [tmp_path],
        threshold=0.95,
        low_water_mark=0.9,
        interval_ms=3_600_000,
        forced=False,
        storage_failure=lambda: failure[0] if failure else None,
    )
    assert monitor.initial_state().reasons == ["disk_full"]
    applied: list[bool] = []

    async def apply(value: bool) -> None:
        applied.append(value)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(monitor.run, apply)
        failure.append(DiskFull("entry-log write: [Errno 28] No space left on device"))
        monitor.force(False)  # wakes the monitor: a check now
        with anyio.fail_after(5):
            event, fields = await monitor_events.receive()
        assert event == "bookie.read_only"
        assert fields["reasons"] == ["disk_full", "storage_failed"]
        assert fields["previous_reasons"] == ["disk_full"]
        assert "No space left" in str(fields["storage_failure"])
        used[0] = 0.5
        monitor.force(False)
        with anyio.fail_after(5):
            event, fields = await monitor_events.receive()
        assert event == "bookie.read_only", "storage failed: read-only until a restart"
        assert fields["reasons"] == ["storage_failed"]
        assert "restart" in str(fields["hint"])
        assert applied == [], "the flag never flipped: nothing to switch"
        tasks.cancel_scope.cancel()


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
