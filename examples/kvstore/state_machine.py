"""The key-value store's replicated state: `KVStore`, Redis's string commands as a StateMachine.

This class is also the model for writing an application on `rsm`: state in
plain attributes, `@command` for what changes it, `@query` for what reads
it, and logged time (`self.context.time_ms`) wherever Redis would read its
clock.

Arguments are the raw bytes a Redis client sends after the command name;
results are the Python values `kvstore.protocol.resp` encodes (str for a simple
string like "OK", bytes for a bulk string, None for a null bulk, int,
lists); errors are `RedisError`s carrying Redis's exact text.  The
framework records a raised error (type name and message) like any result,
identically on every replica, so every replica answers the same `-ERR ...`
line.  The server checks command names and argument counts before a
command is logged (`kvstore.protocol.commands`); the methods check everything else,
before they change anything.

`KVStore` is put together from one mixin per command family, each over the
state they share (`kvstore.store.state.KVState`: the attributes, expiry, and the
operations on them every command uses):

* `kvstore.store.strings`: SET, GET and their variants, the counters, CAS;
* `kvstore.store.keys`: DEL, UNLINK, RENAME, RENAMENX, COPY, EXISTS, TOUCH, TYPE;
* `kvstore.store.keyspace`: KEYS, SCAN, DBSIZE, FLUSHDB, FLUSHALL;
* `kvstore.store.expiry`: the EXPIRE, TTL and EXPIRETIME families, PERSIST;
* `kvstore.store.transactions`: EXEC, and the position WATCH remembers;
* `kvstore.store.digests`: DEBUG DIGEST and DEBUG DIGEST-VALUE.

The framework finds their `@command` and `@query` methods along the class's
MRO.  `KVStore` itself adds what the framework calls besides: `restore`,
which rebuilds the derived state, `state_hash` and `idle`, which settle the
incremental hash of `kvstore.store.content_hash`, `key_digests`, each key's
share of that hash, and `show_key`, a key's value as redis-cli prints it
(for the tools that list keys or a key's history).  Its Spark reducer
(`kvstore.spark_reducer`, for `rsm spark snapshot`) computes the state key by
key for logs whose commands are confined to the keys they name.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import ClassVar

from kvstore.protocol.redis_cli import reply_text
from kvstore.store.content_hash import HASH_BYTES, key_digest
from kvstore.store.digests import DigestCommands
from kvstore.store.expiry import ExpiryCommands
from kvstore.store.keys import KeyCommands
from kvstore.store.keyspace import KeyspaceCommands
from kvstore.store.strings import StringCommands
from kvstore.store.transactions import TransactionCommands
from rsm import StateMachine


class KVStore(
    StringCommands,
    KeyCommands,
    KeyspaceCommands,
    ExpiryCommands,
    TransactionCommands,
    DigestCommands,
    StateMachine,
):
    """Redis's string commands, replicated.  See the module docstring for its parts and
    `kvstore.store.state` for the state and expiry."""

    spark_reducer = "kvstore.spark_reducer:REDUCER"
    """`rsm spark snapshot` computes the state by key in Spark (`kvstore.spark_reducer`)."""

    spark_arguments: ClassVar[Mapping[str, str]] = {
        "set": "key BINARY, value BINARY, options ARRAY<STRING>",
        "setnx": "key BINARY, value BINARY",
        "getset": "key BINARY, value BINARY",
        "setex": "key BINARY, seconds BIGINT, value BINARY",
        "psetex": "key BINARY, milliseconds BIGINT, value BINARY",
        "getdel": "key BINARY",
        "getex": "key BINARY, options ARRAY<STRING>",
        "mset": "pairs ARRAY<BINARY>",
        "msetnx": "pairs ARRAY<BINARY>",
        "append": "key BINARY, value BINARY",
        "setrange": "key BINARY, offset BIGINT, value BINARY",
        "incr": "key BINARY",
        "decr": "key BINARY",
        "incrby": "key BINARY, increment BIGINT",
        "decrby": "key BINARY, decrement BIGINT",
        "incrbyfloat": "key BINARY, increment DOUBLE",
        "cas": "key BINARY, expected BINARY, new BINARY",
        "del": "keys ARRAY<BINARY>",
        "unlink": "keys ARRAY<BINARY>",
        "expire": "key BINARY, seconds BIGINT, options ARRAY<STRING>",
        "pexpire": "key BINARY, milliseconds BIGINT, options ARRAY<STRING>",
        "expireat": "key BINARY, unix_seconds BIGINT, options ARRAY<STRING>",
        "pexpireat": "key BINARY, unix_milliseconds BIGINT, options ARRAY<STRING>",
        "persist": "key BINARY",
        "rename": "key BINARY, new_key BINARY",
        "renamenx": "key BINARY, new_key BINARY",
    }
    """The `typed_arguments` of `rsm-log` (with the option `machine`): the string commands,
    DEL and UNLINK, the EXPIRE family, PERSIST and RENAME; numbers as the numbers they
    are."""

    # --- snapshots and state hashes --------------------------------------------------------

    def restore(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        """The default restore of the public attributes, then the private indexes and the
        hash rebuilt from them (they are derived, so snapshots do not carry them)."""
        super().restore(chunks)
        self._rebuild_derived()

    def state_hash(self) -> bytes:
        """The running hash of the contents (see `kvstore.store.state`): no serialization."""
        self._settle_hash()
        return self._content_hash.to_bytes(HASH_BYTES, "big")

    def key_digests(self, keys: Iterable[bytes] | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Each key's digest (`kvstore.store.content_hash.key_digest`), in key order; with `keys`,
        those of them that exist.  Keys expired but not deleted yet count, as in the state
        hash.  Computed when called, so it stays right while later commands apply."""
        values, expire_at_ms = self.values, self.expire_at_ms
        chosen = sorted(values) if keys is None else sorted({k for k in keys if k in values})
        return iter([(key, key_digest(key, values[key], expire_at_ms.get(key))) for key in chosen])

    def show_key(self, key: bytes) -> str:
        """The stored value as redis-cli prints a GET of it (`(nil)` when absent), and its
        expiry time (ms since the Unix epoch) when it has one.  Expired but not deleted
        yet counts, as in `key_digests`."""
        value = self.values.get(key)
        expire_at_ms = self.expire_at_ms.get(key)
        expiry = "" if expire_at_ms is None or value is None else f" (expires at {expire_at_ms})"
        return reply_text(value) + expiry

    def idle(self) -> None:
        """Bring the state hash up to date while the replica has nothing else to do."""
        self._settle_hash()
