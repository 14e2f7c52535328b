"""ZooKeeper over TLS: a ZooKeeper that serves mutual TLS only (no plain port), a bookie
and a replica (`bookie serve`, `rsm run`) working through it with the `BOOKIE_ZK_TLS_*`
variables set, a client and `bookie shell` too; a process without the variables, or
with a CA that did not sign the server's certificate (whatever the system's CAs are), is
refused with one line that says how it tried."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.local.certificates import DevelopmentCertificates
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk_tls import ZK_TLS_CA_FILE_ENV, ZK_TLS_CERT_FILE_ENV
from tests.tls_certs import Certificates

from .support.rsm_processes import RsmProcesses
from .support.shell import shell, shell_json

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

ONE_BOOKIE = ("--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1")


async def test_a_bookie_and_a_replica_work_through_a_tls_only_zookeeper(
    tls_zookeeper: tuple[LocalZooKeeper, DevelopmentCertificates],
    zk_root: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    zookeeper, certs = tls_zookeeper
    monkeypatch.setenv(ZK_TLS_CA_FILE_ENV, str(certs.ca))
    monkeypatch.setenv(ZK_TLS_CERT_FILE_ENV, str(certs.client))
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await cluster.start_bookies(1)
        await cluster.start_replica("r1", flags=ONE_BOOKIE)
        async with cluster.client() as client:
            assert await client.call("add", "c", 1) == 1
            assert await client.query("get") == 1
        where = ("--zk", zookeeper.connect_string, "--zk-root", zk_root)
        listed = await shell_json("listbookies", *where)
        assert len(listed["writable"]) == 1

        # Without the variables: refused, saying it tried without TLS.
        monkeypatch.delenv(ZK_TLS_CA_FILE_ENV)
        monkeypatch.delenv(ZK_TLS_CERT_FILE_ENV)
        code, _, err = await shell("listbookies", *where, check=False)
        assert code == 2
        assert f"without TLS ({ZK_TLS_CA_FILE_ENV} is not set)" in err
        assert "Traceback" not in err
        # With a CA that did not sign the server's certificate: refused, over TLS, even
        # when the system's CAs (SSL_CERT_FILE) include the one that did.
        other = Certificates.make(tmp_path / "other")
        monkeypatch.setenv(ZK_TLS_CA_FILE_ENV, str(other.ca))
        monkeypatch.setenv(ZK_TLS_CERT_FILE_ENV, str(certs.client))
        monkeypatch.setenv("SSL_CERT_FILE", str(certs.ca))
        code, _, err = await shell("listbookies", *where, check=False)
        assert code == 2
        assert f"over TLS ({ZK_TLS_CA_FILE_ENV} is set)" in err
