"""Ledger metadata in a metadata store: id allocation, create, read, compare-and-set, delete,
listing and watching.  Works over any `MetadataStore` (ZooKeeper or in-memory).

Each ledger's metadata is one znode at `MetadataLayout.ledger(id)`, encoded by
`ledger_format`.  Every change is a compare-and-set on the znode version;
`update` wraps that in the re-read-and-retry loop every caller needs.  Which
changes are legal is decided by `bookie.core.metadata`, not here.

Ledger ids come from a counter znode, `layout.idgen`, whose value is the next
id to hand out as ASCII decimal (absent or empty: 0).  `allocate_id` reads
it and advances it by compare-and-set, retrying on conflict.  Chosen over
BookKeeper's sequential znodes because the counter spans the whole 63-bit id
range with one mechanism (ZooKeeper's sequence suffix is a signed 32-bit
counter, which is why BookKeeper needs a second generator for large ids),
leaves nothing behind when a client dies half way, and never reuses an id even
after its ledger is deleted.  Its cost, a retry when two clients allocate at
the same moment, is paid only when a ledger is created, never per entry.

Invariants:

* Ids handed out are unique and strictly increasing across all clients: each
  is the counter value replaced by a successful compare-and-set.
* `list_ledgers` returns every ledger that existed throughout the listing or
  raises; it never returns a partial list.  Bookie garbage collection deletes
  the data of ledgers missing from the list, so a silently partial list would
  destroy live data.
* Intermediate directories of the ledger hierarchy are never deleted, so a
  `create` cannot race with the removal of its parent and a listing never
  finds a directory vanishing under it.
"""

from __future__ import annotations

from collections.abc import Callable

from bookie import limits
from bookie.core.metadata import LedgerMetadata
from bookie.errors import (
    BadMetadata,
    MetadataError,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
    NoSuchLedgerError,
)
from bookie.meta import ledger_format
from bookie.meta.api import ANY_VERSION, MetadataStore
from bookie.meta.layout import (
    LedgerNodeKind,
    MetadataLayout,
    ledger_child_kind,
    ledger_id_of_parts,
)

Transform = Callable[[LedgerMetadata], LedgerMetadata | None]
"""Given the current metadata, the metadata to write, or None when there is nothing to do."""


