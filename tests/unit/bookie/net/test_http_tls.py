"""The admin HTTP server over HTTPS: a client with the right CA (and, where required, a
client certificate) is served; a wrong CA, an expired certificate or a missing client
certificate is refused with a clear client error and a `tls.refused` line, and the
server goes on."""

from __future__ import annotations

import json
import logging
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

from bookie.address import Address
from bookie.logs import record_fields
from bookie.net.http_server import Answer, Request, Routes, json_answer, serve_http
from bookie.net.tls import client_context, server_context
from tests.tls_certs import Certificates

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


async def _hello(_: Request) -> Answer:
    return json_answer({"hello": "admin"})


def _routes() -> Routes:
    routes = Routes()
    routes.add("GET", "/hello", _hello)
    return routes


async def _get(port: int, context: ssl.SSLContext) -> object:
    def get() -> object:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/hello", context=context, timeout=10
        ) as response:
            return json.loads(response.read())

    return await anyio.to_thread.run_sync(get)


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    reasons = []
    for record in caplog.records:
        event, fields = record_fields(record)
        if event == "tls.refused" and fields.get("server") == "admin":
            reasons.append(str(fields["reason"]))
    return reasons


async def test_https_with_mutual_tls(certs: Certificates, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="bookie.net.tls")
    context = server_context(certs.server, None, certs.ca, require_client_cert=True)
    async with serve_http(Address("127.0.0.1", 0), _routes(), tls=context) as bound:
        good = client_context(certs.ca, certs.client)
        assert await _get(bound.port, good) == {"hello": "admin"}
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            await _get(bound.port, client_context(certs.rogue_ca, certs.client))
        for refused in (client_context(certs.ca), client_context(certs.ca, certs.expired_client)):
            with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
                await _get(bound.port, refused)
        with anyio.fail_after(5):
            while len(_refusals(caplog)) < 3:
                await anyio.sleep(0.01)
        assert "certificate has expired" in _refusals(caplog)
        assert await _get(bound.port, good) == {"hello": "admin"}


async def test_an_expired_server_certificate_is_refused(
    certs: Certificates, tmp_path: Path
) -> None:
    context = server_context(certs.expired_server, None, None, require_client_cert=False)
    async with serve_http(Address("127.0.0.1", 0), _routes(), tls=context) as bound:
        with pytest.raises(urllib.error.URLError, match="certificate has expired"):
            await _get(bound.port, client_context(certs.ca))
