"""`rsm spark export --to PATH` refuses a PATH Spark's overwrite would destroy, before Spark
starts (rsm.spark.jobs.check_export_path); no Spark session is started here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from rsm.errors import InvalidConfig
from rsm.spark import cli, jobs
from rsm.spark.jobs import BLOCK_COLUMN, STATE_FILE, check_export_path


def _earlier_export(path: Path) -> None:
    """What a complete export leaves, and what a run that died leaves behind it."""
    for block in (1, 51):
        (path / f"{BLOCK_COLUMN}={block}").mkdir(parents=True)
        (path / f"{BLOCK_COLUMN}={block}" / "part-00000.snappy.parquet").write_bytes(b"PAR1")
    for name in (STATE_FILE, STATE_FILE + ".tmp", "_SUCCESS", "._SUCCESS.crc"):
        (path / name).write_text("")
    (path / "_temporary").mkdir()
    (path / ".spark-staging-1b2c").mkdir()


def test_an_absent_path_an_empty_directory_and_an_earlier_export_are_accepted(
    tmp_path: Path,
) -> None:
    check_export_path(str(tmp_path / "new"))
    check_export_path(str(tmp_path / "missing-parent" / "new"))
    (tmp_path / "empty").mkdir()
    check_export_path(str(tmp_path / "empty"))
    _earlier_export(tmp_path / "export")
    check_export_path(str(tmp_path / "export"))


def test_a_directory_holding_anything_else_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "export"
    _earlier_export(path)
    (path / "notes.txt").write_text("keep me")
    named = re.escape(str(path))
    with pytest.raises(InvalidConfig, match=rf"^{named} is not an earlier export: it holds 'notes"):
        check_export_path(str(path))
    (path / "other").mkdir()
    with pytest.raises(InvalidConfig, match=r"holds 'notes.txt' and 1 more, which an export"):
        check_export_path(str(path))


@pytest.mark.parametrize("kind", ["file", "dangling symlink"])
def test_a_path_that_is_not_a_directory_is_refused(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "export"
    if kind == "file":
        path.write_text("keep me")
    else:
        path.symlink_to(tmp_path / "nowhere")
    named = re.escape(str(path))
    with pytest.raises(InvalidConfig, match=rf"^{named} exists and is not a directory"):
        check_export_path(str(path))


@pytest.mark.parametrize("content", ["directory", "file"])
def test_the_command_refuses_before_spark_starts_and_deletes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str,
) -> None:
    def no_session(*args: object, **kwargs: object) -> None:
        pytest.fail("a Spark session was started")

    monkeypatch.setattr(jobs, "session", no_session)
    path = tmp_path / "export"
    if content == "directory":
        path.mkdir()
        (path / "notes.txt").write_text("keep me")
        kept = path / "notes.txt"
    else:
        path.write_text("keep me")
        kept = path
    words = ["export", "--app", "kv", "--zk", "127.0.0.1:1", "--to", str(path)]
    assert cli.main(words) == cli.EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: InvalidConfig: {path} ")
    assert len(err.splitlines()) == 1
    assert kept.read_text() == "keep me"


def _export_dir(path: Path, marker: str, *, record: bool = True) -> None:
    (path / f"{BLOCK_COLUMN}=1").mkdir(parents=True)
    (path / f"{BLOCK_COLUMN}=1" / "part-0.parquet").write_text(marker)
    if record:
        (path / STATE_FILE).write_text("{}")


def _marker(path: Path) -> str:
    return (path / f"{BLOCK_COLUMN}=1" / "part-0.parquet").read_text()


@pytest.mark.parametrize("complete", [True, False], ids=["new one complete", "new one partial"])
def test_a_full_export_killed_between_its_renames_is_finished_by_the_next(
    tmp_path: Path, complete: bool
) -> None:
    """`to` renamed aside, the new export not yet renamed in: the next export puts the new
    one in place if it has its record, else the earlier one back."""
    to = tmp_path / "export"
    _export_dir(tmp_path / ".export.rsm-export-old", "earlier")
    _export_dir(tmp_path / ".export.rsm-export-new", "new", record=complete)
    jobs._finish_swap(to)
    assert _marker(to) == ("new" if complete else "earlier")
    assert not (tmp_path / ".export.rsm-export-old").exists()
    check_export_path(str(to))


def test_a_swap_replaces_the_export_whole(tmp_path: Path) -> None:
    to, new = tmp_path / "export", tmp_path / ".export.rsm-export-new"
    _export_dir(to, "earlier")
    (to / f"{BLOCK_COLUMN}=9").mkdir()  # a block the new export does not have
    _export_dir(new, "new")
    jobs._swap_in(new, to)
    assert _marker(to) == "new"
    assert sorted(child.name for child in to.iterdir()) == [STATE_FILE, f"{BLOCK_COLUMN}=1"]
    assert sorted(child.name for child in tmp_path.iterdir()) == ["export"]
    jobs._finish_swap(to)  # nothing to finish
    assert _marker(to) == "new"


def test_a_path_without_a_name_is_refused_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`/` has no sibling to stage in; `.` stages beside the current directory."""
    jobs._finish_swap(Path("/"))  # nothing to finish, nothing raised
    with pytest.raises(InvalidConfig, match="is not an earlier export"):
        check_export_path("/")
    monkeypatch.chdir(tmp_path)
    assert jobs._sibling(Path("."), "new") == tmp_path.with_name(f".{tmp_path.name}.rsm-export-new")
