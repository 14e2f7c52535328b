"""What every handle of one ledger client shares: connections, metadata, bookies, knobs.

One `ClientContext` is built by `LedgerClient.open` and handed to each write
handle, read handle and recovery it creates, so they reach the same pool,
the same view of the bookies and the same seeded `Random`, and start their
tasks in the client's task group (whose lifetime bounds theirs).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import anyio.abc

from bookie.client.config import ClientConfig
from bookie.client.connections import ConnectionPool
from bookie.client.registry import BookieRegistry
from bookie.client.stats import ClientStats
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication


@dataclass(frozen=True, slots=True)
class ClientContext:
    pool: ConnectionPool
    ledgers: LedgerManager
    registry: BookieRegistry
    config: ClientConfig
    rng: random.Random
    """The only source of randomness (placement): seeded under simulation."""
    task_group: anyio.abc.TaskGroup
    stats: ClientStats
    """What the client counts for its metrics (bookie/client/stats.py)."""
    marks: UnderReplication
    """Autorecovery's marks: a writer that closes a ledger some bookie of which missed
    entries marks it, so that autorecovery copies them back (bookie/client/write_handle.py)."""
