"""A replica's plain and TLS ports side by side (`Replica(tls=..., tls_listen=...)`): plain
and TLS clients of one store both write and read, each on its own kind of port, with the
same client tokens; NotLeader answers name the leader's port of the kind they came in on;
a client that needs a port a replica lacks is told which replica."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from bookie.core.tokens import Role, TokenTable
from bookie.meta.api import MetadataStore
from bookie.net.tls import client_context, server_context
from rsm.client import Client, connect, tcp_connector, tls_connector
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_candidate, decode_leader
from rsm.core.protocol import CallRequest
from rsm.errors import NoAddressForTransport, NotAuthenticated, RsmStatus
from rsm.link import TOKEN_FILE_VARIABLE, Link, LinkLost, Response
from rsm.runtime.replica import Replica
from tests.tls_certs import Certificates
from tests.unit.rsm.runtime.harness import APP, Replicas, replica_cluster, wait_until

pytestmark = pytest.mark.anyio

TOKEN = b"side-by-side-token-0123456789"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


def _both_ports(certs: Certificates, **options: Any) -> dict[str, Any]:
    """The `Replica` arguments of a plain port and a TLS port beside it."""
    context = server_context(certs.server, None, certs.ca, require_client_cert=False)
    return {"tls": context, "tls_listen": "127.0.0.1:0", **options}


@asynccontextmanager
async def _client(replicas: Replicas, *, tls: Certificates | None) -> AsyncIterator[Client]:
    """A client of the counter: with TLS (trusting `tls.ca`) or plain."""
    connector = None if tls is None else tls_connector(client_context(tls.ca))
    async with (
        replicas.cluster.store_factory() as store,
        connect(APP, store=store, connector=connector) as client,
    ):
        yield client


async def _published(store: MetadataStore, replica: Replica) -> tuple[Any, Any]:
    layout = AppLayout.of(APP)
    member = decode_candidate((await store.get(layout.replica(replica.replica_id))).value)
    leader = decode_leader((await store.get(layout.leader)).value)
    return member, leader


class _Answer:
    def __init__(self) -> None:
        self.event = anyio.Event()
        self.response: Response | None = None

    def answered(self, response: Response) -> None:
        self.response = response
        self.event.set()

    def lost(self, error: LinkLost) -> None:
        raise AssertionError(f"the link was lost: {error}")


async def _not_leader_hint(address: str, *, tls: Certificates | None) -> str | None:
    """What a follower at `address` answers a CALL with: the leader it names."""
    connector = tcp_connector if tls is None else tls_connector(client_context(tls.ca))
    link = Link(address, connector, connect_timeout_ms=5_000, answer_timeout_ms=5_000)
    answer = _Answer()
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(link.run)
        link.send(CallRequest(1, "add", [1], {}), answer)
        with anyio.fail_after(10):
            await answer.event.wait()
        link.close()
    response = answer.response
    assert response is not None
    assert response.status == RsmStatus.NOT_LEADER
    return response.detail


async def test_plain_and_tls_clients_of_one_store(certs: Certificates) -> None:
    async with replica_cluster() as replicas:
        first = await replicas.start("r1", **_both_ports(certs))
        await wait_until(lambda: first.is_leader)
        second = await replicas.start("r2", **_both_ports(certs))
        assert first.tls_address is not None
        assert first.tls_address != first.address
        async with replicas.cluster.store_factory() as store:
            member, leader = await _published(store, first)
        assert (member.address, member.tls_address) == (first.address, first.tls_address)
        assert (leader.address, leader.tls_address) == (first.address, first.tls_address)

        async with _client(replicas, tls=None) as plain, _client(replicas, tls=certs) as secure:
            assert await plain.call("add", 2) == 2
            assert await secure.call("add", 3) == 5
            assert await plain.query("get") == 5
            assert await secure.query("get") == 5
            assert await secure.query("get", consistency="read_your_writes") == 5
            assert await secure.replicas() == {
                "r1": first.tls_address,
                "r2": second.tls_address,
            }
            assert await plain.replicas() == {"r1": first.address, "r2": second.address}
        listener = first.tls_listener
        assert listener is not None
        assert listener.accepted >= 1

        # A follower's NotLeader names the leader's port of the kind it was asked on.
        assert second.tls_address is not None
        assert await _not_leader_hint(second.tls_address, tls=certs) == first.tls_address
        assert await _not_leader_hint(second.address, tls=None) == first.address


async def test_both_ports_ask_for_the_same_client_token(
    certs: Certificates, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tokens = TokenTable({"app": (TOKEN, Role.WRITE)})
    async with replica_cluster() as replicas:
        replica = await replicas.start("r1", **_both_ports(certs, client_tokens=tokens))
        await wait_until(lambda: replica.is_leader)
        for tls in (None, certs):
            async with _client(replicas, tls=tls) as client:
                with pytest.raises(NotAuthenticated, match="client token"):
                    await client.call("add", 1)
        token_file = tmp_path / "token"
        token_file.write_bytes(TOKEN)
        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(token_file))
        for tls in (None, certs):
            async with _client(replicas, tls=tls) as client:
                assert await client.call("add", 1) >= 1
        assert replica.client_auth.unauthenticated_requests == 2


async def test_a_client_is_told_which_replica_lacks_its_port(certs: Certificates) -> None:
    tls_only = server_context(certs.server, None, certs.ca, require_client_cert=False)
    async with replica_cluster() as replicas:
        replica = await replicas.start("r1", tls=tls_only)
        await wait_until(lambda: replica.is_leader)
        assert replica.tls_address == replica.address
        async with _client(replicas, tls=None) as plain:
            with pytest.raises(NoAddressForTransport, match="replica r1 has no plain port"):
                await plain.call("add", 1)
            assert await plain.replicas() == {}
        async with _client(replicas, tls=certs) as secure:
            assert await secure.call("add", 1) == 1
        await replicas.stop("r1")
        replica = await replicas.start("r2")
        await wait_until(lambda: replica.is_leader)
        async with _client(replicas, tls=certs) as secure:
            with pytest.raises(NoAddressForTransport, match="replica r2 has no TLS port"):
                await secure.call("add", 1)
