"""Which keys a logged command of the store acts on, for its Spark reducer; or why it cannot say.

Pure.  The reducer (`kvstore.spark_reducer`) applies each command only
where its keys are kept, so it is exact only for commands whose whole
effect on the state is confined to the keys they name, with no TTL
anywhere (a TTL makes every command expire other keys: active expiry):

* one key, the first argument: SET (without EX, PX, EXAT or PXAT), SETNX,
  GETSET, GETDEL, GETEX (without a time), APPEND, SETRANGE, INCR, DECR,
  INCRBY, DECRBY, INCRBYFLOAT, CAS, PERSIST;
* several keys, each changed alone: MSET (every other argument), DEL and
  UNLINK (every argument).

Anything else raises `NotReducible` naming the index and the command:
the commands that give TTLs (EXPIRE and its family, SETEX, PSETEX, and
SET or GETEX with a time), those that move values between keys or change
every key (RENAME, RENAMENX, COPY, MSETNX, FLUSHDB, FLUSHALL), EXEC, and
commands the store does not know.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

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
    }
)
EVERY_ARGUMENT: Final = frozenset({"del", "unlink"})
"""Commands each of whose arguments is a key."""
EVERY_OTHER_ARGUMENT: Final = frozenset({"mset"})
"""Commands whose keys are every other argument, from the first."""
_TIME_OPTIONS: Final = frozenset({b"ex", b"px", b"exat", b"pxat"})
_OPTIONS_FROM: Final = {"set": 2, "getex": 1}
"""Where the options of the commands that take a time start."""


def command_keys(command: str, args: Sequence[bytes], index: int) -> tuple[bytes, ...]:
    """The keys logged command `command(*args)` at `index` acts on (see the module docstring);
    empty for a call that names none (it fails, changing nothing)."""
    if command in SINGLE_KEY:
        options_from = _OPTIONS_FROM.get(command)
        if options_from is not None and any(
            option.lower() in _TIME_OPTIONS for option in args[options_from:]
        ):
            raise NotReducible(
                f"index {index}: {command.upper()} with a time gives a TTL, which the key-value "
                "store's reducer does not reduce (replay does)"
            )
        return tuple(args[:1])
    if command in EVERY_ARGUMENT:
        return tuple(args)
    if command in EVERY_OTHER_ARGUMENT:
        return tuple(args[::2])
    raise NotReducible(
        f"index {index}: the key-value store's reducer does not reduce {command.upper()} "
        "(only commands confined to the keys they name, without TTLs; replay does)"
    )
