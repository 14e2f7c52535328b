"""The bookie's TLS keys: they load into a TLS listener, and a bad combination or a file
that cannot be used is an `InvalidConfig` naming it when the configuration is loaded."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from bookie.errors import InvalidConfig
from bookie.server.config import load_config
from tests.tls_certs import CLIENT_NAME, Certificates


def _flags(tmp_path: Path, **tls: str) -> dict[str, object]:
    return {"journal_dir": str(tmp_path / "j"), "ledger_dirs": [str(tmp_path / "l")], **tls}


def test_the_tls_block_gives_a_listener(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path / "certs")
    config = load_config(
        None,
        _flags(
            tmp_path,
            tls_listen_address="127.0.0.1:3182",
            tls_cert_file=str(certs.server),
            tls_ca_file=str(certs.ca),
            tls_require_client_cert="true",
            tls_allowed_clients=f"{CLIENT_NAME}, other",
        ),
    )
    assert str(config.tls_advertised_address) == "127.0.0.1:3182"
    listen = config.tls_listen()
    assert listen is not None
    assert (listen.host, listen.port) == ("127.0.0.1", 3182)
    assert listen.allowed_names == frozenset({CLIENT_NAME, "other"})
    assert load_config(None, _flags(tmp_path)).tls_listen() is None


@pytest.mark.parametrize(
    ("tls", "message"),
    [
        ({"tls_listen_address": "127.0.0.1:3182"}, "tls_cert_file must be set"),
        ({"tls_cert_file": "server.pem"}, "neither tls_listen_address nor tls_admin"),
        ({"tls_admin": "true"}, "tls_cert_file must be set"),
        (
            {"tls_listen_address": "0.0.0.0:3182", "tls_cert_file": "server.pem"},
            "set tls_advertised_address",
        ),
        (
            {"tls_listen_address": "127.0.0.1:3182", "tls_cert_file": "missing.pem"},
            "cannot read certificate file .*missing.pem",
        ),
        (
            {
                "tls_listen_address": "127.0.0.1:3182",
                "tls_cert_file": "server.pem",
                "tls_allowed_clients": "a",
            },
            "needs tls_require_client_cert",
        ),
    ],
)
def test_bad_tls_settings_are_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls: dict[str, str], message: str
) -> None:
    Certificates.make(tmp_path)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig, match=message):
        load_config(None, _flags(tmp_path, **tls))


def test_a_bookie_with_a_tls_listener_reaches_its_peers_over_tls(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path / "certs")
    config = load_config(
        None,
        _flags(
            tmp_path,
            tls_listen_address="127.0.0.1:3182",
            tls_cert_file=str(certs.server),
            tls_ca_file=str(certs.ca),
        ),
    )
    context = config.peer_tls()
    assert context is not None
    assert context.check_hostname
    assert context.verify_mode is ssl.CERT_REQUIRED
    assert load_config(None, _flags(tmp_path)).peer_tls() is None
