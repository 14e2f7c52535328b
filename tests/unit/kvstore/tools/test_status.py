"""What `kvstore status` reads and prints: endpoint records, a data directory and the table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kvstore.endpoints import Endpoint, decode_endpoint, encode_endpoint, endpoint_path
from kvstore.tools.cli import not_registered, render_status
from kvstore.tools.launcher import read_saved

from rsm.errors import InvalidConfig, MalformedValue


def test_endpoints_round_trip_and_junk_is_refused() -> None:
    endpoint = Endpoint("kv-1", "127.0.0.1:6379", "127.0.0.1:7379")
    assert decode_endpoint("kv-1", encode_endpoint(endpoint)) == endpoint
    assert endpoint_path("kv", "kv-1") == "/kvstore/kv/endpoints/kv-1"
    for junk in (b"not json", b"[]", b'{"resp": "a"}', b'{"resp": 1, "address": "b"}'):
        with pytest.raises(MalformedValue):
            decode_endpoint("kv-1", junk)
    with pytest.raises(InvalidConfig):
        endpoint_path("kv", "a/b")


REPORT: dict[str, Any] = {
    "app": "kv",
    "zk": "127.0.0.1:2181",
    "epoch": 2,
    "leader": {"replica_id": "kv-2", "address": "127.0.0.1:7380", "epoch": 2},
    "segments": 2,
    "open_segment": {"ledger_id": 5, "first_index": 40},
    "end_index": 39,
    "bookies": {"writable": ["127.0.0.1:3181", "127.0.0.1:3182"], "read_only": ["127.0.0.1:3183"]},
    "replicas": [
        {
            "replica_id": "kv-1",
            "address": "127.0.0.1:7379",
            "role": "follower",
            "epoch": 2,
            "applied_index": 41,
            "lag": 1,
            "resp": "127.0.0.1:6379",
        },
        {
            "replica_id": "kv-2",
            "address": "127.0.0.1:7380",
            "role": "leader",
            "epoch": 2,
            "applied_index": 42,
            "lag": 0,
            "resp": "127.0.0.1:6380",
        },
        {"replica_id": "kv-3", "address": "127.0.0.1:7381", "error": "Timeout: no answer"},
    ],
}


def test_the_status_table_names_each_replicas_redis_port() -> None:
    assert render_status(REPORT).splitlines() == [
        "store kv  ZooKeeper 127.0.0.1:2181  epoch 2  leader kv-2 (127.0.0.1:7380)",
        "log: 2 segments, open: ledger 5 from index 40",
        "bookies: 127.0.0.1:3181, 127.0.0.1:3182; read-only: 127.0.0.1:3183",
        "",
        "REPLICA  REDIS           ROLE                EPOCH  APPLIED  LAG  TRY",
        "kv-1     127.0.0.1:6379  follower            2      41       1    redis-cli -p 6379",
        "kv-2     127.0.0.1:6380  leader              2      42       0    redis-cli -p 6380",
        "kv-3     ?               Timeout: no answer",
    ]


REPLICATION = {
    "full": True,
    "degraded": False,
    "ensemble_change_deferred": False,
    "ensemble_size": 3,
    "write_quorum": 3,
    "ack_quorum": 2,
    "configured_ensemble_size": 3,
    "configured_write_quorum": 3,
}


def test_the_status_warns_when_the_leaders_ledger_writes_to_fewer_bookies() -> None:
    deferred = {**REPLICATION, "full": False, "ensemble_change_deferred": True}
    lines = render_status({**REPORT, "replication": deferred}).splitlines()
    assert lines[-4].startswith("under-replicated: a bookie of the open segment's ledger failed")
    assert "replicated" not in render_status({**REPORT, "replication": REPLICATION})
    assert "replicated" not in render_status(REPORT)


def test_the_status_says_when_the_open_segment_is_degraded() -> None:
    degraded = {
        **REPLICATION,
        "full": False,
        "degraded": True,
        "ensemble_size": 2,
        "write_quorum": 2,
    }
    lines = render_status({**REPORT, "replication": degraded}).splitlines()
    assert lines[-4:] == [
        "degraded: the open segment's ledger has E=2 Qw=2 Qa=2 (configured E=3 Qw=3): too",
        "few bookies were writable when it was created.",
        "Every acknowledged write is on Qa bookies' disks; the leader rolls over to a",
        "full-size ledger once E bookies are writable again.",
    ]


def test_known_replicas_that_zookeeper_does_not_list_show_as_down() -> None:
    known = {f"kv-{number}": f"127.0.0.1:{6378 + number}" for number in (1, 2, 3, 4, 5)}
    rows = not_registered(known, REPORT["replicas"])
    assert rows == [
        {"replica_id": "kv-4", "resp": "127.0.0.1:6382", "error": "down (not registered)"},
        {"replica_id": "kv-5", "resp": "127.0.0.1:6383", "error": "down (not registered)"},
    ]
    report = {**REPORT, "replicas": [*REPORT["replicas"], *rows]}
    assert render_status(report).splitlines()[-2:] == [
        "kv-4     127.0.0.1:6382  down (not registered)",
        "kv-5     127.0.0.1:6383  down (not registered)",
    ]


def test_bookies_that_zookeeper_does_not_list_show_as_down() -> None:
    bookies = {**REPORT["bookies"], "down": ["127.0.0.1:3184"]}
    line = render_status({**REPORT, "bookies": bookies}).splitlines()[2]
    assert line == (
        "bookies: 127.0.0.1:3181, 127.0.0.1:3182; read-only: 127.0.0.1:3183; "
        "down (not registered): 127.0.0.1:3184"
    )


def test_a_data_directory_names_its_replicas_and_its_bookies_in_order(tmp_path: Path) -> None:
    (tmp_path / "kvstore.toml").write_text(
        'app = "kv"\nzk = ""\nreplicas = ["kv-1"]\nresp_ports = [6379]\nports = [7379]\n'
    )
    (tmp_path / "cluster.toml").write_text('zk_port = 2181\nzk_root = "/ledgers"\n')
    for number in (10, 2, 1):
        directory = tmp_path / f"bookie-{number}"
        directory.mkdir()
        (directory / "bookie.toml").write_text(f'listen_address = "127.0.0.1:{3180 + number}"\n')
    (tmp_path / "bookie-4").mkdir()  # never set up: no bookie.toml
    saved = read_saved(tmp_path)
    assert saved["zk"] == "127.0.0.1:2181"
    assert saved["replicas"] == ["kv-1"]
    assert saved["bookies"] == ["127.0.0.1:3181", "127.0.0.1:3182", "127.0.0.1:3190"]
