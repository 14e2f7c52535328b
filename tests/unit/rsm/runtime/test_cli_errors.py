"""What the `rsm` command prints when a call fails, on a real ZooKeeper: the application's
exception type and message, a JSON object with `--json`, and the cause at once when the
application or ZooKeeper is not there."""

from __future__ import annotations

import json
import socket

import anyio
import pytest

from bookie.local.zookeeper import LocalZooKeeper
from rsm import limits
from rsm.client import ClientConfig, connect
from rsm.core.state_machine import StateMachine, command, query
from rsm.errors import NoSuchApplication
from rsm.tools import cli
from tests.unit.rsm.runtime.harness import APP
from tests.unit.rsm.runtime.test_zookeeper import zk_replicas

pytestmark = [pytest.mark.anyio, pytest.mark.zookeeper]


class Bank(StateMachine):
    """Accounts by name: a bad amount raises TypeError, an unknown account KeyError."""

    def __init__(self) -> None:
        self.accounts: dict[str, int] = {}

    @command
    def deposit(self, name: str, amount: int) -> int:
        if type(amount) is not int:
            raise TypeError("amount must be an integer")
        self.accounts[name] = self.accounts.get(name, 0) + amount
        return self.accounts[name]

    @query
    def balance(self, name: str) -> int:
        if name not in self.accounts:
            raise KeyError(f"no account {name!r}")
        return self.accounts[name]


async def run_cli(*argv: str) -> int:
    return await anyio.to_thread.run_sync(cli.main, list(argv))


async def test_a_failed_call_names_the_application_s_exception_and_its_message(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zk = f"{zookeeper.connect_string}{zk_root}"
    async with zk_replicas(zookeeper, zk_root) as replicas:
        await replicas.start("a", machine=Bank)
        await replicas.wait_leader()
        common = ("--app", APP, "--zk", zk)

        assert await run_cli("call", *common, "deposit", "ann", '"x"') == cli.EXIT_FAILED
        out, err = capsys.readouterr()
        assert (out, err) == ("", "error: TypeError: amount must be an integer\n")

        assert await run_cli("query", *common, "balance", "bob") == cli.EXIT_FAILED
        out, err = capsys.readouterr()
        assert (out, err) == ("", "error: KeyError: no account 'bob'\n")

        assert await run_cli("query", *common, "balance", "bob", "--json") == cli.EXIT_FAILED
        out, err = capsys.readouterr()
        assert err == ""
        assert json.loads(out) == {
            "error": {"type": "KeyError", "message": "no account 'bob'", "command_failed": True}
        }

        assert await run_cli("call", *common, "withdraw", "1", "--json") == cli.EXIT_FAILED
        out, err = capsys.readouterr()
        assert err == ""
        error = json.loads(out)["error"]
        assert (error["type"], error["command_failed"]) == ("UnknownCommand", False)
        assert "withdraw" in error["message"]


async def test_an_application_that_does_not_exist_is_said_so_at_once(
    zookeeper: LocalZooKeeper, zk_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    zk = f"{zookeeper.connect_string}{zk_root}"
    async with zk_replicas(zookeeper, zk_root) as replicas:
        # Far below the client's deadline, which it would wait for a leader that may come.
        with anyio.fail_after(limits.client_deadline_ms_default / 1000 / 4):
            code = await run_cli("call", "--app", "nosuchapp", "--zk", zk, "add", "1")
            assert code == cli.EXIT_USAGE
            out, err = capsys.readouterr()
            assert (out, err) == (
                "",
                "error: NoSuchApplication: there is no application 'nosuchapp' in this ZooKeeper\n",
            )
            required = ClientConfig(require_application=True)
            async with connect(
                APP, zk=zookeeper.connect_string, zk_root=zk_root, config=required
            ) as client:
                with pytest.raises(NoSuchApplication):
                    await client.query("get")
                # Once a replica of it runs, the same client finds it.
                await replicas.start("a")
                assert await client.call("add", 2) == 2


def unused_port() -> int:
    """A loopback port nothing listens on (it was free when asked)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_an_unreachable_zookeeper_is_one_line_naming_it_after_the_documented_wait(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    zk = f"127.0.0.1:{unused_port()}"
    started = anyio.current_time()
    assert await run_cli("status", "--app", APP, "--zk", zk) == cli.EXIT_FAILED
    waited_ms = (anyio.current_time() - started) * 1000
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"error: MetadataUnavailable: no ZooKeeper session with {zk} within "
        f"{limits.cli_zk_connect_timeout_ms} ms, nothing accepts connections there: "
        "is ZooKeeper running at that address?\n"
    )
    assert not [record for record in caplog.records if record.name.startswith("kazoo")]
    assert limits.cli_zk_connect_timeout_ms <= waited_ms < 2 * limits.cli_zk_connect_timeout_ms
