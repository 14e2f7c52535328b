"""Redis glob patterns over bytes (KEYS, SCAN MATCH) and SCAN's cursor over sorted keys.

Pure.  Matching follows Redis's `stringmatchlen` (case-sensitive) exactly:

* `*` any run of bytes, `?` one byte, `\\x` the byte x;
* `[abc]` one of the listed bytes, `[^abc]` any other, `[a-z]` a range
  (ends in either order), `\\x` inside brackets the byte x; a class the
  pattern ends before closing takes what was listed so far;
* ranges compare bytes as C `char`, which is signed on x86-64, so a byte
  >= 0x80 counts as negative there (`[\\x00-\\xff]` matches only 0x00 and
  0xff, as in Redis);
* the empty key matches only the empty pattern (KEYS and SCAN treat the
  pattern "*" as "everything" without matching, so they still list it);
* a pattern reaching more than `limits.glob_star_groups_max` `*` groups
  matches nothing (Redis's guard against abusive patterns).

A pattern is parsed once into tokens, each matching exactly one byte or (a
star) any run; matching is iterative with backtracking to the last star,
which visits what Redis's recursion with its "skip longer matches" cut
visits, in O(len(key) * len(pattern)) at worst and without recursion.

SCAN: keys are kept sorted, so a cursor names the next key to examine
rather than a hash-table slot.  On the wire a cursor is a decimal integer
(clients parse it as one): "0" starts and ends an iteration; any other
cursor is `int.from_bytes(b"\\x01" + key, "big")`.  Resuming from a key (not
from a position) means writes between calls do not shift the iteration: a
key present for a whole iteration is returned exactly once, and a full
iteration with no writes returns every key exactly once.  COUNT is the
number of keys examined per call (clamped to `limits.scan_count_max`), so
a call may return fewer keys than COUNT, or none, before the cursor ends.

Invariants: a cursor decodes to the key it was encoded from; the keys one
page examines all sort at or after the cursor's key and before the next
cursor's key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from sortedcontainers import SortedDict  # type: ignore[import-untyped]

from kvstore import errors, limits, numbers
from kvstore.errors import RedisError

_STAR: Final = -1
_ANY: Final = -2
"""Token kinds; a non-negative token is a literal byte, and a `bytes` token a class table."""

Token = int | bytes
"""A literal byte (0..255), `_STAR`, `_ANY`, or a class: 256 bytes, 1 where the class matches."""

_CURSOR_START: Final = b"0"
_CURSOR_MARK: Final = b"\x01"
_CURSOR_DIGITS_MAX: Final = 4300
"""Longest cursor text accepted: more digits than any encodable key gives (and than int() takes)."""


def _signed(byte: int) -> int:
    """The value of a byte as C `char` on x86-64 (signed)."""
    return byte - 256 if byte >= 128 else byte


class GlobPattern:
    """One compiled pattern: `matches(key)`, plus what lets KEYS and SCAN skip keys cheaply."""

    __slots__ = ("pattern", "_tokens", "matches_everything", "literal_prefix")

    def __init__(self, pattern: bytes) -> None:
        self.pattern = pattern
        self._tokens = _tokenize(pattern)
        self.matches_everything = pattern == b"*"
        """Exactly "*": KEYS and SCAN list every key without matching (the empty key too)."""
        prefix = bytearray()
        for token in self._tokens:
            if type(token) is not int or token < 0:
                break
            prefix.append(token)
        self.literal_prefix = bytes(prefix)
        """Every matching key starts with these bytes (the pattern's leading literals)."""

    def matches(self, key: bytes) -> bool:
        """Whether `key` matches, exactly as Redis's `stringmatchlen` decides."""
        tokens = self._tokens
        if not key:
            return not self.pattern
        token_count = len(tokens)
        key_length = len(key)
        token_index = key_index = 0
        star_index = -1
        star_key_index = 0
        stars_seen = 0
        while key_index < key_length:
            if token_index < token_count:
                token = tokens[token_index]
                if token == _STAR:
                    if token_index == token_count - 1:
                        return True
                    if token_index > star_index:
                        stars_seen += 1
                        if stars_seen > limits.glob_star_groups_max:
                            return False
                    star_index = token_index
                    star_key_index = key_index
                    token_index += 1
                    continue
                byte = key[key_index]
                if token in (_ANY, byte) or (type(token) is bytes and token[byte]):
                    token_index += 1
                    key_index += 1
                    continue
            if star_index < 0:
                return False
            # Let the last star take one more byte and try the rest again from there.
            star_key_index += 1
            key_index = star_key_index
            token_index = star_index + 1
        while token_index < token_count and tokens[token_index] == _STAR:
            token_index += 1
        return token_index == token_count

    def candidates(self, keys: SortedDict, start: bytes = b"") -> Iterator[bytes]:
        """The keys of `keys` from `start` on that may match: those with the literal prefix."""
        prefix = self.literal_prefix
        for key in keys.irange(minimum=max(start, prefix)):
            if not key.startswith(prefix):
                return
            yield key


def _tokenize(pattern: bytes) -> list[Token]:
    """The pattern as tokens, parsed as `stringmatchlen` walks it."""
    tokens: list[Token] = []
    length = len(pattern)
    position = 0
    while position < length:
        byte = pattern[position]
        if byte == 0x2A:  # '*': consecutive stars are one group
            while position + 1 < length and pattern[position + 1] == 0x2A:
                position += 1
            tokens.append(_STAR)
        elif byte == 0x3F:  # '?'
            tokens.append(_ANY)
        elif byte == 0x5B:  # '['
            table, position = _parse_class(pattern, position + 1)
            tokens.append(table)
        elif byte == 0x5C and position + 1 < length:  # '\\' escapes the next byte
            position += 1
            tokens.append(pattern[position])
        else:
            tokens.append(byte)
        position += 1
    return tokens


def _parse_class(pattern: bytes, position: int) -> tuple[bytes, int]:
    """The class starting after '[' at `position`: its byte table and the index of its ']'.

    An unterminated class ends with the pattern (the index returned is then
    the pattern's last byte), as in Redis.
    """
    length = len(pattern)
    negate = position < length and pattern[position] == 0x5E  # '^'
    if negate:
        position += 1
    members = bytearray(256)
    while True:
        remaining = length - position
        byte = pattern[position] if remaining > 0 else 0
        if byte == 0x5C and remaining >= 2:  # '\\': the next byte, literally
            position += 1
            members[pattern[position]] = 1
        elif byte == 0x5D and remaining > 0:  # ']'
            break
        elif remaining == 0:
            position -= 1
            break
        elif remaining >= 3 and pattern[position + 1] == 0x2D:  # 'a-z'
            low, high = _signed(byte), _signed(pattern[position + 2])
            if low > high:
                low, high = high, low
            for candidate in range(256):
                if low <= _signed(candidate) <= high:
                    members[candidate] = 1
            position += 2
        else:
            members[byte] = 1
        position += 1
    if negate:
        members = bytearray(1 - member for member in members)
    return bytes(members), position


# --- SCAN --------------------------------------------------------------------------------------


def encode_cursor(key: bytes | None) -> bytes:
    """The cursor resuming at `key`; None (iteration finished) is "0"."""
    if key is None:
        return _CURSOR_START
    return str(int.from_bytes(_CURSOR_MARK + key, "big")).encode("ascii")


def decode_cursor(cursor: bytes) -> bytes | None:
    """The key a cursor resumes at, None for "0"; `RedisError` for anything else."""
    if not cursor.isdigit() or len(cursor) > _CURSOR_DIGITS_MAX:
        raise RedisError(errors.INVALID_CURSOR)
    value = int(cursor)
    if value == 0:
        return None
    raw = value.to_bytes((value.bit_length() + 7) // 8, "big")
    if raw[:1] != _CURSOR_MARK:
        raise RedisError(errors.INVALID_CURSOR)
    return raw[1:]


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """One SCAN call's arguments, checked as Redis checks them."""

    start: bytes | None
    """The key to resume at; None: from the beginning."""
    count: int
    pattern: GlobPattern | None
    type_name: bytes | None

    @classmethod
    def parse(cls, cursor: bytes, options: Sequence[bytes]) -> ScanRequest:
        """`SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`; `RedisError` as Redis's."""
        start = decode_cursor(cursor)
        count = limits.scan_count_default
        pattern: GlobPattern | None = None
        type_name: bytes | None = None
        position = 0
        while position < len(options):
            option = options[position].lower()
            has_value = position + 1 < len(options)
            if option == b"count" and has_value:
                count = numbers.require_int(options[position + 1])
                if count < 1:
                    raise RedisError(errors.SYNTAX)
            elif option == b"match" and has_value:
                pattern = GlobPattern(options[position + 1])
            elif option == b"type" and has_value:
                type_name = options[position + 1]
            else:
                raise RedisError(errors.SYNTAX)
            position += 2
        return cls(start, min(count, limits.scan_count_max), pattern, type_name)

    def page(self, keys: SortedDict) -> tuple[bytes, list[bytes]]:
        """The next cursor and the matching keys among the next `count` examined.

        Every key here holds a string, so TYPE "string" (any case) filters
        nothing and any other type ends the iteration with no keys.
        """
        if self.type_name is not None and self.type_name.lower() != b"string":
            return _CURSOR_START, []
        pattern = self.pattern
        if pattern is None or pattern.matches_everything:
            examined: Iterator[bytes] = keys.irange(minimum=self.start or b"")
            pattern = None
        else:
            examined = pattern.candidates(keys, self.start or b"")
        found: list[bytes] = []
        for seen, key in enumerate(examined):
            if seen == self.count:
                return encode_cursor(key), found
            if pattern is None or pattern.matches(key):
                found.append(key)
        return _CURSOR_START, found
