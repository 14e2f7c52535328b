"""A small HTTP/1.1 server for the admin API: one request per connection.

Scope: GET and POST with an optional `Content-Length` body, which is what
Prometheus, curl and HTTP client libraries send to an admin endpoint.  No
keep-alive and no chunked bodies: every answer says `Connection: close`, and
the connection is closed after it.  Bounds (bookie/limits.py): the request line
and headers `admin_head_bytes_max` (else 431), the body `admin_body_bytes_max`
(else 413), the request within `admin_request_timeout_ms` (else the connection
is closed), `admin_connections_max` connections at once and
`admin_connections_per_address_max` from one peer host (later ones are
answered 503 and closed).  An accept that fails for want of file descriptors
waits and accepts again (bookie/net/accepting.py); a request that breaks the
server's own code ends its connection, logged, never the server.  With a TLS
context it serves HTTPS instead.

`Routes` maps a method and a path pattern to an async handler.  A pattern's
segment in braces (`/api/v1/ledgers/{ledger_id}`) matches any one segment,
handed to the handler in `Request.params`.  A handler returns an `Answer`, or
raises `HttpError`, answered as JSON `{"error": message}` with its status; any
other exception is logged and answered 500 (without its text).  An unknown
path is answered 404, a known path with another method 405 with `Allow`, a
request that is not HTTP 400 (a `Content-Length` that is not digits, or two
different ones, too).  With an
admin token configured (`bookie.net.admin_token`), a POST without it is
answered 401, with another token 403, before its handler runs.
"""

from __future__ import annotations

import contextlib
import functools
import http
import json
import logging
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from bookie import limits
from bookie.address import Address
from bookie.errors import AdminUnavailable, HttpError, MethodNotAllowed
from bookie.logs import emit
from bookie.metrics import CONTENT_TYPE, exposition, process_registry, registry
from bookie.net.accepting import serve_listener
from bookie.net.admin_token import AdminGuard, admin_token_from_environment
from bookie.net.admission import ConnectionAdmission, peer_host
from bookie.net.tls import TlsStreamListener

logger = logging.getLogger(__name__)

JSON: Final = "application/json"
METHODS: Final = ("GET", "POST")
_DIGITS: Final = re.compile(r"[0-9]+")
_LENGTH_DIGITS_MAX: Final = 18
"""A longer Content-Length is surely past the body bound: not converted (Python refuses
`int()` of thousands of digits)."""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str] = field(default_factory=dict)
    params: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    authorization: str | None = field(default=None, repr=False)
    """The Authorization header, if any (for `bookie.net.admin_token`)."""

    def json(self) -> Any:
        """The body as JSON (an empty body is an empty object); `HttpError` 400 if it is not."""
        if not self.body.strip():
            return {}
        try:
            return json.loads(self.body)
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise HttpError(400, f"the body is not JSON: {error}") from error


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str = JSON
    allow: str | None = None
    """The methods a 405's path takes (its `Allow` header)."""


def json_answer(value: Any, status: int = 200) -> Answer:
    return Answer(status, json.dumps(value, sort_keys=True).encode() + b"\n")


Handler = Callable[[Request], Awaitable[Answer]]


class Routes:
    """Method and path pattern -> handler (see the module docstring)."""

    def __init__(self, guard: AdminGuard | None = None) -> None:
        self._routes: dict[tuple[str, ...], dict[str, Handler]] = {}
        self.guard = guard
        """Checks the admin token of every POST (None: POSTs are open)."""

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        assert method in METHODS
        segments = _segments(pattern)
        methods = self._routes.setdefault(segments, {})
        assert method not in methods, f"{method} {pattern} is routed twice"
        methods[method] = handler

    @property
    def patterns(self) -> list[tuple[str, str]]:
        """(method, pattern) of every route."""
        return [
            (method, "/" + "/".join(segments))
            for segments, methods in self._routes.items()
            for method in methods
        ]

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        """The handler of `method path` and the pattern's parameters; `HttpError` 404 or 405."""
        segments = _segments(path)
        for pattern, methods in self._routes.items():
            params = _bind(pattern, segments)
            if params is None:
                continue
            if method not in methods:
                raise MethodNotAllowed(path, sorted(methods))
            return methods[method], params
        raise HttpError(404, f"no such path: {path}")


