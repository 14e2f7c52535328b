"""A replica's snapshot work: take, load, schedule, truncate, collect.

`SnapshotService` belongs to one `Replica` and runs inside its task group:

* `watch` keeps the replica's copy of the snapshots znode current (one
  ZooKeeper watch), so policy and truncation decisions cost no reads.
* `take` captures the state at the replica's applied position
  (rsm/snapshots/capture.py), writes it to a new ledger and registers it
  (rsm/snapshots/store.py).  One at a time per replica.  `policy_loop` calls it
  when the policy says a snapshot is due and this replica is the
  snapshotter (rsm/core/snapshot_policy.py); a failure is logged
  (`rsm.snapshot_failed`) and the replica goes on.  `request` runs it for
  `rsm snapshot create` (the replica's SNAPSHOT request) in the replica's task
  group, so that it completes even when the client stops waiting.
* `load_newest` restores the newest valid snapshot above the replica's
  applied index (rsm/snapshots/loader.py) and installs it in the `Applier`:
  at start, and when the log was truncated past what the replica applied.
  A corrupt snapshot is skipped for the previous one, with an error logged
  (`rsm.snapshot_skipped`); so is one no bookie could serve
  `limits.snapshot_load_data_errors_max` times in a row, when the log still
  holds what follows the older state (else the replica waits for the bookies).
  A load that fails while the snapshots znode changed starts over from the
  newer value.  A replica whose state is at or past the newest snapshot does
  not reload.
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
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc

from bookie.errors import BookieError, DigestMismatch, EntryNotAvailable
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


def _log_follows(first_index: int | None, index: int) -> bool:
    """Whether a log beginning at `first_index` (None: not known, taken as 1) holds the
    commands after `index`, so a state at `index` can be replayed forward."""
    return first_index is None or index + 1 >= first_index


class _Superseded:
    """A load found the snapshots znode changed under it: read it again and start over."""


class _Requested:
    """One requested snapshot and the requests waiting for it."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.manifest: Manifest | None = None
        self.error: RsmError | BookieError | None = None


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
        self._data_errors: dict[int, tuple[str, int]] = {}
        """Snapshot ledger id -> (the type of the data error its loads met, how many loads in
        a row met it): see `limits.snapshot_load_data_errors_max`."""
        self._requested_lock = anyio.Lock()
        self._next_requested: _Requested | None = None
        """The requested snapshot that has not started yet: later requests join it."""

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

    async def request(self, task_group: anyio.abc.TaskGroup) -> Manifest:
        """A snapshot asked for from outside (`rsm snapshot create`, `Client.snapshot`): `take`
        run in `task_group` (the replica's own), not in the asking task, so that it completes
        and registers even when the asker stops waiting (its client's deadline passed, its
        connection closed; logged as `rsm.snapshot_request_left`).

        At most one requested snapshot runs at a time and at most one more waits to start:
        a request made while one runs joins the next one, which captures the state after
        every request it serves was made.  Raises what `take` raised.
        """
        requested = self._next_requested
        if requested is None:
            requested = self._next_requested = _Requested()
            task_group.start_soon(self._run_requested, requested)
        try:
            await requested.done.wait()
        except anyio.get_cancelled_exc_class():
            if not requested.done.is_set():
                emit(
                    logger,
                    logging.INFO,
                    "rsm.snapshot_request_left",
                    detail="the asker stopped waiting; the snapshot goes on and is registered",
                )
            raise
        if requested.error is not None:
            raise requested.error
        assert requested.manifest is not None
        return requested.manifest

    async def _run_requested(self, requested: _Requested) -> None:
        async with self._requested_lock:
            if self._next_requested is requested:
                self._next_requested = None  # later requests wait for the next one
            try:
                requested.manifest = await self.take("requested")
            except (RsmError, BookieError) as error:
                requested.error = error  # logged by `take`
            except BaseException:
                # The replica stopping (a cancellation), or a bug that stops it.
                requested.error = Unavailable("the snapshot was stopped before it was done")
                raise
            finally:
                requested.done.set()

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

    async def load_newest(
        self, log_first_index: Callable[[], Awaitable[int]] | None = None
    ) -> Restored | None:
        """Install the newest valid snapshot above the applied index; None if there is none.

        `log_first_index` reads the first index the log still holds; without it the log is
        taken to hold everything.

        * A snapshot that fails a check, or whose ledger is gone, is skipped loudly
          (`rsm.snapshot_skipped`) for the previous one.
        * A failure while the snapshots znode changed (a newer snapshot registered, the
          one being read unregistered and its ledger deleted) starts over from the
          znode read again (`rsm.snapshot_superseded`), at most
          `limits.snapshot_load_rounds_max` times, then `Unavailable`.
        * A transient error is raised (the caller retries), except a data error (no
          bookie could serve a chunk) that the same snapshot met
          `limits.snapshot_load_data_errors_max` times in a row: that snapshot is skipped
          for the next older one, if the log still holds the commands after it (else the
          error is raised, and `rsm.snapshot_unreadable` says why the replica waits).
        """
        for _round in range(limits.snapshot_load_rounds_max):
            value = await self.refresh()
            outcome = await self._load_from(value, log_first_index)
            if not isinstance(outcome, _Superseded):
                return outcome
        raise Unavailable(
            f"the snapshots znode changed under {limits.snapshot_load_rounds_max} loads in a row"
        )

    async def _load_from(
        self, value: SnapshotsValue, log_first_index: Callable[[], Awaitable[int]] | None
    ) -> Restored | _Superseded | None:
        """`load_newest`'s work on one read of the znode."""
        applier = self._applier
        registered = {manifest.ledger_id for manifest in value.snapshots}
        for ledger_id in set(self._data_errors) - registered:
            del self._data_errors[ledger_id]
        unreadable: BaseException | None = None
        """The data error of a snapshot skipped in this round while it may come back."""
        first_index: int | None = None
        manifests = value.newest_first()[: limits.snapshot_load_attempts_max]
        for position, manifest in enumerate(manifests):
            if manifest.index <= applier.applied_index:
                break  # the state is already as current: no reload
            if unreadable is not None and not _log_follows(first_index, manifest.index):
                self._unreadable_wait(first_index, manifest.index)
                raise unreadable
            started_s = anyio.current_time()
            machine = self._machine_factory()
            try:
                restored = await load(
                    self.store, manifest, machine, self._config, threads=self._strategy != INLINE
                )
            except Exception as error:
                if isinstance(error, MemoryError | RecursionError):
                    raise
                if (await self.refresh()).snapshots != value.snapshots:
                    emit(
                        logger,
                        logging.INFO,
                        "rsm.snapshot_superseded",
                        index=manifest.index,
                        ledger_id=manifest.ledger_id,
                        error=f"{type(error).__name__}: {error}",
                    )
                    return _Superseded()
                if is_transient(error):
                    if not self._data_error_persists(manifest, error):
                        raise
                    unreadable = error
                    if log_first_index is not None and first_index is None:
                        first_index = await log_first_index()
                    older = manifests[position + 1 : position + 2]
                    older_index = max([applier.applied_index, *(m.index for m in older)])
                    if not _log_follows(first_index, older_index):
                        self._unreadable_wait(first_index, older_index)
                        raise
                self._skip(manifest, error)
                continue
            self._data_errors.clear()
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
        if unreadable is not None and not _log_follows(first_index, applier.applied_index):
            self._unreadable_wait(first_index, applier.applied_index)
            raise unreadable
        return None

    def _data_error_persists(self, manifest: Manifest, error: BaseException) -> bool:
        """Count a transient failure of `manifest`'s load; whether it is a data error that
        came `snapshot_load_data_errors_max` times in a row (then skip the snapshot)."""
        if not isinstance(error, DigestMismatch | EntryNotAvailable):
            self._data_errors.pop(manifest.ledger_id, None)
            return False  # bookies or ZooKeeper unreachable: wait for them
        name = type(error).__name__
        seen, count = self._data_errors.get(manifest.ledger_id, (name, 0))
        count = count + 1 if seen == name else 1
        self._data_errors[manifest.ledger_id] = (name, count)
        if count < limits.snapshot_load_data_errors_max:
            emit(
                logger,
                logging.WARNING,
                "rsm.snapshot_unreadable",
                index=manifest.index,
                ledger_id=manifest.ledger_id,
                attempts=count,
                error=f"{name}: {error}",
            )
            return False
        return True

    def _skip(self, manifest: Manifest, error: BaseException) -> None:
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

    def _unreadable_wait(self, first_index: int | None, older_index: int) -> None:
        """A snapshot no bookie serves cannot be skipped: nothing older can be used."""
        emit(
            logger,
            logging.ERROR,
            "rsm.snapshot_unreadable",
            reason=(
                f"no bookie serves the newer snapshot, and no older state can replace it: "
                f"the log begins at index {first_index} (truncated) and the next older state "
                f"ends at index {older_index}; retrying until its bookies serve it (restart or "
                "repair them)"
            ),
        )

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
