"""The key-value store's state hash: its definition, from scratch and change by change.

The hash of a store's contents is the sum modulo 2^256 of a 256-bit BLAKE2b
digest of each (key, value) and each (key, expiry time), each read as a
big-endian integer: of `b"value" + len(key) as 4 bytes big-endian + key +
value`, and of `b"expiry" + len(key) as 4 bytes + key + expiry ms as 8
bytes`, both unkeyed; `KVStore.state_hash` gives the sum as `HASH_BYTES`
bytes big-endian.  Leaders log it and followers compare, so this definition
is part of the log's format: replicas that computed it differently would
report a divergence.  A sum does not depend on order, so equal contents give
equal hashes however they were built, and each change costs one or two
digests instead of hashing the whole store.

Per-key digests (`KVStore.key_digests`, `DEBUG DIGEST-VALUE`): `key_digest` is
one key's share of the sum, the digest of its value plus that of its expiry
if it has one, modulo 2^256, as `HASH_BYTES` bytes big-endian.  So the state
hash is the sum of every key's digest modulo 2^256, and two stores differ
exactly at the keys whose digests differ.

Invariants: `settled_hash` of a hash of some contents, with the old value and
expiry of every key that changed since, is `content_hash` of the contents now;
`content_hash` is the sum modulo 2^256 of `key_digest` over every key.
"""

from __future__ import annotations

from collections.abc import Mapping
from hashlib import blake2b
from typing import Final

HASH_BYTES: Final = 32
_HASH_MODULUS: Final = 1 << (8 * HASH_BYTES)


def _key_prefix(key: bytes) -> bytes:
    """What a key's digests start with: its length too, so ("ab", "c") and ("a", "bc")
    differ."""
    return len(key).to_bytes(4, "big") + key


def _value_digest(prefix: bytes, value: bytes) -> int:
    """BLAKE2b-256 of b"value", the key's prefix and the value, as an integer."""
    return int.from_bytes(
        blake2b(b"value" + prefix + value, digest_size=HASH_BYTES).digest(), "big"
    )


def _expiry_digest(prefix: bytes, expire_at_ms: int) -> int:
    """BLAKE2b-256 of b"expiry", the key's prefix and the time as 8 bytes, as an integer."""
    data = b"expiry" + prefix + expire_at_ms.to_bytes(8, "big")
    return int.from_bytes(blake2b(data, digest_size=HASH_BYTES).digest(), "big")


def key_digest(key: bytes, value: bytes, expire_at_ms: int | None) -> bytes:
    """The digest of one key (its value, and its expiry time if it has one)."""
    prefix = _key_prefix(key)
    total = _value_digest(prefix, value)
    if expire_at_ms is not None:
        total += _expiry_digest(prefix, expire_at_ms)
    return (total % _HASH_MODULUS).to_bytes(HASH_BYTES, "big")


def content_hash(values: Mapping[bytes, bytes], expire_at_ms: Mapping[bytes, int]) -> int:
    """The state hash computed from scratch (what `KVStore` keeps up to date change by change)."""
    total = sum(_value_digest(_key_prefix(key), value) for key, value in values.items())
    total += sum(_expiry_digest(_key_prefix(key), at) for key, at in expire_at_ms.items())
    return total % _HASH_MODULUS


def settled_hash(
    total: int,
    noted: Mapping[bytes, tuple[bytes | None, int | None]],
    values: Mapping[bytes, bytes],
    expire_at_ms: Mapping[bytes, int],
) -> int:
    """`total` with the digests of each noted key's old value and expiry (None: none)
    swapped for those of its current ones in `values` and `expire_at_ms`."""
    for key, (old_value, old_expiry) in noted.items():
        value = values.get(key)
        expiry = expire_at_ms.get(key)
        if value == old_value and expiry == old_expiry:
            continue
        prefix = _key_prefix(key)
        if value != old_value:
            if old_value is not None:
                total -= _value_digest(prefix, old_value)
            if value is not None:
                total += _value_digest(prefix, value)
        if expiry != old_expiry:
            if old_expiry is not None:
                total -= _expiry_digest(prefix, old_expiry)
            if expiry is not None:
                total += _expiry_digest(prefix, expiry)
    return total % _HASH_MODULUS
