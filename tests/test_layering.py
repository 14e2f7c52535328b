"""The pure cores stay pure: nothing under */core/ or */wire/ may do I/O, read
the clock or use global randomness.  This is what makes the seeded simulation
possible, so it is enforced rather than hoped for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PURE_DIRS = ["bookie/core", "bookie/wire", "rsm/core"]
FORBIDDEN_MODULES = {
    "anyio",
    "asyncio",
    "trio",
    "kazoo",
    "socket",
    "os",
    "time",
    "threading",
    "subprocess",
    "selectors",
    "shutil",
    "tempfile",
    "uuid",
    "secrets",
}
FORBIDDEN_CALLS = {
    ("random", name)
    for name in (
        "random",
        "randint",
        "randrange",
        "choice",
        "choices",
        "shuffle",
        "sample",
        "uniform",
        "seed",
    )
}


def _pure_files() -> list[Path]:
    files: list[Path] = []
    for directory in PURE_DIRS:
        files.extend(sorted((ROOT / directory).rglob("*.py")))
    return files


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_module_does_no_io(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        else:
            names = []
        for name in names:
            assert name not in FORBIDDEN_MODULES, f"{path.name}:{node.lineno} imports {name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name):
                assert (target.id, node.func.attr) not in FORBIDDEN_CALLS, (
                    f"{path.name}:{node.lineno} calls module-level random.{node.func.attr}"
                )
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id != "open", f"{path.name}:{node.lineno} opens a file"


def test_there_are_pure_modules_to_check() -> None:
    assert len(_pure_files()) >= 3
