"""A store on TLS as `kvstore up --tls` runs it: bookies with mutual-TLS listeners,
replicas whose framework ports are mutual TLS and whose ledger clients use the bookies'
TLS listeners, and TLS RESP ports.  A write and a read go through it (redis-py with
`ssl=True`, redis-cli with `--tls`); a client with the wrong CA, or without the
client certificate a port requires, is refused on each port, the refusal is counted
(bookie and replica metrics) and logged, and the store goes on serving.  A store that
runs its own ZooKeeper runs it on mutual TLS only.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import redis
import redis.exceptions
from kvstore.tools.launcher import KvSettings, LocalKvCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieUnavailable
from bookie.local.certificates import DevelopmentCertificates
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk_tls import ZK_TLS_CA_FILE_ENV, ZK_TLS_CERT_FILE_ENV, ZK_TLS_KEY_FILE_ENV
from bookie.net.tls import client_context
from rsm.client import tls_connector
from tests.tls_certs import Certificates
from tests.unit.kvstore.local_store import Store, running_store, wait_for

from .support.admin_http import metric_sum

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

HOST = "127.0.0.1"
ZK_TLS_VARIABLES = (ZK_TLS_CA_FILE_ENV, ZK_TLS_CERT_FILE_ENV, ZK_TLS_KEY_FILE_ENV)


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = f"/kvtls-{os.getpid()}"
    with running_store(zookeeper, root, tmp_path_factory.mktemp("store"), tls=True) as running:
        yield running


@pytest.fixture(scope="module")
def others(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    """Certificates of another CA (and expired ones of it), which the store does not trust."""
    return Certificates.make(tmp_path_factory.mktemp("others"))


def _certs(store: Store) -> DevelopmentCertificates:
    tls = store.cluster.tls
    assert tls is not None
    return tls


def _tls_client(store: Store, name: str, **options: object) -> redis.Redis:
    port = store.cluster.replica(name).resp_tls_port
    assert port is not None
    options.setdefault("ssl_ca_certs", str(_certs(store).ca))
    return redis.Redis(
        host=HOST, port=port, ssl=True, socket_timeout=30, retry=Retry(NoBackoff(), 0), **options
    )


def _logged(path: Path, *needles: str) -> int:
    return sum(all(n in line for n in needles) for line in path.read_text().splitlines())


def test_a_write_and_a_read_through_tls(store: Store) -> None:
    leader = store.leader()
    follower = next(name for name in store.names if name != leader)
    with _tls_client(store, follower) as client:
        assert client.set("tls:key", "through a follower")
    with _tls_client(store, leader) as client:
        assert client.get("tls:key") == b"through a follower"
    if shutil.which("redis-cli") is not None:
        port = store.cluster.replica(follower).resp_tls_port
        command = ["redis-cli", "--tls", "--cacert", str(_certs(store).ca), "-p", str(port)]
        result = subprocess.run(
            [*command, "get", "tls:key"],
            capture_output=True,
            check=False,
            timeout=30,
        )
        assert result.stdout.strip() == b"through a follower", result
    # The replicas' ledger clients use the bookies' TLS listeners.
    for bookie in store.cluster.bookies.bookies:
        assert metric_sum(bookie.admin_url, "bookie_tls_accepted_total") >= 1


def test_refusals_are_counted_and_the_store_goes_on(store: Store, others: Certificates) -> None:
    certs = _certs(store)
    leader = store.leader()
    # RESP: a client that trusts another CA refuses the store's certificate.
    with (
        pytest.raises(redis.exceptions.ConnectionError, match=r"(?i)certificate verify failed"),
        _tls_client(store, leader, ssl_ca_certs=str(others.ca)) as client,
    ):
        client.ping()
    log = store.cluster.replica(leader).log_file
    wait_for(lambda: _logged(log, '"tls.refused"', '"server": "resp"') >= 1)

    # A bookie's TLS listener: mutual TLS, so no client certificate is refused.
    bookie = store.cluster.bookies.bookies[0]
    tls_port = bookie.tls_port
    assert tls_port is not None
    refused_before = metric_sum(bookie.admin_url, "bookie_tls_refused_total")

    async def identify(context: ssl.SSLContext) -> None:
        async with BookieConnection.connect(HOST, tls_port, tls=context) as connection:
            await connection.identify(timeout_ms=10_000)

    with pytest.raises(BookieUnavailable, match="TLS"):
        anyio.run(identify, client_context(certs.ca))
    anyio.run(identify, client_context(certs.ca, certs.client))
    wait_for(lambda: metric_sum(bookie.admin_url, "bookie_tls_refused_total") > refused_before)

    # A replica's framework port: a client certificate of another CA is refused.
    address = store.cluster.replica(leader).address

    async def connect_with_rogue_certificate() -> None:
        stream = await tls_connector(client_context(certs.ca, others.rogue_client))(address)
        try:
            await stream.send(b"\0\0\0\1")
            await stream.receive()
        finally:
            await anyio.aclose_forcefully(stream)

    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
        anyio.run(connect_with_rogue_certificate)
    wait_for(lambda: _logged(log, '"tls.refused"', '"server": "replica"') >= 1)
    admin_url = store.cluster.replica(leader).admin_url
    assert metric_sum(admin_url, "rsm_tls_refused_total") >= 1
    assert metric_sum(admin_url, "rsm_tls_accepted_total") >= 1

    # The store goes on serving, through a follower (a write forwarded over TLS).
    follower = next(name for name in store.names if name != leader)
    with _tls_client(store, follower) as client:
        assert client.incr("tls:counter") == 1


def test_kvstore_status_over_tls(store: Store) -> None:
    certs = _certs(store)
    command = [sys.executable, "-m", "kvstore.tools.cli", "status", "--zk", store.cluster.zk]
    # Without TLS flags: the replicas publish no plain port, and status says so.
    plain = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    assert "has no plain port (it serves TLS only: connect with --tls-ca-file)" in plain.stdout, (
        plain
    )
    tls = ["--tls-ca-file", str(certs.ca), "--tls-cert-file", str(certs.client)]
    result = subprocess.run(
        [*command, *tls, "--json"], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The leader answered over TLS (on a loaded machine another replica may miss the
    # status command's 2 s, which says nothing about TLS).
    serving = [r["replica_id"] for r in report["replicas"] if r.get("serving")]
    assert serving == [store.leader()], report["replicas"]


def test_kvstore_history_of_a_tls_store_reads_its_bookies_as_its_client(store: Store) -> None:
    with _tls_client(store, store.leader()) as client:
        assert client.set("tls:history", "once")
    bookies = store.cluster.bookies.bookies
    before = [metric_sum(bookie.admin_url, "bookie_tls_accepted_total") for bookie in bookies]
    # --data-dir of a store made with --tls: no TLS flag needed.
    command = [sys.executable, "-m", "kvstore.tools.cli", "history", "tls:history"]
    result = subprocess.run(
        [*command, "--data-dir", str(store.cluster.data_dir), "--json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert [json.loads(line)["command"] for line in result.stdout.splitlines()] == ["set"]
    after = [metric_sum(bookie.admin_url, "bookie_tls_accepted_total") for bookie in bookies]
    assert any(a > b for a, b in zip(after, before, strict=True))


def _run(command: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, capture_output=True, text=True, check=False, timeout=60, env=environment
    )


def test_a_store_with_its_own_zookeeper_runs_it_on_tls_only(tmp_path: Path) -> None:
    """`kvstore up --tls` without --zk: its ZooKeeper serves mutual TLS only.  The bookies,
    the replica and the launcher reach it; `kvstore status` and `kvstore history` with
    --data-dir too, by themselves; `bookie shell` without the variables is refused, and
    with those the banner prints (the client certificate) gets through."""
    settings = KvSettings(replicas=1, base_port=0, tls=True)
    cluster = LocalKvCluster(tmp_path, settings=settings)
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(cluster),
    ):
        store = Store(portal, cluster)
        with _tls_client(store, "kv-1") as client:
            assert client.set("zk:tls", "on")
            assert client.get("zk:tls") == b"on"
        assert "zk_tls = true" in (tmp_path / "cluster.toml").read_text()
        plain = {name: value for name, value in os.environ.items() if name not in ZK_TLS_VARIABLES}

        kvstore = [sys.executable, "-m", "kvstore.tools.cli"]
        where = ["--data-dir", str(tmp_path), "--json"]
        status = _run([*kvstore, "status", *where], plain)
        assert status.returncode == 0, status.stderr
        assert [r["replica_id"] for r in json.loads(status.stdout)["replicas"]] == ["kv-1"]
        history = _run([*kvstore, "history", "zk:tls", *where], plain)
        assert history.returncode == 0, history.stderr
        assert [json.loads(line)["command"] for line in history.stdout.splitlines()] == ["set"]

        listbookies = [sys.executable, "-m", "bookie.tools.cli", "shell", "listbookies"]
        listbookies += ["--zk", cluster.bookies.zk_servers, "--json"]
        refused = _run(listbookies, plain)
        assert refused.returncode == 2
        assert "without TLS (BOOKIE_ZK_TLS_CA_FILE is not set)" in refused.stderr
        client_tls = cluster.bookies.zk_client_tls
        assert client_tls is not None
        assert client_tls.cert_file == _certs(store).client
        listed = _run(listbookies, {**plain, **client_tls.environment()})
        assert listed.returncode == 0, listed.stderr
        assert len(json.loads(listed.stdout)["writable"]) == 3
