"""The layers stay layers, checked on the import graph of every module.

* Pure modules stay pure: nothing under */core/ or */wire/, nor anything they
  import directly or through other modules of this repository, may do I/O,
  read the clock or use global randomness.  This is what makes the seeded
  simulation possible, so it is enforced rather than hoped for.
* Within `bookie`, `rsm` and `kvstore`, a module imports only from its own folder or
  from folders of a lower layer (`LAYERS`), so the folders read as the
  architecture and no two folders depend on each other.
* `bookie` imports nothing of `rsm` or of the applications; `rsm` nothing of
  the applications; no shipped code imports a `testing` package except the
  testing packages themselves.
* The key-value store, the guide to writing an application, imports only the
  framework's public modules (`RSM_PUBLIC`) and nothing of the bookie
  protocol's wire format (its test support, like every testing package, may
  import anything).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bookie", "rsm", "examples")
PURE_DIRS = ("bookie/core", "bookie/wire", "rsm/core")
FORBIDDEN_MODULES = frozenset(
    {
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
)
FORBIDDEN_CALLS = frozenset(
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
)

LAYERS: dict[str, list[list[str]]] = {
    "bookie": [
        [
            "bookie.errors",
            "bookie.limits",
            "bookie.logs",
            "bookie.clock",
            "bookie.metrics",
            "bookie.secret_file",
            "bookie.tls_keys",
        ],
        ["bookie.wire", "bookie.storage.api", "bookie.address"],
        ["bookie.core"],
        ["bookie.storage", "bookie.meta", "bookie.net", "bookie.runtime_tuning"],
        ["bookie.client", "bookie.server"],
        ["bookie.autorecovery"],
        ["bookie.local"],
        ["bookie.tools", "bookie.testing"],
    ],
    "rsm": [
        ["rsm.errors", "rsm.limits"],
        ["rsm.core"],
        ["rsm.link"],
        ["rsm.config", "rsm.client"],
        ["rsm.snapshots"],
        ["rsm.runtime"],
        ["rsm.host", "rsm.machines", "rsm.tls_flags"],
        ["rsm.overview"],
        ["rsm.admin"],
        ["rsm.spark"],
        ["rsm.tools"],
        ["rsm.testing"],
    ],
    "kvstore": [
        ["kvstore.errors", "kvstore.limits", "kvstore.endpoints"],
        ["kvstore.protocol"],
        ["kvstore.store"],
        ["kvstore.state_machine"],
        ["kvstore.connection", "kvstore.spark_reducer"],
        ["kvstore.runtime"],
        ["kvstore.tools"],
        ["kvstore.testing"],
    ],
}
"""Per package, its units (folders, or single modules) from the lowest layer up.

A unit is the longest listed name that a module's name starts with.  A
module may import its own unit and the units of lower layers, never a unit
of its own layer or a higher one; the package's `__init__` (its public face)
is outside the layers and may not be imported from inside the package.
"""

RSM_PUBLIC = frozenset(
    {
        "rsm",
        "rsm.client",
        "rsm.config",
        "rsm.errors",
        "rsm.host",
        "rsm.limits",
        "rsm.link",
        # The admin HTTP API a program hosting replicas serves (--admin).
        "rsm.admin",
        # The TLS flags of a program hosting replicas or talking to them.
        "rsm.tls_flags",
        # The investigation tools an application's own command offers (kvstore history/get).
        "rsm.tools",
        # What an application's Spark reducer is given and gives back (the bulk snapshot).
        "rsm.spark",
    }
)


def _module_name(path: Path) -> str:
    """The name a module is imported by (applications under examples/ are top-level packages)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "examples":
        parts.pop(0)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.parent != ROOT / "examples":
                modules[_module_name(path)] = path
    return modules


@functools.cache
def _tree(name: str) -> ast.Module:
    path = _modules()[name]
    return ast.parse(path.read_text(), filename=str(path))


def _resolve(name: str) -> str | None:
    """The repository module `name` refers to (a module, or the package holding a name)."""
    modules = _modules()
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, *, through_faces: bool = False) -> Iterator[tuple[int, str]]:
    """(line, repository module) for every import statement of module `name`.

    With `through_faces`, a name that module takes from another (`from rsm
    import command`, where `rsm` takes it from `rsm.core.state_machine`) counts
    as imported from where it is defined, which is what the code depends on.
    """
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            resolved = _resolve(target)
            if through_faces and resolved is not None and resolved != target:
                resolved = _source_of(resolved, target.rpartition(".")[2])
            if resolved is not None and resolved != name:
                yield node.lineno, resolved


def _source_of(module: str, attribute: str) -> str:
    """The module that `module` imports `attribute` from (`module` itself if none)."""
    for node in _tree(module).body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and any(alias.name == attribute for alias in node.names)
        ):
            return _resolve(f"{node.module}.{attribute}") or module
    return module


