"""RESP, the Redis protocol: an incremental request parser and a reply encoder (RESP2 and RESP3).

Pure: bytes in, commands out (h11 style), and replies to bytes; no sockets.

Requests.  A client sends commands one after another on one connection
(pipelining: it need not wait for replies).  Each command is either

* multibulk: `*<n>\\r\\n` then n arguments, each `$<len>\\r\\n<len bytes>\\r\\n`
  (`<n>` and `<len>` are decimal, no sign or leading zeros; `*0`, or a
  negative count, is an empty command and is skipped); or
* inline: one line of text ending in `\\n` (or `\\r\\n`), split into
  arguments like a shell would: blanks separate, "double quotes" allow the
  escapes \\n \\r \\t \\b \\a \\xHH and \\<any>, 'single quotes' allow \\';
  a closing quote must be followed by a blank or the end of the line; an
  empty line is skipped.

A request starting with `*` is multibulk, anything else is inline.  The
parser follows Redis's `processMultibulkBuffer` and `processInlineBuffer`
byte for byte, leniencies included: a count line is read up to its `\\r`
and the next byte is skipped unread, and so are the two bytes after each
argument's data (a client sending `$1\\r\\naXY` gets "a").  One difference:
Redis looks for line ends as in a C string, so a NUL byte before a line's
end makes it wait for more data until a bound is hit; here line ends are
found past NUL bytes, so such a request fails (or completes) at once.

Errors, after which the parser accepts nothing more and the connection must
be closed once the error is sent (`ProtocolError`):

    ERR Protocol error: invalid multibulk length     count not a number, or too large
    ERR Protocol error: expected '$', got 'x'        an argument without its `$`
    ERR Protocol error: invalid bulk length          length not a number, negative, too large
    ERR Protocol error: too big mbulk count string   no `\\r` in the first `inline_bytes_max`
    ERR Protocol error: too big bulk count string    ... of an argument's length line
    ERR Protocol error: too big inline request       no `\\n` within `inline_bytes_max`
    ERR Protocol error: unbalanced quotes in request  inline quoting broken
    ERR Protocol error: too big request              the arguments exceed `request_bytes_max`

Replies (Python value -> bytes).  Requests are the same in both protocol
versions; a connection's replies are RESP2 until `HELLO 3` switches it to
RESP3 (and back with `HELLO 2`).  Values and their encodings:

    value               RESP2                     RESP3
    str                 simple `+OK\r\n`          the same  (no CR or LF inside)
    RedisError          error `-ERR msg\r\n`      the same  (CR/LF become spaces)
    int                 integer `:42\r\n`         the same
    bytes               bulk `$3\r\nabc\r\n`      the same
    None                null bulk `$-1\r\n`       null `_\r\n`
    NULL_ARRAY          null array `*-1\r\n`      null `_\r\n`
    list / tuple        array `*2\r\n` + items    the same
    RespMap(pairs)      array of 2n items         map `%n\r\n` + key, value, ...
    RespSet(items)      array                     set `~n\r\n` + items
    Verbatim(text)      bulk string               verbatim `=<4+len>\r\ntxt:<text>\r\n`

Which commands answer maps, sets and verbatim strings follows Redis 7:
HELLO, CONFIG GET and COMMAND DOCS answer maps, COMMAND INFO's flags and
categories are sets, INFO is verbatim text.  Plain values (str, bytes, int,
None, lists) are also what `KVStore` commands return: they survive the
framework's CBOR round trip unchanged.

Invariants: the parser never holds more than `buffered_bytes_max` bytes
(`feed` takes at most `room_bytes`); every command it returns has at
least one argument and at most `request_bytes_max` bytes of arguments;
after a `ProtocolError` it returns no command again.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, TypeAlias

from kvstore import limits
from kvstore.errors import ProtocolError, RedisError
from kvstore.protocol.numbers import parse_int


class _NullArray:
    """The type of `NULL_ARRAY`, the RESP2 null array (`*-1`)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NULL_ARRAY"


NULL_ARRAY: Final = _NullArray()


