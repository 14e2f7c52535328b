"""A connection to one bookie for autorecovery, checked to be that bookie of this cluster.

Like the ledger client's connections (bookie/client/connections.py), a new connection
first asks IDENTIFY; one that names another bookie or another cluster is refused
(`BookieUnavailable`), since a lost bookie's address may since be another's.
"""

from __future__ import annotations

import contextlib

from bookie.client.bookie_conn import BookieConnection
from bookie.client.connections import bookie_address, identity_problem
from bookie.errors import BookieUnavailable, NoNode
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import read_instance_id


async def cluster_instance_id(store: MetadataStore, root: str) -> str | None:
    """The cluster's INSTANCEID, None when no bookie has initialised the cluster yet."""
    try:
        return await read_instance_id(store, root)
    except NoNode:
        return None


async def connect_checked(
    stack: contextlib.AsyncExitStack,
    bookie_id: str,
    address: str,
    instance_id: str | None,
    timeout_ms: int,
) -> BookieConnection:
    """A connection to `bookie_id` at `address`, closed with `stack`; raises
    `BookieUnavailable` when it cannot connect or another bookie answers."""
    target = bookie_address(address)
    connection = await stack.enter_async_context(
        BookieConnection.connect(target.host, target.port, connect_timeout_ms=timeout_ms)
    )
    answer = await connection.identify(timeout_ms=timeout_ms)
    problem = identity_problem(bookie_id, instance_id, answer)
    if problem is not None:
        raise BookieUnavailable(f"{address}: {problem}")
    return connection
