"""`BOOKIE_ZK_TLS_*`: which ZooKeeper sessions speak TLS, with which files, and what kazoo
is given for them."""

from __future__ import annotations

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


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    names = {"ca": "ca.pem", "cert": "client.pem", "key": "client.key"}
    for name in names.values():
        (tmp_path / name).write_text("-----BEGIN CERTIFICATE-----\n")
    return {kind: str(tmp_path / name) for kind, name in names.items()}


def test_no_ca_file_is_plain_tcp() -> None:
    assert zk_tls_from_environment({}) is None
    assert zk_tls_from_environment({ZK_TLS_CA_FILE_ENV: ""}) is None


def test_a_ca_file_alone_verifies_the_server_and_checks_its_host_name(
    files: dict[str, str],
) -> None:
    tls = zk_tls_from_environment({ZK_TLS_CA_FILE_ENV: files["ca"]})
    assert tls == ZkTls(Path(files["ca"]))
    assert tls.kazoo_options() == {
        "use_ssl": True,
        "verify_certs": True,
        "check_hostname": True,
        "ca": files["ca"],
    }


def test_a_client_certificate_holds_its_key_unless_one_is_given(files: dict[str, str]) -> None:
    both = {ZK_TLS_CA_FILE_ENV: files["ca"], ZK_TLS_CERT_FILE_ENV: files["cert"]}
    tls = zk_tls_from_environment(both)
    assert tls is not None
    assert tls.kazoo_options()["keyfile"] == files["cert"]
    keyed = zk_tls_from_environment({**both, ZK_TLS_KEY_FILE_ENV: files["key"]})
    assert keyed is not None
    assert keyed.kazoo_options()["certfile"] == files["cert"]
    assert keyed.kazoo_options()["keyfile"] == files["key"]


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
