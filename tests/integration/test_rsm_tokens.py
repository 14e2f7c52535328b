"""Client tokens on a real `rsm run` replica: started with `--client-tokens-file`, it serves
only clients whose `RSM_TOKEN_FILE` holds one of its tokens, and only what the token's role
allows; it refuses the others with a clear error and counts them, and never writes a token
into its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from rsm.errors import Forbidden, NotAuthenticated
from rsm.link import TOKEN_FILE_VARIABLE

from .support.admin_http import AdminClient, sample
from .support.rsm_processes import RsmProcesses

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

APP_TOKEN = "app-token-0123456789abcdef"
VIEWER_TOKEN = "viewer-token-0123456789ab"
OPS_TOKEN = "ops-token-0123456789abcdef"
WRONG_TOKEN = "wrong-token-0000000000000"
SECRETS = (APP_TOKEN, VIEWER_TOKEN, OPS_TOKEN, WRONG_TOKEN)


async def test_a_replica_serves_only_clients_with_a_known_token(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tmp_path / "client-tokens"
    table.write_text(f"app {APP_TOKEN}\nviewer {VIEWER_TOKEN} read\nops {OPS_TOKEN} admin\n")
    files = {}
    for name, token in zip(("good", "viewer", "ops", "wrong"), SECRETS, strict=True):
        files[name] = tmp_path / f"{name}.token"
        files[name].write_text(token)
    good, wrong = files["good"], files["wrong"]
    async with RsmProcesses(zookeeper, zk_root, tmp_path / "cluster") as cluster:
        await cluster.start_bookies(3)
        replica = await cluster.start_replica(
            "r1", flags=["--client-tokens-file", str(table), "--admin", "127.0.0.1:0"]
        )
        await cluster.wait_leader()
        admin = AdminClient(replica.named("rsm.ready")[-1]["admin"])
        labels = {"app": cluster.app, "replica": replica.address}

        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(good))
        async with cluster.client() as client:
            assert await client.call("add", "c", 1) == 1
            assert await client.query("get") == 1
            with pytest.raises(Forbidden, match="app may not do this: it takes the admin role"):
                await client.snapshot()

        # Roles: a read token queries but logs nothing; an admin token takes snapshots.
        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(files["viewer"]))
        async with cluster.client() as client:
            assert await client.query("get") == 1
            with pytest.raises(Forbidden, match="takes the write role"):
                await client.call("add", "c", 2)
        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(files["ops"]))
        async with cluster.client() as client:
            assert (await client.snapshot())["index"] >= 1
        assert sample(await admin.metrics(), "rsm_forbidden_requests_total", **labels) == 2

        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(wrong))
        async with cluster.client() as client:
            with pytest.raises(NotAuthenticated, match="token this connection presented"):
                await client.call("add", "c", 2)
        assert sample(await admin.metrics(), "rsm_auth_failures_total", **labels) == 1

        monkeypatch.delenv(TOKEN_FILE_VARIABLE)
        async with cluster.client() as client:
            with pytest.raises(NotAuthenticated, match="requires a client token"):
                await client.query("get")
        metrics = await admin.metrics()
        assert sample(metrics, "rsm_unauthenticated_requests_total", **labels) == 2

        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(good))
        async with cluster.client() as client:
            assert await client.query("get") == 1, "the refused call changed nothing"

        broken = tmp_path / "broken-tokens"
        broken.write_text(f"app {APP_TOKEN}\nagain {APP_TOKEN}\n")
        with pytest.raises(AssertionError):
            await cluster.start_replica("r2", flags=["--client-tokens-file", str(broken)])
        refused = cluster.replicas["r2"]
        assert await refused.wait_exit() == 2
        (failed,) = refused.named("rsm.failed")
        assert "line 2" in failed["error"]

        logs = "\n".join(line for r in cluster.replicas.values() for line in r.lines)
        assert not [secret for secret in SECRETS if secret in logs]
