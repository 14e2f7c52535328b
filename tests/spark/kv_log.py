"""Key-value store logs for the bulk snapshot's tests, written on real bookies as leaders do.

`kv_commands` draws a seeded mix of every command the store's reducer takes
(SET with and without NX, XX, GET, KEEPTTL; SETNX, GETSET, GETDEL, GETEX,
MSET, APPEND, SETRANGE, the counters, CAS, PERSIST, DEL, UNLINK), some of
them failing (a counter on a text, a wrong argument count), from four client
sessions and without one, with retries logged again (duplicates that the
session table must skip); `blind_commands` those that set or delete their
keys whatever they held.  `KvLog` makes them into batches of segments, each
segment a new leader's (epoch, leader-start marker first); `KvLogWriter`
appends those to CLOSED ledgers and publishes the log znode.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from anyio.from_thread import BlockingPortal

from bookie.client.ledger_client import LedgerClient
from bookie.meta.zk import ZkMetadataStore
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_format import (
    decode_log,
    encode_batch,
    encode_command,
    encode_leader_start,
    encode_log,
)
from rsm.core.log_state import Log, Segment, SegmentState

T0_MS = 1_700_000_000_000
PASSWORD = ReplicaConfig().ledger_password
CLIENTS = (b"kv-client-1", b"kv-client-2", b"kv-client-3", b"kv-client-4")

Command = tuple[str, list[bytes]]


def kv_commands(
    count: int, seed: int, extra: Command | None = None, *, ttl: bool = False
) -> list[Command]:
    """`count` commands over a few keys (see the module docstring); `extra` in the middle;
    with `ttl`, also the commands that give TTLs (`ttl_commands`)."""
    rng = random.Random(seed)
    keys = [f"k{number}".encode() for number in range(24)]

    def key() -> bytes:
        return rng.choice(keys)

    def value() -> bytes:
        return rng.choice([b"%d" % rng.randrange(-50, 50), b"text-%d" % rng.randrange(99)])

    makers = [
        lambda: ("set", [key(), value()]),
        lambda: ("set", [key(), value(), rng.choice([b"NX", b"xx", b"GET", b"KEEPTTL"])]),
        lambda: ("setnx", [key(), value()]),
        lambda: ("getset", [key(), value()]),
        lambda: ("getdel", [key()]),
        lambda: ("getex", [key(), *rng.choice([[], [b"PERSIST"]])]),
        lambda: ("mset", [item for _ in range(rng.randrange(1, 4)) for item in (key(), value())]),
        lambda: ("append", [key(), b"+"]),
        lambda: ("setrange", [key(), b"%d" % rng.randrange(4), b"ab"]),
        lambda: ("incr", [key()]),
        lambda: ("decrby", [key(), b"%d" % rng.randrange(10)]),
        lambda: ("incrbyfloat", [key(), b"1.5"]),
        lambda: ("cas", [key(), value(), value()]),
        lambda: ("persist", [key()]),
        lambda: ("del", [key() for _ in range(rng.randrange(1, 4))]),
        lambda: ("unlink", [key()]),
        lambda: ("set", [key()]),  # a wrong argument count: fails, changes nothing
    ]
    if ttl:
        makers += ttl_commands(rng, key, value)
    commands: list[Command] = [rng.choice(makers)() for _ in range(count)]
    if extra is not None:
        commands.insert(count // 2, extra)
    return commands


def ttl_commands(
    rng: random.Random, key: Callable[[], bytes], value: Callable[[], bytes]
) -> list[Callable[[], Command]]:
    """Makers of the commands that give or drop TTLs, their times from a second to a minute
    (entries are a second apart, so keys expire before the log's end and after), a few of
    them already past or malformed."""

    def seconds() -> bytes:
        return b"%d" % rng.randrange(1, 60)

    def at_ms() -> bytes:
        return b"%d" % (T0_MS + 1000 * rng.randrange(-5, 400))

    return [
        lambda: ("expire", [key(), seconds()]),
        lambda: ("pexpire", [key(), b"%d" % rng.randrange(1, 60_000), b"GT"]),
        lambda: ("expireat", [key(), b"%d" % (int(at_ms()) // 1000), b"NX"]),
        lambda: ("pexpireat", [key(), at_ms()]),
        lambda: ("set", [key(), value(), b"EX", seconds()]),
        lambda: ("set", [key(), value(), b"PXAT", at_ms()]),
        lambda: ("setex", [key(), seconds(), value()]),
        lambda: ("psetex", [key(), b"%d" % rng.randrange(1, 60_000), value()]),
        lambda: ("getex", [key(), b"EX", seconds()]),
        lambda: ("persist", [key()]),
        lambda: ("expire", [key(), b"soon"]),  # not a number: fails
    ]


def blind_commands(count: int, seed: int) -> list[Command]:
    """`count` commands that set or delete their keys whatever they held (`b0` .. `b29`,
    which the reducer reduces to one run per key and task): SET, MSET with repeated keys and keys
    out of order, DEL and UNLINK with repeated keys, often interleaved on one key; now and
    then an MSET naming one of `kv_commands`' keys too (which the reducer keeps), a key
    that is not UTF-8, and a UTF-8 key whose text is the one the log writes for it."""
    rng = random.Random(seed)
    keys = [f"b{number}".encode() for number in range(30)]
    odd = [b"\xffodd", b'{"hex":"ff6f6464"}']

    def key() -> bytes:
        return rng.choice(keys)

    def value() -> bytes:
        return b"v%d" % rng.randrange(1000)

    makers = [
        lambda: ("set", [key(), value()]),
        lambda: ("mset", [item for _ in range(rng.randrange(1, 5)) for item in (key(), value())]),
        lambda: ("del", [key() for _ in range(rng.randrange(1, 4))]),
        lambda: ("unlink", [key(), key()]),
        lambda: ("mset", [key(), value(), b"k%d" % rng.randrange(24), value()]),
        lambda: ("set", [rng.choice(odd), value()]),
        lambda: ("del", [rng.choice(odd)]),
    ]
    weights = [30, 20, 20, 10, 3, 2, 1]
    return [rng.choices(makers, weights)[0]() for _ in range(count)]


def interleaved(first: list[Command], second: list[Command], seed: int) -> list[Command]:
    """Both lists' commands, each list in its order, interleaved at random."""
    rng = random.Random(seed)
    merged: list[Command] = []
    left, right = list(first), list(second)
    while left or right:
        source = left if right == [] or (left and rng.random() < 0.5) else right
        merged.append(source.pop(0))
    return merged


@dataclass
class KvLog:
    """The entries of an application's log, segment by segment (see the module docstring);
    no I/O, so that tests without bookies reduce the same logs."""

    rng: random.Random = field(default_factory=lambda: random.Random(7))
    index: int = 1
    entry_number: int = 0
    epoch: int = 0
    seqs: dict[bytes, int] = field(default_factory=dict)
    logged: list[tuple[bytes, int, int, Command]] = field(default_factory=list)
    """(client, seq, ack_seq, command) of every command logged with a session."""

    def segment(self, commands: list[Command]) -> list[bytes]:
        """The entries of a new leader's segment holding `commands` (and retries of earlier
        ones), from the next index."""
        self.epoch += 1
        items: list[bytes] = [encode_leader_start(f"replica-{self.epoch}")]
        pending = list(commands)
        entries: list[bytes] = []
        while pending or items:
            while pending and len(items) < self.rng.randrange(1, 6):
                items.append(self._item(pending.pop(0)))
            entries.append(
                encode_batch(
                    epoch=self.epoch,
                    first_index=self.index,
                    timestamp_ms=T0_MS + 1000 * self.entry_number,
                    seed=self.entry_number,
                    items=items,
                )
            )
            self.index += len(items)
            self.entry_number += 1
            items = []
        return entries

    def _item(self, command: Command) -> bytes:
        name, args = command
        draw = self.rng.random()
        if draw < 0.1:
            return encode_command(name, args)
        if draw < 0.15 and self.logged:
            client, seq, ack_seq, (name, args) = self.rng.choice(self.logged[-8:])
            return self._encode(name, args, client, seq, ack_seq)  # a retry, logged again
        client = self.rng.choice(CLIENTS)
        seq = self.seqs.get(client, 0) + 1
        self.seqs[client] = seq
        ack_seq = max(0, seq - self.rng.randrange(1, 4))
        self.logged.append((client, seq, ack_seq, command))
        return self._encode(name, args, client, seq, ack_seq)

    @staticmethod
    def _encode(name: str, args: list[bytes], client: bytes, seq: int, ack_seq: int) -> Any:
        return encode_command(name, args, client_id=client, seq=seq, ack_seq=ack_seq)


@dataclass
class KvLogWriter:
    """Writes an application's log (a `KvLog`) on bookies, segment by segment."""

    store: ZkMetadataStore
    ledgers: LedgerClient
    app: str
    log: KvLog = field(default_factory=KvLog)
    segments: list[Segment] = field(default_factory=list)
    version: int = -1

    @property
    def index(self) -> int:
        """The next index."""
        return self.log.index

    async def segment(self, commands: list[Command]) -> None:
        """A new leader's CLOSED segment holding `commands` (and retries of earlier ones)."""
        first_index = self.log.index
        handle = await self.ledgers.create_ledger(3, 3, 2, password=PASSWORD)
        for entry in self.log.segment(commands):
            await handle.append(entry)
        await handle.close()
        epoch = self.log.epoch
        self.segments.append(
            Segment(handle.ledger_id, epoch, first_index, SegmentState.CLOSED, self.index - 1)
        )
        value = encode_log(Log(epoch, tuple(self.segments)))
        layout = AppLayout.of(self.app)
        if self.version < 0:
            await self.store.create(layout.log, value, make_parents=True)
            self.version = 0
        else:
            versioned = await self.store.get(layout.log)
            assert decode_log(versioned.value).segments == tuple(self.segments[:-1])
            await self.store.set(layout.log, value, versioned.version)

    async def truncate_first_segment(self) -> int:
        """Drop the first segment from the log znode, as truncation behind a snapshot does;
        the log's new first index."""
        self.segments.pop(0)
        layout = AppLayout.of(self.app)
        versioned = await self.store.get(layout.log)
        await self.store.set(
            layout.log, encode_log(Log(self.log.epoch, tuple(self.segments))), versioned.version
        )
        return self.segments[0].first_index


@contextlib.contextmanager
def kv_writer(zk: str, ledger_root: str, portal: BlockingPortal, app: str) -> Iterator[KvLogWriter]:
    """A writer of `app`'s log on the cluster of `zk`, its clients running on `portal`."""
    with (
        portal.wrap_async_context_manager(ZkMetadataStore.connect(zk)) as store,
        portal.wrap_async_context_manager(LedgerClient.open(store, root=ledger_root)) as ledgers,
    ):
        yield KvLogWriter(store, ledgers, app)
