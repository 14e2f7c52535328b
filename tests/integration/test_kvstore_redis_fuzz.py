"""Seeded random command sequences, sent to the store and to a real redis-server alike.

This test is responsible for the store answering every supported string, keyspace,
expiry and transaction command as Redis 7 does, byte for byte in RESP2, when the
commands come in sequences nobody wrote by hand: each seed generates a sequence over
a small keyspace (so the commands interact), with random options, edge-case numbers,
binary values, wrong arities and malformed arguments, plus MULTI/EXEC/DISCARD/WATCH on
its one connection.  The same sequence goes over raw sockets to a replica of the store
(seeds take turns among the replicas) and to a real redis-server, one command at a time
or pipelined in chunks, and every reply is compared as raw bytes.  The first difference
in a sequence fails the test with the seed, the sequence up to it and both replies.

Only what legitimately differs is compared loosely, and nothing else is:

* `KEYS` and `SCAN` order (README, "Differences"): `KEYS` replies are compared as
  sorted lists; a `SCAN` is run to the end with each server's own cursors and the keys
  compared as sets (a single `SCAN 0 ... COUNT 100`, inside MULTI too, must end at
  cursor 0 on both); a `SCAN` from another valid cursor only has to be a cursor and an
  array.  Their errors are compared exactly.
* Time: relative expiries (`EX`, `PX`, `EXPIRE`, `SETEX`, ...) are either in the past
  (deleting at once) or at least 100,000 s ahead, each distinct from the others in a
  sequence by 60 s, so no comparison between two of them (`GT`, `LT`) can depend on
  when they ran; absolute ones are in the past or near 2100-01-01.  `TTL`/`PTTL`, and
  `EXPIRETIME`/`PEXPIRETIME` of relative expiries, must agree in sign and within
  10 s; `EXPIRETIME`/`PEXPIRETIME` of the absolute expiries used here exactly.
* A `SET ... EXAT/PXAT` in the past is followed at once by `EXISTS` of its key:
  Redis 7.0 keeps such a key (`DBSIZE` counts it) until its active expiry, some time
  in the next second, deletes it, where the store deletes it at once.

Left out, since they differ by design (README, "Differences"): `COPY ... DB n` for
n in 1..15 (one database), values past the store's 512 KiB bound (so no `SETRANGE`
offset between 512 KiB and 512 MiB), `CAS` (not in Redis), and the words Redis reads
as C strings and the store whole: an option with a NUL byte and more after it, a
`SCAN` cursor that is empty, signed or holds a NUL.

`KV_FUZZ_SEQUENCES` (30), `KV_FUZZ_LENGTH` (40) and `KV_FUZZ_FIRST_SEED` (0) set the
seeds run, for long hunts.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

SEQUENCES = int(os.environ.get("KV_FUZZ_SEQUENCES", "30"))
LENGTH = int(os.environ.get("KV_FUZZ_LENGTH", "40"))
FIRST_SEED = int(os.environ.get("KV_FUZZ_FIRST_SEED", "0"))
REPORTED_MAX = 10
"""Failing seeds described in full in the assertion message (all are counted)."""

TIME_SLACK_S = 10
"""How far apart two answers about a relative expiry may be: the two servers ran the
command that set it, and the one that asks, at slightly different times."""


# --- RESP2 over a raw socket -----------------------------------------------------------------


@dataclass(frozen=True)
class Reply:
    """One RESP2 reply: its bytes as received, its type byte and its parsed value."""

    raw: bytes
    kind: bytes
    value: bytes | int | tuple[Reply, ...] | None

    @property
    def is_error(self) -> bool:
        return self.kind == b"-"


def encode(words: Sequence[bytes]) -> bytes:
    parts = [b"*%d\r\n" % len(words)]
    for word in words:
        parts.append(b"$%d\r\n%s\r\n" % (len(word), word))
    return b"".join(parts)


class RespConnection:
    """A RESP2 client that keeps every reply's exact bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        self.buffer = b""

    def close(self) -> None:
        self.sock.close()

    def send(self, commands: Sequence[Sequence[bytes]]) -> None:
        self.sock.sendall(b"".join(encode(words) for words in commands))

    def call(self, words: Sequence[bytes]) -> Reply:
        self.send([words])
        return self.read()

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"the server closed the connection; unread: {self.buffer!r}")
        self.buffer += chunk

    def _line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        line, self.buffer = self.buffer[: end + 2], self.buffer[end + 2 :]
        return line

    def _exactly(self, count: int) -> bytes:
        while len(self.buffer) < count:
            self._fill()
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read(self) -> Reply:
        line = self._line()
        kind, body = line[:1], line[1:-2]
        if kind in (b"+", b"-"):
            return Reply(line, kind, body)
        if kind == b":":
            return Reply(line, kind, int(body))
        if kind == b"$":
            length = int(body)
            if length < 0:
                return Reply(line, kind, None)
            data = self._exactly(length + 2)
            return Reply(line + data, kind, data[:-2])
        if kind == b"*":
            count = int(body)
            if count < 0:
                return Reply(line, kind, None)
            items = tuple(self.read() for _ in range(count))
            return Reply(line + b"".join(item.raw for item in items), kind, items)
        raise AssertionError(f"not a RESP2 reply: {line!r}{self.buffer[:200]!r}")


