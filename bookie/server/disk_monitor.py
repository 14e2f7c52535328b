"""Read-only mode: when the bookie refuses new data, and measuring its disks.

A bookie is read-only (normal adds and explicit LACs get EREADONLY; reads,
fencing and recovery adds go on; its registration sits under
`available/readonly/`) for any of three reasons:

* `forced`: the operator asked for it (`read_only = true`, `--read-only`);
* `disk_full`: the fullest data disk reached `disk_usage_threshold`.  It stays
  set until every data disk is back under `disk_usage_low_water_mark`: the gap
  between the two marks (hysteresis) keeps a disk hovering at the threshold
  from flipping the bookie at every check;
* `storage_failed`: a journal or entry-log write or fsync failed.  Storage
  stops taking writes until a restart (docs/storage-format.md), so the bookie
  stays read-only for the rest of the process's life.

`ReadOnlyState` is the decision, pure and unit-tested; `DiskMonitor` runs it
every `disk_check_interval_ms` (and at once when woken, e.g. by a reloaded
configuration) and hands every change of the outcome to an `apply` callback.
An `apply` that raises a `MetadataError` (ZooKeeper unreachable) is retried at
the next check, so the registration catches up with the state once it can.

Disk usage is measured per file system, not per directory: directories on
one disk count once in the bookie's free and total bytes.  A file system's
usage is reckoned as `df` reckons it, used / (used + available to unprivileged
users): blocks reserved for root (5% by default on ext4) count neither as used
nor as available, so the fraction reaches 1.0 when a write by the bookie (not
root) fails with ENOSPC, and `disk_usage_threshold` = 0.95 means `df`'s 95%.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import anyio

from bookie.errors import MetadataError, StorageError
from bookie.logs import emit

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DiskUsage:
    """The data disks at one moment."""

    used_fraction: float
    """Usage of the fullest file system, as `df` reports it: used / (used + available)."""
    fullest_dir: Path
    free_bytes: int
    """Available bytes, summed over the distinct file systems."""
    total_bytes: int


def used_fraction(used_bytes: int, available_bytes: int) -> float:
    """The fraction of a file system `disk_usage_threshold` is compared with, as df counts
    it: root's reserve (free but not available) is neither used nor available."""
    total = used_bytes + available_bytes
    return used_bytes / total if total else 1.0


def measure(
    dirs: Iterable[Path], *, statvfs: Callable[[Path], os.statvfs_result] = os.statvfs
) -> DiskUsage:
    """Usage of the file systems holding `dirs` (which must exist); raises OSError.

    `statvfs` is `os.statvfs` but for tests."""
    seen: set[int] = set()
    fullest: tuple[float, Path] | None = None
    free_bytes = 0
    total_bytes = 0
    for path in dirs:
        status = statvfs(path)
        device = os.stat(path).st_dev
        total = status.f_blocks * status.f_frsize
        used = (status.f_blocks - status.f_bfree) * status.f_frsize
        available = status.f_bavail * status.f_frsize
        fraction = used_fraction(used, available)
        if fullest is None or fraction > fullest[0]:
            fullest = (fraction, path)
        if device not in seen:
            seen.add(device)
            free_bytes += status.f_bavail * status.f_frsize
            total_bytes += total
    assert fullest is not None, "a bookie has data directories"
    return DiskUsage(fullest[0], fullest[1], free_bytes, total_bytes)


@dataclass(frozen=True, slots=True)
class ReadOnlyState:
    """Why the bookie is read-only, if it is (see the module docstring)."""

    forced: bool = False
    disk_full: bool = False
    storage_failed: bool = False

    @property
    def read_only(self) -> bool:
        return self.forced or self.disk_full or self.storage_failed

    @property
    def reasons(self) -> list[str]:
        return [
            name
            for name, active in (
                ("forced", self.forced),
                ("disk_full", self.disk_full),
                ("storage_failed", self.storage_failed),
            )
            if active
        ]

    def after_check(
        self,
        used_fraction: float,
        threshold: float,
        low_water_mark: float,
        *,
        storage_failed: bool,
    ) -> ReadOnlyState:
        """The state after a disk check that found `used_fraction` on the fullest disk."""
        assert 0.0 < low_water_mark < threshold <= 1.0
        if used_fraction >= threshold:
            disk_full = True
        elif used_fraction < low_water_mark:
            disk_full = False
        else:
            disk_full = self.disk_full
        return ReadOnlyState(
            forced=self.forced,
            disk_full=disk_full,
            storage_failed=self.storage_failed or storage_failed,
        )


Apply = Callable[[bool], Awaitable[None]]
"""Makes the bookie read-only (True) or writable (False): server switch and registration."""


