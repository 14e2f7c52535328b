"""Real `rsm run` replicas' admin HTTP APIs under load: metrics move, every endpoint answers
as its OpenAPI document says, a snapshot and a leadership transfer asked over HTTP happen;
the status page sees the bookies the way the replica reaches them."""

from __future__ import annotations

import contextlib
import socket
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper, free_port
from tests.tls_certs import Certificates

from .support.admin_http import AdminClient, sample
from .support.processes import HOST
from .support.rsm_processes import CounterLoad, ReplicaProcess, RsmProcesses, wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

NAMES = ["r1", "r2"]
ADMIN = ["--admin", "127.0.0.1:0"]


def admin_of(replica: ReplicaProcess) -> AdminClient:
    address = replica.named("rsm.ready")[-1]["admin"]
    assert address.startswith("127.0.0.1:")
    return AdminClient(address)


async def test_replica_admin_api(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
        setups = [cluster.bookies.add_bookie(ledger_dirs=1) for _ in range(3)]
        bookies = [await cluster.bookies.start(setup, wait_for="bookie.ready") for setup in setups]
        for name in NAMES:
            await cluster.start_replica(name, flags=ADMIN)
        leader, epoch = await cluster.wait_leader()
        follower = next(r for r in cluster.replicas.values() if r is not leader)
        on_leader, on_follower = admin_of(leader), admin_of(follower)
        document = (await on_leader.request("GET", "/openapi.json")).json()
        labels = {"app": cluster.app, "replica": leader.address}

        before = await on_leader.metrics()
        load = CounterLoad(cluster, 2)
        async with load.running():
            await load.wait_acknowledged(40)
        after = await on_leader.metrics()
        commits = sample(after, "rsm_commit_latency_seconds_count", **labels)
        assert commits > sample(before, "rsm_commit_latency_seconds_count", **labels)
        assert sample(after, "rsm_commit_latency_seconds_sum", **labels) > 0
        assert sample(after, "rsm_batch_commands_sum", **labels) >= load.total_acknowledged
        assert sample(after, "rsm_batch_bytes_sum", **labels) > 0
        assert sample(after, "rsm_leader", **labels) == 1
        assert sample(after, "rsm_epoch", **labels) == epoch
        assert sample(after, "rsm_applied_index", **labels) >= load.total_acknowledged
        assert sample(after, "ledger_add_latency_seconds_count") >= commits
        assert sample(after, "rsm_failover_seconds_count", **labels) == 1
        assert sample(after, "rsm_segment_under_replicated", **labels) == 0

        async def follower_ready() -> bool:
            return (await on_follower.request("GET", "/ready")).status == 200

        await wait_for(follower_ready)
        follower_labels = {"app": cluster.app, "replica": follower.address}
        following = await on_follower.metrics()
        assert sample(following, "rsm_leader", **follower_labels) == 0
        assert sample(following, "rsm_applied_index", **follower_labels) > 0
        assert sample(following, "rsm_leader_changes_total", **follower_labels) >= 1

        for admin in (on_leader, on_follower):
            assert await admin.checked(document, "GET", "/health") == (200, {"status": "ok"})
            status, ready = await admin.checked(document, "GET", "/ready")
            assert (status, ready["ready"]) == (200, True)
        _, apps = await on_leader.checked(document, "GET", "/api/v1/applications")
        assert cluster.app in apps["applications"]
        _, app = await on_follower.checked(document, "GET", "/api/v1/application")
        assert app["leader"]["replica_id"] == leader.address
        assert app["epoch"] == epoch
        assert sorted(r["replica_id"] for r in app["replicas"]) == sorted(
            r.address for r in cluster.replicas.values()
        )
        assert all(r["lag"] is not None and r["lag"] >= 0 for r in app["replicas"])
        _, replica = await on_leader.checked(document, "GET", "/api/v1/replica")
        assert (replica["role"], replica["serving"]) == ("leader", True)
        _, segments = await on_follower.checked(document, "GET", "/api/v1/segments")
        assert segments["segments"][-1]["state"] == "OPEN"
        assert segments["segments"][-1]["epoch"] == epoch

        async def bookies_up() -> bool:
            _, seen = await on_follower.checked(document, "GET", "/api/v1/overview")
            return [bookie["state"] for bookie in seen["bookies"]] == ["up"] * 3

        await wait_for(bookies_up)
        _, overview = await on_follower.checked(document, "GET", "/api/v1/overview")
        assert overview["served_by"] == follower.address
        assert overview["leader"]["replica_id"] == leader.address
        assert overview["segments"] == segments["segments"]
        assert all(b["total_bytes"] >= b["free_bytes"] > 0 for b in overview["bookies"])
        serving = [r for r in overview["replicas"] if r["serving"]]
        assert [r["replica_id"] for r in serving] == [leader.address]
        assert serving[0]["load"]["commits"] >= 1
        assert {"kind": "leader", "message": f"leader {leader.address} (epoch {epoch})"} in [
            {"kind": e["kind"], "message": e["message"]} for e in overview["events"]
        ]
        page = await on_leader.request("GET", "/")
        assert (page.status, page.content_type) == (200, "text/html; charset=utf-8")
        assert b'id="leader"' in page.body
        assert b"/api/v1/overview" in page.body

        status, manifest = await on_follower.checked(document, "POST", "/api/v1/snapshots")
        assert status == 202
        assert manifest["replica_id"] == follower.address
        _, listed = await on_leader.checked(document, "GET", "/api/v1/snapshots")
        assert manifest["index"] in [each["index"] for each in listed["snapshots"]]
        taken = sample(await on_follower.metrics(), "rsm_snapshots_total", action="taken")
        assert taken == 1

        transfer = "/api/v1/leader/transfer"
        status, refused = await on_follower.checked(document, "POST", transfer, {})
        assert status == 409
        assert "leader" in refused["error"]
        status, refused = await on_leader.checked(document, "POST", transfer, {"to": "nobody"})
        assert (status, "not a caught-up candidate" in refused["error"]) == (400, True)
        status, moved = await on_leader.checked(
            document, "POST", transfer, {"to": follower.address}
        )
        assert status == 202
        assert moved["target"] == follower.address
        await cluster.wait_leader(above_epoch=epoch)
        handed = await on_leader.metrics()
        assert sample(handed, "rsm_handoffs_total", **labels) == 1
        assert sample(handed, "rsm_handoff_window_seconds_count", **labels) == 1
        taken_over = await on_follower.metrics()
        assert sample(taken_over, "rsm_failover_seconds_count", **follower_labels) == 1
        assert sample(taken_over, "rsm_leader", **follower_labels) == 1

        # A bookie of three lost: the new leader's entries get fewer copies than Qw.
        bookies[0].kill()
        degraded_load = CounterLoad(cluster, 2)
        async with degraded_load.running():
            await degraded_load.wait_acknowledged(10)

        async def under_replicated() -> bool:
            families = await on_follower.metrics()
            return sample(families, "rsm_segment_under_replicated", **follower_labels) == 1

        await wait_for(under_replicated)


async def test_status_page_asks_the_bookies_where_the_replica_reaches_them(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """Bookies whose registered plain address refuses every connection, as when their
    plain listeners are bound to loopback on other hosts (docs/security.md, "Moving a
    store to TLS"), and a replica that reaches them over TLS (`--tls-bookies`): its
    status page shows each up, at its TLS address, with its disk use."""
    certs = Certificates.make(tmp_path / "certs")
    with contextlib.ExitStack() as held:
        async with RsmProcesses(zookeeper, zk_root, tmp_path) as cluster:
            setups = [cluster.bookies.add_bookie(ledger_dirs=1) for _ in range(3)]
            taken = {setup.port for setup in setups}
            tls_addresses = []
            for setup in setups:
                refusing = held.enter_context(socket.socket())
                refusing.bind((HOST, 0))  # bound, never listening: connections are refused
                tls_port = free_port(HOST, taken=taken)
                taken.add(tls_port)
                tls_addresses.append(f"{HOST}:{tls_port}")
                cluster.bookies.write_config(
                    setup,
                    advertised_address=f"{HOST}:{refusing.getsockname()[1]}",
                    tls_listen_address=tls_addresses[-1],
                    tls_cert_file=str(certs.server),
                    autorecovery=False,
                )
            for setup in setups:
                await cluster.bookies.start(setup, wait_for="bookie.ready")
            replica = await cluster.start_replica(
                "r1", flags=[*ADMIN, "--tls-bookies", "--tls-ca-file", str(certs.ca)]
            )
            await cluster.wait_leader()
            admin = admin_of(replica)
            seen: list[dict[str, object]] = []

            async def bookies_up() -> bool:
                overview = (await admin.request("GET", "/api/v1/overview")).json()
                seen[:] = overview["bookies"]
                return [bookie["state"] for bookie in seen] == ["up"] * 3

            await wait_for(bookies_up)
            assert sorted(str(bookie["address"]) for bookie in seen) == sorted(tls_addresses)
            assert all(bookie["total_bytes"] and bookie["free_bytes"] for bookie in seen)
