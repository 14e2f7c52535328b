"""`kvstore serve` refuses what it could not mean before it connects to anything."""

from __future__ import annotations

import pytest
from kvstore.tools import cli


def test_serve_refuses_a_follower_nice_outside_linux_range(
    capsys: pytest.CaptureFixture[str],
) -> None:
    serve = ["serve", "--zk", "127.0.0.1:1", "--listen", "h:1", "--resp", "h:2"]
    assert cli.main([*serve, "--follower-nice", "-1"]) == cli.EXIT_USAGE
    assert "follower nice -1 is outside 0..19" in capsys.readouterr().err
