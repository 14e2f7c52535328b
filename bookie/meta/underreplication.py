"""Autorecovery's state in the metadata store: under-replication marks, the locks of the
workers repairing them, the switch that pauses the workers, and the auditor election.

Works over any `MetadataStore`; paths from `layout.MetadataLayout` (docs/ledgers.md,
"Under-replication"):

    R/underreplication/ledgers/<4 hex>/<4 hex>/<4 hex>/<4 hex>/urL<id>   a mark
    R/underreplication/locks/urL<id>             ephemeral: a worker is repairing the ledger
    R/underreplication/disable                   present: workers take no mark
    R/underreplication/triggeraudit              present: the auditor audits now
    R/underreplication/auditorelection/auditor_<10 digits>   ephemeral sequential: a candidate

Value formats, each one canonical CBOR map (`records.py`):

Mark, version 1::

    "v"  uint           1
    "m"  array of text  the bookies the ledger is missing: distinct, ascending, non-empty

Lock and election candidate, version 1::

    "v"  uint           1
    "o"  text           who holds it: the process's autorecovery id (its bookie id, or
                        the standalone process's id)

`disable` and `triggeraudit` hold no value (b"").

Invariants:

* A mark is created with its missing bookies, widened by compare-and-set when more of
  the ledger's bookies are lost, and removed only by compare-and-delete at the version
  its remover read: a bookie added after the remover read it is never lost with it.
* `list_marks` returns every mark that existed throughout the listing or raises.
* Intermediate directories of the marks' hierarchy are never deleted (as for ledgers),
  so creating a mark never races with the removal of its parent.
* The auditor is the candidate with the lowest sequence number; a candidate's znode is
  ephemeral, so a dead auditor's session takes its candidacy with it.  A process
  withdraws its earlier candidacies before it stands, so none of its own, left by an
  attempt whose answer was lost, can hold the election while nobody audits.
* A lock naming the worker that asks for it is its own (owners are unique per
  process: a bookie id, or a standalone process's id).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

from bookie import limits
from bookie.errors import BadMetadata, MetadataError, MetadataVersionConflict, NodeExists, NoNode
from bookie.meta import paths
from bookie.meta.api import ANY_VERSION, MetadataStore
from bookie.meta.layout import (
    LedgerNodeKind,
    MetadataLayout,
    underreplicated_child_kind,
    underreplicated_ledger_id_of_parts,
)
from bookie.meta.records import decode_record, encode_record, expect_array, expect_text

MARK_FORMAT_VERSION: Final = 1
OWNER_FORMAT_VERSION: Final = 1
CANDIDATE_PREFIX: Final = "auditor_"
_SEQUENCE_DIGITS: Final = 10


@dataclass(frozen=True, slots=True)
class Mark:
    """One under-replicated ledger: the bookies it is missing, as read at `version`."""

    ledger_id: int
    missing: frozenset[str]
    version: int


def encode_mark(missing: Collection[str]) -> bytes:
    assert missing, "a mark names at least one missing bookie"
    return encode_record({"v": MARK_FORMAT_VERSION, "m": sorted(set(missing))})


def decode_mark(data: bytes, what: str) -> frozenset[str]:
    record = decode_record(data, what, ("m",), MARK_FORMAT_VERSION)
    items = expect_array(record["m"], f"{what}: missing bookies")
    missing = [expect_text(item, f"{what}: missing bookie") for item in items]
    if not missing or missing != sorted(set(missing)):
        raise BadMetadata(f"{what}: missing bookies {missing} are not distinct, ascending, some")
    return frozenset(missing)


def encode_owner(owner: str) -> bytes:
    assert owner, "an owner is named"
    return encode_record({"v": OWNER_FORMAT_VERSION, "o": owner})


def decode_owner(data: bytes, what: str) -> str:
    record = decode_record(data, what, ("o",), OWNER_FORMAT_VERSION)
    return expect_text(record["o"], f"{what}: owner")


def candidate_sequence(name: str) -> int | None:
    """The sequence number of an election candidate's znode name, or None if it is not one."""
    digits = name.removeprefix(CANDIDATE_PREFIX)
    if name == digits or len(digits) != _SEQUENCE_DIGITS or not digits.isdigit():
        return None
    return int(digits)


