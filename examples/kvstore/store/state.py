"""The key-value store's state, and the private operations on it every command family shares.

`KVState` holds the attributes and keeps them consistent; the command
families (`kvstore.store.strings`, `kvstore.store.keys`, `kvstore.store.keyspace`,
`kvstore.store.expiry`, `kvstore.store.transactions`) are mixins over it that change
the state only through these operations, and `kvstore.state_machine.KVStore`
puts them together as a `StateMachine`.

State:

* `values`: key -> value;
* `expire_at_ms`: key -> the logged time (ms since the Unix epoch) at which
  it expires, for keys with a TTL;
* `versions`: key -> the log index of the command that last changed it (its
  value or its TTL), for every key; `tombstones`: deleted key -> `(index of
  the deletion, expiry time if it was deleted for expiring, else None)`, for
  the last `limits.watch_tombstones_max` deletions, and
  `tombstones_forgotten_index`, the highest deletion index forgotten.
  Together they answer "did this key change after index i?" for WATCH.

Derived from those, private (not in snapshots; rebuilt by `_rebuild_derived`
when a snapshot is restored):

* `_scan_index`: `(key_hash(key), key)` for every key, sorted: the order in
  which SCAN and KEYS walk the keys (see `kvstore.protocol.glob`), so a SCAN cursor
  is one 64-bit number whatever the key.  Kept lazily: a new key goes into
  the set `_unindexed`, and SCAN and KEYS merge that set into the index
  before walking it (`_scan_order`), so a SET of a new key costs a set
  insertion, not a sorted insertion;
* `_expiry_queue`: the pairs of `expire_at_ms` as `(expire_at_ms, key)`,
  sorted, so the keys due first are found without a scan;
* `_content_hash`: the state hash (`KVStore.state_hash`; defined in
  `kvstore.store.content_hash`), kept up to date change by change.  The digests
  are taken later than the change: a key's first change since the hash was
  last brought up to date notes its value and expiry before it
  (`_hash_pending`), and `_settle_hash` swaps the digests of the noted ones
  for those of the current ones.  That runs in `idle` (a leader calls it
  while the bookies store a batch, so the digests leave the path from the
  clients' commands to their answers), in `state_hash`, and when
  `limits.hash_pending_keys_max` keys are noted.

Not state at all: `_expired_keys`, the keys this process deleted for having
expired since it started or restored a snapshot (INFO's `expired_keys`, a
counter of the process as Redis's is; replicas apply the same deletions, so
they count alike from the same start).

Expiry is decided by logged time only, so it is the same on every replica:
a key is expired once `expire_at_ms <= now`, where `now` is the time of the
command being applied, or for a query the time of the last applied entry
(the replica passes its applied position to the query; a linearizable read
on the leader sees the leader's clock when later).  Commands delete expired
keys they touch (lazy expiry: `_lookup`), and every command also deletes up
to `limits.active_expiry_keys_max` due keys from the front of
`_expiry_queue` (active expiry: `_command_time_ms`), so unread keys do not
stay forever.  Queries change nothing: they treat an expired key as absent
(`value_at`).  Like Redis, DBSIZE counts keys not deleted yet, expired or not.

Keys are at most `key_bytes_max` bytes and values `value_bytes_max` (every
write checks); these settings decide results, so they must be equal on
every replica.

Invariants: `expire_at_ms` and `_expiry_queue` hold the same pairs, and only
keys present in `values`; `_scan_index` and `_unindexed` (disjoint), and
`versions`, hold exactly the keys of `values`, and `tombstones` none of them;
`_content_hash`, once `_settle_hash` ran, is the sum of the digests of
`values` and `expire_at_ms`; every change of `values` or `expire_at_ms` is
preceded by `_note_change` of its key, except in `_delete_all`, which
empties the hash and its notes with the rest; every key is at most
`key_bytes_max` bytes and every value at most `value_bytes_max`.
"""

from __future__ import annotations

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from kvstore import errors, limits
from kvstore.errors import RedisError
from kvstore.protocol.glob import key_hash
from kvstore.store.content_hash import content_hash, settled_hash
from rsm import Context


