"""`kvstore up --tls` decides TLS when a store is created: a store made without it is
refused at once, before any file (certificates included) is written."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvstore.tools.launcher import KV_FILE, TLS_DIRECTORY, KvSettings, LocalKvCluster

from bookie.local.cluster import ClusterError


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
