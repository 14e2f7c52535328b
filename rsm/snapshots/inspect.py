"""What `rsm snapshot ls` and `rsm snapshot inspect` report: manifests, and one snapshot read
through and checked.

`inspect` reads a snapshot's whole ledger with every check a loading replica
makes (chunk CRCs and sequence, manifest sizes and SHA-256, header against
manifest) and decodes what it can without the application's code: the header,
the number of sessions, and, for the default codec, each public attribute's
type and size (the state is rebuilt in a plain object to get them, so the
tool needs about as much memory as the state).  Problems are reported, not
raised: an operator inspects a snapshot precisely because it may be bad.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from bookie.errors import BookieError
from rsm.core.snapshot_format import (
    CODEC_DEFAULT,
    SECTION_FRAMEWORK,
    FrameworkDecoder,
    SnapshotReader,
)
from rsm.core.snapshot_manifest import Manifest, SnapshotsValue
from rsm.core.snapshot_state import StateDecoder, public_attributes
from rsm.errors import RsmError
from rsm.snapshots.store import SnapshotStore


def manifest_plain(manifest: Manifest) -> dict[str, Any]:
    """A manifest as plain values (hashes in hex), for answers, tables and JSON."""
    return {
        "app": manifest.app,
        "index": manifest.index,
        "time_ms": manifest.time_ms,
        "epoch": manifest.epoch,
        "ledger_id": manifest.ledger_id,
        "state_hash": manifest.state_hash.hex(),
        "sha256": manifest.sha256.hex(),
        "size_bytes": manifest.size_bytes,
        "chunk_count": manifest.chunk_count,
        "format": manifest.format,
        "created_ms": manifest.created_ms,
        "replica_id": manifest.replica_id,
    }


def listing(value: SnapshotsValue) -> dict[str, Any]:
    """The snapshots znode as plain values, newest snapshot first."""
    return {
        "snapshots": [manifest_plain(m) for m in value.newest_first()],
        "pending": [
            {"ledger_id": p.ledger_id, "replica_id": p.replica_id, "started_ms": p.started_ms}
            for p in value.pending
        ],
        "garbage": list(value.garbage),
    }


class _Attributes:
    """What a default-codec state is restored into when the application's class is absent."""


async def inspect(store: SnapshotStore, manifest: Manifest) -> dict[str, Any]:
    """Read `manifest`'s snapshot through and report what it holds and whether it is sound."""
    report: dict[str, Any] = {"manifest": manifest_plain(manifest), "valid": False}
    reader = SnapshotReader()
    framework = FrameworkDecoder()
    state = _Attributes()
    decoder: StateDecoder | None = None
    state_bytes = 0
    try:
        async for payload in store.chunks(manifest):
            section, data = reader.take(payload)
            if section == SECTION_FRAMEWORK:
                framework.feed(data)
                continue
            header = framework.header
            if not state_bytes and header is not None and header.codec == CODEC_DEFAULT:
                decoder = StateDecoder(state)
            state_bytes += len(data)
            if decoder is not None:
                decoder.feed(data)
        reader.finish(manifest.chunk_count, manifest.size_bytes, manifest.sha256)
        header = framework.finish()
        if decoder is not None:
            decoder.finish()
    except (RsmError, BookieError) as error:
        report["error"] = f"{type(error).__name__}: {error}"
        return report
    if (header.app, header.index, header.epoch) != (manifest.app, manifest.index, manifest.epoch):
        report["error"] = "the header does not match the manifest"
        return report
    report["valid"] = True
    report["header"] = {
        "machine": header.machine,
        "codec": header.codec,
        "index": header.index,
        "time_ms": header.time_ms,
        "epoch": header.epoch,
        "cursor": None if header.cursor is None else list(header.cursor),
        "sessions": header.sessions,
        "replica_id": header.replica_id,
        "created_ms": header.created_ms,
    }
    report["state_bytes"] = state_bytes
    if decoder is not None:
        report["attributes"] = {
            name: {
                "type": type(value).__qualname__,
                "length": len(value) if isinstance(value, Sized) else None,
            }
            for name, value in public_attributes(state)
        }
    return report
