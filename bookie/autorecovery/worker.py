"""The replication worker: takes marked ledgers one at a time and copies them back to full
replication.  The async shell of `bookie.core.rereplication`.

One round (`run_once`; `run` repeats it every `poll_interval_ms`): unless workers are
paused (`R/underreplication/disable`), list the marks, and for each ledger the retry
schedule allows, in a random order, take its ephemeral lock (skip it if another
worker holds it), repair it, release the lock.  A repair:

1. reads the mark and the ledger's metadata.  A deleted ledger's mark is removed.  A
   marked bookie that is registered and lists every entry of the sealed segments it
   should hold (a lost bookie back with its disk) is missing no longer, unless it is in
   the last segment of a ledger not yet CLOSED (what it lacks there, entries written
   while it was away, is known once the ledger is closed): only the others are
   replaced below.  One that lacks entries is replaced like a lost one (its disk
   may be damaged), unless placement finds no spare bookie for a segment to repair:
   then each that is registered writable and lacks entries of a CLOSED ledger (it was
   down while they were written, and the writer, with no bookie free, went on without
   it) gets those entries alone copied back (`lacking_in_segment`, read as in step 3
   from members that are not missing), the metadata stays as it is, and it is missing
   no longer (`autorecovery.refilled`).  Without that, a cluster of exactly E writable
   bookies could never bring such a ledger back to Qw copies;
2. picks, among the configured passwords, the one whose hash the metadata holds;
3. for each sealed segment that names a missing bookie (`plan_repairs`: every segment
   of a closed ledger, every one but the last of an open or in-recovery one): asks
   placement for replacements among the writable bookies (never one of the segment's
   ensemble, never a missing one), copies to each replacement exactly the entries its
   position holds, each read from the first surviving member of its write set whose copy's
   digest verifies and written verbatim with the recovery flag (as recovery re-adds
   entries), `limits.rereplication_entries_in_flight_max` at a time and no faster
   than the worker's `CopyThrottle` allows (`rate_entries_per_s`, `rate_bytes_per_s`,
   over all its copies); then replaces the segment's bookies by compare-and-set
   (`repaired_segment_transform`);
4. when the ledger is not closed and its last segment names a missing bookie
   (`left_to_writer`), that segment is its writer's to change (an ensemble change,
   deferred until a bookie is free) or its recovery's: the mark stays and the ledger
   is tried again, until it is closed or the writer replaced the bookie, unless
   `bookie.core.open_ledgers` finds its writer gone (its `bookie.writer` znode, no
   progress for `open_ledger_grace_ms`) and either placement finds a spare bookie or
   every missing bookie of that segment is registered writable again: then the worker
   fences and recovers the ledger (`autorecovery.ledger_fenced`), which closes it at
   its last acknowledged entry, and repairs it as a closed one: refilled in place as
   in step 1 when there is no spare, its now sealed segments as in step 3;
5. removes the mark at the version read in step 1 (a mark widened meanwhile stays,
   for the next round).

A failure anywhere (`RereplicationFailed`: no spare bookie, an entry with no readable
copy, no matching password, a segment left to its writer; or a bookie or metadata
error) leaves the mark and whatever segments were already repaired, each changed by
one whole compare-and-set, and the ledger is tried again after a back-off
(`RetrySchedule`).  Every outcome is one log event:
`autorecovery.repaired`, `autorecovery.repair_failed` (with the reason and the delay),
`autorecovery.mark_removed` (a deleted ledger).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import random
import ssl
from collections.abc import Iterator, Sequence

import anyio

from bookie import limits
from bookie.autorecovery.connect import client_addresses, cluster_instance_id, connect_checked
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.autorecovery.stats import AutoRecoveryStats
from bookie.client.bookie_conn import BookieConnection
from bookie.client.config import ClientConfig
from bookie.client.connections import Connector
from bookie.client.ledger_client import LedgerClient, password_hash
from bookie.clock import loop_clock_ms
from bookie.core.auditor import lacking_entries
from bookie.core.metadata import LedgerMetadata
from bookie.core.open_ledgers import (
    Progress,
    StalledLedgers,
    Writer,
    declared_writer,
    writer_state,
)
from bookie.core.placement import choose_replacements
from bookie.core.rereplication import (
    CopyThrottle,
    RetrySchedule,
    SegmentRepair,
    copy_sources,
    lacking_in_segment,
    left_to_writer,
    plan_repairs,
    position_entries,
    repaired_segment_transform,
    segment_ranges,
)
from bookie.errors import (
    BookieError,
    NoSuchLedger,
    NoSuchLedgerError,
    NotEnoughBookies,
    RereplicationFailed,
)
from bookie.logs import emit
from bookie.meta import paths
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import Bookies, list_bookies
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from bookie.wire.packet import Digest, master_key

logger = logging.getLogger(__name__)


class ReplicationWorker:
    """Repairs the marked ledgers of one cluster; see the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        settings: AutoRecoverySettings,
        rng: random.Random,
        connector: Connector | None = None,
        stats: AutoRecoveryStats | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._stats = AutoRecoveryStats() if stats is None else stats
        self._rng = rng
        self._connector = connector
        """Opens the streams to bookies (None: TCP)."""
        self._marks = UnderReplication(store, settings.root)
        self._ledgers = LedgerManager(store, settings.root)
        self._schedule = RetrySchedule(
            delay_ms_min=settings.retry_delay_ms_min, delay_ms_max=settings.retry_delay_ms_max
        )
        self._stalled = StalledLedgers(grace_ms=settings.open_ledger_grace_ms)
        self._throttle = CopyThrottle(
            entries_per_s=settings.rate_entries_per_s, bytes_per_s=settings.rate_bytes_per_s
        )

    async def run(self) -> None:
        """Rounds forever, `poll_interval_ms` apart; metadata errors are logged, not raised."""
        while True:
            try:
                await self.run_once()
            except BookieError as error:
                emit(logger, logging.WARNING, "autorecovery.worker_round_failed", reason=str(error))
            await anyio.sleep(self._settings.poll_interval_ms / 1000)

    async def run_once(self) -> int:
        """One round; return how many ledgers it brought back to full replication."""
        enabled = await self._marks.is_enabled()
        marked = await self._marks.list_marks()
        self._stats.enabled = enabled
        self._stats.marked_ledgers = len(marked)
        if not enabled:
            return 0
        self._stalled.retain(marked)
        ready = self._schedule.ready(marked, loop_clock_ms())
        self._rng.shuffle(ready)
        repaired = 0
        for ledger_id in ready:
            if not await self._marks.is_enabled():
                break
            if not await self._marks.try_lock(ledger_id, self._settings.owner):
                continue
            try:
                repaired += await self._repair_logged(ledger_id)
            finally:
                with anyio.CancelScope(shield=True):
                    await self._marks.unlock(ledger_id)
        return repaired

    async def _repair_logged(self, ledger_id: int) -> int:
        try:
            segments = await self.repair(ledger_id)
        except BookieError as error:
            delay_ms = self._schedule.failed(ledger_id, loop_clock_ms())
            emit(
                logger,
                logging.WARNING,
                "autorecovery.repair_failed",
                ledger_id=ledger_id,
                reason=f"{type(error).__name__}: {error}",
                retry_in_ms=delay_ms,
            )
            self._stats.repairs_failed += 1
            return 0
        self._schedule.succeeded(ledger_id)
        if segments is None:
            return 0
        self._stats.ledgers_repaired += 1
        return 1

    async def repair(self, ledger_id: int) -> int | None:
        """Repair one ledger (its lock held); return the segments repaired, None when the
        mark was gone or widened meanwhile.  Raises as the module docstring says."""
        mark = await self._marks.read_mark(ledger_id)
        if mark is None:
            return None
        try:
            metadata, _ = await self._ledgers.read(ledger_id)
        except NoSuchLedgerError:
            await self._marks.remove_mark(mark)
            emit(logger, logging.INFO, "autorecovery.mark_removed", ledger_id=ledger_id)
            return None
        bookies = await list_bookies(self._store, self._settings.root)
        missing, listings = await self._still_missing(metadata, mark.missing, bookies)
        refilled, copied = await self._refill_in_place(metadata, missing, listings, bookies)
        missing -= refilled
        segments, sealed_copied = await self._repair_sealed(metadata, missing)
        copied += sealed_copied
        if left_to_writer(metadata, missing):
            metadata = await self._recover_if_writer_gone(ledger_id, missing, segments)
            bookies = await list_bookies(self._store, self._settings.root)
            listings = await self._listings(ledger_id, missing, bookies)
            refilled, more_copied = await self._refill_in_place(
                metadata, missing, listings, bookies
            )
            missing -= refilled
            more, sealed_copied = await self._repair_sealed(metadata, missing)
            segments += more
            copied += more_copied + sealed_copied
        self._stalled.forget(ledger_id)
        if not await self._marks.remove_mark(mark):
            return None
        emit(
            logger,
            logging.INFO,
            "autorecovery.repaired",
            ledger_id=ledger_id,
            missing=sorted(mark.missing),
            back=sorted(mark.missing - missing),
            segments=segments,
            entries_copied=copied,
        )
        self._stats.entries_copied += copied
        return segments

    async def _repair_sealed(
        self, metadata: LedgerMetadata, missing: frozenset[str]
    ) -> tuple[int, int]:
        """Repair every sealed segment naming a missing bookie; return how many segments
        and entries copied."""
        repairs = plan_repairs(metadata, missing)
        copied = 0
        if repairs:
            password = self._password_of(metadata)
            for repair in repairs:
                copied += await self._repair_segment(metadata, password, repair, missing)
        return len(repairs), copied

    async def _recover_if_writer_gone(
        self, ledger_id: int, missing: frozenset[str], repaired: int
    ) -> LedgerMetadata:
        """The ledger's metadata once its last segment is no longer left to its writer:
        as read again when it changed meanwhile, else after fencing and recovering it
        when `bookie.core.open_ledgers` says its writer is gone.  Raises
        `RereplicationFailed` while the segment is still its writer's."""
        metadata, version = await self._ledgers.read(ledger_id)
        if not left_to_writer(metadata, missing):
            return metadata
        writer = await self._writer_of(metadata)
        last_entry_held = await self._last_entry_held(metadata, missing)
        progress = Progress(version, last_entry_held)
        wait_ms = self._stalled.observe(ledger_id, writer, progress, loop_clock_ms())
        lost = sorted(set(metadata.current_ensemble) & missing)
        if wait_ms != 0:
            until = "while it lives" if wait_ms is None else f"for {wait_ms} ms more"
            raise RereplicationFailed(
                f"ledger {ledger_id} is {metadata.state.name} and its last segment names "
                f"{lost}: that segment is left to its writer ({writer.value}) {until} "
                f"({repaired} earlier segments repaired)"
            )
        password = self._password_of(metadata)
        await self._check_spares(metadata, missing)
        emit(
            logger,
            logging.WARNING,
            "autorecovery.ledger_fenced",
            ledger_id=ledger_id,
            state=metadata.state.name,
            writer=writer.value,
            missing=lost,
            last_entry_held=last_entry_held,
        )
        async with LedgerClient.open(
            self._store,
            root=self._settings.root,
            config=ClientConfig(tls=self._settings.tls),
            connector=self._connector,
            rng=self._rng,
        ) as client:
            await client.open_ledger(ledger_id, password, recovery=True)
        recovered, _ = await self._ledgers.read(ledger_id)
        return recovered

    async def _writer_of(self, metadata: LedgerMetadata) -> Writer:
        path = declared_writer(metadata)
        if path is None or not paths.is_valid(path) or path == paths.ROOT:
            return writer_state(metadata, znode_exists=None, parent_exists=None)
        exists = await self._store.exists(path) is not None
        parent_exists = exists or await self._store.exists(paths.parent_of(path)) is not None
        return writer_state(metadata, znode_exists=exists, parent_exists=parent_exists)

    async def _still_missing(
        self, metadata: LedgerMetadata, marked: frozenset[str], bookies: Bookies
    ) -> tuple[frozenset[str], dict[str, Sequence[Sequence[int]]]]:
        """The bookies of `marked` that are missing still: all but those registered now that
        list every entry of the ledger's sealed segments they should hold (a lost bookie
        that came back with its disk), so that none is replaced needlessly; and what each
        of them that answered listed.  A bookie of the last segment of a ledger that is
        not CLOSED stays missing: what it lacks of that segment (entries written while
        it was away) is known once the ledger is closed."""
        listings = await self._listings(metadata.ledger_id, marked, bookies)
        writing = () if metadata.is_closed else metadata.current_ensemble
        whole = {
            bookie_id
            for bookie_id, held in listings.items()
            if bookie_id not in writing and not lacking_entries(metadata, bookie_id, held)
        }
        return marked - whole, {b: held for b, held in listings.items() if b not in whole}

    def _spares_for(
        self, metadata: LedgerMetadata, missing: frozenset[str], bookies: Bookies
    ) -> bool:
        """Whether placement finds replacements for every sealed segment to repair (asked
        with a generator of its own: the worker's draws stay those of the repair)."""
        try:
            for repair in plan_repairs(metadata, missing):
                self._segment_replacements(bookies, metadata, repair, missing, rng=random.Random(0))
        except RereplicationFailed:
            return False
        return True

    async def _refill_in_place(
        self,
        metadata: LedgerMetadata,
        missing: frozenset[str],
        listings: dict[str, Sequence[Sequence[int]]],
        bookies: Bookies,
    ) -> tuple[frozenset[str], int]:
        """When placement finds no spare bookie for a segment to repair (else they are
        replaced), copy back to each bookie of `missing` that is registered writable and
        listed what it holds the entries of the CLOSED ledger it lacks (module docstring,
        step 1); return those bookies and the entries copied."""
        if not metadata.is_closed or self._spares_for(metadata, missing, bookies):
            return frozenset(), 0
        targets = sorted(missing & listings.keys() & bookies.writable.keys())
        if not targets:
            return frozenset(), 0
        password = self._password_of(metadata)
        addresses = client_addresses(bookies, self._settings.tls is not None)
        copier = self._copier(metadata, password)
        instance_id = await cluster_instance_id(self._store, self._settings.root)
        segments = segment_ranges(metadata)
        sources = {bookie_id for _, _, ensemble in segments for bookie_id in ensemble} - missing
        copied = 0
        async with contextlib.AsyncExitStack() as stack:
            for bookie_id in sorted(sources | set(targets)):
                await copier.connect(stack, bookie_id, addresses.get(bookie_id), instance_id)
            for target in targets:
                entries = 0
                for segment in segments:
                    lacking = lacking_in_segment(metadata.quorum, segment, target, listings[target])
                    work = ((entry_id, target) for entry_id in lacking)
                    entries += await copier.copy_all(work, segment[2], set(missing))
                emit(
                    logger,
                    logging.INFO,
                    "autorecovery.refilled",
                    ledger_id=metadata.ledger_id,
                    bookie_id=target,
                    entries_copied=entries,
                )
                copied += entries
        return frozenset(targets), copied

    async def _last_entry_held(self, metadata: LedgerMetadata, missing: frozenset[str]) -> int:
        """The last entry of the ledger that a surviving bookie of its last segment says it
        holds (-1: none, or none could be asked)."""
        listings = await self._listings(
            metadata.ledger_id,
            frozenset(metadata.current_ensemble) - missing,
            await list_bookies(self._store, self._settings.root),
        )
        return max((last for held in listings.values() for _, last in held), default=-1)

    async def _listings(
        self, ledger_id: int, bookie_ids: frozenset[str], bookies: Bookies
    ) -> dict[str, Sequence[Sequence[int]]]:
        """What each of `bookie_ids` that is registered in `bookies` and answers holds of
        the ledger (LIST_ENTRIES: inclusive ranges, ascending; none when it has no such
        ledger)."""
        tls = self._settings.tls
        addresses = client_addresses(bookies, tls is not None)
        timeout_ms = self._settings.timeout_ms
        instance_id = await cluster_instance_id(self._store, self._settings.root)
        listings: dict[str, Sequence[Sequence[int]]] = {}
        async with contextlib.AsyncExitStack() as stack:
            for bookie_id in sorted(bookie_ids & addresses.keys()):
                try:
                    connection = await connect_checked(
                        stack,
                        bookie_id,
                        addresses[bookie_id],
                        instance_id,
                        timeout_ms,
                        connector=self._connector,
                        tls=tls,
                    )
                    listing = await connection.list_entries(ledger_id, timeout_ms=timeout_ms)
                    listings[bookie_id] = listing.ranges or []
                except NoSuchLedger:
                    listings[bookie_id] = []
                except BookieError:
                    continue  # this bookie says nothing this time
        return listings

    async def _check_spares(self, metadata: LedgerMetadata, missing: frozenset[str]) -> None:
        """Raise `RereplicationFailed` unless placement finds replacements for the missing
        bookies of the last segment, or each of them is registered writable again (it is
        refilled in place once the ledger is closed): fencing a ledger that cannot be
        repaired would only stop its writer."""
        bookies = await list_bookies(self._store, self._settings.root)
        ensemble = metadata.current_ensemble
        positions = tuple(i for i, bookie_id in enumerate(ensemble) if bookie_id in missing)
        first_entry_id = metadata.ensembles[-1][0]
        try:
            self._replacements(
                bookies, metadata, ensemble, positions, missing, first_entry_id=first_entry_id
            )
        except RereplicationFailed:
            if not missing.intersection(ensemble) <= bookies.writable.keys():
                raise

    def _segment_replacements(
        self,
        bookies: Bookies,
        metadata: LedgerMetadata,
        repair: SegmentRepair,
        missing: frozenset[str],
        *,
        rng: random.Random | None = None,
    ) -> dict[int, str]:
        """`_replacements` for the positions of a sealed segment to repair."""
        return self._replacements(
            bookies,
            metadata,
            repair.ensemble,
            repair.positions,
            missing,
            first_entry_id=repair.first_entry_id,
            rng=rng,
        )

    def _replacements(
        self,
        bookies: Bookies,
        metadata: LedgerMetadata,
        ensemble: tuple[str, ...],
        positions: tuple[int, ...],
        missing: frozenset[str],
        *,
        first_entry_id: int,
        rng: random.Random | None = None,
    ) -> dict[int, str]:
        """Placement's replacements for `positions` of the segment from `first_entry_id`,
        drawn with `rng` (the worker's by default); `RereplicationFailed` when there is no
        spare bookie."""
        try:
            return choose_replacements(
                {bookie_id: info.rack for bookie_id, info in bookies.writable.items()},
                ensemble,
                positions,
                write_quorum=metadata.write_quorum,
                rng=self._rng if rng is None else rng,
                excluded=missing,
            )
        except NotEnoughBookies as error:
            raise RereplicationFailed(
                f"ledger {metadata.ledger_id}, segment from entry {first_entry_id}: no spare "
                f"bookie ({error})"
            ) from error

    def _copier(self, metadata: LedgerMetadata, password: bytes) -> _Copier:
        return _Copier(
            metadata,
            password,
            self._settings.timeout_ms,
            self._throttle,
            connector=self._connector,
            tls=self._settings.tls,
        )

    def _password_of(self, metadata: LedgerMetadata) -> bytes:
        for password in self._settings.passwords:
            if hmac.compare_digest(password_hash(password), metadata.password_hash):
                return password
        raise RereplicationFailed(
            f"ledger {metadata.ledger_id}: none of the {len(self._settings.passwords)} "
            "configured passwords is its password (set autorecovery_password)"
        )

    async def _repair_segment(
        self,
        metadata: LedgerMetadata,
        password: bytes,
        repair: SegmentRepair,
        missing: frozenset[str],
    ) -> int:
        """Copy one segment's entries to replacements, then CAS them into the metadata;
        return the entries copied."""
        ledger_id = metadata.ledger_id
        bookies = await list_bookies(self._store, self._settings.root)
        addresses = client_addresses(bookies, self._settings.tls is not None)
        replacements = self._segment_replacements(bookies, metadata, repair, missing)
        unusable = set(missing) | {repair.ensemble[index] for index in repair.positions}
        copier = self._copier(metadata, password)
        instance_id = await cluster_instance_id(self._store, self._settings.root)
        async with contextlib.AsyncExitStack() as stack:
            needed = {*repair.ensemble, *replacements.values()} - unusable
            for bookie_id in sorted(needed):
                await copier.connect(stack, bookie_id, addresses.get(bookie_id), instance_id)
            work = (
                (entry_id, replacements[position])
                for position in repair.positions
                for entry_id in position_entries(
                    metadata.quorum, repair.first_entry_id, repair.last_entry_id, position
                )
            )
            copied = await copier.copy_all(work, repair.ensemble, unusable)
        await self._ledgers.update(
            ledger_id,
            lambda current: repaired_segment_transform(
                current, repair.first_entry_id, repair.ensemble, replacements
            ),
        )
        emit(
            logger,
            logging.INFO,
            "autorecovery.segment_repaired",
            ledger_id=ledger_id,
            first_entry_id=repair.first_entry_id,
            replaced={repair.ensemble[index]: new for index, new in replacements.items()},
            entries_copied=copied,
        )
        return copied


