"""The key-value store as monitoring sees it: INFO read by redis-py, and the admin HTTP APIs
that `kvstore up` turns on for every bookie and replica, moving under Redis load."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from tests.unit.kvstore.local_store import Store, running_store

from .support.admin_http import AdminClient, sample

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]

SECTIONS = [
    "Server",
    "Clients",
    "Memory",
    "Persistence",
    "Stats",
    "Replication",
    "CPU",
    "Cluster",
    "Keyspace",
]
WRITES = 30


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = f"/kvobs-{os.getpid()}"
    with running_store(zookeeper, root, tmp_path_factory.mktemp("store")) as running:
        yield running


def test_info_has_every_section_redis_tooling_reads(store: Store) -> None:
    leader = store.leader()
    with store.client(leader, protocol=2) as client:
        for number in range(WRITES):
            client.set(f"info:{number}", number, ex=1_000 if number % 2 else None)
        with store.client(leader, protocol=2) as raw:
            raw.set_response_callback("INFO", lambda response, **_: response)
            text = raw.execute_command("INFO").decode()  # type: ignore[no-untyped-call]
        headers = [line for line in text.split("\r\n") if line.startswith("# ")]
        assert headers == [f"# {section}" for section in SECTIONS]
        info = client.info()
        assert info["redis_mode"] == "standalone"
        assert len(info["run_id"]) == 40
        assert info["tcp_port"] == store.port(leader)
        assert info["connected_clients"] >= 1
        assert info["maxclients"] > 0
        assert info["used_memory"] > 1_000_000
        assert info["used_memory_peak"] >= info["used_memory_rss"] > 0
        assert info["total_system_memory"] > info["used_memory"]
        assert info["total_connections_received"] >= info["connected_clients"]
        assert info["rejected_connections"] == 0
        assert info["aof_enabled"] == 0
        assert info["rdb_changes_since_last_save"] == info["rsm_applied_index"]
        assert info["role"] == "master"
        assert info["master_repl_offset"] == info["rsm_applied_index"] >= WRITES
        assert info["rsm_role"] == "leader"
        assert info["used_cpu_user"] > 0
        assert info["cluster_enabled"] == 0
        assert info["db0"]["keys"] >= WRITES
        assert info["db0"]["expires"] >= WRITES // 2
        for section in SECTIONS:
            assert client.info(section.lower()), section
        commandstats = client.info("commandstats")
        assert commandstats["cmdstat_set"]["calls"] >= WRITES
        assert commandstats["cmdstat_set"]["failed_calls"] == 0
        assert client.info("stats")["total_commands_processed"] >= WRITES
        first_replid = info["master_replid"]
    follower = next(name for name in store.running() if name != leader)
    with store.client(follower, protocol=3) as client:
        assert client.info("replication")["master_replid"] == first_replid


def test_kvstore_up_serves_admin_apis_that_move_under_load(store: Store) -> None:
    leader = store.leader()
    replica = store.cluster.replica(leader)
    admin = AdminClient(replica.admin_url.removeprefix("http://"))
    labels = {"app": store.cluster.settings.app, "replica": leader}
    before = store.portal.call(admin.metrics)
    with store.client(leader) as client:
        for _ in range(WRITES):
            client.incr("admin:counter")
        assert client.get("admin:counter") == str(WRITES).encode()
    after = store.portal.call(admin.metrics)
    count = "rsm_commit_latency_seconds_count"
    assert sample(after, count, **labels) >= sample(before, count, **labels) + WRITES
    commands = "rsm_batch_commands_sum"
    assert sample(after, commands, **labels) >= sample(before, commands, **labels) + WRITES
    assert sample(after, "rsm_leader", **labels) == 1
    assert sample(after, "ledger_add_latency_seconds_count") > 0
    ok = {"command": "incrby", "result": "ok"}  # redis-py sends INCR as INCRBY
    assert sample(after, "kvstore_commands_total", **ok) >= (
        sample(before, "kvstore_commands_total", **ok) + WRITES
    )
    assert sample(after, "kvstore_keys") >= 1
    assert sample(after, "kvstore_connections_received_total") >= 1
    assert store.portal.call(admin.request, "GET", "/ready").status == 200

    acked = 0.0
    for bookie in store.cluster.bookies.bookies:
        bookie_admin = AdminClient(bookie.admin_url.removeprefix("http://"))
        assert store.portal.call(bookie_admin.request, "GET", "/ready").status == 200
        families = store.portal.call(bookie_admin.metrics)
        acked += sample(families, "bookie_add_latency_seconds_count", result="ok")
    assert acked >= WRITES


def test_admin_ports_are_on_loopback(store: Store) -> None:
    addresses = [r.admin_url for r in store.cluster.replicas]
    addresses += [b.admin_url for b in store.cluster.bookies.bookies]
    assert all(url.startswith("http://127.0.0.1:") for url in addresses)
    assert len(set(addresses)) == len(addresses)
