"""The `/rsm/<app>/snapshots` znode: registered snapshots, ones being written, ledgers to delete.

Pure.  One znode holds all of it, so that every change is one compare-and-set
(or one multi-operation with the log znode, for truncation) and nothing is
ever half-registered.  The value, a canonical CBOR map (RFC 8949 §4.2.1)::

    {"v": 1,
     "snapshots": [manifest, ...],        registered, ascending index; at most K
     "pending":   [[ledger_id, replica_id, started_ms], ...],   being written
     "garbage":   [ledger_id, ...]}       no longer referenced, to be deleted

    manifest = {"app": text, "index": uint, "time_ms": uint, "epoch": uint,
                "ledger_id": uint, "state_hash": bytes, "sha256": bytes (32),
                "size_bytes": uint, "chunk_count": uint, "format": uint,
                "created_ms": uint, "replica_id": text}

A manifest describes one snapshot ledger: the state after applying `index`
(logged at `time_ms`, by the leader of `epoch`); `state_hash` is the state
machine's `state_hash()` there, `sha256`, `size_bytes` and `chunk_count` what
a reader checks the chunks against (rsm/core/snapshot_format.py), `format`
the chunk format version, `created_ms` the capturing replica's wall clock.

Life of a snapshot ledger, each step one CAS of this value:

1. `begin`: its ledger id goes into `pending` (with the writer and the time),
   before any chunk is written.  A writer's older pending entries go to
   `garbage` at the same time: a replica writes one snapshot at a time, so
   they are leftovers of a crash.
2. `register`: once the ledger is closed, the pending entry becomes a
   manifest.  A snapshot is *durable* from this moment, never before.  The
   manifests beyond the newest K move to `garbage` in the same step
   (unregistered first, deleted after).
3. `abandon` (a failed write) or `expire_pending` (a writer that crashed: its
   entry outlived `grace_ms`): the ledger goes to `garbage`.
4. Truncation moves the truncated segments' ledgers to `garbage` in the same
   multi-operation that removes them from the log.
5. `collected`: ledgers deleted (or found gone) leave `garbage`.

So a crash between two steps leaves a ledger listed somewhere, and a later
round finds and deletes it: no ledger of a snapshot or of the log is ever
leaked, and none is deleted while something refers to it.

Invariants: manifests ascend strictly by index and name distinct ledgers; a
ledger id appears at most once across the three lists; the lists respect
their bounds (`limits.snapshots_kept_max`, `snapshot_pending_max`,
`snapshot_garbage_max`).
"""

from __future__ import annotations

import io
import itertools
from dataclasses import dataclass, replace
from typing import Any, Final

import cbor2

from bookie.errors import preview
from rsm import limits
from rsm.core.snapshot_format import FORMAT_VERSION
from rsm.errors import MalformedValue

VALUE_VERSION: Final = 1
_U63_END: Final = 1 << 63
SHA256_BYTES: Final = 32


@dataclass(frozen=True, slots=True)
class Manifest:
    """One registered snapshot (fields in the module docstring)."""

    app: str
    index: int
    time_ms: int
    epoch: int
    ledger_id: int
    state_hash: bytes
    sha256: bytes
    size_bytes: int
    chunk_count: int
    created_ms: int
    replica_id: str
    format: int = FORMAT_VERSION


@dataclass(frozen=True, slots=True)
class Pending:
    """A snapshot ledger being written by `replica_id` since `started_ms` (its wall clock)."""

    ledger_id: int
    replica_id: str
    started_ms: int


@dataclass(frozen=True, slots=True)
class SnapshotsValue:
    """The whole znode value (see the module docstring)."""

    snapshots: tuple[Manifest, ...] = ()
    pending: tuple[Pending, ...] = ()
    garbage: tuple[int, ...] = ()

    @property
    def newest(self) -> Manifest | None:
        return self.snapshots[-1] if self.snapshots else None

    def newest_first(self) -> tuple[Manifest, ...]:
        return tuple(reversed(self.snapshots))

    def find(self, index: int) -> Manifest | None:
        for manifest in self.snapshots:
            if manifest.index == index:
                return manifest
        return None

    @property
    def ledger_ids(self) -> frozenset[int]:
        """Every ledger the value mentions."""
        return frozenset(
            (
                *(m.ledger_id for m in self.snapshots),
                *(p.ledger_id for p in self.pending),
                *self.garbage,
            )
        )


# --- transitions ------------------------------------------------------------------------------


class SnapshotsFull(Exception):
    """A bound of the znode value would be exceeded; the caller waits for garbage collection."""


