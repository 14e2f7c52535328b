"""The RESP request parser (incremental, pipelined, inline, bounded) and the reply encoder
(RESP2 and RESP3)."""

from __future__ import annotations

from typing import Final
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvstore import limits
from kvstore.errors import ProtocolError, RedisError
from kvstore.protocol.numbers import parse_int
from kvstore.protocol.resp import (
    NULL_ARRAY,
    Reply,
    RespMap,
    RespParser,
    RespSet,
    Verbatim,
    encode_replies,
    encode_reply,
    reply_bytes_bound,
    split_inline,
)


def multibulk(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def parse_all(data: bytes, parser: RespParser | None = None) -> list[list[bytes]]:
    parser = parser or RespParser()
    parser.feed(data)
    commands = []
    while (command := parser.next_command()) is not None:
        commands.append(command)
    return commands


def protocol_error(data: bytes, parser: RespParser | None = None) -> tuple[str, list[list[bytes]]]:
    """The protocol error `data` causes, and the commands returned before it."""
    parser = parser or RespParser()
    parser.feed(data)
    commands = []
    error: ProtocolError | None = None
    try:
        while (command := parser.next_command()) is not None:
            commands.append(command)
    except ProtocolError as raised:
        error = raised
    assert error is not None, f"{data!r} parsed without an error"
    # The parser is dead: it answers the same error again, and no command.
    with pytest.raises(ProtocolError) as again:
        parser.next_command()
    assert again.value is error
    return error.message, commands


# --- requests -----------------------------------------------------------------------------------


def test_multibulk_commands_pipelined_in_one_read() -> None:
    data = multibulk(b"SET", b"k", b"v") + multibulk(b"GET", b"k") + multibulk(b"PING")
    assert parse_all(data) == [[b"SET", b"k", b"v"], [b"GET", b"k"], [b"PING"]]


def test_binary_arguments_including_crlf() -> None:
    assert parse_all(multibulk(b"SET", b"\r\n", b"\x00\xff", b"")) == [
        [b"SET", b"\r\n", b"\x00\xff", b""]
    ]


def test_empty_commands_and_lines_are_skipped() -> None:
    data = b"*0\r\n*-1\r\n\r\n\n   \r\n" + multibulk(b"PING")
    assert parse_all(data) == [[b"PING"]]


def test_the_bytes_after_a_count_and_after_an_argument_are_skipped_unread() -> None:
    # Redis does not check them; neither does this parser.
    assert parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\naXY*1\r\n$4\r\nPINGzz") == [
        [b"GET", b"a"],
        [b"PING"],
    ]
    assert parse_all(b"*1\rX$4\r\nPING\r\n") == [[b"PING"]]


@pytest.mark.parametrize(
    ("line", "arguments"),
    [
        (b"PING", [b"PING"]),
        (b"  set  k   v  ", [b"set", b"k", b"v"]),
        (b"set k\tv", [b"set", b"k", b"v"]),
        (b'set "a b" c', [b"set", b"a b", b"c"]),
        (b'echo "a\\x41\\n\\r\\t\\b\\a\\q\\\\"', [b"echo", b"aA\n\r\t\b\aq\\"]),
        (b'echo "\\xzz"', [b"echo", b"xzz"]),
        (b"echo 'it\\'s'", [b"echo", b"it's"]),
        (b"echo 'no \\n escapes'", [b"echo", b"no \\n escapes"]),
        (b'echo ""', [b"echo", b""]),
        (b"echo ''", [b"echo", b""]),
        (b'foo"bar baz"', [b"foobar baz"]),
        (b"a\x00b c", [b"a"]),
        (b"", []),
    ],
)
def test_inline_splitting(line: bytes, arguments: list[bytes]) -> None:
    assert split_inline(line) == arguments


@pytest.mark.parametrize("line", [b'echo "open', b"echo 'open", b'echo "a"b', b"echo 'a'b"])
def test_unbalanced_inline_quotes(line: bytes) -> None:
    assert split_inline(line) is None
    message, _ = protocol_error(line + b"\r\n")
    assert message == "ERR Protocol error: unbalanced quotes in request"


def test_inline_commands_end_at_lf_with_or_without_cr() -> None:
    assert parse_all(b"PING\r\nECHO hi\nset a 'b c'\r\n") == [
        [b"PING"],
        [b"ECHO", b"hi"],
        [b"set", b"a", b"b c"],
    ]


