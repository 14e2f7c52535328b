"""Replies as redis-cli prints them, for the store's own tools (`kvstore get`, `kvstore history`).

Pure.  A bulk string is printed in double quotes with redis-cli's escapes
(its `sdscatrepr`): `\\\\` and `\\"`, `\\n`, `\\r`, `\\t`, `\\a`, `\\b`, printable
ASCII (0x20 to 0x7e) as itself and every other byte as `\\xHH` (lower-case
hex); a null bulk is `(nil)`; an integer `(integer) N`; a simple string as
it is.
"""

from __future__ import annotations

from typing import Final

_ESCAPES: Final = {
    ord("\\"): "\\\\",
    ord('"'): '\\"',
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    0x07: "\\a",
    0x08: "\\b",
}


def quoted(value: bytes) -> str:
    """A bulk string as redis-cli prints it."""
    parts = ['"']
    for byte in value:
        escape = _ESCAPES.get(byte)
        if escape is not None:
            parts.append(escape)
        elif 0x20 <= byte <= 0x7E:
            parts.append(chr(byte))
        else:
            parts.append(f"\\x{byte:02x}")
    parts.append('"')
    return "".join(parts)


def reply_text(value: bytes | str | int | None) -> str:
    """A bulk string, null, integer or simple string reply as redis-cli prints it."""
    if value is None:
        return "(nil)"
    if isinstance(value, bytes):
        return quoted(value)
    if isinstance(value, int):
        return f"(integer) {value}"
    return value
