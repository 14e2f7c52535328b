"""docs/operations.md's minimal bookie configuration file loads, and sets the ledger
password autorecovery needs for the state-machine framework's ledgers.

What the operations review saw: a bookie configured from the page logged
`autorecovery.repair_failed ... (set autorecovery_password)` for the framework's ledgers."""

from __future__ import annotations

import re
from pathlib import Path

from bookie.server.config import load_config
from rsm.config import LEDGER_PASSWORD_DEFAULT

OPERATIONS = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def minimal_file() -> str:
    """The TOML block that follows "A minimal file:" on the page."""
    text = OPERATIONS.read_text()
    found = re.search(r"A minimal file:\s*```toml\n(.*?)```", text, re.DOTALL)
    assert found is not None, "docs/operations.md lost its minimal configuration file"
    return found.group(1)


def test_the_minimal_file_loads_with_the_frameworks_ledger_password(tmp_path: Path) -> None:
    file = tmp_path / "bookie.toml"
    file.write_text(minimal_file())
    config = load_config(file)
    assert config.autorecovery_password == LEDGER_PASSWORD_DEFAULT.decode()
    assert "RSM_LEDGER_PASSWORD_FILE" in minimal_file(), "says when to change it"
