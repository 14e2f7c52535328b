"""The `rsm` command's own parsing and rendering, and its status report against an
in-memory ZooKeeper (the commands themselves run against ZooKeeper in test_zookeeper.py)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from rsm import host, limits
from rsm.core.layout import AppLayout
from rsm.core.log_format import CandidateInfo
from rsm.errors import InvalidConfig
from rsm.runtime.log import LogStore
from rsm.tools import cli, key_bytes
from tests.unit.bookie.client.cluster import memory_cluster
from tests.unit.rsm.core.counter import Counter


@pytest.mark.parametrize(
    ("connect_string", "expected"),
    [
        ("127.0.0.1:2181", ("127.0.0.1:2181", None)),
        ("a:1,b:2/my/root", ("a:1,b:2", "/my/root")),
        ("a:1/", ("a:1", None)),
    ],
)
def test_zookeeper_connect_strings_split_into_hosts_and_chroot(
    connect_string: str, expected: tuple[str, str | None]
) -> None:
    assert host.split_zk(connect_string) == expected


def test_a_connect_string_without_hosts_is_refused() -> None:
    with pytest.raises(InvalidConfig):
        host.split_zk("/root")


def test_arguments_are_json_where_they_parse_and_keywords_by_name() -> None:
    args, kwargs = cli.parse_arguments(["5", '"x"', "hello", "[1, 2]", "null", "amount=3", "a=b=c"])
    assert args == [5, "x", "hello", [1, 2], None]
    assert kwargs == {"amount": 3, "a": "b=c"}


def test_bytes_are_written_as_the_output_shows_them() -> None:
    words = ['{"hex": "6869"}', '[{"hex": ""}, {"hex": "00ff", "x": 1}]', 'k={"hex": "ff"}']
    args, kwargs = cli.parse_arguments(words)
    assert args == [b"hi", [b"", {"hex": "00ff", "x": 1}]]
    assert kwargs == {"k": b"\xff"}


@pytest.mark.parametrize("word", ['{"hex": "abc"}', '{"hex": "zz"}', '{"hex": 5}'])
def test_a_hex_object_that_is_not_hex_is_a_usage_error(word: str) -> None:
    with pytest.raises(InvalidConfig, match="is not bytes"):
        cli.parse_arguments([word])


def test_with_bytes_every_text_is_its_utf8_bytes() -> None:
    args, kwargs = cli.parse_arguments(
        ["greeting", '"é"', "5", '["a", {"hex": "00"}]', 'v={"k": "x"}'], as_bytes=True
    )
    assert args == [b"greeting", "é".encode(), 5, [b"a", b"\x00"]]
    assert kwargs == {"v": {"k": b"x"}}


def test_with_bytes_a_text_that_is_not_utf8_is_the_bytes_the_shell_passed() -> None:
    # Python hands such an argument over with surrogate escapes.
    word = b"k\xff".decode("utf-8", "surrogateescape")
    assert cli.parse_arguments([word], as_bytes=True) == ([b"k\xff"], {})


@pytest.mark.parametrize(
    ("word", "key"),
    [
        ("greeting", b"greeting"),
        ('{"hex": "6bff"}', b"k\xff"),
        (b"k\xff".decode("utf-8", "surrogateescape"), b"k\xff"),
        ('{"x": 1}', b'{"x": 1}'),
        ("{not json", b"{not json"),
    ],
)
def test_a_key_is_its_bytes_or_a_hex_object(word: str, key: bytes) -> None:
    assert key_bytes(word) == key


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (b"hi", '"hi"'),
        (b"\xff\xfe", '{"hex": "fffe"}'),
        ([b"a", b"\x80"], '["a", {"hex": "80"}]'),
        (b"fffe", '"fffe"'),
    ],
)
def test_results_show_bytes_that_are_not_utf8_as_a_hex_object(value: Any, shown: str) -> None:
    """Not as their hex digits: b"\\xff\\xfe" and the text "fffe" must not print alike."""
    assert cli._dumps(value) == shown


def test_machines_are_loaded_by_module_and_class() -> None:
    assert cli.load_machine("tests.unit.rsm.core.counter:Counter") is Counter
    for target in (
        "tests.unit.rsm.core.counter",
        "no.such.module:X",
        "tests.unit.rsm.core.counter:nope",
    ):
        with pytest.raises(InvalidConfig):
            cli.load_machine(target)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "tests.unit.rsm.core.counter:Countr",
            "module tests.unit.rsm.core.counter has no Countr; it has Counter",
        ),
        ("json:Thing", "module json has no Thing, nor any StateMachine subclass"),
        ("json:dumps", "json:dumps is not a StateMachine subclass"),
        (
            "countr:Counter",
            "cannot import countr: No module named 'countr' (the import path starts at ",
        ),
    ],
)
def test_a_class_that_is_not_there_is_named_with_what_is(target: str, message: str) -> None:
    with pytest.raises(InvalidConfig) as raised:
        cli.load_machine(target)
    assert str(raised.value).startswith(message)


def test_status_renders_one_row_per_replica() -> None:
    report = {
        "app": "counter",
        "epoch": 3,
        "leader": {"replica_id": "a", "address": "h:1", "epoch": 3},
        "segments": 2,
        "open_segment": {"ledger_id": 9, "first_index": 12},
        "end_index": None,
        "replicas": [
            {
                "replica_id": "a",
                "address": "h:1",
                "role": "leader",
                "serving": True,
                "epoch": 3,
                "applied_index": 20,
                "lag": 0,
                "candidate": True,
            },
            {"replica_id": "b", "address": "h:2", "error": "Timeout: no answer"},
        ],
    }
    lines = cli.render_status(report).splitlines()
    assert lines[0] == "app counter  epoch 3  leader a (h:1)"
    assert lines[1] == "log: 2 segments, open: ledger 9 from index 12"
    assert lines[3].split() == [
        "REPLICA",
        "ADDRESS",
        "ROLE",
        "EPOCH",
        "APPLIED",
        "LAG",
        "CANDIDATE",
    ]
    assert lines[4].split() == ["a", "h:1", "leader", "3", "20", "0", "yes"]
    assert lines[5].split()[:3] == ["b", "h:2", "Timeout:"]


def test_usage_errors_exit_with_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == cli.EXIT_USAGE
    with pytest.raises(SystemExit) as raised:
        cli.main(["call", "--app", "x"])
    assert raised.value.code == cli.EXIT_USAGE
    assert "--zk" in capsys.readouterr().err
    run = ["run", "counter:Counter", "--app", "x", "--zk", "127.0.0.1:1", "--listen", "h:1"]
    assert cli.main([*run, "--follower-nice", "20"]) == cli.EXIT_USAGE
    assert "follower nice 20 is outside 0..19" in capsys.readouterr().err


class SilentReplicaClient:
    """A plain client of app "app" whose registered replicas are one that never answers
    STATUS and one with a TLS port only."""

    app = "app"

    async def members(self) -> dict[str, CandidateInfo]:
        return {"a": CandidateInfo("a", "h:1"), "b": CandidateInfo("b", None, "h:2")}

    def dial_address(self, info: CandidateInfo) -> str:
        return info.dial(tls=False)

    async def status(self, replica: str | None = None) -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


@pytest.mark.anyio
async def test_a_replica_that_does_not_answer_or_cannot_be_reached_gets_a_row_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "status_answer_timeout_ms", 50)
    async with memory_cluster(3) as cluster, cluster.store_factory() as store:
        await LogStore(store, AppLayout.of("app")).ensure_layout()
        report = await host.application_status(store, SilentReplicaClient())  # type: ignore[arg-type]
    assert report["replicas"] == [
        {
            "replica_id": "a",
            "address": "h:1",
            "tls_address": None,
            "error": "no answer within 0.05 s",
        },
        {
            "replica_id": "b",
            "address": None,
            "tls_address": "h:2",
            "error": "NoAddressForTransport: replica b has no plain port (it serves TLS only: "
            "connect with --tls-ca-file)",
        },
    ]
    table = cli.render_status(report)
    assert "h:1" in table
    assert "tls h:2" in table