# --- how two replies are compared -------------------------------------------------------------

Check = Literal[
    "exact", "ttl_s", "ttl_ms", "at_s", "at_ms", "keys", "scan_all", "scan_shape", "scan_full"
]


@dataclass(frozen=True)
class Step:
    """One command of a sequence, and how its replies are compared."""

    words: tuple[bytes, ...]
    check: Check = "exact"

    @property
    def name(self) -> bytes:
        return self.words[0].lower() if self.words else b""


def same_reply(check: Check, expected: Reply, got: Reply) -> bool:
    """Whether the store's reply `got` answers as Redis's `expected` does under `check`."""
    if expected.raw == got.raw:
        return True
    if check == "exact" or expected.is_error or got.is_error:
        return False
    if check in ("ttl_s", "ttl_ms", "at_s", "at_ms"):
        return _close_in_time(check, expected, got)
    if check == "keys":
        return expected.kind == got.kind == b"*" and _sorted_keys(expected) == _sorted_keys(got)
    theirs, ours = _scan_parts(expected), _scan_parts(got)
    if theirs is None or ours is None:
        return False
    if check == "scan_all":
        return theirs[0].raw == ours[0].raw and set(_sorted_keys(theirs[1])) == set(
            _sorted_keys(ours[1])
        )
    return check == "scan_shape"  # "scan_full" is compared by `full_scan`


def _close_in_time(check: Check, expected: Reply, got: Reply) -> bool:
    if expected.kind != b":" or got.kind != b":":
        return False
    assert isinstance(expected.value, int)
    assert isinstance(got.value, int)
    if expected.value <= 0 or got.value <= 0:
        return False
    if check == "at_s" and {expected.value, got.value} & ABSOLUTE_TIMES_S:
        return False
    if check == "at_ms" and {expected.value, got.value} & ABSOLUTE_TIMES_MS:
        return False
    scale = 1 if check in ("ttl_s", "at_s") else 1000
    return abs(expected.value - got.value) <= TIME_SLACK_S * scale


def _sorted_keys(reply: Reply) -> list[bytes]:
    assert isinstance(reply.value, tuple)
    return sorted(item.raw for item in reply.value)


def _scan_parts(reply: Reply) -> tuple[Reply, Reply] | None:
    value = reply.value
    if reply.kind != b"*" or not isinstance(value, tuple) or len(value) != 2:
        return None
    cursor, keys = value
    if cursor.kind != b"$" or keys.kind != b"*" or not isinstance(keys.value, tuple):
        return None
    return cursor, keys


def full_scan(connection: RespConnection, options: Sequence[bytes]) -> tuple[Reply, set[bytes]]:
    """SCAN from cursor 0 to the end: the first reply (an error stops it) and the keys."""
    first = connection.call((b"SCAN", b"0", *options))
    reply, keys = first, set[bytes]()
    for _ in range(10_000):
        parts = _scan_parts(reply)
        if parts is None:
            return first, keys
        cursor, batch = parts
        assert isinstance(batch.value, tuple)
        keys.update(item.raw for item in batch.value)
        if cursor.value == b"0":
            return first, keys
        assert isinstance(cursor.value, bytes)
        reply = connection.call((b"SCAN", cursor.value, *options))
    raise AssertionError(f"SCAN {list(options)!r} did not end after 10,000 calls")


# --- the sequences ----------------------------------------------------------------------------

