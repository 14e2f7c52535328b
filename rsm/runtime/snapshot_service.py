"""A replica's snapshot work: take, load, schedule, truncate, collect.

`SnapshotService` belongs to one `Replica` and runs inside its task group:

* `watch` keeps the replica's copy of the snapshots znode current (one
  ZooKeeper watch), so policy and truncation decisions cost no reads.
* `take` captures the state at the replica's applied position
  (rsm/snapshots/capture.py), writes it to a new ledger and registers it
  (rsm/snapshots/store.py).  One at a time per replica.  `policy_loop` calls it
  when the policy says a snapshot is due and this replica is the
  snapshotter (rsm/core/snapshot_policy.py); `rsm snapshot create` calls it
  through the replica's SNAPSHOT request.
* `load_newest` restores the newest valid snapshot above the replica's
  applied index (rsm/snapshots/loader.py) and installs it in the `Applier`:
  at start, and when the log was truncated past what the replica applied.
  A corrupt snapshot is skipped for the previous one, with an error logged
  (`rsm.snapshot_skipped`).  A replica whose state is at or past the newest
  snapshot does not reload.
* `truncation_loop` runs while the replica leads: it gives up pending
  snapshots whose writer vanished, truncates the log below the newest durable
  snapshot outside the retention window (through the `LeaderTerm`, which owns
  the log's version), and deletes garbage ledgers.

Everything external is injected (the store, the ledger client, the wall
clock, the machine factory); time is read through anyio; the capture strategy
is a setting, so the seeded simulation runs all of this inline.

Invariants: the live state changes only through `Applier.install`, and only
forward; a snapshot is registered only after its ledger is closed; the log is
truncated only below a registered snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from bookie.errors import BookieError
from bookie.logs import emit
from rsm import limits
from rsm.config import ReplicaConfig
from rsm.core import snapshot_manifest
from rsm.core.snapshot_format import CODEC_CUSTOM, CODEC_DEFAULT, SnapshotHeader
from rsm.core.snapshot_manifest import (
    Manifest,
    SnapshotAbandoned,
    SnapshotsFull,
    SnapshotsValue,
)
from rsm.core.snapshot_policy import SnapshotPolicy, plan_truncation
from rsm.core.state_machine import StateMachine
from rsm.errors import RsmError, Unavailable
from rsm.runtime.applier import Applier
from rsm.runtime.leader_term import LeaderTerm
from rsm.runtime.transient import is_transient
from rsm.snapshots.capture import FORK, INLINE, capture, fork_available
from rsm.snapshots.loader import Restored, load, machine_name
from rsm.snapshots.store import SnapshotStore, manifest_of, pending_ledger

logger = logging.getLogger(__name__)

MachineFactory = Callable[[], StateMachine]


def capture_strategy(config: ReplicaConfig) -> str:
    """The strategy the setting names ("auto": fork where the platform has it)."""
    if config.snapshot_capture == "auto":
        return FORK if fork_available() else INLINE
    return config.snapshot_capture


class SnapshotService:
    """The snapshot work of one replica (see the module docstring)."""

    def __init__(
        self,
        *,
        app: str,
        replica_id: str,
        snapshots: SnapshotStore,
        applier: Applier,
        config: ReplicaConfig,
        machine_factory: MachineFactory,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        self._app = app
        self._replica_id = replica_id
        self.store = snapshots
        self._applier = applier
        self._config = config
        self._machine_factory = machine_factory
        self._wall_clock_ms = wall_clock_ms
        self._strategy = capture_strategy(config)
        self._policy = SnapshotPolicy(
            config.snapshot_every_commands,
            config.snapshot_every_log_bytes,
            config.snapshot_every_ms,
            config.snapshot_log_growth_percent,
        )
        self._lock = anyio.Lock()
        self.value = SnapshotsValue()
        """The snapshots znode as last seen."""
        self._version = -2
        """The version `value` was read or written at (-1: absent, -2: never seen)."""
        self._changed = anyio.Event()
        self.taken = 0
        self.loaded = 0
        self.skipped = 0
        self.truncations = 0
        self.last_taken: dict[str, Any] | None = None
        self.last_loaded: dict[str, Any] | None = None
        self.last_error: str | None = None

    def status(self) -> dict[str, Any]:
        newest = self.value.newest
        return {
            "strategy": self._strategy,
            "newest_index": None if newest is None else newest.index,
            "registered": len(self.value.snapshots),
            "taken": self.taken,
            "loaded": self.loaded,
            "skipped": self.skipped,
            "truncations": self.truncations,
            "garbage": len(self.value.garbage),
            "last_taken": self.last_taken,
            "last_loaded": self.last_loaded,
            "last_error": self.last_error,
        }

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def _wait_change(self, timeout_s: float) -> None:
        with anyio.move_on_after(timeout_s):
            await self._changed.wait()

    # --- the znode ----------------------------------------------------------------------------

    async def refresh(self) -> SnapshotsValue:
        value, version = await self.store.read()
        self._seen(value, version)
        return value

    def _seen(self, value: SnapshotsValue, version: int) -> None:
        """Keep `value` if it is newer than the one kept: reads and writes of several tasks
        complete in any order, and an older one must not hide a newer one."""
        if version > self._version:
            self._version = version
            if value != self.value:
                self.value = value
                self._notify()

    async def watch(self) -> None:
        """Keep `value` current, forever (transient errors are waited out)."""
        while True:
            try:
                value, version = await self.store.read()
                self._seen(value, version)
                await self.store.watch(version)
            except Exception as error:
                if not is_transient(error):
                    raise
                await anyio.sleep(self._config.retry_delay_ms / 1000)

    # --- taking -------------------------------------------------------------------------------

    async def take(self, reason: str = "requested") -> Manifest:
        """Snapshot the state at the applied position now; its manifest once registered.

        When the newest registered snapshot is already at (or past) this
        replica's applied index, that one is returned and nothing is written.
        """
        async with self._lock:
            applier = self._applier
            newest = (await self.refresh()).newest
            if newest is not None and newest.index >= applier.applied_index:
                return newest
            if applier.applied_index == 0:
                raise Unavailable("nothing was applied yet: there is no state to snapshot")
            try:
                return await self._take(reason)
            except (RsmError, BookieError, SnapshotsFull, SnapshotAbandoned) as error:
                self.last_error = f"{type(error).__name__}: {error}"
                emit(logger, logging.WARNING, "rsm.snapshot_failed", error=self.last_error)
                if isinstance(error, RsmError | BookieError):
                    raise
                raise Unavailable(f"the snapshot could not be registered: {error}") from None

    async def _take(self, reason: str) -> Manifest:
        applier = self._applier
        config = self._config
        started_s = anyio.current_time()
        async with pending_ledger(
            self.store,
            replica_id=self._replica_id,
            started_ms=self._wall_clock_ms(),
        ) as handle:
            # From here to the capture nothing awaits: the header describes
            # exactly the state the capture sees.
            machine = applier.machine
            sessions = applier.sessions
            position = applier.position
            header = SnapshotHeader(
                app=self._app,
                index=position.index,
                time_ms=position.time_ms,
                epoch=position.epoch,
                cursor=None
                if applier.cursor is None
                else (applier.cursor.ledger_id, applier.cursor.entry_id),
                machine=machine_name(type(machine)),
                codec=CODEC_DEFAULT
                if type(machine).snapshot is StateMachine.snapshot
                else CODEC_CUSTOM,
                clock_ms=sessions.clock_ms,
                sessions=len(sessions),
                replica_id=self._replica_id,
                created_ms=self._wall_clock_ms(),
            )
            async with capture(
                self._strategy, machine, header, sessions, config.snapshot_chunk_bytes
            ) as captured:
                written = await self.store.write_ledger(handle, captured.payloads())
                result = captured.result
            assert result is not None
            manifest = manifest_of(header, written, result)
            value, version = await self.store.update(
                lambda current: snapshot_manifest.register(
                    current, manifest, kept=config.snapshots_kept
                )
            )
        self._seen(value, version)
        write_s = anyio.current_time() - started_s
        self.taken += 1
        self.last_taken = {
            "index": manifest.index,
            "ledger_id": manifest.ledger_id,
            "size_bytes": manifest.size_bytes,
            "pause_ms": round(captured.pause_ms, 3),
            "duration_ms": round(write_s * 1000),
            "reason": reason,
        }
        emit(logger, logging.INFO, "rsm.snapshot_taken", **self.last_taken)
        if value.garbage:
            await self._collect()
        return manifest

    async def _collect(self) -> None:
        try:
            await self.store.collect()
        except (BookieError, Unavailable) as error:
            emit(logger, logging.WARNING, "rsm.garbage_collect_failed", error=repr(error))

    async def policy_loop(self, is_snapshotter: Callable[[], bool]) -> None:
        """Take scheduled snapshots while this replica is the snapshotter, forever."""
        config = self._config
        interval_s = config.snapshot_check_interval_ms / 1000
        since_ms = self._wall_clock_ms()
        newest_index = -1
        newest_size_bytes = 0
        bytes_baseline = self._applier.log_bytes
        while True:
            await self._wait_change(interval_s)
            newest = self.value.newest
            if newest is not None and newest.index != newest_index:
                # Log bytes are counted from when this replica saw the newest
                # snapshot: an estimate, good enough for a policy.
                newest_index = newest.index
                newest_size_bytes = newest.size_bytes
                since_ms = newest.created_ms
                bytes_baseline = self._applier.log_bytes
            reason = self._policy.due(
                applied_index=self._applier.applied_index,
                newest_index=max(newest_index, 0),
                newest_size_bytes=newest_size_bytes,
                log_bytes_since=self._applier.log_bytes - bytes_baseline,
                now_ms=self._wall_clock_ms(),
                since_ms=since_ms,
            )
            if reason is None or not is_snapshotter():
                continue
            try:
                await self.take(reason)
            except Exception as error:
                if not isinstance(error, RsmError | BookieError):
                    raise
                # Logged by `take`; wait a while before trying again.
                await anyio.sleep(config.retry_delay_ms / 1000)

    # --- loading ------------------------------------------------------------------------------

    async def load_newest(self) -> Restored | None:
        """Install the newest valid snapshot above the applied index; None if there is none.

        Raises what a transient error of ZooKeeper or the bookies raises (the
        caller retries); a snapshot that fails a check, or whose ledger is
        gone, is skipped loudly for the previous one.
        """
        value = await self.refresh()
        applier = self._applier
        for manifest in value.newest_first()[: limits.snapshot_load_attempts_max]:
            if manifest.index <= applier.applied_index:
                return None  # the state is already as current: no reload
            started_s = anyio.current_time()
            machine = self._machine_factory()
            try:
                restored = await load(
                    self.store, manifest, machine, self._config, threads=self._strategy != INLINE
                )
            except Exception as error:
                if is_transient(error) or isinstance(error, MemoryError | RecursionError):
                    raise
                self.skipped += 1
                self.last_error = f"{type(error).__name__}: {error}"
                emit(
                    logger,
                    logging.ERROR,
                    "rsm.snapshot_skipped",
                    index=manifest.index,
                    ledger_id=manifest.ledger_id,
                    error=self.last_error,
                )
                continue
            if restored.position.index <= applier.applied_index:
                return None  # applied past it meanwhile
            applier.install(restored.machine, restored.sessions, restored.position, restored.cursor)
            self.loaded += 1
            duration_s = anyio.current_time() - started_s
            self.last_loaded = {
                "index": manifest.index,
                "ledger_id": manifest.ledger_id,
                "size_bytes": manifest.size_bytes,
                "duration_ms": round(duration_s * 1000),
            }
            emit(logger, logging.INFO, "rsm.snapshot_loaded", **self.last_loaded)
            return restored
        return None

    # --- truncation (leader) ------------------------------------------------------------------

    async def truncation_loop(self, term: LeaderTerm) -> None:
        """While `term` lasts: expire abandoned pending snapshots, truncate, collect garbage."""
        interval_s = self._config.snapshot_check_interval_ms / 1000
        while term.ended is None:
            try:
                await self._truncation_round(term)
            except Exception as error:
                if not (is_transient(error) or isinstance(error, SnapshotsFull)):
                    raise
                emit(logger, logging.INFO, "rsm.truncation_retry", error=repr(error))
            await self._wait_change(interval_s)

    async def _truncation_round(self, term: LeaderTerm) -> None:
        config = self._config
        store = self.store
        value, version = await store.read()
        self._seen(value, version)
        now_ms = self._wall_clock_ms()
        expired = snapshot_manifest.expire_pending(
            value, now_ms=now_ms, grace_ms=config.snapshot_orphan_grace_ms
        )
        if expired != value:
            emit(
                logger,
                logging.WARNING,
                "rsm.snapshot_orphans",
                ledger_ids=sorted(set(expired.garbage) - set(value.garbage)),
            )
            value, version = await store.update(
                lambda current: snapshot_manifest.expire_pending(
                    current, now_ms=now_ms, grace_ms=config.snapshot_orphan_grace_ms
                )
            )
            self._seen(value, version)
        if config.truncation and term.accepting:
            position = self._applier.position
            plan = plan_truncation(
                term.log,
                value,
                applied_index=position.index,
                applied_time_ms=position.time_ms,
                retention_commands=config.retention_commands,
                retention_ms=config.retention_ms,
            )
            if plan is not None and await term.truncate(
                plan.log, [store.snapshots_op(plan.snapshots, version)]
            ):
                self.truncations += 1
                value = plan.snapshots
                self._seen(value, version + 1)
                emit(
                    logger,
                    logging.INFO,
                    "rsm.truncated",
                    snapshot_index=plan.snapshot.index,
                    first_index=plan.log.first_index,
                    ledger_ids=[s.ledger_id for s in plan.removed],
                )
        if value.garbage:
            await self._collect()
