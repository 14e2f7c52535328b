"""The identity rules (cookies in ZooKeeper and in every data directory), case by case,
and the cookie files themselves."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bookie.errors import CookieMismatch
from bookie.meta.bookies import Cookie
from bookie.server.identity import (
    COOKIE_FILE,
    DirectoryState,
    IdentityPlan,
    directory_roles,
    plan_identity,
    read_directory,
    write_cookie_file,
)

EXPECTED = Cookie(
    instance_id="instance-a",
    bookie_id="bk1:3181",
    advertised_address="bk1:3181",
    journal_dir="/d/journal",
    ledger_dirs=("/d/l0", "/d/l1"),
)
ZK_PATH = "/ledgers/cookies/bk1:3181"


def states(
    cookie: Cookie | None = EXPECTED,
    *,
    has_data: bool = True,
    replaced: dict[str, DirectoryState] | None = None,
) -> list[DirectoryState]:
    """The three directories, all holding `cookie`, with some replaced."""
    result = []
    for path, role in directory_roles(Path("/d/journal"), [Path("/d/l0"), Path("/d/l1")]):
        default = DirectoryState(str(path), role, cookie, has_data=has_data)
        result.append((replaced or {}).get(str(path), default))
    return result


def plan(
    zk: Cookie | None, dirs: list[DirectoryState], expected: Cookie = EXPECTED
) -> IdentityPlan:
    return plan_identity(
        expected,
        None if zk is None else (zk, 4),
        dirs,
        zk_path=ZK_PATH,
        cluster="zk:2181 /ledgers",
    )


def refusal(zk: Cookie | None, dirs: list[DirectoryState], expected: Cookie = EXPECTED) -> str:
    with pytest.raises(CookieMismatch) as caught:
        plan(zk, dirs, expected)
    message = str(caught.value)
    assert message.startswith("bookie bk1:3181 refuses to start")
    return message


def test_everything_matching_writes_nothing() -> None:
    result = plan(EXPECTED, states())
    assert not result.write_zk
    assert result.write_dirs == ()
    assert result.note is None


def test_first_start_writes_directories_then_zookeeper() -> None:
    result = plan(None, states(None, has_data=False))
    assert result.write_zk
    assert result.zk_version is None
    assert not result.zk_first
    assert result.write_dirs == ("/d/journal", "/d/l0", "/d/l1")


def test_interrupted_first_start_is_finished() -> None:
    # The directories were written, then the process died before ZooKeeper.
    dirs = states(
        None,
        has_data=False,
        replaced={"/d/l1": DirectoryState("/d/l1", "ledger dir", EXPECTED, False)},
    )
    result = plan(None, dirs)
    assert result.write_zk
    assert result.write_dirs == ("/d/journal", "/d/l0", "/d/l1")


def test_data_without_zookeeper_cookie_refuses() -> None:
    message = refusal(None, states(EXPECTED, has_data=True))
    assert "has no cookie for this bookie at /ledgers/cookies/bk1:3181" in message
    assert "hold data" in message


def test_wiped_ledger_dir_refuses_with_advice() -> None:
    wiped = DirectoryState("/d/l1", "ledger dir", None, has_data=False)
    message = refusal(EXPECTED, states(replaced={"/d/l1": wiped}))
    assert "ledger dir /d/l1 is new or was wiped: its cookie is missing while ZooKeeper" in message
    assert "If this bookie lost its data" in message
    assert "/d/l0" not in message.split("- ")[1].split(" is new")[0]


def test_data_without_cookie_file_refuses() -> None:
    lost = DirectoryState("/d/journal", "journal dir", None, has_data=True)
    assert "holds data but no COOKIE file" in refusal(
        EXPECTED, states(replaced={"/d/journal": lost})
    )


def test_changed_ledger_dirs_refuse_once() -> None:
    expected = replace(EXPECTED, ledger_dirs=("/d/l0", "/d/l1", "/d/l2"))
    dirs = [
        *states(),
        DirectoryState("/d/l2", "ledger dir", None, has_data=False),
    ]
    message = refusal(EXPECTED, dirs, expected)
    assert "ledger_dirs are ['/d/l0', '/d/l1', '/d/l2'] in the configuration" in message
    # The new directory is part of the list problem, not reported again as wiped.
    assert "is new or was wiped" not in message
    assert message.count("\n- ") == 1


def test_changed_journal_dir_refuses() -> None:
    expected = replace(EXPECTED, journal_dir="/e/journal")
    message = refusal(EXPECTED, states(), expected)
    assert "journal_dir is /e/journal in the configuration" in message


def test_directories_of_another_cluster_refuse_grouped() -> None:
    other = replace(EXPECTED, instance_id="instance-b")
    message = refusal(None, states(other))
    assert message.count("belong to cluster instance instance-b") == 1
    assert "journal dir /d/journal, ledger dir /d/l0, ledger dir /d/l1" in message
    assert "the cluster at zk:2181 /ledgers is instance instance-a" in message


def test_directories_of_another_bookie_refuse() -> None:
    other = replace(EXPECTED, bookie_id="bk9:3181")
    message = refusal(EXPECTED, states(other))
    assert "belong to bookie 'bk9:3181', not 'bk1:3181'" in message
    assert 'bookie_id = "bk9:3181"' in message


def test_copied_directory_cookie_refuses() -> None:
    copied = replace(EXPECTED, ledger_dirs=("/x",))
    dirs = states(replaced={"/d/l0": DirectoryState("/d/l0", "ledger dir", copied, True)})
    message = refusal(EXPECTED, dirs)
    assert "ledger dir /d/l0 has a cookie that differs from ZooKeeper's" in message


def test_unreadable_cookie_file_refuses() -> None:
    broken = DirectoryState("/d/l0", "ledger dir", None, True, unreadable="not CBOR")
    assert "COOKIE file cannot be read (not CBOR)" in refusal(
        EXPECTED, states(replaced={"/d/l0": broken})
    )


def test_replaced_instance_id_refuses() -> None:
    old = replace(EXPECTED, instance_id="instance-old")
    message = refusal(old, states(), EXPECTED)
    assert "the cluster's INSTANCEID was replaced" in message


def test_address_change_rewrites_zookeeper_first() -> None:
    moved = replace(EXPECTED, advertised_address="bk1-new:3181")
    result = plan(EXPECTED, states(), moved)
    assert result.write_zk
    assert result.zk_version == 4
    assert result.zk_first
    assert result.write_dirs == ("/d/journal", "/d/l0", "/d/l1")
    assert result.note is not None
    assert "bk1-new:3181" in result.note


def test_address_change_interrupted_after_zookeeper_finishes() -> None:
    moved = replace(EXPECTED, advertised_address="bk1-new:3181")
    result = plan(moved, states(), moved)
    assert not result.write_zk
    assert result.write_dirs == ("/d/journal", "/d/l0", "/d/l1")
    assert result.note == "advertised address changed from bk1:3181 to bk1-new:3181"


# --- files ------------------------------------------------------------------------------------


def test_cookie_file_round_trip_and_data_detection(tmp_path: Path) -> None:
    directory = tmp_path / "ledgers"
    assert read_directory(directory, "ledger dir") == DirectoryState(
        str(directory), "ledger dir", None, has_data=False
    )
    write_cookie_file(directory, EXPECTED)
    (directory / "lost+found").mkdir()
    state = read_directory(directory, "ledger dir")
    assert state.cookie == EXPECTED
    assert not state.has_data
    assert (directory / COOKIE_FILE).read_bytes() == EXPECTED.encode()
    (directory / "index.sqlite").write_bytes(b"")
    assert read_directory(directory, "ledger dir").has_data
    write_cookie_file(directory, replace(EXPECTED, advertised_address="elsewhere:1"))
    replaced = read_directory(directory, "ledger dir").cookie
    assert replaced is not None
    assert replaced.advertised_address == "elsewhere:1"
    assert sorted(path.name for path in directory.iterdir()) == [
        COOKIE_FILE,
        "index.sqlite",
        "lost+found",
    ]


def test_junk_cookie_file_is_unreadable(tmp_path: Path) -> None:
    (tmp_path / COOKIE_FILE).write_bytes(b"\xff junk")
    state = read_directory(tmp_path, "journal dir")
    assert state.cookie is None
    assert state.unreadable is not None
    assert state.has_data


def test_directory_roles_merge_a_shared_directory() -> None:
    roles = directory_roles(Path("/d"), [Path("/d"), Path("/e")])
    assert roles == [(Path("/d"), "journal and ledger dir"), (Path("/e"), "ledger dir")]
