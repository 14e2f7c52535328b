"""`bookie shell` run as a process, its JSON reports checked for their common fields."""

from __future__ import annotations

import json
import shlex
import sys
from typing import Any

import anyio


async def shell(*arguments: str, check: bool = True) -> tuple[int, str, str]:
    result = await anyio.run_process(
        [sys.executable, "-m", "bookie.tools.cli", "shell", *arguments], check=False
    )
    stdout, stderr = result.stdout.decode(), result.stderr.decode()
    if check:
        assert result.returncode == 0, stderr
    return result.returncode, stdout, stderr


async def shell_json(*arguments: str, code: int = 0) -> Any:
    """The report of `bookie shell ARGUMENTS --json`, without its `schema` and, when it
    found problems, its `reproduce` line (both checked here)."""
    returned, stdout, stderr = await shell(*arguments, "--json", check=False)
    assert returned == code, stderr
    report = json.loads(stdout)
    assert report.pop("schema") == 1
    if report.get("problems"):
        assert report.pop("reproduce") == "reproduce: bookie " + shlex.join(
            ["shell", *arguments, "--json"]
        )
    else:
        assert "reproduce" not in report
    return report