class DiskMonitor:
    """Checks the disks periodically and applies read-only changes; run it in a task group."""

    def __init__(
        self,
        dirs: Iterable[Path],
        *,
        threshold: float,
        low_water_mark: float,
        interval_ms: int,
        forced: bool,
        storage_failure: Callable[[], StorageError | None],
    ) -> None:
        assert interval_ms > 0
        self._dirs = tuple(dirs)
        self._threshold = threshold
        self._low_water_mark = low_water_mark
        self._interval_s = interval_ms / 1000
        self._storage_failure = storage_failure
        self._state = ReadOnlyState(forced=forced)
        self._applied = False
        self._wakeup = anyio.Event()
        self._usage: DiskUsage | None = None
        self._logged: tuple[bool, list[str]] = (False, [])
        """The read-only flag and reasons of the last event (or of the initial state)."""

    @property
    def state(self) -> ReadOnlyState:
        return self._state

    @property
    def applied(self) -> bool:
        """The read-only state last applied successfully."""
        return self._applied

    def initial_state(self) -> ReadOnlyState:
        """The state to start the bookie in: checked now, and taken as applied."""
        state = self.check()
        self._applied = state.read_only
        self._logged = (state.read_only, state.reasons)
        return state

    def check(self) -> ReadOnlyState:
        """Measure the disks and update the state (no side effect beyond that)."""
        failure = self._storage_failure()
        try:
            usage = self._usage = measure(self._dirs)
            used_fraction = usage.used_fraction
        except OSError as error:
            # A disk we cannot even stat will not take writes either.
            emit(logger, logging.ERROR, "bookie.disk_check_failed", error=str(error))
            used_fraction = 1.0
        self._state = self._state.after_check(
            used_fraction, self._threshold, self._low_water_mark, storage_failed=failure is not None
        )
        return self._state

    def reconfigure(self, *, threshold: float, low_water_mark: float, forced: bool) -> None:
        """New thresholds or forced switch (a reloaded configuration); checks at once."""
        assert 0.0 < low_water_mark < threshold <= 1.0
        self._threshold = threshold
        self._low_water_mark = low_water_mark
        self._state = ReadOnlyState(
            forced=forced,
            disk_full=self._state.disk_full,
            storage_failed=self._state.storage_failed,
        )
        self._wakeup.set()

    def force(self, forced: bool) -> None:
        """Switch forced read-only mode on or off (the admin API); checks at once."""
        self.reconfigure(
            threshold=self._threshold, low_water_mark=self._low_water_mark, forced=forced
        )

    async def run(self, apply: Apply) -> None:
        """Check every interval (or when woken) and apply each change; never returns.

        A change of the read-only flag is applied (and logged once applied); a change
        of the reasons alone (a bookie read-only for `disk_full` whose storage then
        fails, or whose disk is then freed) needs no switch but is logged as well, so
        the last `bookie.read_only` / `bookie.writable` event always gives the reasons
        in force."""
        while True:
            state = self.check()
            if state.read_only != self._applied:
                await self._apply(apply, state)
            elif state.reasons != self._logged[1]:
                self._log(state)
            with anyio.move_on_after(self._interval_s):
                await self._wakeup.wait()
            self._wakeup = anyio.Event()

    def _fields(self, state: ReadOnlyState) -> dict[str, object]:
        usage = self._usage
        fields: dict[str, object] = {
            "read_only": state.read_only,
            "reasons": state.reasons,
            "previous_reasons": self._logged[1],
        }
        if usage is not None:
            fields["disk_usage"] = round(usage.used_fraction, 4)
            fields["fullest_dir"] = str(usage.fullest_dir)
        if state.storage_failed:
            fields["storage_failure"] = str(self._storage_failure())
            fields["hint"] = (
                "storage takes no writes until the bookie restarts: fix the cause "
                "(free space, replace the disk), then restart it"
            )
        return fields

    async def _apply(self, apply: Apply, state: ReadOnlyState) -> None:
        try:
            await apply(state.read_only)
        except MetadataError as error:
            emit(
                logger,
                logging.WARNING,
                "bookie.read_only_change_delayed",
                error=str(error),
                **self._fields(state),
            )
            return
        self._applied = state.read_only
        self._log(state)

    def _log(self, state: ReadOnlyState) -> None:
        """The event for the state now in force, with its reasons."""
        fields = self._fields(state)
        self._logged = (state.read_only, state.reasons)
        level = logging.ERROR if state.storage_failed else logging.WARNING
        if not state.read_only:
            level = logging.INFO
        emit(logger, level, "bookie.read_only" if state.read_only else "bookie.writable", **fields)
