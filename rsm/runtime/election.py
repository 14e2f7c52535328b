"""A replica's side of the election: candidacy, leader-elect, leader and handoff znodes.

The pure rule is `rsm/core/election.py`: the candidate named by a fresh
`handoff` (its epoch is the log's epoch) if it is a candidate, else the lowest
sequence number.  This module does the ZooKeeper part around it:

* **Candidacy**: an ephemeral sequential `election/n-<seq>` with
  `{replica_id, address, tls_address}`, created by `stand` (the replica stands only once
  it is caught up) and deleted by `withdraw`; it vanishes by itself when the
  replica's ZooKeeper session ends.
* **Evaluation**: `evaluate` reads the candidates, the handoff and the log's
  epoch and returns an `ElectionView`; `wait_for_change` returns when any of
  the three changes (level-triggered watches on what was read) or when the
  replica wakes it (a session event, a change of its own state).
* **Leader znode**: `publish` writes the ephemeral `leader` {replica_id,
  address, tls_address, epoch} once a new leader's marker is applied, replacing a stale
  one left by a predecessor whose session has not expired yet (never a newer
  one); `unpublish` deletes it only if it is still this replica's, for this
  epoch.  `follow_leader` keeps `leader` up to date for NotLeader hints and
  for measuring a handoff.
* **Pin**: every takeover records its leader in `handoff` under the new epoch
  (rsm/runtime/takeover.py), so a leader stays leader-elect while it is a candidate.
  A leader that steps down for its own failure (not because it lost its
  session or was replaced) withdraws and clears its pin (`clear_pin`), so
  that another candidate is elected instead of itself again.
* **Membership**: the ephemeral `replicas/<id>` for status and tools.

Election needs only to be usually unique: safety comes from fencing and from
the CAS on the log znode, never from this module.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio

from bookie.errors import MetadataError, MetadataVersionConflict, NodeExists, NoNode
from bookie.logs import emit
from bookie.meta import paths
from bookie.meta.api import NO_NODE_VERSION, MetadataStore
from rsm import limits
from rsm.core.election import Candidate, candidates, leader_elect
from rsm.core.log_format import (
    CandidateInfo,
    Handoff,
    LeaderInfo,
    decode_candidate,
    decode_handoff,
    decode_leader,
    encode_candidate,
    encode_leader,
)
from rsm.errors import MalformedValue, NotLeader, Unavailable
from rsm.runtime.log import LogStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ElectionView:
    """What one evaluation saw, and the versions to watch for the next change."""

    candidates: tuple[Candidate, ...]
    children: tuple[str, ...]
    elect: Candidate | None
    handoff_version: int
    log_epoch: int
    log_version: int


class Leadership:
    """The election-related znodes of one replica of one application."""

    def __init__(
        self,
        store: MetadataStore,
        log_store: LogStore,
        *,
        replica_id: str,
        address: str | None,
        tls_address: str | None = None,
        retry_delay_ms: int,
    ) -> None:
        self._store = store
        self._log_store = log_store
        self._layout = log_store.layout
        self.replica_id = replica_id
        self.address = address
        """The replica's plain port, if it has one."""
        self.tls_address = tls_address
        """The replica's TLS port, if it has one."""
        self._retry_delay_s = retry_delay_ms / 1000
        self.candidacy: str | None = None
        """The name of this replica's candidacy znode, while it has one."""
        self.leader: LeaderInfo | None = None
        """The `leader` znode as last seen."""
        self.leader_changes = 0
        """How often the `leader` znode named a leader other than the last one it named."""
        self._last_leader: tuple[str, int] | None = None
        self._candidates: dict[str, CandidateInfo] = {}
        """The candidacies the last evaluation read.  A candidacy's value never changes and
        its sequential name is never used again, so a name seen before needs no read: an
        evaluation costs the reads of the children, the log and the handoff, and one per
        new candidacy."""
        self._leader_seen = anyio.Event()

    # --- candidacy ----------------------------------------------------------------------------

    async def stand(self) -> str:
        """Create this replica's candidacy; its znode name."""
        value = encode_candidate(CandidateInfo(self.replica_id, self.address, self.tls_address))
        path = await self._store.create(
            self._layout.candidate_prefix, value, ephemeral=True, sequential=True
        )
        self.candidacy = paths.name_of(path)
        emit(logger, logging.INFO, "rsm.candidacy", candidacy=self.candidacy)
        return self.candidacy

    async def withdraw(self) -> None:
        """Delete this replica's candidacy, if it has one.

        The name is forgotten only once the znode is gone: a delete that failed (ZooKeeper
        out of reach, the session alive) leaves the candidacy standing, and a replica that
        forgot it would stand a second time and never be elected under either name."""
        name = self.candidacy
        if name is not None:
            with contextlib.suppress(NoNode):
                await self._store.delete(self._layout.candidate(name))
            self.candidacy = None

    async def clear_pin(self) -> None:
        """Empty the `handoff` znode if it names this replica (see the module docstring)."""
        try:
            current = await self._store.get(self._layout.handoff)
            if current.value and decode_handoff(current.value).target == self.replica_id:
                await self._store.set(self._layout.handoff, b"", current.version)
        except (NoNode, MetadataVersionConflict, MalformedValue):
            pass

    # --- evaluation ---------------------------------------------------------------------------

    async def evaluate(self) -> ElectionView:
        """Read candidates, handoff and log epoch; who should lead now.

        The candidates, the handoff and the log are read as one snapshot: every
        write of the handoff that matters comes with a change of the log in the
        same multi-operation (a takeover, a handover, which also deletes the old
        leader's candidacy), so the candidates and the handoff are read between
        two reads of the log's version, and again if that version moved.  Read
        before the first of them, the candidates could predate a handover whose
        handoff is read after it: its target, standing since before the handover,
        would be missing, and another candidate elected under a fresh handoff.
        """
        store = self._store
        layout = self._layout
        for _attempt in range(limits.election_snapshot_attempts_max):
            log, log_version = await self._log_store.read()
            children = await store.children(layout.election)
            infos = await self._candidate_infos(children)
            handoff_node = await store.get(layout.handoff)
            if await store.exists(layout.log) == log_version:
                break
        else:
            raise Unavailable("the log keeps changing; the election is evaluated again later")
        self._candidates = infos
        handoff: Handoff | None = None
        if handoff_node.value:
            try:
                handoff = decode_handoff(handoff_node.value)
            except MalformedValue as error:
                emit(logger, logging.WARNING, "rsm.bad_handoff", error=str(error))
        return ElectionView(
            candidates=tuple(candidates(infos)),
            children=tuple(children),
            elect=leader_elect(infos, handoff, log.epoch),
            handoff_version=handoff_node.version,
            log_epoch=log.epoch,
            log_version=log_version,
        )

    async def _candidate_infos(self, children: list[str]) -> dict[str, CandidateInfo]:
        """The data of the candidacies `children` (those still there and decodable)."""
        store = self._store
        known = self._candidates
        infos: dict[str, CandidateInfo] = {}
        for name in children:
            info = known.get(name)
            if info is None:
                try:
                    info = decode_candidate((await store.get(self._layout.candidate(name))).value)
                except NoNode:
                    continue  # the candidate went away meanwhile
                except MalformedValue as error:
                    emit(logger, logging.WARNING, "rsm.bad_candidacy", name=name, error=str(error))
                    continue
            infos[name] = info
        return infos

    async def wait_for_change(self, view: ElectionView, wakeup: anyio.Event) -> None:
        """Return once the candidates, the handoff or the log changed since `view`, or `wakeup`
        is set.  A failed watch also returns (the caller evaluates again after a pause)."""
        store = self._store
        layout = self._layout
        waits: list[Callable[[], Awaitable[None]]] = [
            lambda: store.watch_children(layout.election, view.children),
            lambda: store.watch(layout.handoff, view.handoff_version),
            lambda: store.watch(layout.log, view.log_version),
            wakeup.wait,
        ]
        async with anyio.create_task_group() as task_group:

            async def first(wait: Callable[[], Awaitable[None]]) -> None:
                try:
                    await wait()
                except MetadataError:
                    await anyio.sleep(self._retry_delay_s)
                task_group.cancel_scope.cancel()

            for wait in waits:
                task_group.start_soon(first, wait)

    # --- the leader znode ---------------------------------------------------------------------

    async def publish(self, epoch: int) -> None:
        """Write the `leader` znode for `epoch`, replacing an older leader's.

        Raises `NotLeader` when a leader of this or a later epoch is published,
        `Unavailable` when ZooKeeper keeps failing.
        """
        store = self._store
        path = self._layout.leader
        value = encode_leader(LeaderInfo(self.replica_id, self.address, epoch, self.tls_address))
        for _attempt in range(limits.leader_publish_attempts_max):
            try:
                await store.create(path, value, ephemeral=True)
                return
            except NodeExists:
                pass
            except MetadataError as error:
                if not error.retryable:
                    raise
                await anyio.sleep(self._retry_delay_s)
                continue
            try:
                current = await store.get(path)
                info = decode_leader(current.value)
                if info.epoch >= epoch and info.replica_id != self.replica_id:
                    raise NotLeader(f"{info.replica_id} leads epoch {info.epoch}", info.address)
                await store.delete(path, current.version)
            except MalformedValue:
                await store.delete(path)
            except (NoNode, MetadataVersionConflict):
                continue
            except MetadataError as error:
                if not error.retryable:
                    raise
                await anyio.sleep(self._retry_delay_s)
        raise Unavailable(f"could not publish the leader znode of epoch {epoch}")

    async def unpublish(self, epoch: int) -> None:
        """Delete the `leader` znode if it is still this replica's for `epoch` (best effort)."""
        path = self._layout.leader
        try:
            current = await self._store.get(path)
            info = decode_leader(current.value)
            if info.replica_id == self.replica_id and info.epoch == epoch:
                await self._store.delete(path, current.version)
        except (MetadataError, MalformedValue):
            pass

    async def leader_version(self, epoch: int) -> int | None:
        """The version of the `leader` znode if it is this replica's for `epoch`."""
        try:
            current = await self._store.get(self._layout.leader)
            info = decode_leader(current.value)
        except (NoNode, MalformedValue):
            return None
        if info.replica_id == self.replica_id and info.epoch == epoch:
            return current.version
        return None

    async def follow_leader(self) -> None:
        """Keep `leader` equal to the `leader` znode; runs until cancelled."""
        store = self._store
        path = self._layout.leader
        while True:
            try:
                try:
                    current = await store.get(path)
                    version = current.version
                    leader = self.leader = decode_leader(current.value)
                    if (leader.replica_id, leader.epoch) != self._last_leader:
                        self._last_leader = (leader.replica_id, leader.epoch)
                        self.leader_changes += 1
                except (NoNode, MalformedValue):
                    version = NO_NODE_VERSION
                    self.leader = None
                seen, self._leader_seen = self._leader_seen, anyio.Event()
                seen.set()
                await store.watch(path, version)
            except MetadataError:
                await anyio.sleep(self._retry_delay_s)

    async def leader_changed(self) -> LeaderInfo | None:
        """Wait for the next reading of the `leader` znode (it changed, or was read again after
        a failed watch); the leader it names, if any."""
        await self._leader_seen.wait()
        return self.leader

    async def wait_leader(self, accept: Callable[[LeaderInfo], bool]) -> LeaderInfo:
        """Wait until the `leader` znode holds a value `accept` likes (bound it from outside)."""
        while self.leader is None or not accept(self.leader):
            await self._leader_seen.wait()
        return self.leader

    # --- membership ---------------------------------------------------------------------------

    async def register(self) -> None:
        """Create `replicas/<id>`, replacing one a previous run of this replica left behind."""
        store = self._store
        path = self._layout.replica(self.replica_id)
        value = encode_candidate(CandidateInfo(self.replica_id, self.address, self.tls_address))
        for _attempt in range(limits.leader_publish_attempts_max):
            try:
                await store.create(path, value, ephemeral=True)
                return
            except NodeExists:
                with contextlib.suppress(NoNode):
                    await store.delete(path)
        raise Unavailable(f"could not register replica {self.replica_id}")

    async def unregister(self) -> None:
        with contextlib.suppress(NoNode):
            await self._store.delete(self._layout.replica(self.replica_id))
