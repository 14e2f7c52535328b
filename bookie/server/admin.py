"""A bookie's admin HTTP API: metrics, liveness, readiness, its state, the cluster's ledgers.

`bookie_routes` builds the routes a bookie process serves on `admin_address`
(bookie/net/http_server.py serves them).  Reads answer JSON; the two POSTs
change the bookie (forced read-only mode, a garbage-collection round), so the
server listens on loopback unless the operator says otherwise, and they need
the admin token when one is configured (`bookie.net.admin_token`).

`/ready` is 200 once the bookie is registered and writable, else 503 with the
reason; `/health` is 200 while the process serves HTTP at all.  The answers'
shapes are in `BOOKIE_OPENAPI`, served at `/openapi.json`; the tests check real
answers against it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import CollectorRegistry

from bookie import limits
from bookie.core.metadata import LedgerMetadata
from bookie.errors import HttpError, NoSuchLedgerError
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import list_bookies
from bookie.meta.ledgers import LedgerManager
from bookie.metrics import exposition
from bookie.net.http_server import Answer, Request, Routes, common_routes, json_answer
from bookie.net.openapi import document, get, obj, post
from bookie.server.disk_monitor import DiskMonitor, measure
from bookie.server.gc import GarbageCollector
from bookie.server.server import BookieServer
from bookie.storage.file import FileLedgerStorage

_LEDGER_ID_DIGITS_MAX: Final = len(str(limits.ledger_id_max))


@dataclass(slots=True)
class BookieParts:
    """What the admin API reads and drives in a running bookie process."""

    bookie_id: str
    address: str
    root: str
    store: MetadataStore
    server: BookieServer
    storage: FileLedgerStorage
    collector: GarbageCollector
    monitor: DiskMonitor
    registries: list[CollectorRegistry]
    registered: Callable[[], bool]


def ledger_json(metadata: LedgerMetadata) -> dict[str, Any]:
    """A ledger's metadata as JSON (the password hash and custom values left out)."""
    return {
        "ledger_id": metadata.ledger_id,
        "state": metadata.state.name,
        "ensemble_size": metadata.ensemble_size,
        "write_quorum": metadata.write_quorum,
        "ack_quorum": metadata.ack_quorum,
        "last_entry_id": metadata.last_entry_id,
        "length": metadata.length,
        "ctime_ms": metadata.ctime_ms,
        "ensembles": [
            {"first_entry_id": first, "bookies": list(bookies)}
            for first, bookies in metadata.ensembles
        ],
    }


def bookie_routes(parts: BookieParts) -> Routes:
    ledgers = LedgerManager(parts.store, parts.root)

    async def ready(_: Request) -> Answer:
        reasons = []
        if not parts.registered():
            reasons.append("not registered")
        if parts.server.read_only:
            reasons.append("read-only: " + ", ".join(parts.monitor.state.reasons))
        return json_answer({"ready": not reasons, "reasons": reasons}, 503 if reasons else 200)

    async def info(_: Request) -> Answer:
        usage = measure(parts.storage.config.ledger_dirs)
        server = parts.server
        return json_answer(
            {
                "bookie_id": parts.bookie_id,
                "address": parts.address,
                "read_only": server.read_only,
                "read_only_reasons": parts.monitor.state.reasons,
                "registered": parts.registered(),
                "connections": server.connection_count,
                "pending_requests": server.pending_requests,
                "free_bytes": usage.free_bytes,
                "total_bytes": usage.total_bytes,
                "storage_bytes": parts.storage.file_bytes(),
            }
        )

    async def bookies(_: Request) -> Answer:
        seen = await list_bookies(parts.store, parts.root)
        listed = [
            {"bookie_id": bookie_id, "address": info.address, "rack": info.rack, "read_only": False}
            for bookie_id, info in sorted(seen.writable.items())
        ] + [
            {"bookie_id": bookie_id, "address": info.address, "rack": info.rack, "read_only": True}
            for bookie_id, info in sorted(seen.read_only.items())
        ]
        return json_answer({"bookies": listed})

    async def ledger_list(_: Request) -> Answer:
        return json_answer({"ledgers": sorted(await ledgers.list_ledgers())})

    async def ledger(request: Request) -> Answer:
        text = request.params["ledger_id"]
        if not (text.isascii() and text.isdigit()):
            raise HttpError(400, f"a ledger id is a number, not {text!r}")
        if len(text) > _LEDGER_ID_DIGITS_MAX or int(text) > limits.ledger_id_max:
            raise HttpError(404, f"no ledger {text}: ledger ids are 0..{limits.ledger_id_max}")
        try:
            metadata, _version = await ledgers.read(int(text))
        except NoSuchLedgerError as error:
            raise HttpError(404, f"no ledger {text}") from error
        return json_answer(ledger_json(metadata))

    def read_only_state() -> dict[str, Any]:
        state = parts.monitor.state
        return {
            "read_only": parts.server.read_only,
            "forced": state.forced,
            "reasons": state.reasons,
        }

    async def read_only(_: Request) -> Answer:
        return json_answer(read_only_state())

    async def set_read_only(request: Request) -> Answer:
        body = request.json()
        value = body.get("read_only") if isinstance(body, dict) else None
        if not isinstance(value, bool):
            raise HttpError(400, 'send {"read_only": true} or {"read_only": false}')
        parts.monitor.force(value)
        return json_answer(read_only_state(), 202)

    async def gc_status(_: Request) -> Answer:
        return json_answer(parts.collector.metrics.as_dict())

    async def gc_trigger(_: Request) -> Answer:
        parts.collector.trigger()
        return json_answer({"triggered": True}, 202)

    routes = common_routes(lambda: exposition(parts.registries), ready, BOOKIE_OPENAPI)
    routes.add("GET", "/api/v1/bookie/info", info)
    routes.add("GET", "/api/v1/bookies", bookies)
    routes.add("GET", "/api/v1/ledgers", ledger_list)
    routes.add("GET", "/api/v1/ledgers/{ledger_id}", ledger)
    routes.add("GET", "/api/v1/bookie/read_only", read_only)
    routes.add("POST", "/api/v1/bookie/read_only", set_read_only)
    routes.add("GET", "/api/v1/bookie/gc", gc_status)
    routes.add("POST", "/api/v1/bookie/gc", gc_trigger)
    return routes


