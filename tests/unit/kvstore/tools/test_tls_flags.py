"""`kvstore serve`'s TLS flags: what runs on TLS, and bad combinations refused with a
message naming the flags before anything starts."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kvstore.tools.tls_flags import (
    add_client_tls_arguments,
    add_tls_arguments,
    client_connector,
    node_tls,
)

from bookie.errors import InvalidConfig
from rsm.client import tcp_connector
from tests.tls_certs import Certificates


def _parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_tls_arguments(parser)
    return parser.parse_args(list(flags))


def test_no_flags_no_tls() -> None:
    tls = node_tls(_parse())
    assert tls.resp is None
    assert tls.replica_server is None
    assert tls.client is None
    assert tls.connector() is tcp_connector


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
    assert tls.replica_server is not None
    assert tls.admin is tls.replica_server
    assert tls.client is not None
    assert tls.bookies
    assert tls.replica_allowed_names == frozenset({"a", "b"})
    assert tls.connector() is not tcp_connector


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--resp-tls", "127.0.0.1:0"], "need --tls-cert-file"),
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


def test_a_tool_connects_with_tls_only_when_told(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path)
    parser = argparse.ArgumentParser()
    add_client_tls_arguments(parser)
    assert client_connector(parser.parse_args([])) is None
    flags = ["--tls-ca-file", str(certs.ca), "--tls-cert-file", str(certs.client)]
    assert client_connector(parser.parse_args(flags)) is not None
    with pytest.raises(InvalidConfig, match="need --tls-ca-file"):
        client_connector(parser.parse_args(["--tls-cert-file", str(certs.client)]))