KEY_POOL = [
    *(b"a", b"b", b"c", b"ab", b"A", b"key:1", b"key:2"),
    *(b"k*", b"k?", b"[", b"\\", b"", b"\x00\xff", b"sp ace", b"k\r\n"),
]
VALUES = [
    *(b"", b"0", b"1", b"-1", b"10", b"10.5", b"abc", b"hello", b" 1", b"1 ", b"+1"),
    *(b"01", b"-0", b"00", b"9223372036854775807", b"-9223372036854775808"),
    *(b"9223372036854775808", b"1e3", b"5.0e3", b"0x10", b"inf", b"-inf", b"nan"),
    *(b"\x00\xff\r\n", b"3.0000000000000000001", b"1.5e308", b"1e400", b"0.1", b"\xe2\x82\xac"),
    *(b"x" * 100, b"1" * 30, b"-9223372036854775809", b"17179869184", b".5", b"5."),
    *(b"007", b"1.50", b"-.5", b"1e+3", b"1E3", b"  ", b"1e4000", b"1e-4940", b"0.2"),
    *(b"1.1", b"99999999999999999.5", b"-1e-17", b"1e17", b"12345.6789", b"4.9e-324"),
    *(b"7\x00x", b"1\x00", b"0.5\x00"),
]
INTEGERS = [
    *(b"0", b"1", b"-1", b"5", b"100", b"9223372036854775807", b"-9223372036854775808"),
    *(b"9223372036854775806", b"-9223372036854775807", b"9223372036854775808", b"1.5"),
    *(b"abc", b"", b" 1", b"+5", b"0x1", b"-0", b"00", b"1e3", b"4611686018427387904"),
]
FLOATS = [
    *(b"1e3", b"0.1", b"-5", b"inf", b"-inf", b"+inf", b"nan", b"abc", b"1e308", b"1e5000"),
    *(b"-1e5000", b"1e-400", b"0x10", b"", b" 1", b"1 ", b"3", b"+.5", b"5.", b".", b"1e"),
    *(b"9223372036854775807", b"123456789012345678901234567890", b"0.30000000000000004"),
    *(b"-0", b"1.0e-10", b"2.5", b"-2.5", b"1.7976931348623157e308", b"0.0000001", b"7"),
    *(b"-9223372036854775808", b"1e18", b"1e19", b"-1e19", b"3.14159265358979323846"),
    *(b"1e4000", b"1e4932", b"-1e4932", b"1.18e4932", b"1e-4940", b"1e-4951", b"3.6e-4951"),
    *(b"0.1", b"1.1", b"2.2", b"1e17", b"0.5", b"12345.6789", b"-0.0001", b"1e-17", b"1e-18"),
    *(b"1E3", b"1e+3", b"-.5", b"0X1p3", b"0x1.8p1", b"1.0000000000000000001", b"nan(1)"),
    *(b"infinity", b"-Infinity", b"1e-310", b"4.9e-324", b"0.000000000000000000001"),
    *(b"1\x00abc", b"2.5\x00", b"\x001", b"1\x00"),
]
RANGES = [
    *(b"0", b"-1", b"-2", b"1", b"3", b"-100", b"100", b"2", b"-3"),
    *(b"9223372036854775807", b"-9223372036854775808", b"x", b"1.0", b""),
]
OFFSETS = [b"0", b"1", b"3", b"10", b"-1", b"536870912", b"2147483648", b"9223372036854775807"]
BAD_NUMBERS = [b"x", b"1.5", b"", b" 1", b"9223372036854775808", b"-9223372036854775809"]
PATTERNS = [
    *(b"*", b"?", b"a*", b"*a", b"k*", b"k\\*", b"k\\?", b"[a-c]*", b"[^a]*", b"[!a]*"),
    *(b"*[", b"[", b"\\", b"[a-", b"[]]", b"[\\]]", b"*\\", b"[z-a]", b"?*?", b""),
    *(b"\x00*", b"**", b"*:*", b"[A-Z]", b"key:?", b"[[]", b"[\\\\]", b"a", b"*b", b"[ab"),
    *(b"[a-]", b"[-a]", b"k[*?]", b"\\a", b"*\\*", b"s*e", b"[^]*", b"[!]]"),
]
ABSOLUTE_S = [b"4102444800", b"4102444801", b"4102444900", b"9223372036854"]
ABSOLUTE_MS = [b"4102444800000", b"4102444800001", b"4102444801500", b"4102444900999"]
PAST = [b"1", b"0", b"-1", b"-100"]
"""Absolute times in the past, and relative ones (but 1: a millisecond or a second ahead)."""
HUGE = [b"9223372036854775807", b"9223372036854775", b"-9223372036854775808"]
ABSOLUTE_TIMES_MS = {int(ms) for ms in ABSOLUTE_MS + HUGE} | {
    int(s) * 1000 for s in ABSOLUTE_S + HUGE
}
"""What PEXPIRETIME can answer after the absolute expiries above: compared exactly."""
ABSOLUTE_TIMES_S = {int(s) for s in ABSOLUTE_S + HUGE} | {
    int(ms) // 1000 + up for ms in ABSOLUTE_MS + HUGE for up in (0, 1)
}
"""What EXPIRETIME can answer after them (a time in ms rounded either way): exactly."""

