"""Moving a running application's replicas to TLS without stopping it, as docs/security.md
("Moving a store to TLS") says: real `rsm run` processes on real bookies and ZooKeeper.

A rolling restart gives each replica a TLS port beside its plain one (`--tls-listen`),
followers first and the leader last, while clients keep writing over plain TCP; the
clients then switch to TLS; a second rolling restart leaves each replica its TLS port only
(`--tls-replicas`).  Every acknowledged write is applied exactly once, and a plain client
left over is told which replica has no plain port."""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.net.tls import client_context
from rsm.client import tls_connector
from rsm.errors import NoAddressForTransport
from tests.tls_certs import Certificates

from .support.processes import HOST
from .support.rsm_processes import CounterLoad, RsmProcesses, check_exactly_once

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

NAMES = ["r1", "r2", "r3"]
CLIENTS = 2
ADDS_BETWEEN_STEPS = 10


async def _rolling_restart(
    cluster: RsmProcesses, load: CounterLoad, flags_of: dict[str, Sequence[str]]
) -> None:
    """Restart every replica gracefully with its new flags, followers first and the leader
    last, each once it stood for election again (caught up) and the clients went on."""
    leader, _ = await cluster.wait_leader()
    for name in sorted(NAMES, key=lambda name: name == leader.name):
        replica = cluster.replicas[name]
        replica.send(signal.SIGTERM)
        assert await replica.wait_exit() == 0
        restarted = await cluster.start_replica(name, flags=flags_of[name])
        await restarted.wait_event("rsm.candidacy")
        await load.wait_acknowledged(load.total_acknowledged + ADDS_BETWEEN_STEPS)


async def test_replicas_move_to_tls_one_at_a_time_while_clients_write(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    certs = Certificates.make(tmp_path / "certs")
    files = ["--tls-cert-file", str(certs.server), "--tls-ca-file", str(certs.ca)]
    secure = tls_connector(client_context(certs.ca))
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        await cluster.start_bookies()
        await cluster.start_replicas(NAMES)
        await cluster.wait_leader()
        # Each replica's id is its plain address, which it keeps on its TLS-only restart.
        ids = {name: cluster.replicas[name].address for name in NAMES}
        tls_ports: dict[str, int] = {}
        for name in NAMES:  # picked while the plain ports are bound: none of theirs
            tls_ports[name] = free_port(HOST, taken=set(tls_ports.values()))
        load = CounterLoad(cluster, CLIENTS, attempt_timeout_ms=1_000, deadline_ms=30_000)
        async with load.running():
            await load.wait_acknowledged(ADDS_BETWEEN_STEPS)
            both_ports = {
                name: ["--tls-listen", f"{HOST}:{tls_ports[name]}", *files] for name in NAMES
            }
            await _rolling_restart(cluster, load, both_ports)
            async with cluster.client() as plain, cluster.client(connector=secure) as tls:
                replicas = await tls.replicas()
                assert replicas == {ids[name]: f"{HOST}:{tls_ports[name]}" for name in NAMES}
                assert await plain.replicas() == {ids[name]: ids[name] for name in NAMES}
                # Linearizable reads on either kind of port see every write before them.
                acknowledged = load.total_acknowledged
                seen = await plain.query("get")
                assert seen >= acknowledged > 0
                assert await tls.query("get") >= seen
            before = load.total_acknowledged
            load.switch(secure)
            await load.wait_acknowledged(before + ADDS_BETWEEN_STEPS)
            tls_only = {
                name: [
                    *("--listen", f"{HOST}:{tls_ports[name]}", "--replica-id", ids[name]),
                    *("--tls-replicas", *files),
                ]
                for name in NAMES
            }
            await _rolling_restart(cluster, load, tls_only)
        async with cluster.client(connector=secure) as client:
            audit = await client.query("audit")
        async with cluster.client() as plain:
            with pytest.raises(NoAddressForTransport, match=r"replica \S+ has no plain port"):
                await plain.call("add", "left-over", 1)
    check_exactly_once(audit, load)
    assert load.total_acknowledged >= 6 * ADDS_BETWEEN_STEPS