class KVState:
    """The state of `KVStore` and the operations on it (see the module docstring).

    A mixin: the class using it derives from `StateMachine` too, which gives
    `context`.
    """

    context: Context
    """Where and when the command being applied was logged (`StateMachine.context`)."""

    def __init__(
        self,
        *,
        key_bytes_max: int = limits.key_bytes_max_default,
        value_bytes_max: int = limits.value_bytes_max_default,
    ) -> None:
        assert key_bytes_max >= 1
        assert value_bytes_max >= 1
        self.values: dict[bytes, bytes] = {}
        self.expire_at_ms: dict[bytes, int] = {}
        self._scan_index: SortedList = SortedList()
        self._unindexed: set[bytes] = set()
        self._expiry_queue: SortedList = SortedList()
        self._content_hash = 0
        self._hash_pending: dict[bytes, tuple[bytes | None, int | None]] = {}
        """Key changed since `_content_hash` was brought up to date -> its value and expiry
        then (None: none)."""
        self.versions: dict[bytes, int] = {}
        self.tombstones: dict[bytes, tuple[int, int | None]] = {}
        self.tombstones_forgotten_index = 0
        self.key_bytes_max = key_bytes_max
        self.value_bytes_max = value_bytes_max
        self._expired_keys = 0

    @property
    def expired_keys(self) -> int:
        """Keys deleted here for having expired (see the module docstring)."""
        return self._expired_keys

    def _rebuild_derived(self) -> None:
        """Rebuild the private indexes and the hash from the public attributes (a restored
        snapshot carries only those)."""
        self._scan_index = SortedList((key_hash(key), key) for key in self.values)
        self._unindexed = set()
        self._expiry_queue = SortedList((at, key) for key, at in self.expire_at_ms.items())
        self._content_hash = content_hash(self.values, self.expire_at_ms)
        self._hash_pending = {}

    # --- the state hash -----------------------------------------------------------------------

    def _note_change(self, key: bytes) -> None:
        """Call before changing the value or the expiry of `key` (see the module docstring)."""
        pending = self._hash_pending
        if key in pending:
            return
        if len(pending) >= limits.hash_pending_keys_max:
            self._settle_hash()
        pending[key] = (self.values.get(key), self.expire_at_ms.get(key))

    def _settle_hash(self) -> None:
        """Swap the digests of what `_hash_pending` noted for those of the keys' current
        value and expiry."""
        pending = self._hash_pending
        if not pending:
            return
        self._content_hash = settled_hash(
            self._content_hash, pending, self.values, self.expire_at_ms
        )
        pending.clear()

    # --- time and expiry ----------------------------------------------------------------------

    def _command_time_ms(self) -> int:
        """The logged time of the command being applied, after active expiry of due keys."""
        now_ms = self.context.time_ms
        if self.expire_at_ms:  # (the queue holds the same keys; a dict's test costs less)
            queue = self._expiry_queue
            for _ in range(limits.active_expiry_keys_max):
                if not queue or queue[0][0] > now_ms:
                    break
                expire_at_ms, key = queue[0]
                self._delete(key, expired_at_ms=expire_at_ms)
        return now_ms

    def _query_time_ms(self) -> int:
        """The time of the last applied entry (a query's "now")."""
        return self.context.time_ms

    def _expired(self, key: bytes, now_ms: int) -> bool:
        expire_at_ms = self.expire_at_ms.get(key)
        return expire_at_ms is not None and expire_at_ms <= now_ms

    def _lookup(self, key: bytes, now_ms: int) -> bytes | None:
        """The live value of `key` for a command; an expired key is deleted (lazy expiry)."""
        expire_at_ms = self.expire_at_ms.get(key)
        if expire_at_ms is not None and expire_at_ms <= now_ms:
            self._delete(key, expired_at_ms=expire_at_ms)
            return None
        return self.values.get(key)

    def value_at(self, key: bytes, now_ms: int) -> bytes | None:
        """The live value of `key` at `now_ms` (an expired key reads as absent); changes
        nothing: queries read through it, and the server's GETs under the read lease.  A key
        that is not bytes is a `TypeError`, not a key that is absent (a query's caller may
        pass text: `rsm query` without `--bytes`)."""
        if type(key) is not bytes:
            raise TypeError(f"keys are bytes, not {type(key).__name__}")
        expire_at_ms = self.expire_at_ms.get(key)
        if expire_at_ms is not None and expire_at_ms <= now_ms:
            return None
        return self.values.get(key)

    # --- writes and the indexes ---------------------------------------------------------------

    def _store(self, key: bytes, value: bytes, *, keep_ttl: bool) -> None:
        self._note_change(key)
        if not keep_ttl and key in self.expire_at_ms:
            self._persist(key)
        if key not in self.values:
            self._unindexed.add(key)
            self.tombstones.pop(key, None)
        self.values[key] = value
        self.versions[key] = self.context.index

    def _delete(self, key: bytes, *, expired_at_ms: int | None = None) -> None:
        """Delete `key` (which exists); `expired_at_ms`: it is deleted because it expired then."""
        self._note_change(key)
        self._persist(key)
        del self.values[key]
        del self.versions[key]
        if key in self._unindexed:
            self._unindexed.remove(key)
        else:
            self._scan_index.remove((key_hash(key), key))
        if expired_at_ms is not None:
            self._expired_keys += 1
        self._bury(key, expired_at_ms)

    def _delete_all(self) -> None:
        """Delete every key at once, remembering the deletions for WATCH (past the bound,
        forgetting every deletion instead)."""
        if len(self.tombstones) + len(self.values) > limits.watch_tombstones_max:
            # Too many to remember one by one: every older WATCH will abort.
            self.tombstones.clear()
            self.tombstones_forgotten_index = self.context.index
        else:
            for key in self.values:
                self._bury(key, None)
        self.values.clear()
        self._scan_index.clear()
        self._unindexed.clear()
        self.versions.clear()
        self.expire_at_ms.clear()
        self._expiry_queue.clear()
        self._content_hash = 0
        self._hash_pending.clear()

    def _bury(self, key: bytes, expired_at_ms: int | None) -> None:
        """Remember that `key` was deleted now, for WATCH; forget the oldest deletion past the
        bound (`tombstones_forgotten_index` then says how recent the forgotten ones are)."""
        tombstones = self.tombstones
        tombstones[key] = (self.context.index, expired_at_ms)
        if len(tombstones) > limits.watch_tombstones_max:
            oldest = next(iter(tombstones))
            index, _ = tombstones.pop(oldest)
            self.tombstones_forgotten_index = max(self.tombstones_forgotten_index, index)

    def _expire(self, key: bytes, expire_at_ms: int, now_ms: int) -> None:
        """Give `key` (which exists) a TTL; a time already past deletes it."""
        if expire_at_ms <= now_ms:
            self._delete(key)
            return
        self._note_change(key)
        self._persist(key)
        self.expire_at_ms[key] = expire_at_ms
        self._expiry_queue.add((expire_at_ms, key))
        self.versions[key] = self.context.index

    def _persist(self, key: bytes) -> bool:
        """Drop the TTL of `key`; whether it had one (then the key changed, for WATCH)."""
        if key not in self.expire_at_ms:
            return False
        self._note_change(key)
        expire_at_ms = self.expire_at_ms.pop(key)
        self._expiry_queue.remove((expire_at_ms, key))
        self.versions[key] = self.context.index
        return True

    def _scan_order(self) -> SortedList:
        """`_scan_index` with the keys stored since the last walk merged in."""
        unindexed = self._unindexed
        if unindexed:
            self._scan_index.update((key_hash(key), key) for key in unindexed)
            unindexed.clear()
        return self._scan_index

    # --- checks -------------------------------------------------------------------------------

    def _check_key(self, key: bytes) -> None:
        if type(key) is not bytes:
            raise TypeError(f"keys are bytes, not {type(key).__name__}")
        if len(key) > self.key_bytes_max:
            raise RedisError(errors.KEY_TOO_LONG)

    @staticmethod
    def _check_words(words: tuple[bytes, ...]) -> None:
        """A query's arguments other than keys are bytes too, as a Redis client sends them."""
        for word in words:
            if type(word) is not bytes:
                raise TypeError(f"arguments are bytes, not {type(word).__name__}")

    def _check_value(self, value: bytes) -> None:
        if type(value) is not bytes:
            raise TypeError(f"values are bytes, not {type(value).__name__}")
        if len(value) > self.value_bytes_max:
            raise RedisError(errors.STRING_TOO_LONG)
