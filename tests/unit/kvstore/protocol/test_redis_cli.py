"""Replies as redis-cli prints them (its `sdscatrepr` quoting)."""

from __future__ import annotations

from kvstore.protocol.redis_cli import quoted, reply_text
from kvstore.state_machine import KVStore


def test_bulk_strings_are_quoted_with_redis_cli_escapes() -> None:
    assert quoted(b"plain text") == '"plain text"'
    assert quoted(b'say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert quoted(b"\n\r\t\x07\x08") == '"\\n\\r\\t\\a\\b"'
    assert quoted(b"\x00\x7f\xff~ ") == '"\\x00\\x7f\\xff~ "'


def test_nil_integer_and_simple_string_replies() -> None:
    assert reply_text(None) == "(nil)"
    assert reply_text(42) == "(integer) 42"
    assert reply_text("OK") == "OK"
    assert reply_text(b"") == '""'


def test_the_store_shows_a_key_as_a_get_of_it_with_its_expiry() -> None:
    store = KVStore()
    store.values[b"k"] = b"v\n"
    store.expire_at_ms[b"k"] = 1_700_000_000_000
    store.values[b"p"] = b"x"
    assert store.show_key(b"k") == '"v\\n" (expires at 1700000000000)'
    assert store.show_key(b"p") == '"x"'
    assert store.show_key(b"gone") == "(nil)"
