"""Client tokens on a real bookie process: a bookie with `client_tokens_file` serves only
clients that presented one of its tokens (AUTH, docs/protocol.md), refuses the others
with a clear error, counts them, and never writes a token into its log or its errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.errors import BookieError, Forbidden, NotAuthenticated
from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.net.credentials import TOKEN_FILE_VARIABLE

from .support.admin_http import AdminClient, sample
from .support.ledgers import ledger_client
from .support.processes import HOST, BookieCluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

WRITER_TOKEN = "writer-token-0123456789abcdef"
BOOKIE_TOKEN = "bookie-token-fedcba9876543210"
READER_TOKEN = "reader-token-0123456789abcde"
WRONG_TOKEN = "wrong-token-00000000000000000"
SECRETS = (WRITER_TOKEN, BOOKIE_TOKEN, READER_TOKEN, WRONG_TOKEN)


@pytest.fixture
def token_files(tmp_path: Path) -> dict[str, Path]:
    files = {
        "table": tmp_path / "client-tokens",
        "writer": tmp_path / "writer.token",
        "bookie": tmp_path / "bookie.token",
        "wrong": tmp_path / "wrong.token",
    }
    files["table"].write_text(
        f"# who may use these bookies\nwriter {WRITER_TOKEN}\nbookies {BOOKIE_TOKEN}\n"
        f"reader {READER_TOKEN} read\n"
    )
    files["writer"].write_text(WRITER_TOKEN + "\n")
    files["bookie"].write_text(BOOKIE_TOKEN)
    files["wrong"].write_text(WRONG_TOKEN)
    return files


async def test_a_bookie_serves_only_clients_with_a_known_token(
    zookeeper: LocalZooKeeper,
    zk_root: str,
    tmp_path: Path,
    token_files: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path / "cluster") as cluster:
        admin_port = free_port(HOST)
        setup = cluster.add_bookie(
            ledger_dirs=1,
            config={
                "client_tokens_file": str(token_files["table"]),
                "admin_address": f"{HOST}:{admin_port}",
            },
        )
        # The bookie's own clients (autorecovery) present the bookies' token.
        env = {**os.environ, TOKEN_FILE_VARIABLE: str(token_files["bookie"])}
        bookie = await cluster.start(setup, wait_for="bookie.ready", env=env)
        admin = AdminClient(f"{HOST}:{admin_port}")

        # A known token: served as usual.
        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(token_files["writer"]))
        async with ledger_client(cluster, seed=1) as client:
            handle = await client.create_ledger(1, 1, 1, password=b"tokens")
            for number in range(5):
                await handle.append(f"entry {number}".encode())
            await handle.close()
            reader = await client.open_ledger(handle.ledger_id, b"tokens", recovery=False)
            assert await reader.read(0, 4) == [f"entry {n}".encode() for n in range(5)]
        metrics = await admin.metrics()
        assert sample(metrics, "bookie_auth_failures_total") == 0
        assert sample(metrics, "bookie_unauthenticated_requests_total") == 0

        # A read token: reads, and is refused an add.
        async with BookieConnection.connect(
            HOST, setup.port, token=READER_TOKEN.encode()
        ) as reader:
            assert (await reader.read(handle.ledger_id, 0)).packet is not None
            with pytest.raises(Forbidden, match="reader may read, not write"):
                await reader.add(handle.ledger_id + 1, 0, b"k" * 32, b"packet")
        assert sample(await admin.metrics(), "bookie_forbidden_requests_total") == 1

        # A wrong token: refused at connect, with the bookie and the remedy named.
        with pytest.raises(NotAuthenticated) as refused:
            async with BookieConnection.connect(HOST, setup.port, token=WRONG_TOKEN.encode()):
                pytest.fail("a wrong token connected")
        message = str(refused.value)
        assert setup.address in message
        assert TOKEN_FILE_VARIABLE in message
        assert sample(await admin.metrics(), "bookie_auth_failures_total") == 1

        # No token at all: every request is answered EUNAUTHENTICATED, nothing is served.
        monkeypatch.delenv(TOKEN_FILE_VARIABLE)
        async with BookieConnection.connect(HOST, setup.port) as anonymous:
            with pytest.raises(NotAuthenticated, match="requires a client token"):
                await anonymous.identify()
            with pytest.raises(NotAuthenticated):
                await anonymous.read(handle.ledger_id, 0)
        assert sample(await admin.metrics(), "bookie_unauthenticated_requests_total") == 2

        # The process's token file, wrong: the ledger client cannot reach the bookie.
        monkeypatch.setenv(TOKEN_FILE_VARIABLE, str(token_files["wrong"]))
        async with ledger_client(cluster, seed=2) as client:
            unwritable = await client.create_ledger(1, 1, 1, password=b"tokens")
            with pytest.raises(BookieError) as failed:
                await unwritable.append(b"refused")
            assert "refused this client's token" in str(failed.value)
        monkeypatch.delenv(TOKEN_FILE_VARIABLE)

        # A broken token table: the bookie refuses to start, naming the line, not the token.
        table = tmp_path / "broken-tokens"
        table.write_text(f"writer {WRITER_TOKEN}\nsomeone {WRITER_TOKEN}\n")
        broken = cluster.add_bookie(ledger_dirs=1, config={"client_tokens_file": str(table)})
        refused_start = await cluster.run_to_exit(broken)
        assert refused_start.process.returncode == 2  # a usage error
        (invalid,) = refused_start.named("bookie.invalid_config")
        assert "line 2" in invalid["reason"]

        logs = "\n".join(bookie.lines + refused_start.lines)
        assert not [secret for secret in SECRETS if secret in logs]
        assert not [secret for secret in SECRETS if secret in message + invalid["reason"]]