@dataclass(frozen=True, slots=True)
class MarkStatus:
    """One under-replicated ledger as an operator sees it: what it misses, who repairs it."""

    ledger_id: int
    missing: frozenset[str]
    locked_by: str | None
    """The worker repairing it now, None when none is."""


@dataclass(frozen=True, slots=True)
class Candidates:
    """The auditor election as read: candidates in order, and every child as listed."""

    ordered: tuple[str, ...]
    children: tuple[str, ...]


class UnderReplication:
    """Autorecovery's znodes of the cluster rooted at `root` in `store`."""

    def __init__(self, store: MetadataStore, root: str = limits.metadata_root_default) -> None:
        self._store = store
        self._layout = MetadataLayout(root)

    # --- marks --------------------------------------------------------------------------------

    async def mark(self, ledger_id: int, missing: Collection[str]) -> bool:
        """Mark the ledger as missing `missing` (added to what a mark already names); return
        whether anything changed.  Raises what the store raises, `BadMetadata` for junk."""
        assert missing
        path = self._layout.underreplicated_ledger(ledger_id)
        for _ in range(limits.metadata_cas_attempts_max):
            found = await self.read_mark(ledger_id)
            if found is None:
                try:
                    await self._store.create(path, encode_mark(missing), make_parents=True)
                except NodeExists:
                    continue
                return True
            if found.missing >= set(missing):
                return False
            widened = encode_mark(found.missing | set(missing))
            try:
                await self._store.set(path, widened, found.version)
            except (MetadataVersionConflict, NoNode):
                continue
            return True
        raise MetadataVersionConflict(f"{path}: mark still contended")

    async def read_mark(self, ledger_id: int) -> Mark | None:
        """The ledger's mark, or None if it is not marked."""
        path = self._layout.underreplicated_ledger(ledger_id)
        try:
            stored = await self._store.get(path)
        except NoNode:
            return None
        return Mark(ledger_id, decode_mark(stored.value, f"mark {path}"), stored.version)

    async def remove_mark(self, mark: Mark) -> bool:
        """Remove the mark if it is still as read; return False if it changed (it stays) or
        is gone already."""
        path = self._layout.underreplicated_ledger(mark.ledger_id)
        try:
            await self._store.delete(path, mark.version)
        except (MetadataVersionConflict, NoNode):
            return False
        return True

    async def list_marks(self) -> list[int]:
        """Every marked ledger id, ascending; complete or an exception."""
        found: list[int] = []
        await self._walk((), found)
        found.sort()
        return found

    async def mark_statuses(self) -> list[MarkStatus]:
        """Every marked ledger with its missing bookies and its lock's holder, ascending
        (a mark removed during the listing is left out).  Reads only."""
        found: list[MarkStatus] = []
        for ledger_id in await self.list_marks():
            mark = await self.read_mark(ledger_id)
            if mark is None:
                continue  # repaired since the listing
            found.append(MarkStatus(ledger_id, mark.missing, await self.lock_owner(ledger_id)))
        return found

    async def _walk(self, prefix: tuple[str, ...], found: list[int]) -> None:
        directory = self._layout.underreplicated_directory(prefix)
        try:
            names = await self._store.children(directory)
        except NoNode as error:
            if not prefix:
                return  # nothing was ever marked
            raise MetadataError(f"mark directory {directory} vanished during a listing") from error
        for name in names:
            kind = underreplicated_child_kind(prefix, name)
            if kind is LedgerNodeKind.DIRECTORY:
                await self._walk((*prefix, name), found)
            elif kind is LedgerNodeKind.LEDGER:
                ledger_id = underreplicated_ledger_id_of_parts((*prefix, name))
                assert ledger_id is not None
                found.append(ledger_id)

    # --- locks --------------------------------------------------------------------------------

    async def try_lock(self, ledger_id: int, owner: str) -> bool:
        """Take the ledger's ephemeral lock for `owner`; False if someone else holds it.

        A lock that already names `owner` is taken: an earlier attempt whose answer
        was lost created it, or a previous process of the same owner, now dead, did.
        """
        path = self._layout.underreplication_lock(ledger_id)
        try:
            await self._store.create(path, encode_owner(owner), ephemeral=True, make_parents=True)
        except NodeExists:
            return await self.lock_owner(ledger_id) == owner
        return True

    async def unlock(self, ledger_id: int) -> None:
        """Release the ledger's lock (nothing if it is gone: its session ended)."""
        with contextlib.suppress(NoNode):
            await self._store.delete(self._layout.underreplication_lock(ledger_id), ANY_VERSION)

    async def lock_owner(self, ledger_id: int) -> str | None:
        """Who holds the ledger's lock, or None."""
        path = self._layout.underreplication_lock(ledger_id)
        try:
            stored = await self._store.get(path)
        except NoNode:
            return None
        return decode_owner(stored.value, f"lock {path}")

    # --- the switch ---------------------------------------------------------------------------

    async def is_enabled(self) -> bool:
        """Whether replication workers may take marks."""
        return await self._store.exists(self._layout.underreplication_disable) is None

    async def set_enabled(self, enabled: bool) -> None:
        """Let workers take marks again, or pause them (a worker finishes its ledger first)."""
        path = self._layout.underreplication_disable
        if enabled:
            with contextlib.suppress(NoNode):
                await self._store.delete(path, ANY_VERSION)
        else:
            with contextlib.suppress(NodeExists):
                await self._store.create(path, b"", make_parents=True)

    # --- audit trigger ------------------------------------------------------------------------

    async def trigger_audit(self) -> None:
        """Ask the auditor to audit now (lost bookies and entry presence)."""
        with contextlib.suppress(NodeExists):
            await self._store.create(self._layout.audit_trigger, b"", make_parents=True)

    async def audit_trigger(self) -> int | None:
        """The trigger's version if an audit was asked for, else None."""
        return await self._store.exists(self._layout.audit_trigger)

    async def clear_audit_trigger(self, version: int) -> None:
        """Remove the trigger an audit answered (one set again since stays)."""
        with contextlib.suppress(NoNode, MetadataVersionConflict):
            await self._store.delete(self._layout.audit_trigger, version)

    # --- auditor election ---------------------------------------------------------------------

    async def stand(self, owner: str) -> str:
        """Become a candidate for auditor; return the name of the candidate's znode."""
        prefix = paths.join(self._layout.auditor_election, CANDIDATE_PREFIX)
        created = await self._store.create(
            prefix, encode_owner(owner), ephemeral=True, sequential=True, make_parents=True
        )
        return paths.name_of(created)

    async def withdraw(self, owner: str) -> None:
        """Remove every candidacy of `owner` (one an earlier attempt made without learning
        its name, or a dead previous process of the same owner left)."""
        for name in (await self.candidates()).ordered:
            path = paths.join(self._layout.auditor_election, name)
            try:
                stored = await self._store.get(path)
                if decode_owner(stored.value, f"auditor candidate {path}") == owner:
                    await self._store.delete(path, stored.version)
            except (NoNode, MetadataVersionConflict):
                continue

    async def candidates(self) -> Candidates:
        """The candidates, lowest sequence (the auditor) first."""
        try:
            names = await self._store.children(self._layout.auditor_election)
        except NoNode:
            return Candidates((), ())
        numbered = sorted(
            (sequence, name) for name in names if (sequence := candidate_sequence(name)) is not None
        )
        return Candidates(tuple(name for _, name in numbered), tuple(names))

    async def auditor(self) -> str | None:
        """The owner of the elected auditor, or None when no candidate stands."""
        for name in (await self.candidates()).ordered:
            path = paths.join(self._layout.auditor_election, name)
            try:
                stored = await self._store.get(path)
            except NoNode:
                continue  # it just left: the next one is the auditor
            return decode_owner(stored.value, f"auditor candidate {path}")
        return None

    async def watch_candidates(self, seen: Candidates) -> None:
        """Return once the election's children differ from `seen` (see `MetadataStore`)."""
        await self._store.watch_children(self._layout.auditor_election, seen.children)