class RespMap(tuple[tuple["Reply", "Reply"], ...]):
    """A map reply: RESP3 `%`, or a flat array of keys and values in RESP2.  Built from pairs."""

    __slots__ = ()


class RespSet(tuple["Reply", ...]):
    """A set reply: RESP3 `~`, or an array in RESP2."""

    __slots__ = ()


class Verbatim(bytes):
    """Text for a human (INFO): a RESP3 verbatim string of format "txt", a bulk string in RESP2."""

    __slots__ = ()


Reply: TypeAlias = (
    "str | bytes | int | RedisError | _NullArray | RespMap | RespSet | Sequence[Reply] | None"
)
"""A value the encoder writes (see the module docstring)."""

_CR: Final = 0x0D
_LF: Final = 0x0A
_STAR: Final = 0x2A
_DOLLAR: Final = 0x24
_ZERO: Final = 0x30
_PLAIN_COUNT_DIGITS_MAX: Final = 18
"""Up to this many digits, a count is below 2**63 whatever they are."""


_LONE_GET_PREFIXES: Final = (b"*2\r\n$3\r\nGET\r\n$", b"*2\r\n$3\r\nget\r\n$")
_LONE_SET_PREFIXES: Final = (b"*3\r\n$3\r\nSET\r\n$", b"*3\r\n$3\r\nset\r\n$")
_LONE_PREFIX_BYTES: Final = len(_LONE_GET_PREFIXES[0])
"""Of either prefix: up to the first argument's count."""
_NAME_BYTES: Final = len(b"GET")
_SMALL_COUNTS: Final = {b"%d" % count: count for count in range(1024)}
"""Counts in their usual form up to 1023, by their text: one dict lookup instead of
`_plain_count`'s checks and `int`."""


def _plain_count(raw: bytes | bytearray) -> int | None:
    """A count in the usual form, ASCII digits without a leading zero, or None."""
    if raw.isdigit() and len(raw) <= _PLAIN_COUNT_DIGITS_MAX and (raw[0] != _ZERO or len(raw) == 1):
        return int(raw)
    return None


def _count(raw: bytes | bytearray) -> int | None:
    """A multibulk or bulk count: an integer by Redis's rules (`parse_int`), or None.

    The usual form skips `parse_int`'s pattern match, a few percent of the server's
    CPU per command.
    """
    count = _plain_count(raw)
    return parse_int(raw) if count is None else count


