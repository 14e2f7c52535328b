"""`kvstore up --tls` decides TLS when a store is created: a store made without it is
refused at once, before any file (certificates included) is written; a cluster whose own
ZooKeeper is on TLS is refused without its certificates, and tools reach that ZooKeeper
with the client certificate."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvstore.tools.launcher import (
    KV_FILE,
    TLS_DIRECTORY,
    KvSettings,
    LocalKvCluster,
    read_saved,
    saved_zk_client_tls,
)

from bookie.local.cluster import CLUSTER_FILE, ClusterError, LocalCluster
from bookie.meta.zk_tls import ZkTls


def test_tls_on_a_store_made_without_it_is_refused(tmp_path: Path) -> None:
    (tmp_path / KV_FILE).write_text('app = "kv"\nreplicas = []\n')
    with pytest.raises(ClusterError, match="created without TLS"):
        LocalKvCluster(tmp_path, settings=KvSettings(tls=True))
    assert not (tmp_path / TLS_DIRECTORY).exists()


def test_a_store_made_with_tls_keeps_it(tmp_path: Path) -> None:
    (tmp_path / KV_FILE).write_text('app = "kv"\nreplicas = []\ntls = true\n')
    cluster = LocalKvCluster(tmp_path)
    assert cluster.tls is not None
    assert cluster.tls.ca.exists()
    assert LocalKvCluster(tmp_path / "new").tls is None


@pytest.mark.anyio
async def test_a_cluster_whose_zookeeper_is_on_tls_needs_its_certificates(
    tmp_path: Path,
) -> None:
    (tmp_path / CLUSTER_FILE).write_text('zk_port = 1\nzk_root = "/ledgers"\nzk_tls = true\n')
    with pytest.raises(ClusterError, match="runs its ZooKeeper on TLS"):
        async with LocalCluster(tmp_path):
            pass


def test_tools_dial_a_store_s_own_zookeeper_with_the_client_certificate(tmp_path: Path) -> None:
    kv_toml = 'app = "kv"\nzk = ""\nreplicas = []\nresp_ports = []\nports = []\ntls = true\n'
    (tmp_path / KV_FILE).write_text(kv_toml)
    (tmp_path / CLUSTER_FILE).write_text('zk_port = 2181\nzk_root = "/ledgers"\nzk_tls = true\n')
    saved = read_saved(tmp_path)
    assert saved["zk"] == "127.0.0.1:2181"
    certificates = LocalKvCluster(tmp_path).tls
    assert certificates is not None
    assert saved_zk_client_tls(tmp_path, saved) == ZkTls(certificates.ca, certificates.client)
    # A cluster.toml without the key (or an external ZooKeeper): the variables decide.
    (tmp_path / CLUSTER_FILE).write_text('zk_port = 2181\nzk_root = "/ledgers"\n')
    assert saved_zk_client_tls(tmp_path, read_saved(tmp_path)) is None
