"""The auditor: one per cluster, elected in ZooKeeper; marks the ledgers of lost bookies.
The async shell of `bookie.core.auditor`.

Election: each autorecovery process stands as an ephemeral sequential candidate under
`R/underreplication/auditorelection`; the lowest sequence is the auditor.  A process
that is not the auditor waits for the candidates to change; one whose candidate znode
vanished (its session expired), or that met a metadata error, withdraws whatever
candidacy of its own is left and stands again.  Event `autorecovery.auditor_elected`
when a process becomes the auditor.

While elected, every `poll_interval_ms` (sooner when the registrations change) it
observes the bookies it knows of (cookies, and every bookie it saw registered) and the
registered ones, and when an audit is due (`Auditor.audit_due`, or asked for through
`R/underreplication/triggeraudit`, which it then removes) it reads every ledger's
metadata and marks each one that names a lost bookie (`missing_bookies`).  A
bookie lost is one `autorecovery.bookie_lost` event; an audit is one
`autorecovery.audited` event with the number of ledgers marked.  Marking is idempotent,
so two processes that both believe themselves the auditor for a moment (one's session
expiring) mark nothing twice and lose nothing.

Entry presence, every `presence_interval_ms` while elected and when triggered
(`PresenceCheck`): for every ledger, every registered bookie its sealed segments name is
asked which entries of it it holds (LIST_ENTRIES, over a connection checked with
IDENTIFY; no ledger there: none), compared with the entries it should hold (a sample of
`presence_sample_entries` of them when it should hold more), and one found lacking some
at two checks in a row is marked as missing from that ledger, so a replication worker
moves that bookie's share to another bookie.  A bookie that cannot be asked is not judged.  One
`autorecovery.entries_lacking` event per bookie and ledger found lacking, one
`autorecovery.presence_checked` per check.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Collection, Mapping

import anyio

from bookie.autorecovery.connect import client_addresses, cluster_instance_id, connect_checked
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.stats import AutoRecoveryStats
from bookie.client.bookie_conn import BookieConnection
from bookie.client.connections import Connector
from bookie.clock import loop_clock_ms
from bookie.core.auditor import Auditor, PresenceCheck, lacking_entries, missing_bookies
from bookie.core.rereplication import segment_ranges
from bookie.errors import BookieError, NoSuchLedger, NoSuchLedgerError
from bookie.logs import emit
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import list_bookies, list_cookies, watch_bookies
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication

logger = logging.getLogger(__name__)


class AuditorService:
    """Stands for auditor and audits while elected; see the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        settings: AutoRecoverySettings,
        rng: random.Random | None = None,
        connector: Connector | None = None,
        stats: AutoRecoveryStats | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._connector = connector
        """Opens the streams to bookies (None: TCP)."""
        self._stats = AutoRecoveryStats() if stats is None else stats
        self._rng = rng or random.Random()
        """Draws the entries a sampled presence check compares."""
        self._marks = UnderReplication(store, settings.root)
        self._ledgers = LedgerManager(store, settings.root)
        self._seen: set[str] = set()
        """Every bookie this process saw registered."""

    async def run(self) -> None:
        """Forever; metadata errors are logged and the election is joined again."""
        while True:
            try:
                await self._stand_and_serve()
            except BookieError as error:
                emit(logger, logging.WARNING, "autorecovery.auditor_failed", reason=str(error))
            await anyio.sleep(self._settings.poll_interval_ms / 1000)

    async def _stand_and_serve(self) -> None:
        await self._marks.withdraw(self._settings.owner)
        mine = await self._marks.stand(self._settings.owner)
        while True:
            candidates = await self._marks.candidates()
            if mine not in candidates.ordered:
                return  # our session ended: stand again
            if candidates.ordered[0] == mine:
                emit(
                    logger, logging.INFO, "autorecovery.auditor_elected", owner=self._settings.owner
                )
                stats = self._stats
                stats.auditor = True
                try:
                    await self._audit_while_elected(mine)
                finally:
                    stats.auditor = False
                    stats.lost_bookies = 0
                continue
            await self._marks.watch_candidates(candidates)

    async def _audit_while_elected(self, mine: str) -> None:
        settings = self._settings
        core = Auditor(grace_ms=settings.grace_ms, audit_interval_ms=settings.audit_interval_ms)
        presence = PresenceCheck(interval_ms=settings.presence_interval_ms, now_ms=loop_clock_ms())
        reported: frozenset[str] = frozenset()
        while True:
            candidates = await self._marks.candidates()
            if not candidates.ordered or candidates.ordered[0] != mine:
                return
            bookies = await list_bookies(self._store, settings.root)
            registered = set(bookies.writable) | set(bookies.read_only)
            self._seen |= registered
            known = self._seen | set(await list_cookies(self._store, settings.root))
            now_ms = loop_clock_ms()
            core.observe(known, registered, now_ms)
            lost = core.lost(now_ms)
            self._stats.lost_bookies = len(lost)
            for bookie_id in sorted(lost - reported):
                emit(logger, logging.WARNING, "autorecovery.bookie_lost", bookie_id=bookie_id)
            reported = lost
            trigger = await self._marks.audit_trigger()
            if core.audit_due(now_ms, triggered=trigger is not None):
                marked = await self.audit(lost)
                core.audited(lost, now_ms)
                self._stats.audits += 1
                emit(
                    logger,
                    logging.INFO,
                    "autorecovery.audited",
                    lost=sorted(lost),
                    ledgers_marked=marked,
                )
            if presence.due(now_ms, triggered=trigger is not None):
                addresses = client_addresses(bookies, settings.tls is not None)
                await self.check_presence(presence, addresses)
                presence.finished(loop_clock_ms())
            if trigger is not None:
                emit(logger, logging.INFO, "autorecovery.audit_triggered")
                await self._marks.clear_audit_trigger(trigger)
            wait_ms = min(settings.poll_interval_ms, presence.next_due_ms() - now_ms)
            next_change_ms = core.next_change_ms(now_ms)
            if next_change_ms is not None:
                wait_ms = min(wait_ms, next_change_ms - now_ms)
            wait_ms = max(1, wait_ms)
            with anyio.move_on_after(wait_ms / 1000):
                await watch_bookies(self._store, bookies)

    async def audit(self, lost: frozenset[str]) -> int:
        """Mark every ledger naming a bookie of `lost`; return how many now name one."""
        marked = 0
        for ledger_id in await self._ledgers.list_ledgers():
            try:
                metadata, _ = await self._ledgers.read(ledger_id)
            except NoSuchLedgerError:
                continue
            missing = missing_bookies(metadata, lost)
            if missing:
                await self._mark(ledger_id, missing)
                marked += 1
        return marked

    async def check_presence(self, presence: PresenceCheck, addresses: Mapping[str, str]) -> int:
        """Ask the registered bookies (id -> address) what they hold of every ledger; mark
        the lacks `presence` confirms.  Return how many ledgers were marked."""
        presence.begin()
        timeout_ms = self._settings.timeout_ms
        instance_id = await cluster_instance_id(self._store, self._settings.root)
        connections: dict[str, BookieConnection | None] = {}
        checked = marked = 0
        async with contextlib.AsyncExitStack() as stack:

            async def connection(bookie_id: str) -> BookieConnection | None:
                if bookie_id not in connections:
                    connections[bookie_id] = None
                    try:
                        connections[bookie_id] = await connect_checked(
                            stack,
                            bookie_id,
                            addresses[bookie_id],
                            instance_id,
                            timeout_ms,
                            connector=self._connector,
                            tls=self._settings.tls,
                        )
                    except BookieError as error:
                        emit(
                            logger,
                            logging.WARNING,
                            "autorecovery.presence_unreachable",
                            bookie_id=bookie_id,
                            reason=str(error),
                        )
                found = connections[bookie_id]
                return found if found is not None and found.is_usable else None

            for ledger_id in await self._ledgers.list_ledgers():
                try:
                    metadata, _ = await self._ledgers.read(ledger_id)
                except NoSuchLedgerError:
                    continue
                checked += 1
                named = {b for _, _, ensemble in segment_ranges(metadata) for b in ensemble}
                for bookie_id in sorted(named & addresses.keys()):
                    asked = await connection(bookie_id)
                    if asked is None:
                        continue
                    try:
                        listing = await asked.list_entries(ledger_id, timeout_ms=timeout_ms)
                        held = listing.ranges or []
                    except NoSuchLedger:
                        held = []
                    except BookieError:
                        continue  # not judged this time
                    lacking = lacking_entries(
                        metadata,
                        bookie_id,
                        held,
                        sample_entries_max=self._settings.presence_sample_entries,
                        rng=self._rng,
                    )
                    if not lacking:
                        continue
                    confirmed = presence.lacking(ledger_id, bookie_id)
                    emit(
                        logger,
                        logging.WARNING,
                        "autorecovery.entries_lacking",
                        ledger_id=ledger_id,
                        bookie_id=bookie_id,
                        entries=lacking,
                        marked=confirmed,
                    )
                    if confirmed:
                        await self._mark(ledger_id, [bookie_id])
                        marked += 1
        emit(
            logger,
            logging.INFO,
            "autorecovery.presence_checked",
            ledgers_checked=checked,
            ledgers_marked=marked,
        )
        return marked

    async def _mark(self, ledger_id: int, missing: Collection[str]) -> None:
        if await self._marks.mark(ledger_id, missing):
            self._stats.ledgers_marked += 1
