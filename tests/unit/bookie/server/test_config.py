"""The bookie's configuration: file and flags, defaults, validation messages, writing."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.address import Address
from bookie.errors import InvalidConfig
from bookie.server.config import (
    KEYS,
    RELOADABLE,
    REQUIRED,
    BookieConfig,
    address_setting,
    flag_value,
    load_config,
    read_file,
    render_toml,
    restart_needed,
)

MINIMAL: dict[str, object] = {
    "journal_dir": "/data/journal",
    "ledger_dirs": ["/data/l0", "/data/l1"],
}


def write(tmp_path: Path, values: dict[str, object], name: str = "bookie.toml") -> Path:
    path = tmp_path / name
    path.write_text(render_toml(values))
    return path


def rejected(file: Path | None, flags: dict[str, object] | None = None) -> str:
    with pytest.raises(InvalidConfig) as caught:
        load_config(file, flags)
    return str(caught.value)


def test_defaults_come_from_limits(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, MINIMAL))
    assert config.group_wait_ms == limits.journal_group_wait_ms_default
    assert config.group_bytes == limits.journal_group_bytes_default
    assert config.disk_usage_threshold == limits.disk_usage_threshold_default
    assert config.disk_usage_low_water_mark == limits.disk_usage_low_water_mark_default
    assert config.zk_root == limits.metadata_root_default
    assert config.listen_address == Address("127.0.0.1", limits.port_default)
    assert config.advertised_address == config.listen_address
    assert config.bookie_id == f"127.0.0.1:{limits.port_default}"
    assert config.read_only is False
    assert config.ledger_dirs == (Path("/data/l0"), Path("/data/l1"))


def test_every_key_is_a_config_field_and_back() -> None:
    fields = {item.name for item in dataclasses.fields(BookieConfig)}
    assert set(KEYS) == fields
    assert {"read_only", "disk_usage_threshold", "disk_usage_low_water_mark"} <= RELOADABLE


def test_flags_override_the_file(tmp_path: Path) -> None:
    file = write(tmp_path, {**MINIMAL, "group_wait_ms": 5, "read_only": False})
    config = load_config(file, {"group_wait_ms": "7", "read_only": True, "zk_root": "/other"})
    assert config.group_wait_ms == 7
    assert config.read_only is True
    assert config.zk_root == "/other"


def test_the_autorecovery_password_is_not_shown(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, {**MINIMAL, "autorecovery_password": "s3cret-ledger"}))
    assert config.autorecovery_password == "s3cret-ledger"
    assert "s3cret" not in repr(config)


def test_relative_paths_follow_their_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    file = write(cluster, {"journal_dir": "journal", "ledger_dirs": ["ledgers", "~/x"]})
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_config(file)
    assert config.journal_dir == cluster / "journal"
    assert config.ledger_dirs[0] == cluster / "ledgers"
    assert config.ledger_dirs[1] == Path.home() / "x"
    flagged = load_config(file, {"journal_dir": "j2"})
    assert flagged.journal_dir == elsewhere / "j2"


def test_without_a_file_the_required_keys_are_named() -> None:
    message = rejected(None)
    assert "journal_dir is not set" in message
    assert "--journal-dir" in message
    assert load_config(None, {"journal_dir": "/j", "ledger_dirs": ["/l"]}).journal_dir == Path("/j")


def test_unknown_keys_get_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "bookie.toml"
    path.write_text('journal_dir = "/j"\nledger_dirs = ["/l"]\ngroup_wait = 3\n')
    message = rejected(path)
    assert "unknown key in" in message
    assert "'group_wait'" in message
    assert "did you mean 'group_wait_ms'" in message
    assert "unknown flag 'nope'" in rejected(None, {"nope": "1"})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"group_wait_ms": "2"}, "group_wait_ms = '2': expected an integer"),
        ({"group_wait_ms": 5_000}, "group_wait_ms = 5000: must be from 0 to 1000"),
        ({"group_bytes": 0}, "group_bytes = 0: must be from 1"),
        ({"read_only": 1}, "read_only = 1: expected true or false"),
        ({"disk_usage_threshold": 1.5}, "more than 0 and at most 1"),
        ({"disk_usage_threshold": "high"}, "expected a number between 0 and 1"),
        ({"disk_usage_low_water_mark": 0.96}, "must be below disk_usage_threshold"),
        ({"log_level": "loud"}, "expected one of debug, info"),
        ({"listen_address": "localhost"}, "expected host:port"),
        ({"listen_address": "localhost:0"}, "the port must be from 1 to 65535"),
        ({"listen_address": "0.0.0.0:3181"}, "set advertised_address"),
        (
            {"listen_address": "0.0.0.0:3181", "advertised_address": "[::]:3181"},
            "is a wildcard",
        ),
        ({"bookie_id": "a/b"}, "cannot name a znode"),
        ({"bookie_id": "readonly"}, "cannot name a znode"),
        ({"zk_root": "/"}, "expected an absolute znode path below '/'"),
        ({"zk_root": "ledgers"}, "expected an absolute znode path"),
        ({"zk_servers": "zk1:2181,zk2"}, "zk_servers = 'zk2': expected host:port"),
        ({"ledger_dirs": []}, "expected a non-empty list of directories"),
        ({"ledger_dirs": ["/a", "/b/../a"]}, "a directory is listed twice"),
        ({"checkpoint_interval_ms": 1}, "checkpoint_interval_ms = 1: must be from 10"),
    ],
)
def test_bad_values_are_refused_with_the_key(
    tmp_path: Path, values: dict[str, object], expected: str
) -> None:
    assert expected in rejected(write(tmp_path, {**MINIMAL, **values}))


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("journal_dir = \n")
    assert "is not valid TOML" in rejected(path)
    path.write_bytes(b'\xff\xfejournal_dir = "/j"\n')  # UTF-16's byte order mark
    assert rejected(path) == (
        f"config file {path} is not valid TOML: 'utf-8' codec can't decode byte 0xff in "
        "position 0: invalid start byte"
    )
    assert "cannot read config file" in rejected(tmp_path / "absent.toml")
    table = tmp_path / "table.toml"
    table.write_text('[bookie]\njournal_dir = "/j"\n')
    assert "flat keys only" in rejected(table)


def test_wildcard_listen_with_advertised_address(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            {**MINIMAL, "listen_address": "0.0.0.0:4000", "advertised_address": "bk1.dc:4000"},
        )
    )
    assert config.listen_address == Address("0.0.0.0", 4000)
    assert config.bookie_id == "bk1.dc:4000"


def test_ipv6_addresses() -> None:
    address = address_setting("[::1]:3181", "listen_address")
    assert address == Address("::1", 3181)
    assert str(address) == "[::1]:3181"


def test_flag_values() -> None:
    assert flag_value("group_bytes", "1_024") == 1024
    assert flag_value("disk_usage_threshold", "0.5") == 0.5
    assert flag_value("read_only", "TRUE") is True
    assert flag_value("zk_root", "/x") == "/x"
    with pytest.raises(InvalidConfig, match="--group-bytes 'lots': not a number"):
        flag_value("group_bytes", "lots")
    with pytest.raises(InvalidConfig, match="expected true or false"):
        flag_value("read_only", "yes")


def test_data_dirs_and_storage_config(tmp_path: Path) -> None:
    config = load_config(None, {"journal_dir": "/d/a", "ledger_dirs": ["/d/a", "/d/b"]})
    assert config.data_dirs == (Path("/d/a"), Path("/d/b"))
    storage = config.storage_config()
    assert storage.journal_dir == Path("/d/a")
    assert storage.ledger_dirs == (Path("/d/a"), Path("/d/b"))
    assert storage.group_wait_ms == config.group_wait_ms


def test_restart_needed_names_only_fixed_keys() -> None:
    old = load_config(None, MINIMAL)
    new = load_config(
        None,
        {
            **MINIMAL,
            "read_only": True,
            "disk_usage_threshold": "0.99",
            "log_level": "debug",
            "group_wait_ms": "9",
        },
    )
    assert restart_needed(old, new) == ["group_wait_ms"]
    assert restart_needed(old, old) == []


text_values = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=30)


@given(
    rack=text_values,
    bookie_id=st.text(alphabet="abcdefghij-_.:0123456789", min_size=3, max_size=20),
    dirs=st.lists(
        st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
        .filter(lambda text: text.strip("/.") != "")
        .map(lambda text: "/" + text),
        min_size=1,
        max_size=3,
        unique=True,
    ),
)
def test_rendered_toml_reads_back(rack: str, bookie_id: str, dirs: list[str]) -> None:
    values: dict[str, object] = {
        "bookie_id": bookie_id,
        "rack": rack,
        "journal_dir": dirs[0],
        "ledger_dirs": dirs,
        "group_wait_ms": 3,
        "disk_usage_threshold": 0.5,
        "read_only": True,
    }
    assert tomllib.loads(render_toml(values)) == values


def test_read_file_returns_raw_values(tmp_path: Path) -> None:
    path = write(tmp_path, {**MINIMAL, "rack": "r1"})
    assert read_file(path) == {**MINIMAL, "rack": "r1"}


def test_required_marker_is_used_for_directories_only() -> None:
    required = {name for name, key in KEYS.items() if key.default is REQUIRED}
    assert required == {"journal_dir", "ledger_dirs"}
