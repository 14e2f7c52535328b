"""The simulation's side of the store (examples/kvstore/testing/workload.py): the observed store
reports what it applies and answers as `KVStore` does; the Redis client's requests are what the
server parses and its reply parser reads what the server encodes."""

from __future__ import annotations

import pytest
from kvstore.errors import RedisError
from kvstore.protocol.resp import Reply, RespParser, encode_replies
from kvstore.testing.workload import (
    ErrorReply,
    ReplyError,
    encode_command,
    observed_kvstore,
    parse_reply,
    set_label,
)

from rsm.testing.workload import Applied
from tests.unit.kvstore.replica import Replica, words


def test_the_observed_store_reports_each_write_it_applies_with_its_label() -> None:
    applied: list[Applied] = []
    replica = Replica(observed_kvstore(applied.append)())
    outcomes = replica.apply(
        [words("SET", "k", "1000"), words("INCR", "k"), words("DEL", "k", "j"), words("DEL", "k")]
    )
    assert [outcome.value for outcome in outcomes] == ["OK", 1001, 1, 0]
    assert [(a.index, a.epoch, a.op, a.kind, a.result) for a in applied] == [
        (1, 1, set_label("k", "1000"), "set", "OK"),
        (2, 1, "incr k @2", "incr", 1001),
        (3, 1, "del k j @3", "del", 1),
        (4, 1, "del k @4", "del", 0),
    ]


def test_requests_are_what_the_server_parses() -> None:
    parser = RespParser()
    parser.feed(encode_command([b"SET", b"k", b"a b\r\n"]))
    assert parser.next_command() == [b"SET", b"k", b"a b\r\n"]


@pytest.mark.parametrize(
    "reply",
    ["OK", 42, b"value", None, [b"a", None, 3], []],
)
def test_replies_read_back_as_the_server_encodes_them(reply: Reply) -> None:
    data = encode_replies([reply, "OK"])
    parsed = parse_reply(data)
    assert parsed is not None
    value, end = parsed
    assert value == reply
    assert parse_reply(data, end) == ("OK", len(data))
    for cut in range(end):
        assert parse_reply(data[:cut]) is None


def test_error_replies_and_garbage() -> None:
    data = encode_replies([RedisError("TRYAGAIN the command was not applied")])
    parsed = parse_reply(data)
    assert parsed is not None
    assert isinstance(parsed[0], ErrorReply)
    assert parsed[0].startswith("TRYAGAIN")
    with pytest.raises(ReplyError):
        parse_reply(b"?what\r\n")
    with pytest.raises(ReplyError):
        parse_reply(b":x\r\n")
