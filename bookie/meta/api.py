"""The metadata-store contract: what the bookie, the ledger client and the RSM
framework may ask of ZooKeeper (or of its in-memory stand-in).

Two implementations obey it, checked by one contract suite
(`tests/conformance/test_metadata_store.py`): `bookie.meta.zk.ZkMetadataStore`
(kazoo, real ZooKeeper) and `bookie.meta.memory.MemoryMetadataStore` (tests and
simulation, with injectable session expiry).

Semantics, identical in both:

* Paths are absolute, '/'-separated, no trailing slash (except the root '/').
* Every node has a `version` that starts at 0 and grows by one on each `set`.
  `set(path, value, version)` is a compare-and-set: it succeeds only if the
  node's version is still `version`, else raises `MetadataVersionConflict`.
  Passing `version=ANY_VERSION` skips the check.
* `create` fails with `NodeExists` if the node exists and with `NoNode` if the
  parent is missing, unless `make_parents` (parents are created empty,
  persistent).  `sequential` appends a zero-padded 10-digit counter unique
  under the parent and returns the path actually created.
* Ephemeral nodes belong to this store's session: they vanish when the session
  ends (close, or expiry), and `children` of other sessions stop listing them.
* `delete(path, version)` is a compare-and-set too; it fails with `NotEmpty`
  if the node has children.
* `commit(ops)` applies a list of `Check`/`Create`/`SetData`/`Delete` atomically:
  all or nothing (ZooKeeper `multi`).
* `watch(path, version)` returns at once if the node's version already
  differs from `version`, else after the node's data or existence next
  changes, even when that change leaves the version where it was (a node
  deleted and created again starts over at version 0, so versions alone cannot
  tell).  `watch_children` likewise for the set of children.  A return means
  "look again", possibly with nothing new to see: callers re-read.  Because
  the first check and the registration are atomic, no change can be missed
  between two calls.
* Session state: `session_events()` yields every transition; `LOST` means the
  session expired and every ephemeral node of it is gone.  After LOST the store
  opens a new session by itself; holders of ephemeral nodes (registrations,
  leadership) must re-create them and re-validate whatever they held.
* Every call raises `MetadataUnavailable` if the service does not answer within
  `limits.zk_operation_timeout_ms_default`; its outcome is then unknown.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

ANY_VERSION: Final = -1
"""Pass as `version` to skip the compare in `set` and `delete`."""

NO_NODE_VERSION: Final = -1
"""`watch` and `Versioned.version` for a node that does not exist."""


@dataclass(frozen=True, slots=True)
class Versioned:
    """A node's value together with the version it was read at."""

    value: bytes
    version: int


class SessionState(enum.Enum):
    CONNECTED = "connected"
    """The session is usable; ephemeral nodes exist."""
    SUSPENDED = "suspended"
    """Connection lost, session may still be alive: do not act as the owner of anything."""
    LOST = "lost"
    """The session expired: every ephemeral node of it is gone."""


@dataclass(frozen=True, slots=True)
class Check:
    path: str
    version: int


@dataclass(frozen=True, slots=True)
class Create:
    path: str
    value: bytes
    ephemeral: bool = False


@dataclass(frozen=True, slots=True)
class SetData:
    path: str
    value: bytes
    version: int


@dataclass(frozen=True, slots=True)
class Delete:
    path: str
    version: int


Op = Check | Create | SetData | Delete


class MetadataStore(Protocol):
    """A versioned, hierarchical key-value store with sessions (ZooKeeper's model)."""

    async def get(self, path: str) -> Versioned:
        """The node's value and version; `NoNode` if absent."""
        ...

    async def exists(self, path: str) -> int | None:
        """The node's version, or None if absent."""
        ...

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node; return its path (with the counter when `sequential`)."""
        ...

    async def set(self, path: str, value: bytes, version: int) -> int:
        """Compare-and-set; return the new version."""
        ...

    async def delete(self, path: str, version: int = ANY_VERSION) -> None:
        """Compare-and-delete a leaf; `NoNode` if absent."""
        ...

    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the node's children, sorted; `NoNode` if absent."""
        ...

    async def commit(self, ops: Sequence[Op]) -> None:
        """Apply all ops atomically or none; raises the error of the first failing op."""
        ...

    async def watch(self, path: str, version: int) -> None:
        """Return once the node's version differs from `version` (NO_NODE_VERSION: absent)."""
        ...

    async def watch_children(self, path: str, children: Sequence[str]) -> None:
        """Return once the node's children differ from `children` (or the node is gone)."""
        ...

    def session_events(self) -> AsyncIterator[SessionState]:
        """Every session state transition from now on."""
        ...

    @property
    def session_state(self) -> SessionState:
        """The current session state."""
        ...

    @property
    def session_id(self) -> int:
        """Identifies the current session; changes after LOST."""
        ...
