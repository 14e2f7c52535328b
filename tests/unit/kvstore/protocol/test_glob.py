"""Redis glob matching over bytes, and SCAN's hash order and cursors.

Golden cases were checked against a real redis-server (KEYS); the property
test compares the matcher with a literal, recursive reading of Redis's
`stringmatchlen` written here as an oracle.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvstore import limits
from kvstore.errors import RedisError
from kvstore.protocol.glob import GlobPattern, ScanRequest, decode_cursor, encode_cursor, key_hash
from sortedcontainers import SortedList  # type: ignore[import-untyped]


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        (b"*", b"anything", True),
        (b"h?llo", b"hello", True),
        (b"h?llo", b"hllo", False),
        (b"h*llo", b"hllo", True),
        (b"h*llo", b"heeeello", True),
        (b"h[ae]llo", b"hallo", True),
        (b"h[ae]llo", b"hillo", False),
        (b"h[^e]llo", b"hallo", True),
        (b"h[^e]llo", b"hello", False),
        (b"h[a-b]llo", b"hbllo", True),
        (b"h[b-a]llo", b"hallo", True),
        (b"h[a-b]llo", b"hcllo", False),
        (b"h\\*llo", b"h*llo", True),
        (b"h\\*llo", b"hello", False),
        (b"[\\]]", b"]", True),
        (b"[]]", b"]", False),
        (b"[]", b"]", False),
        (b"[^]", b"x", True),
        (b"[a-", b"a", True),
        (b"[a-", b"-", True),
        (b"[a-", b"b", False),
        (b"[a-]", b"]", True),
        (b"[abc", b"c", True),
        (b"ab\\", b"ab\\", True),
        (b"[\\", b"\\", True),
        (b"*a", b"a", True),
        (b"a*", b"a", True),
        (b"**", b"", False),
        (b"", b"", True),
        (b"?", b"", False),
        (b"a*b*c", b"aXbYbZc", True),
        (b"a*b*c", b"aXbYcZ", False),
        (b"*?*?*", b"ab", True),
        (b"*?*?*", b"a", False),
        # Ranges compare bytes as signed C chars: 0x80..0xff sort below 0x00.
        (b"[\x00-\xff]", b"\x00", True),
        (b"[\x00-\xff]", b"\xff", True),
        (b"[\x00-\xff]", b"a", False),
        (b"[\x80-\x7f]", b"a", True),
        (b"[a-\xff]", b"\xff", True),
        (b"[a-\xff]", b"b", False),
    ],
)
def test_golden_cases(pattern: bytes, key: bytes, matches: bool) -> None:
    assert GlobPattern(pattern).matches(key) is matches


def test_only_a_lone_star_matches_everything() -> None:
    assert GlobPattern(b"*").matches_everything
    assert not GlobPattern(b"**").matches_everything


def test_patterns_reaching_too_many_star_groups_match_nothing() -> None:
    stars = limits.glob_star_groups_max
    key = b"a" * (stars + 1)
    assert GlobPattern(b"*a" * stars).matches(key)
    assert GlobPattern(b"*a" * stars + b"*").matches(key)
    assert not GlobPattern(b"*a" * (stars + 1)).matches(key)


def test_matching_stays_fast_on_patterns_that_defeat_backtracking() -> None:
    # Exponential for naive backtracking; linear-ish passes here.
    assert not GlobPattern(b"*a" * 30 + b"b").matches(b"a" * 200)


def oracle(pattern: bytes, key: bytes) -> bool:
    """Redis's `stringmatchlen` read literally (recursive, no shortcuts): the reference."""

    def at(data: bytes, index: int) -> int:
        # C strings: reading at the end gives the terminating NUL.
        return data[index] if index < len(data) else 0

    def signed(byte: int) -> int:
        return byte - 256 if byte >= 128 else byte

    def match(p: int, s: int) -> bool:
        while p < len(pattern) and s < len(key):
            char = pattern[p]
            if char == ord("*"):
                while p + 1 < len(pattern) and pattern[p + 1] == ord("*"):
                    p += 1
                if p == len(pattern) - 1:
                    return True
                return any(match(p + 1, start) for start in range(s, len(key)))
            if char == ord("?"):
                s += 1
            elif char == ord("["):
                p += 1
                negate = at(pattern, p) == ord("^")
                if negate:
                    p += 1
                found = False
                while True:
                    left = len(pattern) - p
                    if at(pattern, p) == ord("\\") and left >= 2:
                        p += 1
                        found = found or pattern[p] == key[s]
                    elif at(pattern, p) == ord("]"):
                        break
                    elif left == 0:
                        p -= 1
                        break
                    elif left >= 3 and pattern[p + 1] == ord("-"):
                        low, high = sorted((signed(pattern[p]), signed(pattern[p + 2])))
                        found = found or low <= signed(key[s]) <= high
                        p += 2
                    else:
                        found = found or pattern[p] == key[s]
                    p += 1
                if found == negate:
                    return False
                s += 1
            else:
                if char == ord("\\") and len(pattern) - p >= 2:
                    p += 1
                if pattern[p] != key[s]:
                    return False
                s += 1
            p += 1
            if s == len(key):
                while at(pattern, p) == ord("*"):
                    p += 1
                break
        return p >= len(pattern) and s == len(key)

    return match(0, 0)


