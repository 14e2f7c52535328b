"""The TLS flags of a replica process and of a tool (rsm.tls_flags), and `rsm run` and
`rsm status` taking them: what runs on TLS, bad combinations exit 2 naming the flags."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rsm.client import tcp_connector
from rsm.errors import InvalidConfig
from rsm.tls_flags import (
    add_client_tls_arguments,
    add_replica_tls_arguments,
    client_connector,
    replica_tls,
)
from rsm.tools import cli
from tests.tls_certs import Certificates

REPOSITORY = Path(__file__).resolve().parents[3]


def _parse(*flags: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_replica_tls_arguments(parser)
    return parser.parse_args(list(flags))


def test_what_runs_on_tls(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path)
    assert replica_tls(_parse()).connector() is tcp_connector
    files = ["--tls-cert-file", str(certs.server), "--tls-ca-file", str(certs.ca)]
    bookies_only = replica_tls(_parse("--tls-bookies", "--tls-ca-file", str(certs.ca)))
    assert bookies_only.server is None
    assert bookies_only.connector() is tcp_connector
    config = bookies_only.ledger_config()
    assert config is not None
    assert config.tls is bookies_only.client
    everything = replica_tls(_parse("--tls-replicas", "--tls-admin", *files))
    assert everything.server is not None
    assert everything.admin is everything.server
    assert everything.ledger_config() is None
    assert everything.connector() is not tcp_connector


def test_a_tls_port_beside_the_plain_one(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path)
    both = replica_tls(_parse("--tls-listen", "127.0.0.1:0", "--tls-cert-file", str(certs.server)))
    assert both.server is not None
    assert both.listen == "127.0.0.1:0"
    assert both.advertise is None
    # Its own --listen is plain: it reaches the other replicas on their plain ports.
    assert both.connector() is tcp_connector
    advertised = replica_tls(
        _parse(
            "--tls-listen", "0.0.0.0:7001", "--tls-advertise", "10.0.0.1:7001",
            "--tls-cert-file", str(certs.server), "--tls-ca-file", str(certs.ca),
            "--tls-require-client-cert", "--tls-allowed-clients", "a",
        )
    )  # fmt: skip
    assert advertised.advertise == "10.0.0.1:7001"
    assert advertised.allowed_names == frozenset({"a"})


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-replicas", "--tls-ca-file", "ca.pem"], "need --tls-cert-file"),
        (["--tls-listen", "127.0.0.1:0"], "need --tls-cert-file"),
        (["--tls-advertise", "h:1"], "--tls-advertise needs --tls-listen"),
        (["--tls-replicas", "--tls-listen", "h:1"], "one or the other"),
        (["--tls-listen", "nowhere"], "--tls-listen 'nowhere'"),
        (["--tls-listen", "h:1", "--tls-advertise", "h:0"], "--tls-advertise 'h:0'"),
        (["--tls-bookies"], "need --tls-ca-file"),
        (["--tls-admin", "--tls-cert-file", "x.pem", "--tls-allowed-clients", "a"], "needs"),
        (["--tls-admin", "--tls-cert-file", "missing.pem"], "cannot read certificate file"),
    ],
)
def test_bad_flags_are_refused(
    flags: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig, match=message):
        replica_tls(_parse(*flags))


def test_a_tool_connects_with_tls_only_when_told(tmp_path: Path) -> None:
    certs = Certificates.make(tmp_path)
    parser = argparse.ArgumentParser()
    add_client_tls_arguments(parser)
    assert client_connector(parser.parse_args([])) is None
    flags = ["--tls-ca-file", str(certs.ca), "--tls-cert-file", str(certs.client)]
    assert client_connector(parser.parse_args(flags)) is not None
    with pytest.raises(InvalidConfig, match="need --tls-ca-file"):
        client_connector(parser.parse_args(["--tls-key-file", str(certs.client)]))
    with pytest.raises(InvalidConfig, match="cannot read CA file"):
        client_connector(parser.parse_args(["--tls-ca-file", str(tmp_path / "none.pem")]))


def test_rsm_commands_exit_2_on_bad_tls_flags(capsys: pytest.CaptureFixture[str]) -> None:
    run = [
        "run", "tests.unit.rsm.core.counter:Counter", "--app-dir", str(REPOSITORY),
        "--app", "x", "--zk", "127.0.0.1:1", "--listen", "127.0.0.1:0",
    ]  # fmt: skip
    assert cli.main([*run, "--tls-replicas"]) == cli.EXIT_USAGE
    assert (
        "--tls-replicas, --tls-listen and --tls-admin need --tls-cert-file"
        in capsys.readouterr().err
    )
    assert cli.main([*run, "--tls-listen", "nowhere"]) == cli.EXIT_USAGE
    assert "--tls-listen 'nowhere'" in capsys.readouterr().err
    status = ["status", "--app", "x", "--zk", "127.0.0.1:1", "--tls-cert-file", "c.pem"]
    assert cli.main(status) == cli.EXIT_USAGE
    assert "need --tls-ca-file" in capsys.readouterr().err
