"""The API reference (scripts/api_docs.py, `make docs`) builds from the docstrings without a
warning and documents the public surface; a warning fails the build."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "api_docs.py"
SURFACE = (
    "StateMachine",
    "command",
    "query",
    "Context",
    "connect",
    "connect_sync",
    "Client",
    "SyncClient",
    "Replica",
    "CommandFailed",
    "CommandFailed.type_name",
    "StatusError.message",
    "Context.random",
    "NoSuchApplication",
)


def test_the_reference_builds_without_warnings_and_covers_the_surface(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert (built.returncode, built.stderr) == (0, "")
    assert (tmp_path / "index.html").exists()
    page = (tmp_path / "rsm.html").read_text()
    missing = [name for name in SURFACE if f'id="{name}"' not in page]
    assert not missing, missing
    assert "Timeout" in (tmp_path / "rsm" / "errors.html").read_text()


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_docs", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_warning_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = load_script()
    # A module whose docstring pdoc cannot read: one warning.
    broken = tmp_path / "broken_module.py"
    broken.write_text(
        "from __future__ import annotations\n"
        "def f(x: NoSuchName) -> None:\n"
        '    """Takes an annotation that names nothing."""\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(script, "MODULES", ("broken_module",))
    assert script.main([str(tmp_path / "out")]) == 1
    assert "api docs: warning: " in capsys.readouterr().err