@st.composite
def command_streams(draw: st.DrawFn) -> tuple[list[list[bytes]], bytes]:
    commands = draw(
        st.lists(st.lists(st.binary(max_size=40), min_size=1, max_size=6), min_size=1, max_size=8)
    )
    chunks = []
    for command in commands:
        inline_safe = all(arg.isalnum() for arg in command)
        if inline_safe and draw(st.booleans()):
            chunks.append(b" ".join(command) + draw(st.sampled_from([b"\n", b"\r\n"])))
        else:
            chunks.append(multibulk(*command))
    return commands, b"".join(chunks)


@settings(max_examples=300)
@given(stream=command_streams(), cuts=st.lists(st.integers(1, 50), max_size=60))
def test_any_chunking_gives_the_same_commands(
    stream: tuple[list[list[bytes]], bytes], cuts: list[int]
) -> None:
    commands, data = stream
    parser = RespParser()
    parsed: list[list[bytes]] = []
    position = 0
    for size in [*cuts, len(data)]:
        parser.feed(data[position : position + size])
        position += size
        while (command := parser.next_command()) is not None:
            parsed.append(command)
    assert parsed == commands
    assert parser.buffered_bytes == 0


def test_the_parser_keeps_no_reference_to_what_it_was_fed() -> None:
    parser = RespParser()
    fed = bytearray(b"*1\r\n$4\r\nPI")
    parser.feed(fed)
    fed[:] = b"*1\r\n$4\r\nXX"
    parser.feed(b"NG\r\n")
    assert parser.next_command() == [b"PING"]


@st.composite
def damaged_streams(draw: st.DrawFn) -> bytes:
    """Multibulk commands with bytes overwritten, inserted or cut: counts that are not
    plain, a CR without its LF, a missing '$', a short argument, a cut at any point."""
    commands = draw(
        st.lists(st.lists(st.binary(max_size=10), min_size=0, max_size=4), min_size=1, max_size=4)
    )
    data = bytearray(b"".join(multibulk(*command) for command in commands))
    for _ in range(draw(st.integers(0, 3))):
        marks = [i for i, byte in enumerate(data) if byte in b"*$\r\n0123456789"]
        if marks and draw(st.booleans()):
            at = draw(st.sampled_from(marks))  # mostly where the framing is
        else:
            at = draw(st.integers(0, len(data)))
        damage = draw(st.sampled_from([b"\r", b"0", b"9", b"$", b"*", b"-", b"+", b"x", b""]))
        if draw(st.booleans()) and at < len(data):
            data[at : at + 1] = damage
        else:
            data[at:at] = damage
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


def outcome_of(data: bytes, cuts: list[int]) -> tuple[list[list[bytes]], str | None, int]:
    """Commands parsed from `data` fed in `cuts`, the protocol error if any, bytes left."""
    parser = RespParser(bulk_bytes_max=8, request_bytes_max=12, multibulk_args_max=3)
    parsed: list[list[bytes]] = []
    position = 0
    try:
        for size in [*cuts, len(data)]:
            parser.feed(data[position : position + size])
            position += size
            while (command := parser.next_command()) is not None:
                parsed.append(command)
    except ProtocolError as error:
        return parsed, error.message, parser.buffered_bytes
    return parsed, None, parser.buffered_bytes


@settings(max_examples=500)
@given(data=damaged_streams(), cuts=st.lists(st.integers(1, 30), max_size=8))
def test_the_one_pass_reading_of_whole_commands_agrees_with_the_general_one(
    data: bytes, cuts: list[int]
) -> None:
    fast = outcome_of(data, cuts)
    with mock.patch.object(RespParser, "_whole_multibulk", return_value=None):
        assert outcome_of(data, cuts) == fast


@st.composite
def near_lone_commands(draw: st.DrawFn) -> bytes:
    """GET and SET requests, alone or not, damaged like `damaged_streams` damages commands."""
    name = draw(st.sampled_from([b"GET", b"get", b"Get", b"GETX", b"SET", b"set", b"Set"]))
    commands = [[name, *draw(st.lists(st.binary(max_size=6), min_size=1, max_size=3))]]
    if draw(st.booleans()):
        commands.append([b"GET", draw(st.binary(max_size=3))])
    data = bytearray(b"".join(multibulk(*command) for command in commands))
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(data)))
        damage = draw(st.sampled_from([b"\r", b"\n", b"0", b"9", b"$", b"x", b""]))
        data[at : at + 1] = damage
    if draw(st.booleans()):
        del data[draw(st.integers(0, len(data))) :]
    return bytes(data)