def common_routes(metrics: Callable[[], bytes], ready: Handler, openapi: Any) -> Routes:
    """Routes with what every admin server answers: `/metrics` (`metrics()`, Prometheus's
    text format, the process's own `process_*` metrics and the admin token's refusals),
    `/health` (liveness: the process serves), `/ready`, `/openapi.json`; POSTs need the
    admin token of `BOOKIE_ADMIN_TOKEN_FILE`, if any (`bookie.net.admin_token`)."""
    token = admin_token_from_environment()
    guard = None if token is None else AdminGuard(token)
    routes = Routes(guard)
    more = [process_registry()] + ([] if guard is None else [registry(guard.families)])

    async def get_metrics(_: Request) -> Answer:
        return Answer(200, metrics() + exposition(more), CONTENT_TYPE)

    async def health(_: Request) -> Answer:
        return json_answer({"status": "ok"})

    async def document(_: Request) -> Answer:
        return json_answer(openapi)

    routes.add("GET", "/metrics", get_metrics)
    routes.add("GET", "/health", health)
    routes.add("GET", "/ready", ready)
    routes.add("GET", "/openapi.json", document)
    return routes


def _segments(path: str) -> tuple[str, ...]:
    return tuple(segment for segment in path.split("/") if segment)


def _bind(pattern: tuple[str, ...], segments: tuple[str, ...]) -> dict[str, str] | None:
    if len(pattern) != len(segments):
        return None
    params = {}
    for expected, actual in zip(pattern, segments, strict=True):
        if expected.startswith("{") and expected.endswith("}"):
            params[expected[1:-1]] = actual
        elif expected != actual:
            return None
    return params


