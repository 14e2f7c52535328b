"""The znode path scheme and its inverse; znode path helpers."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.meta import paths
from bookie.meta.layout import (
    LedgerNodeKind,
    MetadataLayout,
    ledger_child_kind,
    ledger_id_of_parts,
    ledger_parts,
)

from .strategies import ledger_ids

LAYOUT = MetadataLayout()


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1, "/ledgers/00/0000/L0001"),
        (1_234_567_890, "/ledgers/12/3456/L7890"),
        (10**10 - 1, "/ledgers/99/9999/L9999"),
        (10**10, "/ledgers/000/0000/0100/0000/L0000"),
        (limits.ledger_id_max, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_ledger_paths(ledger_id: int, path: str) -> None:
    assert LAYOUT.ledger(ledger_id) == path
    assert LAYOUT.ledger_id_of(path) == ledger_id


@given(ledger_ids, st.sampled_from(["/", "/ledgers", "/a/b"]))
def test_ledger_path_round_trips_and_every_step_is_walkable(ledger_id: int, root: str) -> None:
    layout = MetadataLayout(root)
    path = layout.ledger(ledger_id)
    assert layout.ledger_id_of(path) == ledger_id
    parts = ledger_parts(ledger_id)
    for depth, name in enumerate(parts[:-1]):
        assert ledger_child_kind(parts[:depth], name) is LedgerNodeKind.DIRECTORY
    assert ledger_child_kind(parts[:-1], parts[-1]) is LedgerNodeKind.LEDGER


@pytest.mark.parametrize(
    "path",
    [
        "/ledgers",
        "/ledgers/available",
        "/ledgers/00",
        "/ledgers/00/0000",
        "/ledgers/00/0000/0001",
        "/ledgers/00/0000/L001",
        "/ledgers/00/0000/L00001",
        "/ledgers/0a/0000/L0001",
        "/ledgers/00/0000/L0001/x",
        "/ledgers/000/0000/0000/0000/L0001",  # a small id spelled in the long form
        "/ledgers/999/9999/9999/9999/L9999",  # beyond the largest id
        "/ledgers/\u0660\u0660/0000/L0001",  # Arabic-Indic digits: not ASCII
        "/other/00/0000/L0001",
        "/ledgersx/00/0000/L0001",
    ],
)
def test_anything_else_is_not_a_ledger(path: str) -> None:
    assert LAYOUT.ledger_id_of(path) is None


@pytest.mark.parametrize(
    ("prefix", "name", "kind"),
    [
        ((), "00", LedgerNodeKind.DIRECTORY),
        ((), "000", LedgerNodeKind.DIRECTORY),
        ((), "available", None),
        ((), "INSTANCEID", None),
        ((), "idgen", None),
        ((), "0", None),
        (("00",), "0000", LedgerNodeKind.DIRECTORY),
        (("00",), "L0000", None),
        (("00", "0000"), "L0001", LedgerNodeKind.LEDGER),
        (("00", "0000"), "0001", None),
        (("000", "0000", "0001"), "0000", LedgerNodeKind.DIRECTORY),
        (("000", "0000", "0000", "0000"), "L0001", None),
        (("00", "0000", "L0001"), "x", None),
    ],
)
def test_walk_classifies_children(
    prefix: tuple[str, ...], name: str, kind: LedgerNodeKind | None
) -> None:
    assert ledger_child_kind(prefix, name) is kind


def test_ledger_id_of_parts_rejects_empty() -> None:
    assert ledger_id_of_parts(()) is None


def test_cluster_paths() -> None:
    layout = MetadataLayout("/cluster")
    assert layout.instance_id == "/cluster/INSTANCEID"
    assert layout.registration("b1:3181", read_only=False) == "/cluster/available/b1:3181"
    assert layout.registration("b1:3181", read_only=True) == "/cluster/available/readonly/b1:3181"
    assert layout.cookie("b1:3181") == "/cluster/cookies/b1:3181"
    assert layout.idgen == "/cluster/idgen"
    assert layout.underreplicated_ledger(0x1234_5678_9ABC) == (
        "/cluster/underreplication/ledgers/0000/1234/5678/9abc/urL20015998343868"
    )
    assert layout.underreplicated_ledger(1) == (
        "/cluster/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    )
    assert layout.underreplication_lock(1) == "/cluster/underreplication/locks/urL0000000001"
    assert layout.auditor_election == "/cluster/underreplication/auditorelection"


def test_root_layout_has_no_double_slash() -> None:
    assert MetadataLayout("/").ledger(5) == "/00/0000/L0005"
    assert MetadataLayout("/").ledger_id_of("/00/0000/L0005") == 5


def test_default_root_is_the_limit() -> None:
    assert MetadataLayout().root == limits.metadata_root_default


@pytest.mark.parametrize(
    ("path", "valid"),
    [
        ("/", True),
        ("/a", True),
        ("/a/b:3181", True),
        ("", False),
        ("a", False),
        ("/a/", False),
        ("//a", False),
        ("/a/./b", False),
        ("/a/..", False),
        ("/a\x00", False),
    ],
)
def test_path_validity(path: str, valid: bool) -> None:
    assert paths.is_valid(path) is valid


def test_path_helpers() -> None:
    assert paths.join("/", "a", "b") == "/a/b"
    assert paths.join("/r", "a") == "/r/a"
    assert paths.join("/r") == "/r"
    assert paths.parent_of("/a/b") == "/a"
    assert paths.parent_of("/a") == "/"
    assert paths.name_of("/a/b") == "b"
    assert paths.under("/r", "/a") == "/r/a"
    assert paths.under("/r", "/") == "/r"
    assert paths.under("/", "/a") == "/a"
    assert paths.relative_to("/r", "/r/a") == "/a"
    assert paths.relative_to("/r", "/r") == "/"
    assert paths.relative_to("/", "/a") == "/a"