@settings(max_examples=1000)
@given(
    before=st.sampled_from([b"", b"*1\r\n$4\r\nPING\r\n", b"*2\r\n$3\r\nGET\r\n"]),
    data=near_lone_commands(),
)
def test_a_lone_get_or_set_is_recognised_only_where_the_parser_would_read_it_alone(
    before: bytes, data: bytes
) -> None:
    parser = RespParser(bulk_bytes_max=8, request_bytes_max=10)
    parser.feed(before)
    while parser.next_command() is not None:
        pass
    key = parser.lone_get(data)
    key_and_value = parser.lone_set(data)
    if key is not None:
        assert key_and_value is None
        expected = [b"GET", key]
    elif key_and_value is not None:
        expected = [b"SET", *key_and_value]
    else:
        return
    assert parser.buffered_bytes == 0, "nothing was fed"
    parser.feed(data)
    command = parser.next_command()
    assert command is not None
    assert [command[0].upper(), *command[1:]] == expected
    assert parser.next_command() is None
    assert parser.buffered_bytes == 0


def test_lone_gets_and_what_is_left_to_the_parser() -> None:
    parser = RespParser(bulk_bytes_max=8, request_bytes_max=10)
    assert parser.lone_get(multibulk(b"GET", b"key")) == b"key"
    assert parser.lone_get(multibulk(b"get", b"")) == b""
    assert parser.lone_get(multibulk(b"GET", b"k\r\ney")) == b"k\r\ney"
    assert parser.lone_get(multibulk(b"Get", b"key")) is None, "other spellings"
    assert parser.lone_get(multibulk(b"GET", b"key") * 2) is None, "a pipeline"
    assert parser.lone_get(multibulk(b"GET", b"key")[:-1]) is None, "a cut request"
    assert parser.lone_get(b"*2\r\n$3\r\nGET\r\n$03\r\nkey\r\n") is None, "a leading zero"
    assert parser.lone_get(b"*2\r\n$3\r\nGET\r\n$3\r\nkeyXY") is None, "no CRLF after it"
    assert parser.lone_get(multibulk(b"GET", b"k" * 9)) is None, "over bulk_bytes_max"
    assert parser.lone_get(b"GET key\r\n") is None, "inline"
    parser.feed(b"*2\r\n$3\r\nGET\r\n")
    assert parser.next_command() is None
    assert parser.lone_get(multibulk(b"GET", b"key")) is None, "in the middle of a command"


def test_lone_sets_and_what_is_left_to_the_parser() -> None:
    parser = RespParser(bulk_bytes_max=8, request_bytes_max=12)
    assert parser.lone_set(multibulk(b"SET", b"key", b"value")) == (b"key", b"value")
    assert parser.lone_set(multibulk(b"set", b"", b"")) == (b"", b"")
    assert parser.lone_set(multibulk(b"SET", b"k\r\n", b"\r\nv")) == (b"k\r\n", b"\r\nv")
    assert parser.lone_set(multibulk(b"SET", b"k", b"v", b"NX")) is None, "options"
    assert parser.lone_set(multibulk(b"SET", b"k")) is None, "a key alone"
    assert parser.lone_set(multibulk(b"SET", b"k", b"v") * 2) is None, "a pipeline"
    assert parser.lone_set(multibulk(b"SET", b"k", b"v")[:-1]) is None, "a cut request"
    not_bulk = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n:1\r\nv\r\n"
    assert parser.lone_set(not_bulk) is None, "not a bulk string"
    assert parser.lone_set(multibulk(b"SET", b"k", b"v" * 9)) is None, "over bulk_bytes_max"
    assert parser.lone_set(multibulk(b"SET", b"k" * 5, b"v" * 5)) is None, "over the request's"
    assert parser.lone_set(multibulk(b"SET", b"k" * 4, b"v" * 5)) == (b"kkkk", b"vvvvv")
    assert parser.lone_set(multibulk(b"GET", b"key")) is None
    assert parser.lone_get(multibulk(b"SET", b"key", b"value")) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"*x\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*01\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*+1\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*99999999999999999999\r\n", "ERR Protocol error: invalid multibulk length"),
        (b"*1\r\nfoo\r\n", "ERR Protocol error: expected '$', got 'f'"),
        (b"*1\r\n:4\r\n", "ERR Protocol error: expected '$', got ':'"),
        (b"*1\r\n\xff\r\n", "ERR Protocol error: expected '$', got '\xff'"),
        (b"*1\r\n$-1\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$04\r\nPING\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$x\r\n", "ERR Protocol error: invalid bulk length"),
        (b"*1\r\n$\r\n", "ERR Protocol error: invalid bulk length"),
    ],
)
def test_malformed_requests_get_redis_errors(data: bytes, message: str) -> None:
    assert protocol_error(data)[0] == message


