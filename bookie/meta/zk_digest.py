"""ZooKeeper digest credentials: who a ZooKeeper session is, and the ACL of every znode it creates.

A `ZkDigest` is a user and password for ZooKeeper's `digest` scheme.  A
session that has one authenticates with it (kazoo's `auth_data`) and creates
every znode with `acl()`: every permission for that identity and none for
anybody else, so a client without the credentials can neither read nor
change nor delete what we create (ZooKeeper still lets anyone see that a
znode exists, and its ACL).

Where the credentials come from: the file named by the environment variable
`BOOKIE_ZK_DIGEST_FILE` (`ZK_DIGEST_FILE_ENV`), which holds `user:password`
and nothing else but one optional final line ending.  Every process that
talks to ZooKeeper (bookies, autorecovery, replicas, `bookie shell`,
`rsm`, `kvstore`) reads it when it connects, so one variable, set the same
for all of them, secures a cluster; the password never appears on a command
line.  Unset (or empty): no credentials, and znodes are created open to
anyone, as before.

Errors: `InvalidConfig` naming the variable and the file, never showing the
password.  Invariants: `repr` of a `ZkDigest` never shows the password; the
password is at most `limits.zk_digest_file_bytes_max` bytes with the user.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from kazoo.security import ACL, make_digest_acl

from bookie import limits
from bookie.errors import InvalidConfig
from bookie.secret_file import read_secret_file

ZK_DIGEST_FILE_ENV: Final = "BOOKIE_ZK_DIGEST_FILE"
SCHEME: Final = "digest"


@dataclass(frozen=True, slots=True)
class ZkDigest:
    """A ZooKeeper digest identity (`user:password`)."""

    user: str
    password: str = field(repr=False)

    def auth_data(self) -> list[tuple[str, str]]:
        """What a kazoo client authenticates with."""
        return [(SCHEME, f"{self.user}:{self.password}")]

    def acl(self) -> list[ACL]:
        """The ACL of every znode created: all permissions to this identity, nothing to others."""
        return [make_digest_acl(self.user, self.password, all=True)]


def parse_digest(text: str, source: str) -> ZkDigest:
    """`user:password` (one optional final line ending); `InvalidConfig` naming `source`."""
    line = text.removesuffix("\n").removesuffix("\r")
    user, colon, password = line.partition(":")
    if not colon or not user or not password:
        raise InvalidConfig(f"{source}: expected one line 'user:password' with neither empty")
    if any(character.isspace() for character in user) or "\n" in password:
        raise InvalidConfig(f"{source}: the user may not hold spaces, nor the file two lines")
    return ZkDigest(user, password)


def digest_from_environment(environment: Mapping[str, str] | None = None) -> ZkDigest | None:
    """The credentials `BOOKIE_ZK_DIGEST_FILE` names (None: the variable is unset or empty)."""
    path = (os.environ if environment is None else environment).get(ZK_DIGEST_FILE_ENV, "")
    if not path:
        return None
    source = f"{ZK_DIGEST_FILE_ENV}={path}"
    try:
        text = read_secret_file(path, limits.zk_digest_file_bytes_max).decode("utf-8")
    except ValueError as error:  # UnicodeDecodeError is one
        reason = "not UTF-8 text" if isinstance(error, UnicodeDecodeError) else str(error)
        raise InvalidConfig(f"{source}: {reason}") from None
    return parse_digest(text, source)