_STRINGS = {"type": "array", "items": {"type": "string"}}
_READ_ONLY = obj(read_only="boolean", forced="boolean", reasons=_STRINGS)
_ENSEMBLE = obj(first_entry_id="integer", bookies=_STRINGS)

BOOKIE_OPENAPI = document(
    "bookie admin API",
    {
        "/health": get("liveness", obj(status="string")),
        "/ready": get(
            "readiness: registered and writable (503 when not)",
            obj(ready="boolean", reasons=_STRINGS),
            statuses=(200, 503),
        ),
        "/api/v1/bookie/info": get(
            "this bookie",
            obj(
                bookie_id="string",
                address="string",
                read_only="boolean",
                read_only_reasons=_STRINGS,
                registered="boolean",
                connections="integer",
                pending_requests="integer",
                free_bytes="integer",
                total_bytes="integer",
                storage_bytes=obj(journal="integer", entry_log="integer", index="integer"),
            ),
        ),
        "/api/v1/bookies": get(
            "the registered bookies",
            obj(
                bookies={
                    "type": "array",
                    "items": obj(
                        bookie_id="string",
                        address="string",
                        rack=["string", "null"],
                        read_only="boolean",
                    ),
                }
            ),
        ),
        "/api/v1/ledgers": get(
            "every ledger id", obj(ledgers={"type": "array", "items": {"type": "integer"}})
        ),
        "/api/v1/ledgers/{ledger_id}": get(
            "one ledger's metadata",
            obj(
                ledger_id="integer",
                state="string",
                ensemble_size="integer",
                write_quorum="integer",
                ack_quorum="integer",
                last_entry_id="integer",
                length="integer",
                ctime_ms="integer",
                ensembles={"type": "array", "items": _ENSEMBLE},
            ),
            parameter="ledger_id",
        ),
        "/api/v1/bookie/read_only": {
            **get("the read-only state", _READ_ONLY),
            **post(
                "force read-only mode on or off",
                obj(read_only="boolean"),
                _READ_ONLY,
            ),
        },
        "/api/v1/bookie/gc": {
            **get(
                "garbage-collection counters",
                obj(
                    rounds="integer",
                    rounds_skipped="integer",
                    ledgers_deleted="integer",
                    logs_deleted="integer",
                    logs_compacted="integer",
                    bytes_reclaimed="integer",
                    last_run_time_ms=["integer", "null"],
                    last_duration_ms=["integer", "null"],
                    last_error=["string", "null"],
                    errors="integer",
                ),
            ),
            **post("start a garbage-collection round now", None, obj(triggered="boolean")),
        },
    },
)
"""The OpenAPI document of `bookie_routes` (`/metrics` and `/openapi.json` are not JSON)."""