glob_bytes = st.lists(st.sampled_from(b"ab*?[]^-\\\x00\xff"), max_size=7).map(bytes)


@settings(max_examples=1000)
@given(pattern=glob_bytes, key=glob_bytes)
def test_matching_agrees_with_a_literal_reading_of_redis(pattern: bytes, key: bytes) -> None:
    assert GlobPattern(pattern).matches(key) == oracle(pattern, key)


def test_key_hashes_are_fixed_64_bit_values_never_zero() -> None:
    # The same on every replica and in every process: not Python's salted hash().
    assert key_hash(b"key:1") == int.from_bytes(hashlib.blake2b(b"key:1", digest_size=8).digest())
    assert all(1 <= key_hash(b"%d" % i) < 2**64 for i in range(1000))


@given(st.integers(0, 2**64 - 1))
def test_a_cursor_is_the_decimal_hash_it_resumes_at(next_hash: int) -> None:
    cursor = encode_cursor(next_hash)
    assert cursor.isdigit()
    assert decode_cursor(cursor) == next_hash


def test_cursor_zero_starts_and_ends() -> None:
    assert encode_cursor(0) == b"0"
    assert decode_cursor(b"0") == 0
    assert decode_cursor(b"000") == 0
    assert decode_cursor(b"18446744073709551615") == 2**64 - 1
    for invalid in (b"18446744073709551616", b" 1", b"-1", b"+1", b"1x", b"", b"9" * 21):
        with pytest.raises(RedisError, match="invalid cursor"):
            decode_cursor(invalid)


def index_of(keys: list[bytes]) -> SortedList:
    return SortedList((key_hash(key), key) for key in keys)


def test_a_page_resumes_at_the_first_key_whose_hash_reaches_the_cursor() -> None:
    keys = [b"k%d" % i for i in range(20)]
    index = index_of(keys)
    cursor, first = ScanRequest.parse(b"0", [b"COUNT", b"7"]).page(index)
    assert first == [key for _, key in index[:7]]
    assert decode_cursor(cursor) == index[7][0]
    cursor, second = ScanRequest.parse(cursor, [b"COUNT", b"100"]).page(index)
    assert (cursor, second) == (b"0", [key for _, key in index[7:]])


def test_keys_sharing_a_hash_are_returned_again_not_skipped() -> None:
    # Three keys with one hash (a 64-bit collision, forced): a page that ends
    # inside the group makes the next page start at the group's first key.
    index = SortedList([(5, b"a"), (9, b"b1"), (9, b"b2"), (9, b"b3"), (12, b"c")])
    cursor, page = ScanRequest.parse(b"0", [b"COUNT", b"3"]).page(index)
    assert (cursor, page) == (b"9", [b"a", b"b1", b"b2"])
    cursor, page = ScanRequest.parse(cursor, [b"COUNT", b"3"]).page(index)
    assert (cursor, page) == (b"12", [b"b1", b"b2", b"b3"])
    cursor, page = ScanRequest.parse(cursor, [b"COUNT", b"3"]).page(index)
    assert (cursor, page) == (b"0", [b"c"])
