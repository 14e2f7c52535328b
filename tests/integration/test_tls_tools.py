"""The commands that read or write bookies, over TLS: `kvstore history` and `get`, `rsm log
check --all-bookies`, `bookie shell` (readentry, readledger, simpletest) and the standalone
`bookie autorecovery`.

Three bookie processes serve a mutual-TLS listener next to their plain one (a bookie
always has its plain listener), and hold a key-value store's log.  That a command took
the TLS path is shown twice: each bookie's `bookie_tls_accepted_total` grows while it
runs, and the same command given a CA that did not sign the bookies' certificates fails
(a plain connection would not care), with exit status 2 and one line naming TLS.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from kvstore.state_machine import KVStore

from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.meta.zk import ZkMetadataStore
from bookie.net.tls import client_context
from rsm.config import ReplicaConfig
from rsm.testing.logs import Call, LogWriter
from tests.tls_certs import CLIENT_NAME, Certificates

from .support.admin_http import metric_sum
from .support.processes import HOST, BookieCluster, BookieSetup
from .support.replay_cluster import ROOT, T0
from .support.rsm_processes import wait_for

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

APP = "kv-tls"
CONFIG = ReplicaConfig(state_hash_every_commands=1_000)
WAIT_S = 60.0


@dataclass(frozen=True)
class TlsBookies:
    zookeeper: LocalZooKeeper
    zk_root: str
    certs: Certificates
    bookies: list[tuple[BookieSetup, int, str]]
    """Each bookie, its TLS port and its admin URL."""
    ledgers: list[int]
    """The log's segments."""

    @property
    def tls_words(self) -> list[str]:
        """The flags of a command reaching these bookies with TLS, as their client."""
        return [
            "--tls-bookies",
            "--tls-ca-file",
            str(self.certs.ca),
            "--tls-cert-file",
            str(self.certs.client),
        ]

    @property
    def rogue_words(self) -> list[str]:
        """The same with a CA that did not sign the bookies' certificates."""
        return ["--tls-bookies", "--tls-ca-file", str(self.certs.rogue_ca)]

    def accepted(self) -> list[float]:
        """Each bookie's count of TLS handshakes that succeeded."""
        return [metric_sum(url, "bookie_tls_accepted_total") for _, _, url in self.bookies]


@pytest.fixture(scope="module")
async def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[TlsBookies]:
    certs = Certificates.make(tmp_path_factory.mktemp("certs"))
    zk_root = "/tls-tools"
    async with BookieCluster(zookeeper, zk_root, tmp_path_factory.mktemp("bookies")) as running:
        bookies = []
        for _ in range(3):
            tls_port, admin_port = free_port(HOST), free_port(HOST)
            setup = running.add_bookie(
                ledger_dirs=1,
                config={
                    "tls_listen_address": f"{HOST}:{tls_port}",
                    "tls_cert_file": str(certs.server),
                    "tls_ca_file": str(certs.ca),
                    "tls_require_client_cert": True,
                    "tls_allowed_clients": CLIENT_NAME,
                    "admin_address": f"{HOST}:{admin_port}",
                    # The standalone autorecovery of the tests is the only auditor.
                    "autorecovery": False,
                },
            )
            bookies.append((setup, tls_port, f"http://{HOST}:{admin_port}"))
        async with anyio.create_task_group() as task_group:
            for setup, _, _ in bookies:
                task_group.start_soon(
                    functools.partial(running.start, setup, wait_for="bookie.ready")
                )
        tls = ClientConfig(tls=client_context(certs.ca, certs.client))
        async with (
            ZkMetadataStore.connect(zookeeper.connect_string) as store,
            LedgerClient.open(store, root=zk_root, config=tls) as ledgers,
        ):
            writer = LogWriter(store, ledgers, APP, KVStore, CONFIG)
            await writer.segment(1, leader="r1", time_ms=T0)
            await writer.batch([Call("set", (b"k", b"v1"))], time_ms=T0 + 10)
            await writer.batch([Call("set", (b"k", b"v2"))], time_ms=T0 + 20)
            log = await writer.finish()
        yield TlsBookies(
            zookeeper, zk_root, certs, bookies, [segment.ledger_id for segment in log.segments]
        )


