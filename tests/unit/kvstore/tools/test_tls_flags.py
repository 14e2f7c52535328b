"""`kvstore serve`'s TLS flags (the framework's, `rsm.tls_flags`, and the RESP port's):
what runs on TLS, and bad combinations refused with a message naming the flags before
anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kvstore.tools.tls_flags import add_tls_arguments, node_tls

from rsm.client import tcp_connector
from rsm.errors import InvalidConfig
from tests.tls_certs import Certificates


def _parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tls_arguments(parser)
    return parser.parse_args(list(flags))


def test_no_flags_no_tls() -> None:
    tls = node_tls(_parse())
    assert tls.resp is None
    assert tls.replica.server is None
    assert tls.replica.client is None
    assert tls.replica.ledger_config() is None
    assert tls.replica.connector() is tcp_connector


def test_every_part_on_tls(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path)
    tls = node_tls(
        _parse(
            "--resp-tls", "127.0.0.1:0", "--tls-replicas", "--tls-bookies", "--tls-admin",
            "--tls-cert-file", str(certs.server), "--tls-ca-file", str(certs.ca),
            "--tls-require-client-cert", "--tls-allowed-clients", "a, b",
        )
    )  # fmt: skip
    assert tls.resp is not None
    assert (tls.resp.host, tls.resp.port) == ("127.0.0.1", 0)
    replica = tls.replica
    assert replica.server is not None
    assert replica.admin is replica.server
    assert replica.client is not None
    ledger_config = replica.ledger_config()
    assert ledger_config is not None
    assert ledger_config.tls is replica.client
    assert replica.allowed_names == frozenset({"a", "b"})
    assert replica.connector() is not tcp_connector


def test_tls_ports_beside_the_plain_ones(tmp_path: Path) -> None:
    """The state of a node in the middle of a move to TLS: a TLS RESP port and a TLS
    framework port, each beside its plain one; forwarding stays on plain TCP."""
    certs = Certificates.make(tmp_path)
    tls = node_tls(
        _parse(
            "--resp-tls", "127.0.0.1:0", "--tls-listen", "127.0.0.1:0",
            "--tls-cert-file", str(certs.server), "--tls-ca-file", str(certs.ca),
        )
    )  # fmt: skip
    assert tls.resp is not None
    assert tls.replica.server is not None
    assert tls.replica.listen == "127.0.0.1:0"
    assert tls.replica.connector() is tcp_connector


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--resp-tls", "127.0.0.1:0"], "needs --tls-cert-file"),
        (["--tls-bookies"], "need --tls-ca-file"),
        (["--tls-replicas", "--tls-cert-file", "x.pem"], "need --tls-ca-file"),
        (["--resp-tls", "nowhere", "--tls-cert-file", "x.pem"], "--resp-tls 'nowhere'"),
        (["--resp-tls", "127.0.0.1:0", "--tls-cert-file", "x.pem"], "cannot read"),
        (
            ["--tls-admin", "--tls-cert-file", "x.pem", "--tls-allowed-clients", "a"],
            "needs --tls-require-client-cert",
        ),
    ],
)
def test_bad_flags_are_refused(
    flags: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig, match=message):
        node_tls(_parse(*flags))
