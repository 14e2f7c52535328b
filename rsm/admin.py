"""A replica process's admin HTTP API: metrics, readiness, its application, leadership, snapshots.

`admin_server(replica, store, address)` serves, while its block runs, the
routes below on `address` (bookie/net/http_server.py; `None`: no server).
Programs that host replicas (`rsm run`, `kvstore serve`) offer it behind
`--admin HOST:PORT` (`add_admin_argument`); it listens on loopback unless
told otherwise, since its two POSTs change the cluster (a snapshot, a
leadership transfer) and only the admin token guards them
(`bookie.net.admin_token`: 401/403 without it, when one is configured).

`/ready` is 200 while the replica leads and serves, or follows caught up;
else 503.  Answers about the application (leader, epoch, replicas with their
applied index and lag, segments, snapshots) are read from ZooKeeper and from
the replicas' STATUS at the time of the request, as `rsm status` reads them.
`/api/v1/overview` is the whole cluster at once (rsm/overview.py), and `/`
the status page that shows it (`rsm/status_page.html`, one self-contained
file: HTML, CSS and the script that polls the overview and draws the charts).
`REPLICA_OPENAPI` is the OpenAPI document, served at `/openapi.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import ssl
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from functools import partial

import anyio
from prometheus_client.metrics_core import Metric

from bookie.address import Address, parse_address
from bookie.clock import system_wall_clock_ms
from bookie.errors import HttpError, InvalidAddress, NoNode
from bookie.meta.api import MetadataStore
from bookie.metrics import exposition, registry
from bookie.net.http_server import Answer, Request, Routes, common_routes, json_answer, serve_http
from bookie.net.openapi import document, get, obj, post
from rsm.client import connect
from rsm.core.layout import RSM_ROOT, AppLayout
from rsm.errors import BadRequest, NotLeader, StatusError
from rsm.host import application_status
from rsm.overview import ClusterWatch, application_json, overview, segments_json
from rsm.runtime.log import LogStore
from rsm.runtime.metrics import rsm_metrics
from rsm.runtime.replica import Replica
from rsm.snapshots.inspect import listing, manifest_plain

_STATUS_PAGE = importlib.resources.files("rsm") / "status_page.html"

MetricSource = Callable[[], Iterable[Metric]]
"""What yields metric families at each scrape."""


def _admin_address(text: str) -> Address:
    try:
        return parse_address(text, port_zero=True)
    except InvalidAddress as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_admin_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--admin",
        metavar="HOST:PORT",
        type=_admin_address,
        help="serve the admin HTTP API (/metrics, /health, /ready, /api/...) there; keep it "
        "on loopback (docs/observability.md)",
    )


def replica_routes(
    replica: Replica,
    store: MetadataStore,
    watch: ClusterWatch,
    rsm_root: str = RSM_ROOT,
    *,
    app_metrics: MetricSource | None = None,
) -> Routes:
    """The routes of one replica's admin API (see the module docstring); `watch` supplies
    the overview's bookies and events, `app_metrics` the application's own families."""
    layout = AppLayout.of(replica.app, rsm_root)
    sources: list[MetricSource] = [partial(rsm_metrics, replica, system_wall_clock_ms)]
    if app_metrics is not None:
        sources.append(app_metrics)
    metrics = registry(*sources)

    async def ready(_: Request) -> Answer:
        status = replica.status()
        is_ready = status["serving"] or (status["role"] == "follower" and status["caught_up"])
        body = {"ready": is_ready, "role": status["role"], "caught_up": status["caught_up"]}
        return json_answer(body, 200 if is_ready else 503)

    async def applications(_: Request) -> Answer:
        try:
            names = await store.children(rsm_root)
        except NoNode:
            names = []
        return json_answer({"applications": sorted(names)})

    async def application(_: Request) -> Answer:
        async with connect(replica.app, store=store, rsm_root=rsm_root) as client:
            report = await application_status(store, client, ledger_root=replica.ledgers.root)
        return json_answer(application_json(report))

    async def this_replica(_: Request) -> Answer:
        status = replica.status()
        return json_answer({name: status[name] for name in _REPLICA_FIELDS})

    async def segments(_: Request) -> Answer:
        return json_answer(segments_json(*await LogStore(store, layout).read()))

    async def cluster(_: Request) -> Answer:
        return json_answer(await overview(replica, store, watch, rsm_root))

    async def page(_: Request) -> Answer:
        return Answer(200, _STATUS_PAGE.read_bytes(), "text/html; charset=utf-8")

    async def snapshots(_: Request) -> Answer:
        return json_answer(listing(await replica.snapshots.refresh()))

    async def take_snapshot(_: Request) -> Answer:
        try:
            manifest = await replica.snapshots.take("requested")
        except StatusError as error:
            raise HttpError(503, f"{type(error).__name__}: {error}") from None
        return json_answer(manifest_plain(manifest), 202)

    async def transfer(request: Request) -> Answer:
        body = request.json()
        target = body.get("to") if isinstance(body, dict) else None
        if target is not None and not isinstance(target, str):
            raise HttpError(400, 'send {"to": "REPLICA_ID"}, or {} for any caught-up replica')
        try:
            result = await replica.transfer_leadership(target)
        except NotLeader as error:
            raise HttpError(409, f"{error}: ask the leader's admin API") from None
        except BadRequest as error:
            raise HttpError(400, f"{type(error).__name__}: {error}") from None
        except StatusError as error:
            raise HttpError(503, f"{type(error).__name__}: {error}") from None
        return json_answer(result, 202)

    routes = common_routes(lambda: exposition([metrics]), ready, REPLICA_OPENAPI)
    routes.add("GET", "/api/v1/applications", applications)
    routes.add("GET", "/api/v1/application", application)
    routes.add("GET", "/api/v1/replica", this_replica)
    routes.add("GET", "/api/v1/segments", segments)
    routes.add("GET", "/api/v1/overview", cluster)
    routes.add("GET", "/", page)
    routes.add("GET", "/api/v1/snapshots", snapshots)
    routes.add("POST", "/api/v1/snapshots", take_snapshot)
    routes.add("POST", "/api/v1/leader/transfer", transfer)
    return routes


@contextlib.asynccontextmanager
async def admin_server(
    replica: Replica,
    store: MetadataStore,
    address: Address | None,
    rsm_root: str = RSM_ROOT,
    *,
    app_metrics: MetricSource | None = None,
    tls: ssl.SSLContext | None = None,
    tls_allowed_names: Collection[str] | None = None,
) -> AsyncIterator[str | None]:
    """Serve `replica`'s admin API on `address` (None: nothing) for the block; yield the
    address bound ("host:port").  `app_metrics`: what the application adds to `/metrics`,
    called at each scrape.  With `tls` (a server context), over HTTPS, serving the client
    certificate names `tls_allowed_names` only when given.  `AdminUnavailable` (a
    `BookieError`) when it cannot listen there."""
    if address is None:
        yield None
        return
    watch = ClusterWatch(replica, store, system_wall_clock_ms)
    routes = replica_routes(replica, store, watch, rsm_root, app_metrics=app_metrics)
    async with (
        serve_http(address, routes, tls=tls, tls_allowed_names=tls_allowed_names) as bound,
        anyio.create_task_group() as tasks,
    ):
        tasks.start_soon(watch.run)
        try:
            yield str(bound)
        finally:
            tasks.cancel_scope.cancel()


_REPLICA_FIELDS = (
    "app",
    "replica_id",
    "address",
    "role",
    "serving",
    "epoch",
    "applied_index",
    "applied_time_ms",
    "leader_id",
    "leader_address",
    "leader_epoch",
    "candidate",
    "caught_up",
    "lag_entries",
    "sessions",
    "takeovers",
)
_OPTIONAL_INT = ["integer", "null"]
_OPTIONAL_TEXT = ["string", "null"]
_MANIFEST = obj(
    app="string",
    index="integer",
    time_ms="integer",
    epoch="integer",
    ledger_id="integer",
    state_hash="string",
    sha256="string",
    size_bytes="integer",
    chunk_count="integer",
    format="integer",
    created_ms="integer",
    replica_id="string",
)

_REPLICA_ENTRY = obj(
    replica_id="string",
    address=_OPTIONAL_TEXT,
    tls_address=_OPTIONAL_TEXT,
    role=_OPTIONAL_TEXT,
    applied_index=_OPTIONAL_INT,
    lag=_OPTIONAL_INT,
    error=_OPTIONAL_TEXT,
)
_LEADER = {
    **obj(replica_id="string", address=_OPTIONAL_TEXT, tls_address=_OPTIONAL_TEXT, epoch="integer"),
    "type": ["object", "null"],
}
_SEGMENT = obj(
    ledger_id="integer",
    epoch="integer",
    first_index="integer",
    state="string",
    last_index="integer",
)
_OVERVIEW = obj(
    time_ms="integer",
    served_by="string",
    app="string",
    epoch="integer",
    leader=_LEADER,
    end_index=_OPTIONAL_INT,
    replicas={
        "type": "array",
        "items": obj(
            **_REPLICA_ENTRY["properties"],
            serving="boolean",
            load={
                **obj(
                    commits="integer",
                    commit_seconds="number",
                    reads="integer",
                    read_wait_seconds="number",
                ),
                "type": ["object", "null"],
            },
        ),
    },
    segments={"type": "array", "items": _SEGMENT},
    snapshots={"type": "array", "items": _MANIFEST},
    under_replication={
        "type": "object",
        "properties": {
            "enabled": {"type": "boolean"},
            "ledgers": {"type": "integer"},
            "app_ledgers": {"type": "array", "items": {"type": "integer"}},
            "being_repaired": {"type": "integer"},
            "missing_bookies": {"type": "array", "items": {"type": "string"}},
            "error": {"type": "string"},
        },
    },
    bookies={
        "type": "array",
        "items": obj(
            bookie_id="string",
            address=_OPTIONAL_TEXT,
            state={"type": "string", "enum": ["up", "read_only", "down"]},
            free_bytes=_OPTIONAL_INT,
            total_bytes=_OPTIONAL_INT,
            error=_OPTIONAL_TEXT,
        ),
    },
    events={
        "type": "array",
        "items": obj(
            time_ms="integer",
            kind={
                "type": "string",
                "enum": ["leader", "bookie_down", "bookie_up", "bookie_read_only", "diverged"],
            },
            message="string",
        ),
    },
)

REPLICA_OPENAPI = document(
    "replica admin API",
    {
        "/": {
            "get": {
                "summary": "the status page (HTML; it polls /api/v1/overview)",
                "responses": {
                    "200": {
                        "description": "the status page",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/health": get("liveness", obj(status="string")),
        "/ready": get(
            "readiness: leading, or following caught up (503 when not)",
            obj(ready="boolean", role="string", caught_up="boolean"),
            statuses=(200, 503),
        ),
        "/api/v1/applications": get(
            "the applications under the framework's root znode",
            obj(applications={"type": "array", "items": {"type": "string"}}),
        ),
        "/api/v1/application": get(
            "this replica's application: epoch, leader, log end, replicas and their lag",
            obj(
                app="string",
                epoch="integer",
                leader=_LEADER,
                end_index=_OPTIONAL_INT,
                replicas={"type": "array", "items": _REPLICA_ENTRY},
            ),
        ),
        "/api/v1/overview": get(
            "the whole cluster for the status page: the application, its segments and "
            "snapshots, under-replicated ledgers, bookies with their disk use, recent events",
            _OVERVIEW,
        ),
        "/api/v1/replica": get(
            "this replica",
            obj(
                app="string",
                replica_id="string",
                address="string",
                role="string",
                serving="boolean",
                epoch="integer",
                applied_index="integer",
                applied_time_ms="integer",
                leader_id=_OPTIONAL_TEXT,
                leader_address=_OPTIONAL_TEXT,
                leader_epoch=_OPTIONAL_INT,
                candidate="boolean",
                caught_up="boolean",
                lag_entries="integer",
                sessions="integer",
                takeovers="integer",
            ),
        ),
        "/api/v1/segments": get(
            "the log's segments, oldest first",
            obj(epoch="integer", version="integer", segments={"type": "array", "items": _SEGMENT}),
        ),
        "/api/v1/snapshots": {
            **get(
                "the registered snapshots, newest first",
                obj(
                    snapshots={"type": "array", "items": _MANIFEST},
                    pending={
                        "type": "array",
                        "items": obj(
                            ledger_id="integer", replica_id="string", started_ms="integer"
                        ),
                    },
                    garbage={"type": "array", "items": {"type": "integer"}},
                ),
            ),
            **post("snapshot this replica's state now; its manifest", None, _MANIFEST),
        },
        "/api/v1/leader/transfer": post(
            "hand leadership over (asked of the leader; 409 elsewhere; 400 naming a replica "
            "that is not a caught-up candidate)",
            {"type": "object", "properties": {"to": {"type": _OPTIONAL_TEXT}}},
            obj(target="string", epoch=_OPTIONAL_INT, window_ms=_OPTIONAL_INT),
        ),
    },
)
"""The OpenAPI document of `replica_routes`."""
