"""Redis glob patterns over bytes (KEYS, SCAN MATCH) and SCAN's cursor over hash-ordered keys.

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

SCAN.  Every key has a deterministic 64-bit hash (`key_hash`: BLAKE2b,
never Python's salted `hash`, so every replica and every process agrees),
in 1 .. 2**64 - 1; the store keeps its keys in an index sorted by
`(hash, key)`.  A cursor is the hash of the next key to examine, in decimal,
so it fits the unsigned 64-bit integer clients parse it as (redis-cli
--scan, go-redis); "0" starts and ends an iteration.  A page resumes at the
first key whose hash is at least the cursor, so writes between calls do not
shift the iteration: a key present for a whole iteration is returned at
least once (Redis's guarantee), and exactly once unless its hash is shared
with a key a page ended on (64-bit collisions: such a group is returned
again from its start, a duplicate, never a skip).  COUNT is the number of
keys examined per call (clamped to `limits.scan_count_max`), so a call may
return fewer keys than COUNT, or none, before the cursor ends.

Invariants: hashes are never 0; the keys one page examines all have hashes
at or after the cursor and at or before the next cursor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from kvstore import errors, limits
from kvstore.errors import RedisError
from kvstore.protocol import numbers

_STAR: Final = -1
_ANY: Final = -2
"""Token kinds; a non-negative token is a literal byte, and a `bytes` token a class table."""

Token = int | bytes
"""A literal byte (0..255), `_STAR`, `_ANY`, or a class: 256 bytes, 1 where the class matches."""

_CURSOR_START: Final = b"0"
_CURSOR_DIGITS_MAX: Final = 20
"""2**64 - 1 has 20 digits."""
_HASH_BYTES: Final = 8
_HASH_MAX: Final = 2**64 - 1


def _signed(byte: int) -> int:
    """The value of a byte as C `char` on x86-64 (signed)."""
    return byte - 256 if byte >= 128 else byte


class GlobPattern:
    """One compiled pattern: `matches(key)`, plus what lets KEYS and SCAN skip keys cheaply."""

    __slots__ = ("pattern", "_tokens", "matches_everything")

    def __init__(self, pattern: bytes) -> None:
        self.pattern = pattern
        self._tokens = _tokenize(pattern)
        self.matches_everything = pattern == b"*"
        """Exactly "*": KEYS and SCAN list every key without matching (the empty key too)."""

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


def key_hash(key: bytes) -> int:
    """The key's place in SCAN order: 64 bits of BLAKE2b, never 0 (0 is the end mark)."""
    digest = hashlib.blake2b(key, digest_size=_HASH_BYTES).digest()
    return int.from_bytes(digest, "big") or 1


def encode_cursor(next_hash: int) -> bytes:
    """The cursor resuming at hash `next_hash`; 0 (iteration finished) is "0"."""
    assert 0 <= next_hash <= _HASH_MAX
    return b"%d" % next_hash


def decode_cursor(cursor: bytes) -> int:
    """The hash a cursor resumes at (0: from the start); `RedisError` unless an unsigned 64-bit
    decimal integer."""
    if not cursor.isdigit() or len(cursor) > _CURSOR_DIGITS_MAX:
        raise RedisError(errors.INVALID_CURSOR)
    value = int(cursor)
    if value > _HASH_MAX:
        raise RedisError(errors.INVALID_CURSOR)
    return value


@dataclass(frozen=True, slots=True)
class ScanRequest:
    """One SCAN call's arguments, checked as Redis checks them."""

    start: int
    """The hash to resume at; 0: from the beginning."""
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
        if pattern is not None and pattern.matches_everything:
            pattern = None
        return cls(start, min(count, limits.scan_count_max), pattern, type_name)

    def page(self, index: SortedList) -> tuple[bytes, list[bytes]]:
        """The next cursor and the matching keys among the next `count` examined.

        `index` holds `(key_hash(key), key)` for every key, sorted.  Every
        key here holds a string, so TYPE "string" (any case) filters nothing
        and any other type ends the iteration with no keys.
        """
        if self.type_name is not None and self.type_name.lower() != b"string":
            return _CURSOR_START, []
        first = index.bisect_left((self.start, b""))
        stop = first + self.count
        examined: Iterator[tuple[int, bytes]] = index.islice(first, stop)
        pattern = self.pattern
        if pattern is None:
            found = [key for _, key in examined]
        else:
            found = [key for _, key in examined if pattern.matches(key)]
        if stop >= len(index):
            return _CURSOR_START, found
        return encode_cursor(index[stop][0]), found
