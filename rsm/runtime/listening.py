"""A replica process's TCP listeners, with an operator's error when the address is unusable.

A port another process holds, or a host that is not an address of this
machine, is a configuration for the operator to fix: `InvalidConfig` naming
the address and the port's role, which a process's main prints as one line,
not an `OSError` traceback.
"""

from __future__ import annotations

import anyio
import anyio.abc

from bookie.address import Address
from rsm.errors import InvalidConfig


async def listen_tcp(address: Address, role: str) -> anyio.abc.Listener[anyio.abc.SocketStream]:
    """A TCP listener on `address` (port 0: any free one) for `role` ("the RESP port", ...)."""
    try:
        return await anyio.create_tcp_listener(local_host=address.host, local_port=address.port)
    except OSError as error:
        raise InvalidConfig(
            f"cannot listen on {address} ({role}): {error.strerror or error}.  Is another "
            "process using this port, and is the host an address of this machine?"
        ) from error
