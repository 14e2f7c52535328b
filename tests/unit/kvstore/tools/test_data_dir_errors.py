"""A data directory whose files are broken: `kvstore status`, `up` and `history` print one
line naming the file and what is wrong, and exit 2 (bad configuration), before they start
or dial anything."""

from __future__ import annotations

from pathlib import Path

import pytest
from kvstore.tools import cli
from kvstore.tools.launcher import KV_FILE, LocalKvCluster, read_saved

from bookie.local.cluster import CLUSTER_FILE
from rsm.errors import InvalidConfig

KV_TOML = 'app = "kv"\nzk = ""\nreplicas = ["kv-1"]\nresp_ports = [6379]\nports = [7379]\n'
CLUSTER_TOML = 'zk_port = 2181\nzk_root = "/ledgers"\n'


def broken(data_dir: Path, kv: bytes, cluster: bytes | None = None) -> Path:
    (data_dir / KV_FILE).write_bytes(kv)
    if cluster is not None:
        (data_dir / CLUSTER_FILE).write_bytes(cluster)
    return data_dir


@pytest.mark.parametrize(
    ("kv", "cluster", "name", "problem"),
    [
        (b"replicas = [\n", None, KV_FILE, "is not valid TOML: Invalid value"),
        (b"\xff\xfeapp", None, KV_FILE, "is not valid TOML: 'utf-8' codec can't decode"),
        (KV_TOML.encode(), b"zk_port = \n", CLUSTER_FILE, "is not valid TOML: Invalid value"),
        (
            KV_TOML.encode(),
            None,
            CLUSTER_FILE,
            "is missing (the store's bookie cluster settings): start the store with "
            "kvstore up --data-dir",
        ),
    ],
)
def test_read_saved_names_the_broken_file(
    tmp_path: Path, kv: bytes, cluster: bytes | None, name: str, problem: str
) -> None:
    with pytest.raises(InvalidConfig) as raised:
        read_saved(broken(tmp_path, kv, cluster))
    assert str(raised.value).startswith(f"{tmp_path / name} {problem}")


def test_a_broken_bookie_toml_is_named(tmp_path: Path) -> None:
    broken(tmp_path, KV_TOML.encode(), CLUSTER_TOML.encode())
    (tmp_path / "bookie-1").mkdir()
    (tmp_path / "bookie-1" / "bookie.toml").write_text("listen_address = [\n")
    with pytest.raises(InvalidConfig, match=r"bookie-1/bookie\.toml is not valid TOML"):
        read_saved(tmp_path)


def test_up_refuses_a_broken_kvstore_toml_before_it_starts_anything(tmp_path: Path) -> None:
    broken(tmp_path, b"\xff\xfe")
    with pytest.raises(InvalidConfig, match="is not valid TOML"):
        LocalKvCluster(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == [KV_FILE]


@pytest.mark.parametrize(
    ("command", "kv", "problem"),
    [
        *(
            (command, kv, f"{KV_FILE} is not valid TOML")
            for command in (["status"], ["up"], ["history", "k"])
            for kv in (b"replicas = [\n", b"\xff\xfeapp")
        ),
        # `up` writes a missing cluster.toml again: only the readers refuse it.
        *(
            (command, KV_TOML.encode(), f"{CLUSTER_FILE} is missing")
            for command in (["status"], ["history", "k"])
        ),
    ],
)
def test_commands_on_a_broken_data_dir_print_one_line_and_exit_2(
    tmp_path: Path,
    command: list[str],
    kv: bytes,
    problem: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    data_dir = broken(tmp_path, kv)
    assert cli.main([*command, "--data-dir", str(data_dir)]) == cli.EXIT_USAGE
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert "InvalidConfig: " in lines[0]
    assert problem in lines[0]


def test_a_file_without_its_keys_is_named_with_them(tmp_path: Path) -> None:
    broken(tmp_path, b'app = "kv"\n', CLUSTER_TOML.encode())
    with pytest.raises(InvalidConfig, match="lacks zk, replicas, resp_ports, ports: it was not"):
        read_saved(tmp_path)
    broken(tmp_path, KV_TOML.encode(), b"zk_root = '/x'\n")
    with pytest.raises(InvalidConfig, match=f"{CLUSTER_FILE} lacks zk_port"):
        read_saved(tmp_path)


@pytest.mark.parametrize(
    ("cluster", "problem"),
    [(b"zk_port = \n", "is not valid TOML"), (b"zk_port = 2181\n", "lacks zk_root")],
)
def test_up_refuses_a_broken_cluster_toml_naming_it(
    tmp_path: Path, cluster: bytes, problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / CLUSTER_FILE).write_bytes(cluster)
    assert cli.main(["up", "--data-dir", str(tmp_path)]) == cli.EXIT_FAILED
    assert f"{tmp_path / CLUSTER_FILE} {problem}" in capsys.readouterr().err
