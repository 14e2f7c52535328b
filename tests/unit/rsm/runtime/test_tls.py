"""The replica protocol over TLS: a replica started with a TLS context serves clients
with the right certificates (`rsm.client.tls_connector`), refuses a wrong CA, an expired
or missing client certificate and a name not allowed, each with a clear error for the
client and a count on the replica, and goes on serving."""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.abc
import pytest

from bookie.client.ledger_client import LedgerClient
from bookie.net.tls import client_context, server_context
from rsm.client import connect, tls_connector
from rsm.runtime.replica import Replica
from tests.tls_certs import CLIENT_NAME, Certificates
from tests.unit.rsm.core.counter import Counter
from tests.unit.rsm.runtime.harness import (
    APP,
    Replicas,
    ledger_config,
    replica_cluster,
    replica_config,
    wait_until,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


@asynccontextmanager
async def tls_replica(replicas: Replicas, certs: Certificates) -> AsyncIterator[Replica]:
    """One replica (so the leader) whose protocol is on TLS, mutual, `CLIENT_NAME` only."""
    context = server_context(certs.server, None, certs.ca, require_client_cert=True)
    cluster = replicas.cluster
    async with (
        cluster.store_factory() as store,
        LedgerClient.open(
            store, root=cluster.root, rng=random.Random(1), config=ledger_config()
        ) as ledgers,
        Replica(
            Counter,
            app=APP,
            store=store,
            ledgers=ledgers,
            replica_id="tls-1",
            config=replica_config(),
            tls=context,
            tls_allowed_names={CLIENT_NAME},
        ) as replica,
    ):
        await wait_until(lambda: replica.is_leader)
        yield replica


async def _add(replicas: Replicas, context: ssl.SSLContext, amount: int) -> object:
    async with (
        replicas.cluster.store_factory() as store,
        connect(APP, store=store, connector=tls_connector(context)) as client,
    ):
        return await client.call("add", amount)


async def _exchange(stream: anyio.abc.ByteStream) -> None:
    await stream.send(b"\0\0\0\1")
    await stream.receive()


async def test_the_replica_protocol_over_tls(certs: Certificates) -> None:
    async with replica_cluster() as replicas, tls_replica(replicas, certs) as replica:
        good = client_context(certs.ca, certs.client)
        assert await _add(replicas, good, 2) == 2
        listener = replica.tls_listener
        assert listener is not None
        refused = {
            "wrong CA": client_context(certs.rogue_ca, certs.client),
            "no client certificate": client_context(certs.ca),
            "expired client certificate": client_context(certs.ca, certs.expired_client),
            "name not allowed": client_context(certs.ca, certs.other_client),
        }
        # The client refuses the replica's certificate: its connector says why.
        with pytest.raises(OSError, match="TLS: the peer's certificate was refused"):
            await tls_connector(refused.pop("wrong CA"))(replica.address)
        # The replica refuses the client's (TLS 1.3: after the client's side of the
        # handshake): the connection ends before any answer.
        for context in refused.values():
            stream = await tls_connector(context)(replica.address)
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
                await _exchange(stream)
            await anyio.aclose_forcefully(stream)
        await wait_until(lambda: listener.refused_total() == 4)
        assert listener.refusals["certificate has expired"] == 1
        assert listener.refusals["client certificate not allowed"] == 1
        assert await _add(replicas, good, 3) == 5