class RespParser:
    """Feed bytes, pull commands: `feed(data)`, then `next_command()` until it returns None.

    `next_command` returns the arguments of the next complete command
    (command name first, as sent), None when more bytes are needed, and
    raises `ProtocolError` when the client broke the protocol.  The shell
    reads at most `room_bytes` before each `feed` and takes every complete
    command before it reads again.
    """

    __slots__ = (
        "_buffer",
        "_position",
        "_arguments",
        "_remaining",
        "_request_bytes",
        "_error",
        "request_bytes_max",
        "bulk_bytes_max",
        "multibulk_args_max",
        "inline_bytes_max",
        "buffered_bytes_max",
    )

    def __init__(
        self,
        *,
        request_bytes_max: int = limits.request_bytes_max_default,
        bulk_bytes_max: int = limits.bulk_bytes_max_default,
        multibulk_args_max: int = limits.multibulk_args_max,
        inline_bytes_max: int = limits.inline_bytes_max,
        buffered_bytes_max: int = limits.buffered_bytes_max,
    ) -> None:
        assert 0 < bulk_bytes_max <= request_bytes_max
        assert inline_bytes_max > 0
        assert buffered_bytes_max > request_bytes_max + inline_bytes_max
        self._buffer: bytes | bytearray = b""
        self._position = 0
        """Where the next unparsed byte is; bytes before it are consumed."""
        self._arguments: list[bytes] = []
        """Arguments of the multibulk command being read."""
        self._remaining = 0
        """Arguments the multibulk command being read still lacks; 0 between commands."""
        self._request_bytes = 0
        """Argument bytes of the multibulk command being read so far."""
        self._error: ProtocolError | None = None
        self.request_bytes_max = request_bytes_max
        self.bulk_bytes_max = bulk_bytes_max
        self.multibulk_args_max = multibulk_args_max
        self.inline_bytes_max = inline_bytes_max
        self.buffered_bytes_max = buffered_bytes_max

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed and not yet consumed by a returned command."""
        return len(self._buffer) - self._position

    @property
    def room_bytes(self) -> int:
        """How many bytes `feed` may take now."""
        return self.buffered_bytes_max - self.buffered_bytes

    def feed(self, data: bytes) -> None:
        """Add bytes received from the client."""
        assert len(data) <= self.room_bytes, "read at most room_bytes, after taking every command"
        buffer = self._buffer
        position = self._position
        self._position = 0
        if position == len(buffer):
            # All fed before is consumed (the usual case): parse `data` itself, whose
            # slices are the arguments, without copying it into a buffer first.
            self._buffer = data if type(data) is bytes else bytes(data)
        elif type(buffer) is bytearray:
            del buffer[:position]
            buffer += data
        else:
            self._buffer = bytearray(buffer[position:]) + data

    def lone_get(self, data: bytes) -> bytes | None:
        """The key, when `data` is exactly one GET request (`GET` or `get`, multibulk with
        plain counts, lines ending in CRLF) and the parser is between commands with nothing
        buffered: then `feed(data)` and `next_command()` would return `[GET, key]` and then
        None, and the caller may answer it without them (nothing is fed).  None otherwise:
        feed `data` as usual."""
        if not data.startswith(_LONE_GET_PREFIXES) or not self._between_commands():
            return None
        key = self._lone_bulk(data, _LONE_PREFIX_BYTES, self.request_bytes_max - _NAME_BYTES)
        if key is None or key[1] + 2 != len(data):
            return None
        return data[key[0] : key[1]]

    def lone_set(self, data: bytes) -> tuple[bytes, bytes] | None:
        """The key and the value, when `data` is exactly one SET request without options
        (`SET` or `set`, otherwise as `lone_get` says): `feed(data)` and `next_command()`
        would return `[SET, key, value]` and then None.  None otherwise: feed `data`."""
        if not data.startswith(_LONE_SET_PREFIXES) or not self._between_commands():
            return None
        room = self.request_bytes_max - _NAME_BYTES
        key = self._lone_bulk(data, _LONE_PREFIX_BYTES, room)
        if key is None:
            return None
        key_start, key_end = key
        value_at = key_end + 2
        if value_at >= len(data) or data[value_at] != _DOLLAR:
            return None
        value = self._lone_bulk(data, value_at + 1, room - (key_end - key_start))
        if value is None or value[1] + 2 != len(data):
            return None
        return data[key_start:key_end], data[value[0] : value[1]]

    def _between_commands(self) -> bool:
        """Nothing buffered, no command half read, no error pending."""
        return not self._remaining and self._position == len(self._buffer) and self._error is None

    def _lone_bulk(self, data: bytes, count_at: int, room: int) -> tuple[int, int] | None:
        """Where the bulk string whose count begins at `count_at` (right after its `$`) lies
        in `data`, as (start, end), when its count is plain, it is within `bulk_bytes_max`
        and `room` (the request's bytes left) and CRLF follows it; else None."""
        line_end = data.find(b"\r\n", count_at)
        if line_end < 0:
            return None
        raw = data[count_at:line_end]
        length = _SMALL_COUNTS.get(raw)
        if length is None:
            length = _plain_count(raw)
        if length is None or length > self.bulk_bytes_max or length > room:
            return None
        start = line_end + 2
        end = start + length
        if len(data) < end + 2 or data[end] != _CR or data[end + 1] != _LF:
            return None
        return start, end

    def next_command(self) -> list[bytes] | None:
        """The next complete command's arguments, or None when more bytes are needed."""
        if self._error is not None:
            raise self._error
        try:
            while True:
                buffer = self._buffer
                if self._position == len(buffer):
                    return None
                if self._remaining:
                    command = self._multibulk_command()
                elif buffer[self._position] != _STAR:
                    command = self._inline_command()
                else:
                    command = self._whole_multibulk() or self._multibulk_command()
                if command is None:
                    return None
                if command:
                    return command
        except ProtocolError as error:
            self._error = error
            raise

    def _fail(self, message: str) -> ProtocolError:
        return ProtocolError("ERR Protocol error: " + message)

    def _inline_command(self) -> list[bytes] | None:
        """An inline command; [] for an empty line (skipped by the caller)."""
        buffer = self._buffer
        start = self._position
        newline = buffer.find(b"\n", start)
        if newline < 0:
            if len(buffer) - start > self.inline_bytes_max:
                raise self._fail("too big inline request")
            return None
        end = newline
        if end > start and buffer[end - 1] == _CR:
            end -= 1
        if end - start > self.inline_bytes_max:
            raise self._fail("too big inline request")
        arguments = split_inline(bytes(buffer[start:end]))
        if arguments is None:
            raise self._fail("unbalanced quotes in request")
        self._position = newline + 1
        return arguments

    def _whole_multibulk(self) -> list[bytes] | None:
        """The usual case in one pass: a whole multibulk command with plain counts (digits,
        no leading zero) within the bounds, in a buffer that is the received bytes
        themselves.  None, with nothing consumed, for anything else (a buffer gathered from
        several reads too), which `_multibulk_command` then reads by the same rules (or
        rejects).

        Lines end where `_multibulk_command` says they do: at the first CR, with one more
        byte (the LF, not checked) after it."""
        buffer = self._buffer
        if type(buffer) is not bytes:
            return None
        size = len(buffer)
        position = self._position
        line_end = buffer.find(b"\r", position)
        if line_end < 0 or line_end + 1 >= size:
            return None
        raw = buffer[position + 1 : line_end]
        count = _SMALL_COUNTS.get(raw)
        if count is None:
            count = _plain_count(raw)
        if count is None or not 0 < count <= self.multibulk_args_max:
            return None
        position = line_end + 2
        bulk_bytes_max = self.bulk_bytes_max
        room = self.request_bytes_max
        arguments: list[bytes] = []
        for _ in range(count):
            if position >= size or buffer[position] != _DOLLAR:
                return None
            line_end = buffer.find(b"\r", position)
            if line_end < 0 or line_end + 1 >= size:
                return None
            raw = buffer[position + 1 : line_end]
            length = _SMALL_COUNTS.get(raw)
            if length is None:
                length = _plain_count(raw)
            if length is None or length > bulk_bytes_max or length > room:
                return None
            room -= length
            start = line_end + 2
            position = start + length + 2
            if position > size:
                return None
            arguments.append(buffer[start : start + length])
        self._position = position
        return arguments

    def _multibulk_command(self) -> list[bytes] | None:
        """A multibulk command, possibly resumed; [] for an empty one (skipped by the caller)."""
        buffer = self._buffer
        position = self._position
        if self._remaining == 0:
            line_end = buffer.find(b"\r", position)
            if line_end < 0:
                if len(buffer) - position > self.inline_bytes_max:
                    raise self._fail("too big mbulk count string")
                return None
            if line_end + 1 >= len(buffer) and line_end - position <= self.inline_bytes_max:
                return None  # (a longer line is refused now, as it would be once its LF came)
            count = _count(buffer[position + 1 : line_end])
            if count is None or count > self.multibulk_args_max:
                raise self._fail("invalid multibulk length")
            self._position = line_end + 2
            if count <= 0:
                return []
            self._remaining = count
            self._arguments = []
            self._request_bytes = 0
        while self._remaining:
            argument = self._bulk_argument()
            if argument is None:
                return None
            self._arguments.append(argument)
            self._remaining -= 1
        arguments = self._arguments
        self._arguments = []
        return arguments

    def _bulk_argument(self) -> bytes | None:
        """The next `$<len>` argument of the command being read, or None for more bytes.

        The position moves past the length line only once the whole argument
        is there, so a resumed call reads the line again (it is short).
        """
        buffer = self._buffer
        position = self._position
        line_end = buffer.find(b"\r", position)
        if line_end < 0:
            if len(buffer) - position > self.inline_bytes_max:
                raise self._fail("too big bulk count string")
            return None
        if line_end + 1 >= len(buffer) and line_end - position <= self.inline_bytes_max:
            return None  # (a longer line is refused now, as it would be once its LF came)
        if buffer[position] != _DOLLAR:
            got = chr(buffer[position])
            raise self._fail(f"expected '$', got '{got}'")
        length = _count(buffer[position + 1 : line_end])
        if length is None or length < 0 or length > self.bulk_bytes_max:
            raise self._fail("invalid bulk length")
        if self._request_bytes + length > self.request_bytes_max:
            raise self._fail("too big request")
        start = line_end + 2
        if len(buffer) - start < length + 2:
            return None
        self._position = start + length + 2
        self._request_bytes += length
        return bytes(buffer[start : start + length])


# --- inline commands ---------------------------------------------------------------------------

_SPACES: Final = frozenset(b" \t\n\v\f\r")
"""C `isspace`: what may follow a closing quote, and what separates arguments."""
_UNQUOTED_ENDS: Final = frozenset(b" \n\r\t\0")
"""What ends an unquoted argument (not \\v or \\f, as in Redis)."""
_ESCAPES: Final = {
    ord("n"): ord("\n"),
    ord("r"): ord("\r"),
    ord("t"): ord("\t"),
    ord("b"): ord("\b"),
    ord("a"): ord("\a"),
}
_HEX_DIGITS: Final = frozenset(b"0123456789abcdefABCDEF")


def split_inline(line: bytes) -> list[bytes] | None:
    """An inline command line split into arguments as Redis's `sdssplitargs`; None if unbalanced.

    The line is a C string to Redis: a NUL byte ends it.  (Redis also looks
    for the newline as in a C string, so it never completes a line holding
    a NUL; here such a line completes and its arguments end at the NUL.)
    """
    nul = line.find(b"\0")
    if nul >= 0:
        line = line[:nul]
    arguments: list[bytes] = []
    length = len(line)
    position = 0
    while True:
        while position < length and line[position] in _SPACES:
            position += 1
        if position == length:
            return arguments
        current = bytearray()
        in_double = in_single = False
        while True:
            byte = line[position] if position < length else 0
            following = line[position + 1] if position + 1 < length else 0
            if in_double:
                if (
                    byte == 0x5C
                    and following == 0x78
                    and position + 3 < length
                    and line[position + 2] in _HEX_DIGITS
                    and line[position + 3] in _HEX_DIGITS
                ):
                    current.append(int(line[position + 2 : position + 4], 16))
                    position += 3
                elif byte == 0x5C and following:
                    position += 1
                    current.append(_ESCAPES.get(following, following))
                elif byte == 0x22:
                    if following and following not in _SPACES:
                        return None
                    position += 1
                    break
                elif not byte:
                    return None
                else:
                    current.append(byte)
            elif in_single:
                if byte == 0x5C and following == 0x27:
                    position += 1
                    current.append(0x27)
                elif byte == 0x27:
                    if following and following not in _SPACES:
                        return None
                    position += 1
                    break
                elif not byte:
                    return None
                else:
                    current.append(byte)
            elif byte in _UNQUOTED_ENDS:
                if byte:
                    position += 1
                break
            elif byte == 0x22:
                in_double = True
            elif byte == 0x27:
                in_single = True
            else:
                current.append(byte)
            position += 1
        arguments.append(bytes(current))


# --- replies -----------------------------------------------------------------------------------

_OK: Final = b"+OK\r\n"
_NULL_BULK: Final = b"$-1\r\n"
_NULL_ARRAY_BYTES: Final = b"*-1\r\n"
_NULL: Final = b"_\r\n"
_SMALL_INTEGERS: Final = tuple(b":%d\r\n" % value for value in range(16))
_VERBATIM_FORMAT: Final = b"txt:"


def encode_bulk(value: bytes | None, resp3: bool = False) -> bytes:
    """A bulk string's reply (or null's) alone, as `encode_reply` encodes it."""
    if value is None:
        return _NULL if resp3 else _NULL_BULK
    return b"$%d\r\n%b\r\n" % (len(value), value)


def encode_reply(reply: Reply, out: bytearray, resp3: bool = False) -> None:
    """Append the encoding of `reply` to `out`: RESP3 when `resp3`, else RESP2."""
    kind = type(reply)
    if kind is bytes:
        assert isinstance(reply, bytes)
        out += b"$%d\r\n" % len(reply)
        out += reply
        out += b"\r\n"
    elif kind is str:
        assert isinstance(reply, str)
        if reply == "OK":
            out += _OK
        else:
            assert "\r" not in reply, "simple strings are one line"
            assert "\n" not in reply, "simple strings are one line"
            out += b"+" + reply.encode("latin-1") + b"\r\n"
    elif kind is int:
        assert isinstance(reply, int)
        if 0 <= reply < len(_SMALL_INTEGERS):
            out += _SMALL_INTEGERS[reply]
        else:
            out += b":%d\r\n" % reply
    elif reply is None:
        out += _NULL if resp3 else _NULL_BULK
    elif kind is list or kind is tuple:
        assert isinstance(reply, list | tuple)
        out += b"*%d\r\n" % len(reply)
        for element in reply:
            encode_reply(element, out, resp3)
    elif isinstance(reply, RedisError):
        out += _error_line(reply.message)
    elif reply is NULL_ARRAY:
        out += _NULL if resp3 else _NULL_ARRAY_BYTES
    elif kind is RespMap:
        assert isinstance(reply, RespMap)
        out += (b"%%%d\r\n" if resp3 else b"*%d\r\n") % (len(reply) * (1 if resp3 else 2))
        for key, value in reply:
            encode_reply(key, out, resp3)
            encode_reply(value, out, resp3)
    elif kind is RespSet:
        assert isinstance(reply, RespSet)
        out += (b"~%d\r\n" if resp3 else b"*%d\r\n") % len(reply)
        for element in reply:
            encode_reply(element, out, resp3)
    elif kind is Verbatim:
        assert isinstance(reply, Verbatim)
        if resp3:
            out += b"=%d\r\n" % (len(reply) + len(_VERBATIM_FORMAT))
            out += _VERBATIM_FORMAT
        else:
            out += b"$%d\r\n" % len(reply)
        out += reply
        out += b"\r\n"
    else:
        raise AssertionError(f"not a RESP reply: {type(reply).__name__}")


SCALAR_BYTES_MAX: Final = 29
"""What a bulk string (or a verbatim one) adds to its bytes in the encoding, at most, and the
most any other scalar but a string or an error takes: a type byte, a sign and 19 digits,
two CRLFs, and a verbatim string's format."""


def reply_bytes_bound(reply: Reply) -> int:
    """At least as many bytes as `encode_reply` writes for `reply`, in either protocol, found
    without encoding it."""
    kind = type(reply)
    if kind is bytes or kind is Verbatim:
        assert isinstance(reply, bytes)
        return len(reply) + SCALAR_BYTES_MAX
    if kind is str:
        assert isinstance(reply, str)
        return len(reply) + 3
    if isinstance(reply, RedisError):
        return len(reply.message) + 3
    if kind is RespMap:
        assert isinstance(reply, RespMap)
        pairs = sum(reply_bytes_bound(key) + reply_bytes_bound(value) for key, value in reply)
        return SCALAR_BYTES_MAX + pairs
    if kind is list or kind is tuple or kind is RespSet:
        assert isinstance(reply, list | tuple)
        return SCALAR_BYTES_MAX + sum(map(reply_bytes_bound, reply))
    return SCALAR_BYTES_MAX  # an int, None, NULL_ARRAY


def encode_replies(replies: Iterable[Reply], resp3: bool = False) -> bytes:
    """Many replies in one buffer, for one write of a pipeline's answers."""
    out = bytearray()
    for reply in replies:
        encode_reply(reply, out, resp3)
    return bytes(out)


def _error_line(message: str) -> bytes:
    """`-message\\r\\n`; line breaks become spaces, as Redis does, so the reply stays one line."""
    text = message.rstrip("\r\n")
    if "\r" in text or "\n" in text:
        text = text.replace("\r", " ").replace("\n", " ")
    return b"-" + text.encode("latin-1", "replace") + b"\r\n"
