"""The whole cluster as one replica's admin server sees it: the status page's JSON.

`ClusterWatch.run` looks at the cluster every `limits.admin_watch_interval_ms`
while the admin server runs: the bookie members (cookies), the registered
bookies as the replica's ledger client sees them (its watch of the
registrations), each one's disk use asked through that client's own
connection to it (kept open, and on TLS when the replica reaches the bookies
over TLS, so the page sees them the way the replica's log does and costs no
connection per look; a bookie that does not answer within
`limits.admin_bookie_info_timeout_ms` is `down`, like a member that is not
registered), the leader this replica knows and whether its state diverged.
Each look goes into an `EventLog` of at most `limits.admin_events_max` events
(rsm/core/cluster_events.py).

`overview` puts together, at the time of the request, what `/api/v1/overview`
answers: the application (leader, epoch, replicas with their lag and load
counters, as `application_json` reads them), the log's segments, the
snapshots, the bookie cluster's under-replicated ledgers, the bookies of the
last look and the events.  The shapes are in rsm/admin.py's OpenAPI document.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio

from bookie.client.ledger_client import LedgerClient
from bookie.errors import BookieError
from bookie.logs import emit
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import list_cookies
from rsm import limits
from rsm.client import connect
from rsm.core.cluster_events import BookieState, ClusterLook, EventLog
from rsm.core.layout import AppLayout
from rsm.core.log_state import Log
from rsm.host import application_status
from rsm.runtime.log import LogStore
from rsm.runtime.replica import Replica
from rsm.snapshots.inspect import listing

logger = logging.getLogger(__name__)

_REPLICA_KEYS = ("replica_id", "address", "tls_address", "role", "applied_index", "lag", "error")


def application_json(report: dict[str, Any]) -> dict[str, Any]:
    """`/api/v1/application`'s answer from an `application_status` report."""
    return {
        "app": report["app"],
        "epoch": report["epoch"],
        "leader": report["leader"],
        "end_index": report["end_index"],
        "replicas": [
            {key: entry.get(key) for key in _REPLICA_KEYS} for entry in report["replicas"]
        ],
    }


def segments_json(log: Log, version: int) -> dict[str, Any]:
    """`/api/v1/segments`'s answer: the log's segments, oldest first."""
    return {
        "epoch": log.epoch,
        "version": version,
        "segments": [
            {
                "ledger_id": segment.ledger_id,
                "epoch": segment.epoch,
                "first_index": segment.first_index,
                "state": segment.state.name,
                "last_index": segment.last_index,
            }
            for segment in log.segments
        ],
    }


class ClusterWatch:
    """The bookies and events of the status page; see the module docstring."""

    def __init__(
        self,
        replica: Replica,
        store: MetadataStore,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        self._replica = replica
        self._store = store
        self.clock = wall_clock_ms
        self._ledger_root = replica.ledgers.root
        self.events = EventLog(limits.admin_events_max)
        self.bookies: list[dict[str, Any]] = []
        """Each bookie of the last look, by id: `bookie_id`, `address`, `state`,
        `free_bytes` and `total_bytes` (None unless it answered), `error` (why down)."""

    async def run(self) -> None:
        """Look every `limits.admin_watch_interval_ms` until cancelled."""
        while True:
            await self.look()
            await anyio.sleep(limits.admin_watch_interval_ms / 1000)

    async def look(self) -> None:
        try:
            bookies = await self._bookies()
        except BookieError as error:
            emit(logger, logging.WARNING, "admin.watch_failed", error=repr(error))
            return
        status = self._replica.status()
        leader = None
        if status["leader_id"] is not None:
            leader = (status["leader_id"], status["leader_epoch"])
        states = {entry["bookie_id"]: BookieState(entry["state"]) for entry in bookies}
        diverged_at = status["state_hashes"]["diverged_at"]
        self.bookies = bookies
        self.events.look(ClusterLook(leader, states, diverged_at), self.clock())

    async def _bookies(self) -> list[dict[str, Any]]:
        members = await list_cookies(self._store, self._ledger_root)
        ledgers = self._replica.ledgers
        read_only = ledgers.read_only_bookies
        found: dict[str, dict[str, Any]] = {}
        async with anyio.create_task_group() as tasks:
            for bookie_id in {*ledgers.writable_bookies, *read_only}:
                tasks.start_soon(self._ask, ledgers, bookie_id, bookie_id in read_only, found)
        for bookie_id in members:
            if bookie_id not in found:
                found[bookie_id] = _bookie(bookie_id, None, BookieState.DOWN, "not registered")
        return [found[bookie_id] for bookie_id in sorted(found)]

    async def _ask(
        self,
        ledgers: LedgerClient,
        bookie_id: str,
        read_only: bool,
        found: dict[str, dict[str, Any]],
    ) -> None:
        timeout_ms = limits.admin_bookie_info_timeout_ms
        address = ledgers.bookie_address(bookie_id)
        try:
            with anyio.fail_after(timeout_ms / 1000):
                info = await ledgers.bookie_info(bookie_id, timeout_ms=timeout_ms)
        except TimeoutError:
            found[bookie_id] = _bookie(
                bookie_id, address, BookieState.DOWN, f"no answer within {timeout_ms} ms"
            )
            return
        except BookieError as error:
            found[bookie_id] = _bookie(bookie_id, address, BookieState.DOWN, str(error))
            return
        state = BookieState.READ_ONLY if read_only or info.read_only else BookieState.UP
        entry = _bookie(bookie_id, address, state, None)
        entry["free_bytes"], entry["total_bytes"] = info.free_bytes, info.total_bytes
        found[bookie_id] = entry


def _bookie(
    bookie_id: str, address: str | None, state: BookieState, error: str | None
) -> dict[str, Any]:
    return {
        "bookie_id": bookie_id,
        "address": address,
        "state": state.value,
        "free_bytes": None,
        "total_bytes": None,
        "error": error,
    }


async def overview(
    replica: Replica, store: MetadataStore, watch: ClusterWatch, rsm_root: str
) -> dict[str, Any]:
    """`/api/v1/overview`'s answer (see the module docstring)."""
    async with connect(replica.app, store=store, rsm_root=rsm_root) as client:
        report = await application_status(store, client, ledger_root=replica.ledgers.root)
    application = application_json(report)
    for entry, status in zip(application["replicas"], report["replicas"], strict=True):
        entry["serving"] = bool(status.get("serving"))
        entry["load"] = status.get("load")
    log, version = await LogStore(store, AppLayout.of(replica.app, rsm_root)).read()
    return {
        "time_ms": watch.clock(),
        "served_by": replica.replica_id,
        **application,
        "segments": segments_json(log, version)["segments"],
        "snapshots": listing(await replica.snapshots.refresh())["snapshots"],
        "under_replication": report["under_replication"],
        "bookies": watch.bookies,
        "events": [event.plain() for event in watch.events.events()],
    }