@given(st.text(alphabet="0123456789+- x", max_size=22))
def test_counts_follow_redis_integer_rules(text: str) -> None:
    """A multibulk or bulk count is whatever `parse_int` makes of it (the parser's fast path
    for plain digits must agree); one it refuses, or one out of bounds, is a protocol error."""
    count = parse_int(text.encode())
    parser = RespParser()
    parser.feed(b"*" + text.encode() + b"\r\n")
    if count is None or count > parser.multibulk_args_max:
        with pytest.raises(ProtocolError, match="invalid multibulk length"):
            parser.next_command()
    else:
        assert parser.next_command() is None, "waits for the arguments (or skips an empty one)"
    parser = RespParser()
    parser.feed(b"*1\r\n$" + text.encode() + b"\r\n")
    if count is None or count < 0 or count > parser.bulk_bytes_max:
        with pytest.raises(ProtocolError, match="invalid bulk length"):
            parser.next_command()
    else:
        assert parser.next_command() is None, "waits for the argument's bytes"


def test_commands_before_a_protocol_error_are_still_returned() -> None:
    message, commands = protocol_error(multibulk(b"PING") + b"PING\r\n*x\r\n" + multibulk(b"GET"))
    assert commands == [[b"PING"], [b"PING"]]
    assert message == "ERR Protocol error: invalid multibulk length"
    assert isinstance(ProtocolError(message), RedisError)


def test_incomplete_requests_wait_for_more_bytes() -> None:
    parser = RespParser()
    for piece in (b"*2\r", b"\n$3\r\nGE", b"T\r\n$1", b"\r\n", b"k", b"\r"):
        parser.feed(piece)
        assert parser.next_command() is None
    parser.feed(b"\n")
    assert parser.next_command() == [b"GET", b"k"]


# --- bounds -------------------------------------------------------------------------------------


def small_parser() -> RespParser:
    return RespParser(
        request_bytes_max=100,
        bulk_bytes_max=60,
        multibulk_args_max=4,
        inline_bytes_max=32,
        buffered_bytes_max=200,
    )


def test_inline_requests_are_bounded() -> None:
    assert parse_all(b"x" * 32 + b"\n", small_parser()) == [[b"x" * 32]]
    message, _ = protocol_error(b"x" * 33 + b"\n", small_parser())
    assert message == "ERR Protocol error: too big inline request"
    # Without a newline the bound is what is buffered.
    message, _ = protocol_error(b"x" * 33, small_parser())
    assert message == "ERR Protocol error: too big inline request"
    parser = small_parser()
    parser.feed(b"x" * 32)
    assert parser.next_command() is None


def test_count_lines_are_bounded() -> None:
    message, _ = protocol_error(b"*" + b"1" * 40, small_parser())
    assert message == "ERR Protocol error: too big mbulk count string"
    message, _ = protocol_error(b"*1\r\n$" + b"1" * 40, small_parser())
    assert message == "ERR Protocol error: too big bulk count string"


def test_argument_counts_and_sizes_are_bounded() -> None:
    assert parse_all(multibulk(b"a", b"b", b"c", b"d"), small_parser())
    message, _ = protocol_error(b"*5\r\n", small_parser())
    assert message == "ERR Protocol error: invalid multibulk length"
    assert parse_all(multibulk(b"x" * 60), small_parser()) == [[b"x" * 60]]
    message, _ = protocol_error(b"*1\r\n$61\r\n", small_parser())
    assert message == "ERR Protocol error: invalid bulk length"
    # Each argument fits, their sum does not: refused before the data arrives.
    message, _ = protocol_error(b"*2\r\n$60\r\n" + b"x" * 60 + b"\r\n$41\r\n", small_parser())
    assert message == "ERR Protocol error: too big request"


def test_the_buffer_is_bounded_by_room_bytes() -> None:
    parser = small_parser()
    assert parser.room_bytes == 200
    parser.feed(b"*1\r\n$50\r\n" + b"x" * 20)
    assert parser.next_command() is None
    # The count line is consumed; the argument waits whole in the buffer.
    assert parser.buffered_bytes == 25
    assert parser.room_bytes == 175
    with pytest.raises(AssertionError):
        parser.feed(b"x" * 176)


def test_the_default_bounds_come_from_limits() -> None:
    parser = RespParser()
    assert parser.request_bytes_max == limits.request_bytes_max_default
    assert parser.inline_bytes_max == limits.inline_bytes_max
    assert parser.room_bytes == limits.buffered_bytes_max


