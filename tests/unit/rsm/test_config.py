"""The replica's ledger password and digest: where the password comes from, and that no repr
shows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bookie.wire.packet import DigestType
from rsm import limits
from rsm.config import (
    LEDGER_PASSWORD_DEFAULT,
    LEDGER_PASSWORD_FILE_ENV,
    ReplicaConfig,
)
from rsm.errors import InvalidConfig


def test_without_the_variable_the_password_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEDGER_PASSWORD_FILE_ENV, raising=False)
    config = ReplicaConfig()
    assert config.ledger_password == LEDGER_PASSWORD_DEFAULT
    assert config.ledger_digest is DigestType.CRC32C


def test_the_variable_names_the_password_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "password"
    path.write_bytes(b"s3cret-ledger\r\n")
    monkeypatch.setenv(LEDGER_PASSWORD_FILE_ENV, str(path))
    config = ReplicaConfig(ledger_digest=DigestType.HMAC_SHA256)
    assert config.ledger_password == b"s3cret-ledger"
    assert "s3cret" not in repr(config)
    assert ReplicaConfig(ledger_password=b"given").ledger_password == b"given"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot be read: No such file or directory"),
        (b"\n", "the file is empty"),
        (b"x" * (limits.ledger_password_file_bytes_max + 1), "larger than"),
    ],
)
def test_a_password_file_that_cannot_be_used_is_a_configuration_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = tmp_path / "password"
    if content is not None:
        path.write_bytes(content)
    monkeypatch.setenv(LEDGER_PASSWORD_FILE_ENV, str(path))
    with pytest.raises(InvalidConfig, match=f"^{LEDGER_PASSWORD_FILE_ENV}={path}: {message}"):
        ReplicaConfig()
