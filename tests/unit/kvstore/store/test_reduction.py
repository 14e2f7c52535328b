"""Which keys the key-value store's reducer routes a command to, which may give a TTL, and what it
refuses."""

from __future__ import annotations

import pytest
from kvstore.state_machine import KVStore
from kvstore.store.reduction import (
    EVERY_ARGUMENT,
    EVERY_OTHER_ARGUMENT,
    SINGLE_KEY,
    command_keys,
    gives_ttl,
)

from rsm.core.state_machine import commands_by_key
from rsm.errors import NotReducible


@pytest.mark.parametrize(
    ("command", "args", "keys"),
    [
        ("set", [b"k", b"v"], (b"k",)),
        ("set", [b"k", b"v", b"NX", b"GET", b"KEEPTTL"], (b"k",)),
        ("getex", [b"k", b"persist"], (b"k",)),
        ("incrby", [b"k", b"5"], (b"k",)),
        ("mset", [b"a", b"1", b"b", b"2"], (b"a", b"b")),
        ("del", [b"a", b"b", b"a"], (b"a", b"b", b"a")),
        ("set", [], ()),
        ("set", [b"k", b"v", b"EX", b"10"], (b"k",)),
        ("expire", [b"k", b"10"], (b"k",)),
        ("setex", [b"k", b"10", b"v"], (b"k",)),
    ],
)
def test_the_keys_of_a_command(command: str, args: list[bytes], keys: tuple[bytes, ...]) -> None:
    assert command_keys(command, args, 1) == keys


@pytest.mark.parametrize(
    ("command", "args"),
    [
        ("rename", [b"a", b"b"]),
        ("msetnx", [b"a", b"1"]),
        ("flushall", []),
        ("exec", []),
        ("no-such-command", [b"k"]),
    ],
)
def test_what_is_not_confined_to_its_keys_is_refused_naming_it(
    command: str, args: list[bytes]
) -> None:
    with pytest.raises(NotReducible, match=rf"^index 42: .*{command.upper()}"):
        command_keys(command, args, 42)


@pytest.mark.parametrize(
    ("command", "args", "gives"),
    [
        ("set", [b"k", b"v", b"EX", b"10"], True),
        ("set", [b"k", b"v", b"pxat", b"10"], True),
        ("set", [b"k", b"v", b"KEEPTTL"], False),
        ("set", [b"k", b"ex"], False),  # the value, not an option
        ("getex", [b"k", b"Px", b"10"], True),
        ("getex", [b"k", b"persist"], False),
        ("expire", [b"k", b"10"], True),
        ("pexpireat", [b"k", b"10"], True),
        ("setex", [b"k", b"10", b"v"], True),
        ("psetex", [b"k", b"10", b"v"], True),
        ("persist", [b"k"], False),
        ("mset", [b"k", b"ex"], False),
    ],
)
def test_which_commands_may_give_a_ttl(command: str, args: list[bytes], gives: bool) -> None:
    assert gives_ttl(command, args) is gives


def test_every_command_routed_is_one_of_the_stores() -> None:
    logged = set(commands_by_key(KVStore))
    assert logged >= SINGLE_KEY | EVERY_ARGUMENT | EVERY_OTHER_ARGUMENT
