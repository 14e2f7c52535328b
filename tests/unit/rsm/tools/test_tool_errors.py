"""What the investigation commands (`rsm log ...`, `rsm replay`, ..., `kvstore history`,
`kvstore get --at`) and `kvstore status` print when the application or its ZooKeeper is not
there: the cause, at once for a missing application, in one line after
`limits.cli_zk_connect_timeout_ms` for an unreachable ZooKeeper, never a traceback."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from kvstore.tools import cli as kvstore_cli

from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk_tls import ZK_TLS_CA_FILE_ENV
from rsm import limits
from rsm.tools import cli as rsm_cli
from rsm.tools.options import EXIT_USAGE
from tests.unit.rsm.runtime.test_cli_errors import unused_port

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper]

CLASS = ("--class", "rsm.testing.workload:AuditCounter")
BY_KEY = ("--class", "kvstore.state_machine:KVStore")
"""A class with per-key digests, which `diff` and `blame` check for first."""
RSM_TOOLS: list[tuple[str, ...]] = [
    ("log", "dump"),
    ("log", "export", "--to", "unused.rsmlog"),
    ("log", "check"),
    ("replay", *CLASS),
    ("verify", *CLASS),
    ("bisect", "--old", CLASS[1], "--new", CLASS[1]),
    ("determinism", *CLASS),
    ("snapshot", "verify", *CLASS),
    ("diff", *BY_KEY, "--at", "1", "--at", "2"),
    ("blame", *BY_KEY, "key"),
]
KVSTORE_TOOLS: list[tuple[str, ...]] = [("history", "k"), ("get", "k", "--at", "1")]
MISSING = "error: NoSuchApplication: there is no application 'nosuchapp' in this ZooKeeper\n"


async def run(main: Callable[[Sequence[str]], int], argv: list[str]) -> int:
    return await anyio.to_thread.run_sync(main, argv)


MISSING_APP_CASES = [(rsm_cli.main, words) for words in RSM_TOOLS] + [
    (kvstore_cli.main, words) for words in KVSTORE_TOOLS
]


@pytest.mark.parametrize(
    ("main", "words"),
    MISSING_APP_CASES,
    ids=[f"{main.__module__.split('.')[0]} {' '.join(words)}" for main, words in MISSING_APP_CASES],
)
async def test_an_investigation_of_a_missing_application_says_so_at_once(
    main: Callable[[Sequence[str]], int],
    words: tuple[str, ...],
    zookeeper: LocalZooKeeper,
    zk_root: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = ["--app", "nosuchapp", "--zk", zookeeper.connect_string + zk_root]
    with anyio.fail_after(limits.cli_zk_connect_timeout_ms / 1000):
        assert await run(main, [*words, *source]) == EXIT_USAGE
    assert capsys.readouterr() == ("", MISSING)


async def test_status_of_a_missing_store_says_so_at_once(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["status", "--app", "nosuchapp", "--zk", zookeeper.connect_string + zk_root]
    with anyio.fail_after(limits.cli_zk_connect_timeout_ms / 1000):
        assert await run(kvstore_cli.main, argv) == kvstore_cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert (out, err) == ("", "kvstore: " + MISSING.removeprefix("error: "))


@pytest.mark.parametrize(
    "case",
    [
        (rsm_cli.main, ("log", "dump"), "error", EXIT_USAGE),
        (kvstore_cli.main, ("history", "k"), "error", EXIT_USAGE),
        (kvstore_cli.main, ("status",), "kvstore", kvstore_cli.EXIT_FAILED),
    ],
    ids=["rsm log dump", "kvstore history", "kvstore status"],
)
@pytest.mark.parametrize("silent", [False, True], ids=["nothing listens", "never answers"])
async def test_an_unreachable_zookeeper_is_one_line_after_the_documented_wait(
    case: tuple[Callable[[Sequence[str]], int], tuple[str, ...], str, int],
    silent: bool,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing listening, or a server that accepts connections (its backlog does) and never
    answers the session handshake."""
    main, words, prefix, code = case
    with socket.create_server(("127.0.0.1", 0)) as never_answers:
        port = never_answers.getsockname()[1] if silent else unused_port()
        zk = f"127.0.0.1:{port}"
        caplog.set_level(logging.WARNING)
        started = anyio.current_time()
        assert await run(main, [*words, "--app", "app", "--zk", zk]) == code
        waited_ms = (anyio.current_time() - started) * 1000
    out, err = capsys.readouterr()
    assert out == ""
    hint = (
        f"without TLS ({ZK_TLS_CA_FILE_ENV} is not set): is it the server's plain port?"
        if silent
        else "nothing accepts connections there: is ZooKeeper running at that address?"
    )
    assert err == (
        f"{prefix}: MetadataUnavailable: no ZooKeeper session with {zk} within "
        f"{limits.cli_zk_connect_timeout_ms} ms, {hint}\n"
    )
    assert not [record for record in caplog.records if record.name.startswith("kazoo")]
    assert limits.cli_zk_connect_timeout_ms <= waited_ms < 2 * limits.cli_zk_connect_timeout_ms


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_an_output_to_a_full_disk_is_one_line_and_status_1(
    zookeeper: LocalZooKeeper, zk_root: str
) -> None:
    """A command besides the investigations, whose output is short: it fails only as it is
    flushed (here `--json`'s error object, which goes to stdout)."""
    source = ["--app", "nosuchapp", "--zk", zookeeper.connect_string + zk_root]
    with Path("/dev/full").open("w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "rsm.tools.cli", "status", "--json", *source],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, done.stderr) == (
        1,
        "error: OSError: [Errno 28] No space left on device\n",
    )