class SnapshotAbandoned(Exception):
    """The snapshot's ledger is no longer pending (its write was taken for abandoned): it
    cannot be registered, its ledger is garbage or gone."""


def begin(
    value: SnapshotsValue, *, ledger_id: int, replica_id: str, started_ms: int
) -> SnapshotsValue:
    """Step 1: `ledger_id` is being written; this writer's older pending entries are garbage."""
    assert ledger_id not in value.ledger_ids, ledger_id
    stale = tuple(p.ledger_id for p in value.pending if p.replica_id == replica_id)
    pending = tuple(p for p in value.pending if p.replica_id != replica_id)
    if len(pending) >= limits.snapshot_pending_max:
        raise SnapshotsFull(f"{len(pending)} snapshots are being written already")
    result = _with_garbage(
        replace(value, pending=(*pending, Pending(ledger_id, replica_id, started_ms))), stale
    )
    check(result)
    return result


def register(value: SnapshotsValue, manifest: Manifest, *, kept: int) -> SnapshotsValue:
    """Step 2: the pending `manifest.ledger_id` becomes a registered snapshot; keep `kept`.

    A manifest at an index already registered is not added (its ledger goes
    to garbage): the one registered first stays, so readers never see it move.
    """
    assert 1 <= kept <= limits.snapshots_kept_max
    pending = tuple(p for p in value.pending if p.ledger_id != manifest.ledger_id)
    if len(pending) == len(value.pending):
        raise SnapshotAbandoned(f"snapshot ledger {manifest.ledger_id} is not pending")
    if value.find(manifest.index) is not None:
        result = _with_garbage(replace(value, pending=pending), (manifest.ledger_id,))
        check(result)
        return result
    snapshots = tuple(sorted((*value.snapshots, manifest), key=lambda m: m.index))
    dropped = snapshots[:-kept]
    result = _with_garbage(
        replace(value, snapshots=snapshots[-kept:], pending=pending),
        tuple(m.ledger_id for m in dropped),
    )
    check(result)
    return result


def abandon(value: SnapshotsValue, ledger_id: int) -> SnapshotsValue:
    """Step 3: a write that failed; its ledger is garbage."""
    pending = tuple(p for p in value.pending if p.ledger_id != ledger_id)
    result = _with_garbage(replace(value, pending=pending), (ledger_id,))
    check(result)
    return result


def expire_pending(value: SnapshotsValue, *, now_ms: int, grace_ms: int) -> SnapshotsValue:
    """Step 3: pending entries started more than `grace_ms` ago (by the writer's clock and
    `now_ms`) are abandoned: their writer crashed or gave up without saying so."""
    expired = tuple(p.ledger_id for p in value.pending if now_ms - p.started_ms > grace_ms)
    if not expired:
        return value
    pending = tuple(p for p in value.pending if p.ledger_id not in expired)
    result = _with_garbage(replace(value, pending=pending), expired)
    check(result)
    return result


def add_garbage(value: SnapshotsValue, ledger_ids: tuple[int, ...]) -> SnapshotsValue:
    """Step 4: ledgers (of truncated segments) to delete."""
    result = _with_garbage(value, ledger_ids)
    check(result)
    return result


def collected(value: SnapshotsValue, ledger_ids: frozenset[int]) -> SnapshotsValue:
    """Step 5: `ledger_ids` were deleted; they leave the garbage list."""
    return replace(value, garbage=tuple(i for i in value.garbage if i not in ledger_ids))


def _with_garbage(value: SnapshotsValue, ledger_ids: tuple[int, ...]) -> SnapshotsValue:
    listed = set(value.garbage)
    garbage = value.garbage + tuple(i for i in ledger_ids if i not in listed)
    if len(garbage) > limits.snapshot_garbage_max:
        raise SnapshotsFull(f"{len(garbage)} ledgers would await deletion")
    return replace(value, garbage=garbage)


def violation(value: SnapshotsValue) -> str | None:
    """The first invariant of the module docstring `value` breaks, or None."""
    if len(value.snapshots) > limits.snapshots_kept_max:
        return f"{len(value.snapshots)} snapshots exceed {limits.snapshots_kept_max}"
    if len(value.pending) > limits.snapshot_pending_max:
        return f"{len(value.pending)} pending snapshots exceed {limits.snapshot_pending_max}"
    if len(value.garbage) > limits.snapshot_garbage_max:
        return f"{len(value.garbage)} garbage ledgers exceed {limits.snapshot_garbage_max}"
    indexes = [m.index for m in value.snapshots]
    if any(b <= a for a, b in itertools.pairwise(indexes)):
        return f"snapshot indexes {indexes} do not ascend strictly"
    ids = [
        *(m.ledger_id for m in value.snapshots),
        *(p.ledger_id for p in value.pending),
        *value.garbage,
    ]
    if len(ids) != len(set(ids)):
        return "a ledger is listed twice"
    return None


