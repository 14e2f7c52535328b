"""`BOOKIE_ZK_TLS_*`: which ZooKeeper sessions speak TLS, with which files, and how they
dial: trusting the CA file alone, closing the socket of a failed handshake."""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bookie.errors import InvalidConfig
from bookie.meta.zk_tls import (
    ZK_TLS_CA_FILE_ENV,
    ZK_TLS_CERT_FILE_ENV,
    ZK_TLS_KEY_FILE_ENV,
    ZkTls,
    zk_tls_from_environment,
)
from tests.tls_certs import Certificates


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    names = {"ca": "ca.pem", "cert": "client.pem", "key": "client.key"}
    for name in names.values():
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return {kind: str(tmp_path / name) for kind, name in names.items()}


def test_no_ca_file_is_plain_tcp() -> None:
    assert zk_tls_from_environment({}) is None
    assert zk_tls_from_environment({ZK_TLS_CA_FILE_ENV: ""}) is None


def test_a_ca_file_alone_makes_a_session_over_tls(files: dict[str, str]) -> None:
    assert zk_tls_from_environment({ZK_TLS_CA_FILE_ENV: files["ca"]}) == ZkTls(Path(files["ca"]))


def test_a_client_certificate_holds_its_key_unless_one_is_given(files: dict[str, str]) -> None:
    both = {ZK_TLS_CA_FILE_ENV: files["ca"], ZK_TLS_CERT_FILE_ENV: files["cert"]}
    assert zk_tls_from_environment(both) == ZkTls(Path(files["ca"]), Path(files["cert"]))
    keyed = zk_tls_from_environment({**both, ZK_TLS_KEY_FILE_ENV: files["key"]})
    assert keyed == ZkTls(Path(files["ca"]), Path(files["cert"]), Path(files["key"]))


def test_a_child_process_gets_the_settings_and_none_of_its_parents(
    files: dict[str, str],
) -> None:
    parent = {ZK_TLS_CA_FILE_ENV: "other-ca.pem", ZK_TLS_KEY_FILE_ENV: "other.key"}
    for tls in (
        ZkTls(Path(files["ca"])),
        ZkTls(Path(files["ca"]), Path(files["cert"])),
        ZkTls(Path(files["ca"]), Path(files["cert"]), Path(files["key"])),
    ):
        assert zk_tls_from_environment({**parent, **tls.environment()}) == tls


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return Certificates.make(tmp_path_factory.mktemp("certs"))


@contextlib.contextmanager
def tls_server(chain: Path) -> Iterator[tuple[str, int]]:
    """A loopback server that answers one connection's TLS handshake with `chain`, then
    closes it."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(chain)
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            connection, _ = listener.accept()
            with connection, contextlib.suppress(OSError):
                context.wrap_socket(connection, server_side=True).close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        yield listener.getsockname()
        thread.join(timeout=10)
        assert not thread.is_alive()


def test_the_context_checks_the_server_by_the_ca_file_and_its_host_name(
    certs: Certificates,
) -> None:
    context = ZkTls(certs.ca).context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname
    assert len(context.get_ca_certs()) == 1


def test_a_session_dials_tls_trusting_the_ca_file_alone(
    certs: Certificates, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = ZkTls(certs.ca, certs.client).handler()
    with tls_server(certs.server) as address:
        connection = handler.create_connection(address, hostname="127.0.0.1", timeout=10)
        assert connection.version() is not None
        connection.close()
    # The system's CAs (here: SSL_CERT_FILE) are not trusted: only the CA file is.
    monkeypatch.setenv("SSL_CERT_FILE", str(certs.rogue_ca))
    rogue_trusting = ZkTls(certs.ca).handler()
    with tls_server(certs.rogue_server) as address, pytest.raises(ssl.SSLCertVerificationError):
        rogue_trusting.create_connection(address, hostname="127.0.0.1", timeout=10)


def open_sockets() -> set[str]:
    """This process's open sockets ("socket:[inode]")."""
    targets = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            targets.add(os.readlink(f"/proc/self/fd/{fd}"))
    return {target for target in targets if target.startswith("socket:")}


def test_a_failed_handshake_closes_its_socket(certs: Certificates) -> None:
    handler = ZkTls(certs.rogue_ca).handler()
    before = open_sockets()
    with (
        tls_server(certs.server) as address,
        pytest.raises(ssl.SSLCertVerificationError) as refused,
    ):
        handler.create_connection(address, hostname="127.0.0.1", timeout=10)
    # Even while the error (and the frames its traceback holds) is kept, as kazoo keeps it.
    assert refused.value.__traceback__ is not None
    assert open_sockets() == before


def test_a_handshake_that_never_answers_times_out_and_closes_its_socket(
    certs: Certificates,
) -> None:
    """A server that takes the connection and says nothing (a wedged ZooKeeper, a plain
    port that waits for a request): the handshake ends at the connection's timeout."""
    handler = ZkTls(certs.ca).handler()
    before = open_sockets()
    with socket.create_server(("127.0.0.1", 0)) as silent:
        # The kernel completes the TCP handshake from the backlog; nobody ever answers.
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            handler.create_connection(silent.getsockname(), hostname="127.0.0.1", timeout=0.2)
        assert time.monotonic() - started < 10
    assert open_sockets() == before


def test_unusable_files_are_named(files: dict[str, str], certs: Certificates) -> None:
    with pytest.raises(InvalidConfig, match=f"{ZK_TLS_CA_FILE_ENV}=.*: no CA certificate"):
        ZkTls(Path(files["ca"])).context()
    with pytest.raises(InvalidConfig, match=f"{ZK_TLS_CERT_FILE_ENV}=.*: not a certificate"):
        ZkTls(certs.ca, Path(files["cert"])).context()


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({ZK_TLS_CERT_FILE_ENV: "cert"}, f"need {ZK_TLS_CA_FILE_ENV}"),
        ({ZK_TLS_CA_FILE_ENV: "ca", ZK_TLS_KEY_FILE_ENV: "key"}, f"needs {ZK_TLS_CERT_FILE_ENV}"),
        ({ZK_TLS_CA_FILE_ENV: "missing.pem"}, f"{ZK_TLS_CA_FILE_ENV}=missing.pem: cannot read"),
    ],
)
def test_bad_settings_name_the_variable(
    files: dict[str, str], variables: dict[str, str], message: str
) -> None:
    resolved = {name: files.get(value, value) for name, value in variables.items()}
    with pytest.raises(InvalidConfig, match=message):
        zk_tls_from_environment(resolved)
