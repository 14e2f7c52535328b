"""ZooKeeper digest credentials: the file, the environment variable, and what never shows."""

from __future__ import annotations

from pathlib import Path

import pytest
from kazoo.security import make_digest_acl

from bookie import limits
from bookie.errors import InvalidConfig
from bookie.meta.zk_digest import (
    ZK_DIGEST_FILE_ENV,
    ZkDigest,
    digest_from_environment,
    parse_digest,
)


def test_a_digest_file_names_a_user_and_a_password() -> None:
    digest = parse_digest("cluster:pass:with:colons\n", "f")
    assert digest == ZkDigest("cluster", "pass:with:colons")
    assert digest.auth_data() == [("digest", "cluster:pass:with:colons")]
    assert digest.acl() == [make_digest_acl("cluster", "pass:with:colons", all=True)]
    assert "pass" not in repr(digest)


@pytest.mark.parametrize(
    "text", ["", "\n", "cluster", "cluster:", ":secret", "a b:secret", "a:x\ny"]
)
def test_a_bad_digest_file_is_refused_without_showing_it(text: str) -> None:
    with pytest.raises(InvalidConfig, match=r"^f: ") as raised:
        parse_digest(text, "f")
    assert "secret" not in str(raised.value)


def test_the_environment_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "zk-digest"
    path.write_text("cluster:s3cret\r\n")
    assert digest_from_environment({}) is None
    assert digest_from_environment({ZK_DIGEST_FILE_ENV: ""}) is None
    assert digest_from_environment({ZK_DIGEST_FILE_ENV: str(path)}) == ZkDigest("cluster", "s3cret")


def test_a_file_that_cannot_be_used_is_a_configuration_error(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    with pytest.raises(InvalidConfig, match=f"{ZK_DIGEST_FILE_ENV}={missing}: cannot be read"):
        digest_from_environment({ZK_DIGEST_FILE_ENV: str(missing)})
    large = tmp_path / "large"
    large.write_text("a:" + "b" * limits.zk_digest_file_bytes_max)
    with pytest.raises(InvalidConfig, match="larger than"):
        digest_from_environment({ZK_DIGEST_FILE_ENV: str(large)})
    binary = tmp_path / "binary"
    binary.write_bytes(b"a:\xff\xfe")
    with pytest.raises(InvalidConfig, match="not UTF-8 text"):
        digest_from_environment({ZK_DIGEST_FILE_ENV: str(binary)})
