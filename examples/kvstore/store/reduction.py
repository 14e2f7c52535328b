"""Which keys a logged command of the store acts on, for its Spark reducer; or why it cannot say.

Pure.  The reducer (`kvstore.spark_reducer`) applies each command only
where its keys are kept, so it is exact only for commands whose whole
effect on the state is confined to the keys they name, apart from the
active expiry every command runs (which the reducer replays at every
command's index and time):

* one key, the first argument: SET, SETNX, SETEX, PSETEX, GETSET, GETDEL,
  GETEX, APPEND, SETRANGE, INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, CAS,
  PERSIST, and the EXPIRE family (EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT);
* several keys, each changed alone: MSET (every other argument), DEL and
  UNLINK (every argument).

`gives_ttl` says which of them may give their key a TTL: the EXPIRE
family, SETEX, PSETEX, and SET or GETEX with EX, PX, EXAT or PXAT.
Anything else raises `NotReducible` naming the index and the command:
those that move values between keys or change every key (RENAME,
RENAMENX, COPY, MSETNX, FLUSHDB, FLUSHALL), EXEC, and commands the store
does not know.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from rsm.errors import NotReducible

SINGLE_KEY: Final = frozenset(
    {
        "set",
        "setnx",
        "getset",
        "getdel",
        "getex",
        "append",
        "setrange",
        "incr",
        "decr",
        "incrby",
        "decrby",
        "incrbyfloat",
        "cas",
        "persist",
        "setex",
        "psetex",
        "expire",
        "pexpire",
        "expireat",
        "pexpireat",
    }
)
EVERY_ARGUMENT: Final = frozenset({"del", "unlink"})
"""Commands each of whose arguments is a key."""
EVERY_OTHER_ARGUMENT: Final = frozenset({"mset"})
"""Commands whose keys are every other argument, from the first."""
_TIME_OPTIONS: Final = frozenset({b"ex", b"px", b"exat", b"pxat"})
_OPTIONS_FROM: Final = {"set": 2, "getex": 1}
"""Where the options of the commands that take a time start."""
_GIVE_TTL: Final = frozenset({"setex", "psetex", "expire", "pexpire", "expireat", "pexpireat"})


def command_keys(command: str, args: Sequence[bytes], index: int) -> tuple[bytes, ...]:
    """The keys logged command `command(*args)` at `index` acts on (see the module docstring);
    empty for a call that names none (it fails, changing nothing)."""
    if command in SINGLE_KEY:
        return tuple(args[:1])
    if command in EVERY_ARGUMENT:
        return tuple(args)
    if command in EVERY_OTHER_ARGUMENT:
        return tuple(args[::2])
    raise NotReducible(
        f"index {index}: the key-value store's reducer does not reduce {command.upper()} "
        "(only commands confined to the keys they name; replay does)"
    )


def gives_ttl(command: str, args: Sequence[Any]) -> bool:
    """Whether logged command `command(*args)` may give its key a TTL."""
    if command in _GIVE_TTL:
        return True
    options_from = _OPTIONS_FROM.get(command)
    return options_from is not None and any(
        type(option) is bytes and option.lower() in _TIME_OPTIONS for option in args[options_from:]
    )