def check(value: SnapshotsValue) -> None:
    problem = violation(value)
    assert problem is None, problem


# --- encoding ---------------------------------------------------------------------------------


def _manifest_plain(manifest: Manifest) -> dict[str, Any]:
    return {
        "app": manifest.app,
        "index": manifest.index,
        "time_ms": manifest.time_ms,
        "epoch": manifest.epoch,
        "ledger_id": manifest.ledger_id,
        "state_hash": manifest.state_hash,
        "sha256": manifest.sha256,
        "size_bytes": manifest.size_bytes,
        "chunk_count": manifest.chunk_count,
        "format": manifest.format,
        "created_ms": manifest.created_ms,
        "replica_id": manifest.replica_id,
    }


def encode_snapshots(value: SnapshotsValue) -> bytes:
    """The znode value (canonical CBOR: equal values give equal bytes)."""
    check(value)
    return cbor2.dumps(
        {
            "v": VALUE_VERSION,
            "snapshots": [_manifest_plain(m) for m in value.snapshots],
            "pending": [[p.ledger_id, p.replica_id, p.started_ms] for p in value.pending],
            "garbage": list(value.garbage),
        },
        canonical=True,
    )


def _u63(v: Any) -> bool:
    return type(v) is int and 0 <= v < _U63_END


def _text(v: Any) -> bool:
    return type(v) is str and 1 <= len(v) <= limits.address_chars_max


_MANIFEST_CHECKS: Final = {
    "app": _text,
    "index": _u63,
    "time_ms": _u63,
    "epoch": _u63,
    "ledger_id": _u63,
    "state_hash": lambda v: type(v) is bytes and 1 <= len(v) <= limits.state_hash_bytes_max,
    "sha256": lambda v: type(v) is bytes and len(v) == SHA256_BYTES,
    "size_bytes": _u63,
    "chunk_count": _u63,
    "format": _u63,
    "created_ms": _u63,
    "replica_id": _text,
}


def _decode_manifest(raw: Any) -> Manifest:
    if type(raw) is not dict or raw.keys() != _MANIFEST_CHECKS.keys():
        raise MalformedValue(
            f"snapshot manifest {preview(raw, 120)} does not have the manifest's keys"
        )
    for key, valid in _MANIFEST_CHECKS.items():
        if not valid(raw[key]):
            raise MalformedValue(
                f"snapshot manifest field {key} = {preview(raw[key])} is not valid"
            )
    return Manifest(**raw)


def _decode_pending(raw: Any) -> Pending:
    if (
        type(raw) is not list
        or len(raw) != 3
        or not _u63(raw[0])
        or not _text(raw[1])
        or not _u63(raw[2])
    ):
        raise MalformedValue(f"pending snapshot {preview(raw)} is not [ledger, replica, started]")
    return Pending(raw[0], raw[1], raw[2])


def decode_snapshots(data: bytes) -> SnapshotsValue:
    """The value of the znode; an empty znode is the empty value."""
    if not data:
        return SnapshotsValue()
    stream = io.BytesIO(data)
    try:
        raw = cbor2.CBORDecoder(stream, allow_duplicate_keys=False).decode()
    except Exception as error:  # cbor2 raises several unrelated types on junk
        raise MalformedValue(f"snapshots znode is not CBOR: {error}") from None
    if stream.tell() != len(data):
        raise MalformedValue("snapshots znode has bytes after its value")
    if (
        type(raw) is not dict
        or raw.keys() != {"v", "snapshots", "pending", "garbage"}
        or raw["v"] != VALUE_VERSION
        or not all(type(raw[key]) is list for key in ("snapshots", "pending", "garbage"))
    ):
        raise MalformedValue("snapshots znode is not {v: 1, snapshots, pending, garbage}")
    if not all(_u63(i) for i in raw["garbage"]):
        raise MalformedValue("snapshots znode garbage holds something other than ledger ids")
    value = SnapshotsValue(
        tuple(_decode_manifest(m) for m in raw["snapshots"]),
        tuple(_decode_pending(p) for p in raw["pending"]),
        tuple(raw["garbage"]),
    )
    problem = violation(value)
    if problem is not None:
        raise MalformedValue(f"snapshots znode breaks an invariant: {problem}")
    return value
