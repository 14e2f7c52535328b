"""TLS: contexts from files (every bad file a clear `InvalidConfig`), and the bookie's TLS
listener over real loopback sockets next to its plain one: a good certificate is served,
a wrong CA, an expired certificate or a missing client certificate are refused with a
clear error on the client side, counted on the server side, and the server goes on."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bookie import limits
from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieUnavailable, InvalidConfig
from bookie.net.tls import TlsListen, client_context, server_context
from bookie.server.server import BookieServer
from bookie.storage.memory import MemoryLedgerStorage
from tests.tls_certs import CLIENT_NAME, Certificates
from tests.unit.bookie.server.support import running_server, wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


# --- contexts ---------------------------------------------------------------------------------


def test_missing_certificate_file_names_it(tmp_path: Path, certs: Certificates) -> None:
    with pytest.raises(InvalidConfig, match=r"cannot read certificate file .*nope.pem"):
        server_context(tmp_path / "nope.pem", None, None, require_client_cert=False)


def test_key_of_another_certificate_is_refused(tmp_path: Path, certs: Certificates) -> None:
    key = tmp_path / "key.pem"
    key.write_text(
        certs.client.read_text().split("-----END EC PRIVATE KEY-----")[0]
        + "-----END EC PRIVATE KEY-----\n"
    )
    with pytest.raises(InvalidConfig, match="is not the key of the certificate"):
        server_context(certs.server, key, None, require_client_cert=False)


def test_files_that_are_not_pem_are_refused(tmp_path: Path, certs: Certificates) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidConfig, match="not a PEM certificate chain"):
        server_context(junk, None, None, require_client_cert=False)
    with pytest.raises(InvalidConfig, match=r"CA file .*junk.pem holds no PEM certificate"):
        client_context(junk)


def test_requiring_client_certificates_needs_a_ca(certs: Certificates) -> None:
    with pytest.raises(InvalidConfig, match="needs the CA file"):
        server_context(certs.server, None, None, require_client_cert=True)


# --- the bookie's TLS listener ----------------------------------------------------------------


def _listen(
    certs: Certificates,
    server_chain: Path | None = None,
    *,
    require_client_cert: bool = True,
    allowed_names: frozenset[str] | None = None,
) -> TlsListen:
    context = server_context(
        server_chain or certs.server, None, certs.ca, require_client_cert=require_client_cert
    )
    return TlsListen("127.0.0.1", 0, context, allowed_names)


async def _identify(server: BookieServer, context: ssl.SSLContext | None) -> None:
    port = server.tls_port if context is not None else server.port
    assert port is not None
    async with BookieConnection.connect("127.0.0.1", port, tls=context) as connection:
        await connection.identify(timeout_ms=5_000)


async def _refused(server: BookieServer, context: ssl.SSLContext) -> str:
    """Connect and ask; the client's error, which must say it is about TLS."""
    with pytest.raises(BookieUnavailable) as caught:
        await _identify(server, context)
    message = str(caught.value)
    assert "TLS" in message, message
    return message


@pytest.fixture
async def server(certs: Certificates) -> AsyncIterator[BookieServer]:
    async with running_server(MemoryLedgerStorage(), tls=_listen(certs)) as server:
        yield server


async def test_good_certificates_are_served_and_plain_stays_open(
    server: BookieServer, certs: Certificates
) -> None:
    await _identify(server, client_context(certs.ca, certs.client))
    await _identify(server, None)
    tls = server.tls_server
    assert tls is not None
    assert tls.accepted == 1
    assert tls.refused_total() == 0


async def test_refusals_are_clear_counted_and_the_server_goes_on(
    server: BookieServer, certs: Certificates
) -> None:
    tls = server.tls_server
    assert tls is not None
    # The server's certificate is not from the CA the client trusts.
    assert "certificate was refused" in await _refused(server, client_context(certs.rogue_ca))
    # No client certificate where one is required (TLS 1.3: the server says so after
    # the client's side of the handshake is done, on the first read).
    await _refused(server, client_context(certs.ca))
    await _refused(server, client_context(certs.ca, certs.expired_client))
    await _refused(server, client_context(certs.ca, certs.rogue_client))
    await wait_for(lambda: tls.refused_total() == 4)
    assert tls.refusals["no client certificate, and one is required"] == 1
    assert tls.refusals["certificate has expired"] == 1
    await _identify(server, client_context(certs.ca, certs.client))
    assert tls.accepted == 1


async def test_an_expired_server_certificate_is_refused(certs: Certificates) -> None:
    listen = _listen(certs, certs.expired_server, require_client_cert=False)
    async with running_server(MemoryLedgerStorage(), tls=listen) as server:
        message = await _refused(server, client_context(certs.ca))
        assert "certificate has expired" in message


async def test_only_allowed_client_names_are_served(certs: Certificates) -> None:
    listen = _listen(certs, allowed_names=frozenset({CLIENT_NAME}))
    async with running_server(MemoryLedgerStorage(), tls=listen) as server:
        await _identify(server, client_context(certs.ca, certs.client))
        with pytest.raises(BookieUnavailable):
            await _identify(server, client_context(certs.ca, certs.other_client))
        tls = server.tls_server
        assert tls is not None
        await wait_for(lambda: tls.refusals["client certificate not allowed"] == 1)
        assert tls.accepted == 1


async def test_handshakes_past_the_bound_are_refused_at_accept(
    certs: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "tls_handshakes_max", 1)
    async with running_server(MemoryLedgerStorage(), tls=_listen(certs)) as server:
        tls = server.tls_server
        assert tls is not None
        port = server.tls_port
        assert port is not None
        # A client that connects and never says hello holds the one handshake slot.
        async with await anyio.connect_tcp("127.0.0.1", port):
            await wait_for(lambda: tls.handshakes == 1)
            with pytest.raises(BookieUnavailable):
                await _identify(server, client_context(certs.ca, certs.client))
            await wait_for(lambda: tls.refusals["too many handshakes"] == 1)
        await wait_for(lambda: tls.handshakes == 0)
        await _identify(server, client_context(certs.ca, certs.client))


async def test_silent_and_plain_clients_do_not_hold_up_others(
    server: BookieServer, certs: Certificates
) -> None:
    tls = server.tls_server
    port = server.tls_port
    assert tls is not None
    assert port is not None
    good = client_context(certs.ca, certs.client)
    async with await anyio.connect_tcp("127.0.0.1", port) as silent:
        await wait_for(lambda: tls.handshakes == 1)
        await _identify(server, good)  # served while the silent one waits
        async with await anyio.connect_tcp("127.0.0.1", port) as plain:
            await plain.send(b"GET / HTTP/1.1\r\n\r\n")
            await wait_for(lambda: tls.refusals["the peer sent plain HTTP, not TLS"] == 1)
        await silent.send(b"\x00" * 8)  # not a ClientHello either
        await wait_for(lambda: tls.refused_total() == 2)
    await _identify(server, good)
    assert tls.accepted == 2