async def _run(*command: str) -> tuple[int, str, str]:
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}"}
    result = await anyio.run_process(
        [sys.executable, "-m", *command], cwd=ROOT, env=environment, check=False
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def _grew(before: list[float], after: list[float]) -> bool:
    return any(a > b for a, b in zip(after, before, strict=True))


async def _refused(*command: str) -> None:
    """The command with a wrong CA: usage status, one line naming TLS, no traceback."""
    code, _, err = await _run(*command)
    assert code == 2, err
    assert "TLS" in err, err
    assert "Traceback" not in err, err


async def test_kvstore_history_and_get_read_the_log_through_tls(cluster: TlsBookies) -> None:
    where = ["--zk", cluster.zookeeper.connect_string, "--app", APP]
    where += ["--ledger-root", cluster.zk_root]
    before = cluster.accepted()
    code, out, err = await _run(
        "kvstore.tools.cli", "get", "k", "--at", "3", *where, *cluster.tls_words
    )
    assert (code, out, err) == (0, '"v2"\n', "")
    assert _grew(before, cluster.accepted())
    code, out, err = await _run(
        "kvstore.tools.cli", "history", "k", *where, *cluster.tls_words, "--json"
    )
    assert code == 0, err
    assert [json.loads(line)["index"] for line in out.splitlines()] == [2, 3]

    await _refused("kvstore.tools.cli", "history", "k", *where, *cluster.rogue_words)
    code, _, err = await _run("kvstore.tools.cli", "get", "k", "--at", "3", *where, "--tls-bookies")
    assert (code, err) == (2, "error: InvalidConfig: --tls-bookies needs --tls-ca-file\n")


async def test_rsm_log_check_reads_every_copy_through_tls(cluster: TlsBookies) -> None:
    source = ["--app", APP, "--zk", cluster.zookeeper.connect_string]
    source += ["--ledger-root", cluster.zk_root]
    before = cluster.accepted()
    code, out, err = await _run(
        "rsm.tools.cli", "log", "check", *source, "--all-bookies", *cluster.tls_words, "--json"
    )
    assert code == 0, (out, err)
    # Each bookie's copies were read over a connection of its own, with TLS.
    assert all(a > b for a, b in zip(cluster.accepted(), before, strict=True))
    await _refused("rsm.tools.cli", "log", "dump", *source, *cluster.rogue_words)


async def test_bookie_shell_over_tls(cluster: TlsBookies) -> None:
    shell = ("bookie.tools.cli", "shell")
    where = ["--zk", cluster.zookeeper.connect_string, "--zk-root", cluster.zk_root]
    ledger = str(cluster.ledgers[0])
    _, tls_port, _ = cluster.bookies[0]

    code, out, err = await _run(
        *shell, "readentry", f"{HOST}:{tls_port}", ledger, "0", *cluster.tls_words, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["digest"] == "ok"
    await _refused(*shell, "bookieinfo", f"{HOST}:{tls_port}", *cluster.rogue_words)

    before = cluster.accepted()
    password = CONFIG.ledger_password.decode()
    code, out, err = await _run(
        *shell, "readledger", ledger, *where, "--all-bookies", "--password", password,
        *cluster.tls_words, "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["problems"] == []
    assert all(a > b for a, b in zip(cluster.accepted(), before, strict=True))
    code, out, err = await _run(
        *shell, "simpletest", *where, "--entries", "5", *cluster.tls_words, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["problems"] == []
    # The cluster tools report a bookie they cannot reach as a problem of the work, by name.
    code, out, _ = await _run(
        *shell, "readledger", ledger, *where, "--password", password, *cluster.rogue_words
    )
    assert code == 1
    assert "TLS: the peer's certificate was refused" in out


async def test_standalone_autorecovery_checks_the_bookies_through_tls(
    cluster: TlsBookies, tmp_path: Path
) -> None:
    command = ("bookie.tools.cli", "autorecovery", "--zk", cluster.zookeeper.connect_string)
    command += ("--zk-root", cluster.zk_root, "--presence-interval-ms", "100")
    command += ("--password", CONFIG.ledger_password.decode())
    code, _, err = await _run(*command, "--tls-bookies", "--tls-ca-file", str(tmp_path / "none"))
    assert code == 2, err
    assert "cannot read CA file" in err
    assert "Traceback" not in err

    before = cluster.accepted()
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}"}
    process = await anyio.open_process(
        [sys.executable, "-m", *command, *cluster.tls_words],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    async with process:
        try:
            # The auditor's presence checks connect to every bookie, with TLS.
            await wait_for(
                lambda: all(a > b for a, b in zip(cluster.accepted(), before, strict=True))
            )
        finally:
            process.terminate()
            with anyio.fail_after(WAIT_S):
                await process.wait()
