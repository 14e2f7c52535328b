"""DEBUG DIGEST and DEBUG DIGEST-VALUE (kvstore/digests.py): computed from the replicated
state hash, so equal on replicas with equal contents, and answered in Redis's shapes (the
error texts and reply types are redis-server 7.0's for the same requests)."""

from __future__ import annotations

import pytest
from kvstore.store.digests import EMPTY_DIGEST

from tests.unit.kvstore.replica import Conversation, Replica


def digest(replica: Replica) -> str:
    value = replica.run("DEBUG", "DIGEST")
    assert isinstance(value, str)
    return value


def value_digests(replica: Replica, *keys: str) -> list[str]:
    value = replica.run("DEBUG", "DIGEST-VALUE", *keys)
    assert isinstance(value, list)
    return value


def test_an_empty_store_digests_to_zeros_and_digests_are_simple_strings() -> None:
    client = Conversation(Replica())
    zeros = b"+" + b"0" * 40 + b"\r\n"
    assert client.send(["DEBUG", "DIGEST"]) == zeros
    assert client.send(["DEBUG", "DIGEST-VALUE", "a", "b"]) == b"*2\r\n" + zeros + zeros
    assert client.send(["DEBUG", "DIGEST-VALUE"]) == b"*0\r\n"
    assert client.send(["debug", "digest"]) == zeros


def test_the_digests_are_the_state_hash_and_the_key_digests() -> None:
    replica = Replica()
    replica.run("SET", "a", "1")
    replica.run("SET", "b", "2", "PX", "5000")
    assert digest(replica) == replica.store.state_hash()[:20].hex()
    shares = dict(replica.store.key_digests())
    assert value_digests(replica, "b", "nokey", "a") == [
        shares[b"b"][:20].hex(),
        EMPTY_DIGEST,
        shares[b"a"][:20].hex(),
    ]
    assert digest(replica) != EMPTY_DIGEST


def test_replicas_with_equal_contents_answer_equal_digests() -> None:
    one, other = Replica(), Replica()
    one.run("SET", "a", "1")
    one.run("SET", "tmp", "x")
    one.run("RENAME", "tmp", "b")
    other.run("MSET", "b", "x", "a", "1")
    assert digest(one) == digest(other)
    assert value_digests(one, "a", "b") == value_digests(other, "a", "b")
    other.run("APPEND", "b", "y")
    assert digest(one) != digest(other)
    mine, theirs = value_digests(one, "a", "b"), value_digests(other, "a", "b")
    assert [mine[0] == theirs[0], mine[1] == theirs[1]] == [True, False]


def test_a_ttl_changes_the_keys_digest() -> None:
    replica = Replica()
    replica.run("SET", "a", "1")
    before = value_digests(replica, "a")
    replica.run("PEXPIRE", "a", "60000")
    assert value_digests(replica, "a") != before
    replica.run("PERSIST", "a")
    assert value_digests(replica, "a") == before


def test_asking_changes_nothing() -> None:
    replica = Replica()
    replica.run("SET", "a", "1", "PX", "10")
    replica.advance_ms(20)
    state = replica.state()
    digest(replica)
    value_digests(replica, "a")
    assert replica.state() == state, "an expired key is counted, not deleted"


@pytest.mark.parametrize(
    ("request_words", "reply"),
    [
        (["DEBUG"], b"-ERR wrong number of arguments for 'debug' command\r\n"),
        (
            ["DEBUG", "foo"],
            b"-ERR unknown subcommand or wrong number of arguments for 'foo'. Try DEBUG HELP.\r\n",
        ),
        (
            ["DEBUG", "digest", "x"],
            b"-ERR unknown subcommand or wrong number of arguments for 'digest'. "
            b"Try DEBUG HELP.\r\n",
        ),
    ],
)
def test_bad_requests_get_redis_errors(request_words: list[str], reply: bytes) -> None:
    assert Conversation(Replica()).send(request_words) == reply


def test_help_lists_the_subcommands() -> None:
    lines = Replica().run("DEBUG", "HELP")
    assert lines[0] == "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert [line for line in lines if not line.startswith(" ")][1:] == [
        "DIGEST",
        "DIGEST-VALUE <key> [<key> ...]",
        "HELP",
    ]


def test_a_queued_digest_sees_the_writes_before_it_in_the_transaction() -> None:
    replica = Replica()
    client = Conversation(replica)
    reply = client.send(["MULTI"], ["SET", "a", "1"], ["DEBUG", "DIGEST"], ["EXEC"])
    expected = digest(replica)
    assert expected != EMPTY_DIGEST
    assert reply == b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n+" + expected.encode() + b"\r\n"
