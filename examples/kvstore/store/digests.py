"""DEBUG DIGEST and DEBUG DIGEST-VALUE: digests of the data, equal on every replica that
applied the same commands.

Both are computed from the replicated state hash of `kvstore.store.content_hash`
(never from anything local to a replica), so two replicas answer the same
digests at the same applied index, and a replica that diverged answers
different ones.  Redis answers 40 hex characters (a SHA-1); here they are the
first `DIGEST_BYTES` bytes of the 256-bit hashes, in lower-case hex:

* `DEBUG DIGEST`: of the state hash (the sum of every key's digest), so 40
  zeros when the store is empty;
* `DEBUG DIGEST-VALUE key [key ...]`: of each key's digest
  (`KVStore.key_digests`: its value and its expiry time), 40 zeros for a key
  that does not exist; no key, an empty array;
* `DEBUG HELP`: the subcommands.

Keys expired but not deleted yet count, as in the state hash (Redis's
digests look at the stored keys too).  Any other subcommand, or DIGEST with
arguments, is Redis's "unknown subcommand or wrong number of arguments"
error.  Replies are simple strings, as Redis's.  Queries: they change nothing
but bring the running hash up to date (as `state_hash` does).
"""

from __future__ import annotations

from typing import Final

from kvstore.errors import RedisError, c_text
from kvstore.protocol.commands import ERROR_ARGUMENT_CHARS_MAX
from kvstore.store.content_hash import HASH_BYTES, key_digest
from kvstore.store.state import KVState
from rsm import query

DIGEST_BYTES: Final = 20
"""Bytes of a hash a digest shows: 40 hex characters, the length of Redis's."""

EMPTY_DIGEST: Final = "0" * (2 * DIGEST_BYTES)

_HELP: Final = (
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DIGEST",
    "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]",
    "    Output a hex signature of the values of all the specified keys.",
    "HELP",
    "    Print this help.",
)


class DigestCommands(KVState):
    """DEBUG, over the shared state."""

    @query
    def debug(self, subcommand: bytes, *args: bytes) -> str | list[str]:
        """DEBUG DIGEST | DIGEST-VALUE key [key ...] | HELP (see the module docstring)."""
        self._check_words((subcommand, *args))
        name = subcommand.lower()
        if name == b"digest" and not args:
            self._settle_hash()
            return _shown(self._content_hash.to_bytes(HASH_BYTES, "big"))
        if name == b"digest-value":
            values, expire_at_ms = self.values, self.expire_at_ms
            return [
                _shown(key_digest(key, values[key], expire_at_ms.get(key)))
                if key in values
                else EMPTY_DIGEST
                for key in args
            ]
        if name == b"help" and not args:
            return list(_HELP)
        shown = c_text(subcommand)[:ERROR_ARGUMENT_CHARS_MAX]
        raise RedisError(
            f"ERR unknown subcommand or wrong number of arguments for '{shown}'. Try DEBUG HELP."
        )


def _shown(digest: bytes) -> str:
    return digest[:DIGEST_BYTES].hex()