def parse_head(head: bytes) -> tuple[str, str, dict[str, str], int]:
    """(method, target, headers by lower-case name, body length) of a request head."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError as error:
        raise HttpError(400, "not an HTTP request line") from error
    if not version.startswith("HTTP/1."):
        raise HttpError(505, f"{version} is not supported; use HTTP/1.1")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon:
            raise HttpError(400, f"malformed header line {line!r}")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length" and headers.get(name, value) != value:
            raise HttpError(400, "two different Content-Lengths")
        headers[name] = value
    if "transfer-encoding" in headers:
        raise HttpError(411, "chunked bodies are not supported: send a Content-Length")
    text = headers.get("content-length", "0")
    if _DIGITS.fullmatch(text) is None:
        raise HttpError(400, "Content-Length is not a number of bytes")
    length = int(text) if len(text) <= _LENGTH_DIGITS_MAX else limits.admin_body_bytes_max + 1
    if length > limits.admin_body_bytes_max:
        raise HttpError(413, f"bodies are at most {limits.admin_body_bytes_max} bytes")
    return method, target, headers, length


def encode_answer(answer: Answer) -> bytes:
    reason = http.HTTPStatus(answer.status).phrase
    allow = "" if answer.allow is None else f"Allow: {answer.allow}\r\n"
    head = (
        f"HTTP/1.1 {answer.status} {reason}\r\n"
        f"Content-Type: {answer.content_type}\r\n"
        f"Content-Length: {len(answer.body)}\r\n"
        f"{allow}Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + answer.body


async def _read_request(stream: anyio.abc.ByteStream) -> Request:
    buffer = bytearray()
    too_large = HttpError(431, f"request heads are at most {limits.admin_head_bytes_max} bytes")
    while (end := buffer.find(b"\r\n\r\n")) < 0:
        if len(buffer) > limits.admin_head_bytes_max:
            raise too_large
        buffer += await stream.receive()
    if end > limits.admin_head_bytes_max:
        raise too_large
    method, target, headers, length = parse_head(bytes(buffer[:end]))
    body = buffer[end + 4 :]
    while len(body) < length:
        body += await stream.receive()
    try:
        url = urlsplit(target)
    except ValueError as error:
        raise HttpError(400, f"not a request target: {error}") from error
    return Request(
        method,
        url.path,
        dict(parse_qsl(url.query)),
        body=bytes(body[:length]),
        authorization=headers.get("authorization"),
    )


async def _answer(routes: Routes, request: Request) -> Answer:
    try:
        handler, params = routes.match(request.method, request.path)
        guard = routes.guard
        if guard is not None and request.method == "POST":
            refusal = guard.refusal(request.authorization)
            if refusal is not None:
                raise refusal
        return await handler(
            Request(request.method, request.path, request.query, params, request.body)
        )
    except MethodNotAllowed as error:
        answer = json_answer({"error": str(error)}, error.status)
        return Answer(answer.status, answer.body, allow=", ".join(error.methods))
    except HttpError as error:
        return json_answer({"error": str(error)}, error.status)
    except Exception as error:
        logger.exception("admin.failed", exc_info=error)
        return json_answer({"error": "internal error: the server logged it (admin.failed)"}, 500)


_BUSY: Final = encode_answer(
    json_answer({"error": "the admin server holds as many connections as it may"}, 503)
)


class _Server:
    def __init__(self, routes: Routes) -> None:
        self._routes = routes
        self._admission = ConnectionAdmission(
            total_max=limits.admin_connections_max,
            per_address_max=limits.admin_connections_per_address_max,
        )

    async def serve(self, stream: anyio.abc.ByteStream) -> None:
        async with stream:
            host = peer_host(stream.extra(SocketAttribute.remote_address, None))
            if self._admission.admit(host) is not None:
                await _refuse(stream)
                return
            try:
                await self._serve(stream)
            except Exception as error:  # a bug: this connection ends, the server goes on
                logger.exception("admin.connection_failed", exc_info=error)
            finally:
                self._admission.release(host)

    async def _serve(self, stream: anyio.abc.ByteStream) -> None:
        try:
            with anyio.fail_after(limits.admin_request_timeout_ms / 1000):
                request = await _read_request(stream)
        except HttpError as error:
            answer = json_answer({"error": str(error)}, error.status)
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        else:
            answer = await _answer(self._routes, request)
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            await stream.send(encode_answer(answer))


async def _refuse(stream: anyio.abc.ByteStream) -> None:
    """Answer 503 and end the connection without a reset: the request is read and dropped
    until the client closes, for `limits.admin_refusal_drain_ms` at most."""
    with (
        anyio.move_on_after(limits.admin_refusal_drain_ms / 1000),
        contextlib.suppress(anyio.BrokenResourceError, anyio.EndOfStream, OSError),
    ):
        await stream.send(_BUSY)
        with contextlib.suppress(NotImplementedError):  # TLS: no half-close
            await stream.send_eof()
        while True:
            await stream.receive()


@contextlib.asynccontextmanager
async def serve_http(
    address: Address,
    routes: Routes,
    *,
    tls: ssl.SSLContext | None = None,
    tls_allowed_names: Collection[str] | None = None,
) -> AsyncIterator[Address]:
    """Serve `routes` on `address` (port 0: any free port) while the block runs; yield the
    address bound.  With `tls`, HTTPS (`bookie.net.tls.TlsStreamListener`: refusals logged
    as `tls.refused`, server `admin`; `tls_allowed_names`: the client certificate names
    served).  `AdminUnavailable` when it cannot listen there."""
    try:
        tcp = await anyio.create_tcp_listener(local_host=address.host, local_port=address.port)
    except OSError as error:
        raise AdminUnavailable(
            f"the admin HTTP server cannot listen on {address}: {error.strerror or error}.  "
            "Is another process using this port, and is the host an address of this machine?"
        ) from None
    listener: anyio.abc.Listener[anyio.abc.ByteStream] = tcp
    if tls is not None:
        listener = TlsStreamListener(tcp, tls, name="admin", allowed_names=tls_allowed_names)
    port = tcp.extra(SocketAttribute.local_port)
    bound = Address(address.host, port)
    server = _Server(routes)
    async with listener, anyio.create_task_group() as tasks:
        serving = functools.partial(serve_listener, server="admin")
        tasks.start_soon(serving, listener, server.serve, tasks)
        emit(logger, logging.INFO, "admin.listening", address=str(bound), tls=tls is not None)
        try:
            yield bound
        finally:
            tasks.cancel_scope.cancel()
