"""A connection to one bookie for autorecovery, checked to be that bookie of this cluster.

Like the ledger client's connections (bookie/client/connections.py), a new connection
first asks IDENTIFY; one that names another bookie or another cluster is refused
(`BookieUnavailable`), since a lost bookie's address may since be another's.  It goes
over TCP (TLS with a client context: to the bookie's TLS listener), or over the byte
streams a `Connector` opens (the simulated network).
"""

from __future__ import annotations

import contextlib
import ssl

import anyio

from bookie.client.bookie_conn import BookieConnection
from bookie.client.connections import Connector, bookie_address, identity_problem
from bookie.errors import BookieUnavailable, NoNode
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import Bookies, read_instance_id


def client_addresses(bookies: Bookies, tls: bool) -> dict[str, str]:
    """Registered bookie id -> the address to reach it at (its TLS listener's with `tls`,
    when it has one), writable and read-only ones alike."""
    return {
        bookie_id: info.client_address(tls)
        for bookie_id, info in (*bookies.writable.items(), *bookies.read_only.items())
    }


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
    *,
    connector: Connector | None = None,
    tls: ssl.SSLContext | None = None,
) -> BookieConnection:
    """A connection to `bookie_id` at `address` (over TCP, with `tls` TLS, or a stream of
    `connector`), closed with `stack`; raises `BookieUnavailable` when it cannot connect or
    another bookie answers."""
    if connector is None:
        target = bookie_address(address)
        connection = await stack.enter_async_context(
            BookieConnection.connect(
                target.host, target.port, connect_timeout_ms=timeout_ms, tls=tls
            )
        )
    else:
        try:
            with anyio.fail_after(timeout_ms / 1000):
                stream = await connector(address)
        except (OSError, TimeoutError) as error:
            raise BookieUnavailable(f"{address}: cannot connect: {error!r}") from error
        connection = await stack.enter_async_context(BookieConnection.over(stream, address))
    answer = await connection.identify(timeout_ms=timeout_ms)
    problem = identity_problem(bookie_id, instance_id, answer)
    if problem is not None:
        raise BookieUnavailable(f"{address}: {problem}")
    return connection
