"""The RESP server's TLS listener, next to its plain one, with redis-py (`ssl=True`) and
redis-cli (`--tls`): a good certificate is served, a wrong CA, an expired certificate
or a missing client certificate are refused, counted, and other clients go on."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis.asyncio as aredis
import redis.exceptions
from anyio.abc import SocketAttribute
from kvstore.runtime.server import RespServer, ServerConfig
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from bookie.net.tls import TlsListen, TlsServer, server_context
from tests.integration.support.tools import required_tool
from tests.tls_certs import Certificates
from tests.unit.bookie.server.support import wait_for
from tests.unit.kvstore.runtime.test_server import INFO, StoreRouter

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


@asynccontextmanager
async def serving_tls(
    certs: Certificates, *, require_client_cert: bool
) -> AsyncIterator[tuple[int, int, TlsServer]]:
    """A RESP server: its plain port, its TLS port and its TLS listener."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = int(listener.extra(SocketAttribute.local_port))
    context = server_context(certs.server, None, certs.ca, require_client_cert=require_client_cert)
    server = RespServer(
        listener,
        StoreRouter(),
        replica_info=lambda: INFO,
        config=replace(ServerConfig(), port=port),
        tls=TlsListen("127.0.0.1", 0, context),
    )
    assert server.tls_port is not None
    assert server.tls_server is not None
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(server.serve)
        yield port, server.tls_port, server.tls_server
        task_group.cancel_scope.cancel()


async def _set_get(port: int, **options: Any) -> bytes | None:
    # No retries: each refusal is one connection.
    client = aredis.Redis(
        host="127.0.0.1", port=port, socket_timeout=5, retry=Retry(NoBackoff(), 0), **options
    )
    try:
        await client.set("k", "v")
        value: bytes | None = await client.get("k")
        return value
    finally:
        await client.aclose()


async def test_redis_py_with_ssl_and_plain_side_by_side(certs: Certificates) -> None:
    async with serving_tls(certs, require_client_cert=False) as (port, tls_port, tls):
        assert await _set_get(tls_port, ssl=True, ssl_ca_certs=str(certs.ca)) == b"v"
        assert await _set_get(port) == b"v"
        assert tls.accepted == 1


async def test_refusals_are_errors_for_the_client_and_counted(certs: Certificates) -> None:
    async with serving_tls(certs, require_client_cert=True) as (_, tls_port, tls):
        good = {"ssl": True, "ssl_ca_certs": str(certs.ca), "ssl_certfile": str(certs.client)}
        with pytest.raises(redis.exceptions.ConnectionError, match=r"(?i)certificate verify"):
            await _set_get(tls_port, ssl=True, ssl_ca_certs=str(certs.rogue_ca))
        with pytest.raises(redis.exceptions.ConnectionError):
            await _set_get(tls_port, ssl=True, ssl_ca_certs=str(certs.ca))
        with pytest.raises(redis.exceptions.ConnectionError):
            await _set_get(tls_port, **{**good, "ssl_certfile": str(certs.expired_client)})
        await wait_for(lambda: tls.refused_total() == 3)
        assert tls.refusals["no client certificate, and one is required"] == 1
        assert tls.refusals["certificate has expired"] == 1
        assert await _set_get(tls_port, **good) == b"v"


async def test_redis_cli_with_tls(certs: Certificates, tmp_path: Path) -> None:
    redis_cli = required_tool("redis-cli")
    async with serving_tls(certs, require_client_cert=False) as (_, tls_port, _tls):
        command = [redis_cli, "--tls", "--cacert", str(certs.ca), "-p", str(tls_port)]
        result = await anyio.run_process([*command, "set", "cli", "yes"], check=False)
        assert result.stdout.strip() == b"OK", result
        result = await anyio.run_process([*command, "get", "cli"], check=False)
        assert result.stdout.strip() == b"yes", result
        expired = await anyio.run_process(
            ["redis-cli", "--tls", "--cacert", str(certs.rogue_ca), "-p", str(tls_port), "ping"],
            check=False,
            stderr=subprocess.STDOUT,
        )
        assert b"PONG" not in expired.stdout
