"""Znode paths as strings: what a valid path is, and how to take one apart; and the one
rule on znode values (their size).

Pure.  Both metadata stores check every path they are given with
`check_path` and every value with `check_value`, so the in-memory store
refuses what ZooKeeper would and a test against it cannot pass with a path or
value the real service rejects.

Rules (ZooKeeper's, minus the exotic ones we never need): a path is absolute,
'/'-separated, has no empty component (so no '//' and no trailing '/', except
the root '/' itself), no '.' or '..' component, and no NUL character.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from bookie import limits
from bookie.errors import MetadataValueTooLarge
from bookie.meta.api import Create, Op, SetData

ROOT: Final = "/"


def is_valid(path: str) -> bool:
    """Whether `path` follows the rules of the module docstring."""
    if path == ROOT:
        return True
    if not path.startswith("/") or path.endswith("/") or "\x00" in path:
        return False
    return all(part not in ("", ".", "..") for part in path[1:].split("/"))


def check_path(path: str) -> None:
    """Assert that `path` is valid: paths are built by our own code (`layout.py`), so a bad
    one is a programmer error, never an operating one."""
    assert is_valid(path), f"invalid znode path {path!r}"


def is_valid_name(name: str) -> bool:
    """Whether `name` can be one component of a path (a child's name)."""
    return name not in ("", ".", "..") and "/" not in name and "\x00" not in name


def join(parent: str, *names: str) -> str:
    """The path of `names` below `parent`: join('/a', 'b', 'c') == '/a/b/c'."""
    check_path(parent)
    for name in names:
        assert is_valid_name(name), f"invalid znode name {name!r}"
    if not names:
        return parent
    prefix = "" if parent == ROOT else parent
    return prefix + "/" + "/".join(names)


def parent_of(path: str) -> str:
    """The parent of a path other than the root: parent_of('/a/b') == '/a'."""
    check_path(path)
    assert path != ROOT, "the root has no parent"
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def name_of(path: str) -> str:
    """The last component of a path other than the root: name_of('/a/b') == 'b'."""
    check_path(path)
    assert path != ROOT, "the root has no name"
    return path.rsplit("/", 1)[1]


def under(root: str, path: str) -> str:
    """`path` (absolute, as a caller sees it) placed below `root`: under('/r', '/a') == '/r/a'."""
    check_path(root)
    check_path(path)
    if root == ROOT:
        return path
    if path == ROOT:
        return root
    return root + path


def relative_to(root: str, full_path: str) -> str:
    """The inverse of `under`: relative_to('/r', '/r/a') == '/a'."""
    check_path(root)
    check_path(full_path)
    if root == ROOT:
        return full_path
    if full_path == root:
        return ROOT
    assert full_path.startswith(root + "/"), f"{full_path!r} is not below {root!r}"
    return full_path[len(root) :]


def check_value(what: str, size_bytes: int) -> None:
    """Raise `MetadataValueTooLarge` if `size_bytes` of values may not be sent at once.

    `what` names the write in the message (a path, or a commit).  Checked before
    sending, for one value and for the sum of a commit's values alike:
    ZooKeeper answers an oversized request by closing the connection, which
    would look like an outage and be retried forever.
    """
    if size_bytes > limits.metadata_value_bytes_max:
        raise MetadataValueTooLarge(
            f"{what}: {size_bytes} bytes, more than {limits.metadata_value_bytes_max}"
        )


def check_commit(ops: Sequence[Op]) -> None:
    """`check_value` for a commit: its values travel in one request."""
    size_bytes = sum(len(op.value) for op in ops if isinstance(op, Create | SetData))
    check_value(f"commit of {len(ops)} ops", size_bytes)