TRANSACTION_COMMANDS = [b"MULTI", b"EXEC", b"DISCARD", b"WATCH", b"UNWATCH"]

_ARITY_TABLE = """
    append=3 copy=-3 dbsize=1 decr=2 decrby=3 del=-2 exists=-2 expire=-3 expireat=-3
    expiretime=2 flushall=-1 flushdb=-1 get=2 getdel=2 getex=-2 getrange=4 getset=3
    incr=2 incrby=3 incrbyfloat=3 keys=2 mget=-2 mset=-3 msetnx=-3 persist=2
    pexpire=-3 pexpireat=-3 pexpiretime=2 psetex=4 pttl=2 rename=3 renamenx=3 scan=-2
    set=-3 setex=4 setnx=3 setrange=4 strlen=2 touch=-2 ttl=2 type=2 unlink=-2
"""
ARITY = {
    name.encode(): int(arity)
    for name, arity in (entry.split("=") for entry in _ARITY_TABLE.split())
}
"""Redis's arity of each command: its words with the name, negative for "at least"."""


class Generator:
    """One sequence's commands, from its seed."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.keys = self.rng.sample(KEY_POOL, self.rng.randint(3, 6))
        self.relative_count = 0
        self.in_multi = False

    # -- arguments

    def key(self) -> bytes:
        return self.rng.choice(self.keys)

    def some_keys(self, least: int = 1) -> list[bytes]:
        return [self.key() for _ in range(self.rng.randint(least, 4))]

    def value(self) -> bytes:
        roll = self.rng.random()
        if roll < 0.1:
            return bytes(self.rng.randrange(256) for _ in range(self.rng.randint(0, 8)))
        if roll < 0.2:
            return self.integer()
        if roll < 0.3:
            return self.float()
        return self.rng.choice(VALUES)

    def pick(self, pool: Sequence[bytes]) -> bytes:
        return self.rng.choice(pool)

    def integer(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.5:
            return self.pick(INTEGERS)
        if roll < 0.75:
            return b"%d" % rng.randint(-1000, 1000)
        if roll < 0.9:
            return b"%d" % (rng.choice([2**63 - 1, -(2**63)]) + rng.randint(-3, 3))
        return b"%d" % rng.randint(-(10 ** rng.randint(1, 20)), 10 ** rng.randint(1, 20))

    def float(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.4:
            return self.pick(FLOATS)
        if roll < 0.6:
            return repr(rng.uniform(-1e6, 1e6)).encode()
        if roll < 0.7:
            return repr(rng.random() * 10 ** rng.randint(-20, 40)).encode()
        sign = rng.choice(["", "", "-", "+"])
        whole = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 25)))
        fraction = "".join(rng.choice("0123456789") for _ in range(rng.randint(0, 25)))
        text = sign + whole + rng.choice([".", ".", ""]) + fraction
        if rng.random() < 0.3:
            text += rng.choice(["e", "E"]) + rng.choice(["", "-", "+"])
            text += str(rng.choice([0, 1, 5, 17, 300, 308, 309, 4931, 4932, 4933, 4950]))
        return text.encode()

    def pattern(self) -> bytes:
        if self.rng.random() < 0.5:
            return self.pick(PATTERNS)
        alphabet = [b"*", b"?", b"[", b"]", b"^", b"!", b"-", b"\\", b"a", b"b", b"k", b":"]
        return b"".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(1, 7)))

    def range_index(self) -> bytes:
        if self.rng.random() < 0.5:
            return self.pick(RANGES)
        return b"%d" % self.rng.randint(-12, 12)

    def offset(self) -> bytes:
        if self.rng.random() < 0.5:
            return self.pick(OFFSETS)
        return b"%d" % self.rng.randint(0, 40)

    def unknown_command(self) -> Step:
        name = self.rng.choice([b"NOSUCH", b"nosuch", b"x" * 200, b"a\r\nb", b"", b"GETT"])
        return Step((name, *(self.value() for _ in range(self.rng.randint(0, 3)))))

    def relative(self, unit: Literal["s", "ms"]) -> bytes:
        """A relative expiry: far ahead and unlike any other in the sequence, or past,
        zero, huge or malformed."""
        roll = self.rng.random()
        if roll < 0.6:
            self.relative_count += 1
            seconds = 100_000 + 60 * self.relative_count
            return b"%d" % (seconds if unit == "s" else seconds * 1000 + self.rng.choice([0, 499]))
        if roll < 0.8:
            return self.pick(PAST[1:])
        if roll < 0.9:
            return self.pick(HUGE)
        return self.pick(BAD_NUMBERS)

    def absolute(self, unit: Literal["s", "ms"]) -> bytes:
        roll = self.rng.random()
        if roll < 0.6:
            return self.pick(ABSOLUTE_S if unit == "s" else ABSOLUTE_MS)
        if roll < 0.8:
            return self.pick(PAST)
        if roll < 0.9:
            return self.pick(HUGE)
        return self.pick(BAD_NUMBERS)

    def expiry_option(self, persist: bool) -> list[bytes]:
        options = [b"EX", b"PX", b"EXAT", b"PXAT"] + ([b"PERSIST"] if persist else [b"KEEPTTL"])
        option = self.pick(options)
        if option in (b"PERSIST", b"KEEPTTL"):
            return [self.case(option)]
        if option in (b"EX", b"PX"):
            amount = self.relative("s" if option == b"EX" else "ms")
        else:
            amount = self.absolute("s" if option == b"EXAT" else "ms")
        return [self.case(option), amount]

    def case(self, word: bytes) -> bytes:
        """An option or command name in a random case."""
        roll = self.rng.random()
        if roll < 0.7:
            return word
        if roll < 0.85:
            return word.lower()
        return bytes(c ^ 0x20 if chr(c).isalpha() and self.rng.random() < 0.5 else c for c in word)

    # -- commands

    def command(self) -> Step:
        rng = self.rng
        if self.in_multi:
            roll = rng.random()
            if roll < 0.12:
                self.in_multi = False
                return Step((self.case(b"EXEC"),))
            if roll < 0.16:
                self.in_multi = False
                return Step((self.case(b"DISCARD"),))
            if roll < 0.18:
                return Step((self.case(rng.choice([b"MULTI", b"WATCH", b"UNWATCH"])), self.key()))
            if roll < 0.2:
                return self.unknown_command()
        elif rng.random() < 0.06:
            self.in_multi = True
            return Step((self.case(b"MULTI"),))
        elif rng.random() < 0.05:
            return Step((self.case(b"WATCH"), *self.some_keys()))
        elif rng.random() < 0.01:
            return Step((self.case(rng.choice([b"UNWATCH", b"EXEC", b"DISCARD"])),))
        elif rng.random() < 0.005:
            return self.unknown_command()
        if rng.random() < 0.01:  # wrong arities of the transaction commands
            name = rng.choice(TRANSACTION_COMMANDS)
            return Step((name, *([] if name == b"WATCH" else [self.key()])))
        name, make = rng.choice(COMMANDS)
        args, check = make(self)
        if rng.random() < 0.05:
            args, check = self.wrong_arity(name, args), "exact"
        step = Step((self.case(name.upper()), *args), check)
        if step.check == "scan_full" and self.in_multi:
            return Step((*step.words, b"COUNT", b"100"), "scan_all")
        return step

    def wrong_arity(self, name: bytes, args: list[bytes]) -> list[bytes]:
        arity = ARITY[name]
        least = abs(arity) - 1
        if arity > 0 and self.rng.random() < 0.5:
            return [*args[:least], *(self.value() for _ in range(self.rng.randint(1, 2)))]
        if least == 0:
            return [self.key()] if arity > 0 else args
        return args[: self.rng.randrange(least)]

    def sequence(self, length: int) -> list[Step]:
        steps: list[Step] = []
        while len(steps) < length:
            step = self.command()
            steps.append(step)
            if expires_in_the_past(step):
                # Redis 7.0 keeps such a key until something reads it or its active expiry
                # (10 times a second) finds it: read it at once, so DBSIZE does not depend
                # on when that runs.
                steps.append(Step((b"EXISTS", step.words[1])))
        if self.in_multi:
            self.in_multi = False
            steps.append(Step((b"EXEC",)))
        return steps


def expires_in_the_past(step: Step) -> bool:
    """Whether `step` is a SET with an absolute expiry time already past."""
    words = [word.upper() for word in step.words]
    return step.name == b"set" and any(
        option in (b"EXAT", b"PXAT") and amount in PAST
        for option, amount in itertools.pairwise(words[3:])
    )


Maker = Callable[[Generator], tuple[list[bytes], Check]]


def _set(g: Generator) -> tuple[list[bytes], Check]:
    options: list[list[bytes]] = []
    rng = g.rng
    if rng.random() < 0.4:
        options.append([g.case(rng.choice([b"NX", b"XX"]))])
    if rng.random() < 0.3:
        options.append([g.case(b"GET")])
    if rng.random() < 0.6:
        options.append(g.expiry_option(persist=False))
    if rng.random() < 0.1:
        options.append(rng.choice([[b"NX", b"XX"], [b"EX"], [b"FOO"], [b"EX", b"100", b"PX"]]))
    rng.shuffle(options)
    return [g.key(), g.value(), *(word for option in options for word in option)], "exact"


def _getex(g: Generator) -> tuple[list[bytes], Check]:
    options: list[bytes] = []
    for _ in range(g.rng.choice([0, 1, 1, 1, 2])):
        options += g.expiry_option(persist=True)
    if g.rng.random() < 0.05:
        options.append(g.rng.choice([b"FOO", b"EX", b"KEEPTTL"]))
    return [g.key(), *options], "exact"


def _expire(relative: bool, unit: Literal["s", "ms"]) -> Maker:
    def make(g: Generator) -> tuple[list[bytes], Check]:
        amount = g.relative(unit) if relative else g.absolute(unit)
        flags = [
            g.case(g.rng.choice([b"NX", b"XX", b"GT", b"LT", b"FOO"]))
            for _ in range(g.rng.choice([0, 0, 1, 1, 2]))
        ]
        return [g.key(), amount, *flags], "exact"

    return make


def _copy(g: Generator) -> tuple[list[bytes], Check]:
    options: list[list[bytes]] = []
    if g.rng.random() < 0.4:
        options.append([g.case(b"REPLACE")])
    if g.rng.random() < 0.2:
        db = g.rng.choice([[b"0"], [b"x"], [b"-1"], [b"99"], [b"16"], []])
        options.append([g.case(b"DB"), *db])
    if g.rng.random() < 0.05:
        options.append([b"NOW"])
    g.rng.shuffle(options)
    return [g.key(), g.key(), *(word for option in options for word in option)], "exact"


def _scan(g: Generator) -> tuple[list[bytes], Check]:
    options: list[list[bytes]] = []
    rng = g.rng
    if rng.random() < 0.5:
        options.append([g.case(b"MATCH"), g.pattern()])
    if rng.random() < 0.5:
        options.append([g.case(b"COUNT"), rng.choice([b"1", b"2", b"3", b"10", b"100"])])
    if rng.random() < 0.3:
        kind = rng.choice([b"string", b"STRING", b"none", b"hash", b"list", b"bogus"])
        options.append([g.case(b"TYPE"), kind])
    rng.shuffle(options)
    words = [word for option in options for word in option]
    roll = rng.random()
    if roll < 0.1:  # malformed: errors, compared exactly
        cursor = rng.choice([b"x", b" 1", b"0 ", b"1.5", b"18446744073709551616", b"-"])
        return [cursor, *words], "exact"
    if roll < 0.15:
        bad = rng.choice([[b"COUNT", b"0"], [b"COUNT", b"-1"], [b"COUNT", b"x"], [b"MATCH"]])
        return [b"0", *words, *rng.choice([bad, [b"FOO", b"1"], [b"COUNT"], [b"TYPE"]])], "exact"
    if roll < 0.2:
        cursor = rng.choice([b"00", b"18446744073709551615", b"7", b"12345678901234567890"])
        return [cursor, *words], "scan_shape"
    if roll < 0.3:
        return [b"0", *words, b"COUNT", b"100"], "scan_all"
    return [b"0", *words], "scan_full"


def _plain(*makers: Callable[[Generator], bytes], check: Check = "exact") -> Maker:
    def make(g: Generator) -> tuple[list[bytes], Check]:
        return [maker(g) for maker in makers], check

    return make


def _keys(least: int) -> Maker:
    return lambda g: (g.some_keys(least), "exact")


def _pairs(g: Generator) -> tuple[list[bytes], Check]:
    return [word for _ in range(g.rng.randint(1, 3)) for word in (g.key(), g.value())], "exact"


def _flush(g: Generator) -> tuple[list[bytes], Check]:
    if g.rng.random() < 0.7:
        return [], "exact"
    return [g.case(g.rng.choice([b"ASYNC", b"SYNC", b"FOO"]))], "exact"


def _key(g: Generator) -> bytes:
    return g.key()


def _value(g: Generator) -> bytes:
    return g.value()


def _integer(g: Generator) -> bytes:
    return g.integer()


COMMANDS: list[tuple[bytes, Maker]] = [
    (b"append", _plain(_key, _value)),
    (b"copy", _copy),
    (b"dbsize", _plain()),
    (b"decr", _plain(_key)),
    (b"decrby", _plain(_key, _integer)),
    (b"del", _keys(1)),
    (b"exists", _keys(1)),
    (b"expire", _expire(relative=True, unit="s")),
    (b"expireat", _expire(relative=False, unit="s")),
    (b"expiretime", _plain(_key, check="at_s")),
    (b"flushall", _flush),
    (b"flushdb", _flush),
    (b"get", _plain(_key)),
    (b"get", _plain(_key)),
    (b"getdel", _plain(_key)),
    (b"getex", _getex),
    (b"getrange", _plain(_key, lambda g: g.range_index(), lambda g: g.range_index())),
    (b"getset", _plain(_key, _value)),
    (b"incr", _plain(_key)),
    (b"incrby", _plain(_key, _integer)),
    (b"incrbyfloat", _plain(_key, lambda g: g.float())),
    (b"incrbyfloat", _plain(_key, lambda g: g.float())),
    (b"keys", _plain(lambda g: g.pattern(), check="keys")),
    (b"mget", _keys(1)),
    (b"mset", _pairs),
    (b"msetnx", _pairs),
    (b"persist", _plain(_key)),
    (b"pexpire", _expire(relative=True, unit="ms")),
    (b"pexpireat", _expire(relative=False, unit="ms")),
    (b"pexpiretime", _plain(_key, check="at_ms")),
    (b"psetex", _plain(_key, lambda g: g.relative("ms"), _value)),
    (b"pttl", _plain(_key, check="ttl_ms")),
    (b"rename", _plain(_key, _key)),
    (b"renamenx", _plain(_key, _key)),
    (b"scan", _scan),
    (b"set", _set),
    (b"set", _set),
    (b"set", _plain(_key, _value)),
    (b"setex", _plain(_key, lambda g: g.relative("s"), _value)),
    (b"setnx", _plain(_key, _value)),
    (b"setrange", _plain(_key, lambda g: g.offset(), _value)),
    (b"strlen", _plain(_key)),
    (b"touch", _keys(1)),
    (b"ttl", _plain(_key, check="ttl_s")),
    (b"type", _plain(_key)),
    (b"unlink", _keys(1)),
]


def sequence(seed: int, length: int) -> list[Step]:
    return Generator(seed).sequence(length)


# --- running one sequence on both servers -------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    seed: int
    where: str
    steps: list[Step]
    """The sequence up to and including the command answered differently."""
    expected: str
    got: str

    def describe(self) -> str:
        lines = [f"seed {self.seed} ({self.where}), after FLUSHALL on a new connection:"]
        lines += [f"  {render(step.words)}" for step in self.steps]
        lines.append(f"  redis-server: {self.expected}")
        lines.append(f"  kvstore:      {self.got}")
        return "\n".join(lines)


def render(words: Sequence[bytes]) -> str:
    """A command as redis-cli takes it."""
    return " ".join(_quoted(word) for word in words)


def _quoted(word: bytes) -> str:
    if word and all(33 <= c < 127 and c not in b"\"'\\" for c in word):
        return word.decode()
    inner = "".join(chr(c) if 32 <= c < 127 and c not in b'"\\' else f"\\x{c:02x}" for c in word)
    return f'"{inner}"'


ARITY_ERROR = b"-ERR wrong number of arguments"


class Transaction:
    """What the reference server (Redis) queued since MULTI, to compare EXEC's elements."""

    def __init__(self) -> None:
        self.queued: list[Step] | None = None

    def after(self, step: Step, reply: Reply) -> None:
        if step.name == b"multi" and reply.raw == b"+OK\r\n":
            self.queued = []
        elif self.queued is not None:
            if step.name in (b"exec", b"discard") and not reply.raw.startswith(ARITY_ERROR):
                self.queued = None
            elif reply.raw == b"+QUEUED\r\n":
                self.queued.append(step)


