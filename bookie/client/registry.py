"""The bookies a ledger client knows: who is writable (for placement) and where each listens.

The registrations live in the metadata store (`bookie.meta.bookies`); a
`BookieRegistry` lists them once when the client opens, then keeps its view
current with a watch in the client's task group.  Writable bookies, with their
racks, feed placement (new ensembles, replacements); every registered bookie,
writable or read-only, gets its address passed to the `ConnectionPool`, since
read-only bookies still serve reads and fencing.

A bookie that disappears from the registrations is no longer offered to
placement, but the pool keeps its last address: a ledger's readers may still
need it (a registration also vanishes for a moment when its ZooKeeper session
is re-established), and if it is really gone its connection fails and its
requests with it.

Joins are counted: each time a bookie appears among the writable ones (at
the first listing, after it was absent, or with a registration of another
ZooKeeper session: restarted, or re-registered) the count grows and the
bookie's `joined` number is set to it.  A write handle compares them with the
count when a bookie failed it, to tell a bookie that came back from one that
is still registered but dead; and the pool ends the bookie's reconnection
backoff, so that the first request to the bookie that came back reaches it.

A failed listing (metadata service unavailable) keeps the last view and is
retried after `metadata_retry_delay_ms`; the view is never emptied by an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import anyio

from bookie.client.connections import ConnectionPool
from bookie.errors import MetadataError
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import Bookies, list_bookies, watch_bookies

logger = logging.getLogger(__name__)


class BookieRegistry:
    """The client's view of the registered bookies; see the module docstring."""

    def __init__(
        self,
        store: MetadataStore,
        root: str,
        pool: ConnectionPool,
        *,
        retry_delay_ms: int,
        tls: bool = False,
    ) -> None:
        """`tls`: the pool connects with TLS, so to each bookie's TLS listener."""
        self._tls = tls
        self._store = store
        self._root = root
        self._pool = pool
        self._retry_delay_ms = retry_delay_ms
        self._bookies = Bookies()
        self._writable: dict[str, str | None] = {}
        self._join_count = 0
        self._joined: dict[str, int] = {}

    @property
    def writable(self) -> Mapping[str, str | None]:
        """Writable bookie id -> rack (None when it registered none), for placement."""
        return self._writable

    @property
    def join_count(self) -> int:
        """How many times a bookie became writable, as seen by this registry."""
        return self._join_count

    def joined(self, bookie_id: str) -> int:
        """`join_count` when `bookie_id` last became writable (0: never seen writable)."""
        return self._joined.get(bookie_id, 0)

    @property
    def read_only(self) -> frozenset[str]:
        return frozenset(self._bookies.read_only)

    async def refresh(self) -> None:
        """List the registrations now; raises what the store raises."""
        self._apply(await list_bookies(self._store, self._root))

    async def watch(self) -> None:
        """Keep the view current until cancelled."""
        while True:
            try:
                await watch_bookies(self._store, self._bookies)
                await self.refresh()
            except MetadataError as error:
                logger.warning("bookie list unavailable, retrying: %s", error)
                await anyio.sleep(self._retry_delay_ms / 1000)

    def _apply(self, bookies: Bookies) -> None:
        previous = self._bookies
        joined = [
            bookie_id
            for bookie_id in sorted(bookies.writable)
            if bookie_id not in previous.writable
            or previous.sessions.get(bookie_id) != bookies.sessions.get(bookie_id)
        ]
        self._bookies = bookies
        self._writable = {bookie_id: info.rack for bookie_id, info in bookies.writable.items()}
        for group in (bookies.writable, bookies.read_only):
            for bookie_id, info in group.items():
                self._pool.set_address(bookie_id, info.client_address(self._tls))
        for bookie_id in joined:
            self._join_count += 1
            self._joined[bookie_id] = self._join_count
            self._pool.end_backoff(bookie_id)
