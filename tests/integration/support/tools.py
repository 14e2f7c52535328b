"""Outside programs the integration tests drive (Debian's redis-server and redis-tools).

`make test` installs them (`scripts/bootstrap.sh redis-server redis-tools`), so a
missing one is a broken set-up: the test fails and says how to install it, rather
than skipping and leaving the comparison with a real Redis untested.
"""

from __future__ import annotations

import shutil

import pytest


def required_tool(name: str) -> str:
    """The path of program `name`; fails the test when it is not installed."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is not installed: run `make test`, or scripts/bootstrap.sh "
            "redis-server redis-tools"
        )
    return path