def same_step(step: Step, queued: list[Step] | None, expected: Reply, got: Reply) -> bool:
    if queued is not None and step.name == b"exec":
        if expected.raw == got.raw:
            return True
        if not (expected.kind == got.kind == b"*") or expected.value is None:
            return False
        assert isinstance(expected.value, tuple)
        assert isinstance(got.value, tuple)
        return len(expected.value) == len(got.value) == len(queued) and all(
            same_reply(one.check, theirs, ours)
            for one, theirs, ours in zip(queued, expected.value, got.value, strict=True)
        )
    # Inside MULTI a command answers +QUEUED (or an error): its value comes in EXEC's reply.
    return same_reply("exact" if queued is not None else step.check, expected, got)


def run_sequence(seed: int, length: int, theirs: int, ours: int, where: str) -> Mismatch | None:
    """Runs seed's sequence on Redis (port `theirs`) and the store (port `ours`); the first
    difference, if any."""
    steps = sequence(seed, length)
    rng = random.Random(seed ^ 0x5EED)
    pipelined = rng.random() < 0.3
    redis_side, store_side = RespConnection(theirs), RespConnection(ours)
    try:
        for connection in (redis_side, store_side):
            assert connection.call((b"FLUSHALL",)).raw == b"+OK\r\n"
        transaction = Transaction()
        done = 0
        while done < len(steps):
            if steps[done].check == "scan_full":
                step = steps[done]
                expected, expected_keys = full_scan(redis_side, step.words[2:])
                got, got_keys = full_scan(store_side, step.words[2:])
                if expected.is_error or got.is_error:
                    if expected.raw != got.raw:
                        return Mismatch(
                            seed, where, steps[: done + 1], repr(expected.raw), repr(got.raw)
                        )
                elif expected_keys != got_keys:
                    return Mismatch(
                        seed,
                        where,
                        steps[: done + 1],
                        f"keys {sorted(expected_keys)!r}",
                        f"keys {sorted(got_keys)!r}",
                    )
                done += 1
                continue
            chunk: list[Step] = []
            size = rng.randint(1, 8) if pipelined else 1
            while done + len(chunk) < len(steps) and len(chunk) < size:
                if steps[done + len(chunk)].check == "scan_full":
                    break
                chunk.append(steps[done + len(chunk)])
            redis_side.send([step.words for step in chunk])
            store_side.send([step.words for step in chunk])
            expected_replies = [redis_side.read() for _ in chunk]
            got_replies = [store_side.read() for _ in chunk]
            for step, expected, got in zip(chunk, expected_replies, got_replies, strict=True):
                if not same_step(step, transaction.queued, expected, got):
                    return Mismatch(
                        seed, where, steps[: done + 1], repr(expected.raw), repr(got.raw)
                    )
                transaction.after(step, expected)
                done += 1
        return None
    finally:
        redis_side.close()
        store_side.close()


# --- the test ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = f"/kvfuzz-{os.getpid()}"
    with running_store(zookeeper, root, tmp_path_factory.mktemp("store")) as running:
        yield running


@pytest.mark.timeout(max(300, SEQUENCES * LENGTH // 10))
def test_random_sequences_answer_as_redis_does(store: Store, real_redis: int) -> None:
    names = store.running()
    mismatches: list[Mismatch] = []
    for seed in range(FIRST_SEED, FIRST_SEED + SEQUENCES):
        name = names[seed % len(names)]
        found = run_sequence(seed, LENGTH, real_redis, store.port(name), name)
        if found is not None:
            mismatches.append(found)
    assert not mismatches, (
        f"{len(mismatches)} of {SEQUENCES} sequences (seeds {FIRST_SEED}.."
        f"{FIRST_SEED + SEQUENCES - 1}, {LENGTH} commands) answered unlike redis-server; "
        f"seeds {[m.seed for m in mismatches]}; the first {REPORTED_MAX}:\n\n"
        + "\n\n".join(m.describe() for m in mismatches[:REPORTED_MAX])
    )
