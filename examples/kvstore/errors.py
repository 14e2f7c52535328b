"""The errors a Redis client sees, with Redis's exact texts.

A `RedisError`'s message is the whole error line after the `-`: it starts
with Redis's error code ("ERR", "WRONGTYPE", "NOPROTO", ...) and is what
`resp.encode_reply` writes.  The state machine raises them from commands;
the framework records an exception as its type name and message, the same
on every replica, so a server can answer `-<message>` for a recorded
`RedisError` wherever the command was applied.

Messages are `str` holding one character per byte (Latin-1), because some
echo client bytes back ("unknown command 'x'"); the encoder writes them
back as the same bytes.

Invariants: a message is never empty and starts with an upper-case code;
`ProtocolError` is raised only by the RESP parser, and the connection that
caused it is closed after the error is sent.
"""

from __future__ import annotations

from typing import Final


class RedisError(Exception):
    """An error reply: `-<message>\\r\\n`, with `message` exactly as Redis words it."""

    def __init__(self, message: str) -> None:
        assert message
        assert message[0].isupper(), "Redis error messages start with their code"
        super().__init__(message)
        self.message = message


class ProtocolError(RedisError):
    """The client broke RESP: answer the message, then close the connection.

    Nothing after the broken request can be parsed reliably, so the
    connection cannot go on; other connections are not affected.
    """


# --- messages shared by several commands (Redis's shared error objects) ------------------------

SYNTAX: Final = "ERR syntax error"
NOT_AN_INTEGER: Final = "ERR value is not an integer or out of range"
NOT_A_FLOAT: Final = "ERR value is not a valid float"
INCREMENT_OVERFLOW: Final = "ERR increment or decrement would overflow"
STRING_TOO_LONG: Final = "ERR string exceeds maximum allowed size (proto-max-bulk-len)"
KEY_TOO_LONG: Final = "ERR key exceeds maximum allowed size"
INVALID_CURSOR: Final = "ERR invalid cursor"
DB_INDEX_OUT_OF_RANGE: Final = "ERR DB index is out of range"


def c_text(raw: bytes) -> str:
    """Client bytes as Redis prints them with `%s`: up to the first NUL, one character per byte."""
    end = raw.find(b"\0")
    return (raw if end < 0 else raw[:end]).decode("latin-1")


def invalid_expire_time(command: str) -> str:
    """Redis's message for an expire time that is not positive or overflows."""
    return f"ERR invalid expire time in '{command}' command"


def wrong_arity(full_name: str) -> str:
    """Redis's message for a call with the wrong number of arguments (`client|setname` style)."""
    return f"ERR wrong number of arguments for '{full_name}' command"