class LedgerManager:
    """The ledgers of one cluster (root `root`) in `store`."""

    def __init__(self, store: MetadataStore, root: str = limits.metadata_root_default) -> None:
        self._store = store
        self._layout = MetadataLayout(root)

    @property
    def layout(self) -> MetadataLayout:
        return self._layout

    async def allocate_id(self) -> int:
        """A ledger id never handed out before, larger than every id handed out before.

        Raises `MetadataVersionConflict` if `limits.metadata_cas_attempts_max`
        attempts all lost to concurrent allocations, `BadMetadata` if the
        counter znode holds junk, `MetadataError` when ids are exhausted, and
        `MetadataUnavailable` (outcome unknown: at worst an id is skipped).
        """
        path = self._layout.idgen
        for _ in range(limits.metadata_cas_attempts_max):
            try:
                current = await self._store.get(path)
            except NoNode:
                try:
                    await self._store.create(path, _encode_counter(1), make_parents=True)
                except NodeExists:
                    continue
                return 0
            ledger_id = _decode_counter(current.value, path)
            if ledger_id > limits.ledger_id_max:
                raise MetadataError(f"{path}: every ledger id has been handed out")
            try:
                await self._store.set(path, _encode_counter(ledger_id + 1), current.version)
            except MetadataVersionConflict:
                continue
            assert 0 <= ledger_id <= limits.ledger_id_max
            return ledger_id
        raise MetadataVersionConflict(
            f"{path}: no ledger id after {limits.metadata_cas_attempts_max} contended attempts"
        )

    async def create(self, metadata: LedgerMetadata) -> int:
        """Store the metadata of a new ledger; return its version (0).

        Raises `NodeExists` if ledger `metadata.ledger_id` already exists.
        """
        path = self._layout.ledger(metadata.ledger_id)
        await self._store.create(path, ledger_format.encode(metadata), make_parents=True)
        return 0

    async def read(self, ledger_id: int) -> tuple[LedgerMetadata, int]:
        """The ledger's metadata and its version.

        Raises `NoSuchLedgerError` if it does not exist, `BadMetadata` if its
        value is not valid metadata of this ledger.
        """
        path = self._layout.ledger(ledger_id)
        try:
            stored = await self._store.get(path)
        except NoNode as error:
            raise NoSuchLedgerError(f"ledger {ledger_id} ({path})") from error
        what = f"ledger {ledger_id} metadata at {path}"
        metadata = ledger_format.decode(stored.value, what)
        if metadata.ledger_id != ledger_id:
            raise BadMetadata(f"{what}: records ledger id {metadata.ledger_id}")
        return metadata, stored.version

    async def cas(self, ledger_id: int, new: LedgerMetadata, version: int) -> int:
        """Replace the metadata if it is still at `version`; return the new version.

        Raises `MetadataVersionConflict` if it changed since, `NoSuchLedgerError`
        if the ledger is gone.
        """
        assert new.ledger_id == ledger_id
        assert version >= 0, "a compare-and-set needs the version that was read"
        path = self._layout.ledger(ledger_id)
        try:
            return await self._store.set(path, ledger_format.encode(new), version)
        except NoNode as error:
            raise NoSuchLedgerError(f"ledger {ledger_id} ({path})") from error

    async def update(self, ledger_id: int, transform: Transform) -> tuple[LedgerMetadata, int]:
        """Apply `transform` to the current metadata until its result is stored by CAS.

        `transform` is called with the freshly read metadata each round and
        returns the metadata to write, or None if nothing needs writing (then
        the current metadata is returned unchanged).  It may raise to give up;
        its exception propagates.  It must be idempotent in effect: after a
        `MetadataUnavailable` the change may or may not have been stored, and
        the caller that retries will call it again on what was stored.

        Returns the metadata now stored and its version.  Raises
        `MetadataVersionConflict` after `limits.metadata_cas_attempts_max`
        lost rounds, and what `read` raises.
        """
        current, version = await self.read(ledger_id)
        for _ in range(limits.metadata_cas_attempts_max):
            new = transform(current)
            if new is None:
                return current, version
            try:
                return new, await self.cas(ledger_id, new, version)
            except MetadataVersionConflict:
                current, version = await self.read(ledger_id)
        raise MetadataVersionConflict(
            f"ledger {ledger_id}: metadata still contended after "
            f"{limits.metadata_cas_attempts_max} attempts"
        )

    async def delete(self, ledger_id: int, version: int = ANY_VERSION) -> None:
        """Remove the ledger's metadata (bookies then reclaim its data through GC).

        Raises `NoSuchLedgerError` if it does not exist, `MetadataVersionConflict`
        if `version` is given and no longer current.
        """
        path = self._layout.ledger(ledger_id)
        try:
            await self._store.delete(path, version)
        except NoNode as error:
            raise NoSuchLedgerError(f"ledger {ledger_id} ({path})") from error

    async def watch(self, ledger_id: int, version: int) -> None:
        """Return once the ledger's metadata is no longer at `version` (changed or deleted)."""
        await self._store.watch(self._layout.ledger(ledger_id), version)

    async def list_ledgers(self) -> list[int]:
        """Every ledger id in the store, ascending.

        Complete or an exception, never a partial list: any failure while
        walking the hierarchy (`MetadataUnavailable`, a directory that vanished)
        propagates.  Ledgers created or deleted during the walk may or may not
        be listed.
        """
        ledger_ids: list[int] = []
        await self._walk((), ledger_ids)
        ledger_ids.sort()
        return ledger_ids

    async def _walk(self, prefix: tuple[str, ...], ledger_ids: list[int]) -> None:
        directory = self._layout.ledger_directory(prefix)
        try:
            names = await self._store.children(directory)
        except NoNode as error:
            if not prefix:
                return  # no ledger was ever created under this root
            raise MetadataError(
                f"ledger directory {directory} vanished during a listing"
            ) from error
        for name in names:
            kind = ledger_child_kind(prefix, name)
            if kind is LedgerNodeKind.DIRECTORY:
                await self._walk((*prefix, name), ledger_ids)
            elif kind is LedgerNodeKind.LEDGER:
                ledger_id = ledger_id_of_parts((*prefix, name))
                assert ledger_id is not None
                ledger_ids.append(ledger_id)


def _encode_counter(next_ledger_id: int) -> bytes:
    return str(next_ledger_id).encode("ascii")


def _decode_counter(value: bytes, path: str) -> int:
    if not value:
        return 0
    text = value.decode("ascii", errors="replace")
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(limits.ledger_id_max)) + 1:
        raise BadMetadata(f"{path}: ledger id counter holds {value!r}, not a decimal number")
    return int(text)