# --- replies ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "encoded"),
    [
        ("OK", b"+OK\r\n"),
        ("PONG", b"+PONG\r\n"),
        (RedisError("ERR syntax error"), b"-ERR syntax error\r\n"),
        (RedisError("WRONGTYPE bad\r\nline\n"), b"-WRONGTYPE bad  line\r\n"),
        (RedisError("ERR unknown command '\xe9'"), b"-ERR unknown command '\xe9'\r\n"),
        (0, b":0\r\n"),
        (15, b":15\r\n"),
        (-1, b":-1\r\n"),
        (9223372036854775807, b":9223372036854775807\r\n"),
        (b"", b"$0\r\n\r\n"),
        (b"a\r\nb", b"$4\r\na\r\nb\r\n"),
        (None, b"$-1\r\n"),
        (NULL_ARRAY, b"*-1\r\n"),
        ([], b"*0\r\n"),
        ([b"a", None, 1], b"*3\r\n$1\r\na\r\n$-1\r\n:1\r\n"),
        ((b"0", [b"k1", b"k2"]), b"*2\r\n$1\r\n0\r\n*2\r\n$2\r\nk1\r\n$2\r\nk2\r\n"),
        ([[], [["OK"]]], b"*2\r\n*0\r\n*1\r\n*1\r\n+OK\r\n"),
    ],
)
def test_reply_encoding(reply: object, encoded: bytes) -> None:
    out = bytearray()
    encode_reply(reply, out)  # type: ignore[arg-type]
    assert bytes(out) == encoded


SAME_IN_BOTH: Final[list[Reply]] = ["OK", RedisError("ERR x"), 7, b"v", [b"a", 1], []]


@pytest.mark.parametrize(
    ("reply", "resp2", "resp3"),
    [
        (None, b"$-1\r\n", b"_\r\n"),
        (NULL_ARRAY, b"*-1\r\n", b"_\r\n"),
        ([None], b"*1\r\n$-1\r\n", b"*1\r\n_\r\n"),
        (
            RespMap([(b"a", 1), (b"b", [None])]),
            b"*4\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n*1\r\n$-1\r\n",
            b"%2\r\n$1\r\na\r\n:1\r\n$1\r\nb\r\n*1\r\n_\r\n",
        ),
        (RespMap(), b"*0\r\n", b"%0\r\n"),
        (RespSet(["fast", "write"]), b"*2\r\n+fast\r\n+write\r\n", b"~2\r\n+fast\r\n+write\r\n"),
        (Verbatim(b"# Server\r\n"), b"$10\r\n# Server\r\n\r\n", b"=14\r\ntxt:# Server\r\n\r\n"),
    ],
)
def test_resp3_differs_only_for_nulls_maps_sets_and_verbatim_text(
    reply: object, resp2: bytes, resp3: bytes
) -> None:
    assert encode_replies([reply], resp3=False) == resp2  # type: ignore[list-item]
    assert encode_replies([reply], resp3=True) == resp3  # type: ignore[list-item]
    assert encode_replies(SAME_IN_BOTH, resp3=True) == encode_replies(SAME_IN_BOTH)


def test_many_replies_encode_into_one_buffer() -> None:
    assert encode_replies(["OK", 1, b"v", None]) == b"+OK\r\n:1\r\n$1\r\nv\r\n$-1\r\n"


@pytest.mark.parametrize("reply", [True, 1.5, object(), "two\r\nlines"])
def test_values_that_are_not_replies_are_programmer_errors(reply: object) -> None:
    with pytest.raises(AssertionError):
        encode_reply(reply, bytearray())  # type: ignore[arg-type]


def replies() -> st.SearchStrategy[Reply]:
    """Any reply the encoder takes, nested."""
    leaves = st.one_of(
        st.binary(max_size=40),
        st.text(st.characters(max_codepoint=255, blacklist_characters="\r\n"), max_size=20),
        st.integers(-(2**63), 2**63 - 1),
        st.none(),
        st.just(NULL_ARRAY),
        st.text(st.characters(max_codepoint=255), max_size=20).map(
            lambda t: RedisError("ERR " + t)
        ),
        st.binary(max_size=40).map(Verbatim),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.lists(inner, max_size=5).map(tuple),
            st.lists(inner, max_size=5).map(RespSet),
            st.lists(st.tuples(inner, inner), max_size=3).map(RespMap),
        ),
        max_leaves=20,
    )


@given(replies(), st.booleans())
def test_the_reply_bound_is_never_below_the_encoding(reply: Reply, resp3: bool) -> None:
    out = bytearray()
    encode_reply(reply, out, resp3)
    assert len(out) <= reply_bytes_bound(reply)


def test_the_reply_bound_of_values_is_close_to_their_encoding() -> None:
    values = [b"v" * 1000] * 100
    assert reply_bytes_bound(values) < len(encode_replies([values])) * 1.05