class _Copier:
    """Copies entries of one ledger between bookies over connections it holds."""

    def __init__(
        self,
        metadata: LedgerMetadata,
        password: bytes,
        timeout_ms: int,
        throttle: CopyThrottle,
        *,
        connector: Connector | None,
        tls: ssl.SSLContext | None,
    ) -> None:
        self._connector = connector
        self._tls = tls
        self._metadata = metadata
        self._throttle = throttle
        self._digest = Digest(metadata.digest_type, password)
        self._master_key = master_key(password)
        self._timeout_ms = timeout_ms
        self._connections: dict[str, BookieConnection | str] = {}
        """Bookie id -> its connection, or why there is none."""

    async def connect(
        self,
        stack: contextlib.AsyncExitStack,
        bookie_id: str,
        address: str | None,
        instance_id: str | None,
    ) -> None:
        if address is None:
            self._connections[bookie_id] = "not registered"
            return
        try:
            self._connections[bookie_id] = await connect_checked(
                stack,
                bookie_id,
                address,
                instance_id,
                self._timeout_ms,
                connector=self._connector,
                tls=self._tls,
            )
        except BookieError as error:
            self._connections[bookie_id] = str(error)

    async def copy_all(
        self, work: Iterator[tuple[int, str]], ensemble: tuple[str, ...], unusable: set[str]
    ) -> int:
        """Copy every (entry, target bookie) of `work`, some at once; return how many."""
        copied = 0

        async def copy_some() -> None:
            nonlocal copied
            for entry_id, target in work:  # shared: each item goes to one task
                packet = await self._read_verified(entry_id, ensemble, unusable)
                wait_ms = self._throttle.reserve(loop_clock_ms(), len(packet))
                if wait_ms:
                    await anyio.sleep(wait_ms / 1000)
                await self._write(target, entry_id, packet)
                copied += 1

        try:
            async with anyio.create_task_group() as task_group:
                for _ in range(limits.rereplication_entries_in_flight_max):
                    task_group.start_soon(copy_some)
        except BaseExceptionGroup as group:
            # The first failure cancelled the other copies: report it, not the group.
            matched, _ = group.split(BookieError)
            if matched is None:
                raise
            raise _first(matched) from None
        return copied

    async def _read_verified(
        self, entry_id: int, ensemble: tuple[str, ...], unusable: set[str]
    ) -> bytes:
        ledger_id = self._metadata.ledger_id
        failures: list[str] = []
        for bookie_id in copy_sources(self._metadata.quorum, ensemble, entry_id, unusable):
            connection = self._connections.get(bookie_id)
            if not isinstance(connection, BookieConnection):
                failures.append(f"{bookie_id}: {connection}")
                continue
            try:
                response = await connection.read(ledger_id, entry_id, timeout_ms=self._timeout_ms)
                packet = response.packet or b""
                self._digest.verify_entry(packet, ledger_id, entry_id)
            except BookieError as error:
                failures.append(f"{bookie_id}: {type(error).__name__}: {error}")
                continue
            return packet
        raise RereplicationFailed(
            f"ledger {ledger_id} entry {entry_id}: no verified copy to copy from "
            f"({'; '.join(failures) or 'no surviving member of its write set'})"
        )

    async def _write(self, bookie_id: str, entry_id: int, packet: bytes) -> None:
        connection = self._connections.get(bookie_id)
        ledger_id = self._metadata.ledger_id
        if not isinstance(connection, BookieConnection):
            raise RereplicationFailed(f"copy target {bookie_id}: {connection}")
        await connection.add(
            ledger_id,
            entry_id,
            self._master_key,
            packet,
            recovery=True,
            timeout_ms=self._timeout_ms,
        )


def _first(group: BaseExceptionGroup[BookieError]) -> BookieError:
    error: BookieError | BaseExceptionGroup[BookieError] = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