def _impurities(name: str) -> Iterator[str]:
    """What in module `name` does I/O, reads the clock or uses global randomness."""
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            roots = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            roots = [(node.module or "").split(".")[0]]
        else:
            roots = []
        for root in roots:
            if root in FORBIDDEN_MODULES:
                yield f"{name}:{node.lineno} imports {root}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Name) and (target.id, node.func.attr) in FORBIDDEN_CALLS:
                yield f"{name}:{node.lineno} calls module-level random.{node.func.attr}"
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "open"
        ):
            yield f"{name}:{node.lineno} opens a file"


def _pure_modules() -> list[str]:
    prefixes = tuple(directory.replace("/", ".") for directory in PURE_DIRS)
    return [name for name in _modules() if name.startswith(prefixes)]


def _reached(name: str) -> dict[str, str]:
    """Every repository module `name` imports, directly or not, with one import chain to it."""
    chains = {name: name}
    pending = [name]
    while pending:
        current = pending.pop()
        for _, target in _imports(current, through_faces=True):
            if target not in chains:
                chains[target] = f"{chains[current]} -> {target}"
                pending.append(target)
    return chains


def impurities_reached(name: str) -> list[str]:
    """What does I/O in module `name` or in any repository module it imports, directly or not."""
    return [
        f"{problem} (reached by {chain})"
        for reached, chain in _reached(name).items()
        for problem in _impurities(reached)
    ]


@pytest.mark.parametrize("name", _pure_modules())
def test_a_pure_module_and_all_it_imports_do_no_io(name: str) -> None:
    assert impurities_reached(name) == []


def _unit(name: str) -> tuple[int, str] | None:
    """(layer, unit) of module `name` in its package's `LAYERS`; None for a package's face."""
    layers = LAYERS.get(name.split(".", maxsplit=1)[0])
    if layers is None or "." not in name:
        return None
    best: tuple[int, str] | None = None
    for rank, units in enumerate(layers):
        for unit in units:
            matches = name == unit or name.startswith(unit + ".")
            if matches and (best is None or len(unit) > len(best[1])):
                best = (rank, unit)
    return best


def _layered_modules() -> list[str]:
    return [name for name in _modules() if name.split(".")[0] in LAYERS]


@pytest.mark.parametrize("name", _layered_modules())
def test_a_module_imports_only_its_own_unit_and_lower_layers(name: str) -> None:
    own = _unit(name)
    if own is None:
        return
    package = name.split(".", maxsplit=1)[0]
    problems = []
    for line, target in _imports(name):
        if target.split(".")[0] != package:
            continue
        theirs = _unit(target)
        if theirs is None:
            problems.append(f"line {line}: imports the package face {target}")
        elif theirs[1] != own[1] and theirs[0] >= own[0]:
            problems.append(
                f"line {line}: {own[1]} (layer {own[0]}) imports {target} "
                f"({theirs[1]}, layer {theirs[0]})"
            )
    assert problems == []


def test_every_module_of_a_layered_package_has_a_unit() -> None:
    faces = {name for name in _layered_modules() if "." not in name}
    assert [name for name in _layered_modules() if name not in faces and _unit(name) is None] == []


@pytest.mark.parametrize("name", sorted(_modules()))
def test_lower_packages_and_shipped_code_stay_out_of_higher_ones_and_of_testing(name: str) -> None:
    package = name.split(".", maxsplit=1)[0]
    shipped_from_testing = ".testing" in f".{name}"
    problems = []
    for line, target in _imports(name):
        top = target.split(".")[0]
        if package == "bookie" and top not in ("bookie", "rsm"):
            problems.append(f"line {line}: the ledger layer imports {target}")
        if package == "rsm" and top not in ("bookie", "rsm"):
            problems.append(f"line {line}: the framework imports the application {target}")
        if ".testing" in f".{target}" and not shipped_from_testing:
            problems.append(f"line {line}: shipped code imports test support {target}")
    assert problems == []


def test_the_key_value_store_uses_only_public_names_of_the_framework() -> None:
    used = {
        target
        for name in _modules()
        if name.split(".")[0] == "kvstore" and ".testing" not in f".{name}"
        for _, target in _imports(name)
        if target.split(".")[0] in ("rsm", "bookie")
    }
    leaks = {target for target in used if target.startswith("rsm") and target not in RSM_PUBLIC} | {
        target for target in used if target.startswith("bookie.wire")
    }
    assert sorted(leaks) == []


def test_the_checks_see_the_tree() -> None:
    assert len(_pure_modules()) >= 10
    assert _unit("rsm.runtime.replica") == (5, "rsm.runtime")
    assert "rsm.core.log_state" in _reached("rsm.core.commands")
