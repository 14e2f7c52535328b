"""`ConnectionAdmission`: which new connections a server takes, counted in total and per address.

The bookie server, the replica server and the key-value store's RESP server
ask `admit(host)` for each connection they accept and `release(host)` once an
admitted one is gone.  A connection is refused when the server holds
`total_max` connections, or `per_address_max` from the same peer host: one
client machine (or one misbehaving client) cannot take every slot and lock
the others out.  A connection without a peer address (a stream of the
simulated network) counts toward the total only.

Pure bookkeeping: no sockets; `peer_host` reads the host out of what a
transport or stream reports as its peer (`(host, port, ...)` for TCP).

Invariants: `count` is the number admitted and not released; no host holds
more than `per_address_max` of them, and `count` never exceeds `total_max`.
"""

from __future__ import annotations

import enum
from collections import Counter


def peer_host(peer: object) -> str | None:
    """The host of a peer address `(host, port, ...)`, or None for anything else."""
    if isinstance(peer, tuple) and peer and isinstance(peer[0], str):
        return peer[0]
    return None


class Refusal(enum.Enum):
    """Why a connection was refused."""

    SERVER_FULL = "the server holds as many connections as it may"
    ADDRESS_FULL = "the client's host holds as many connections as one address may"


class ConnectionAdmission:
    """A server's connection counts against its two bounds (see the module docstring)."""

    __slots__ = ("total_max", "per_address_max", "_by_host", "_count")

    def __init__(self, *, total_max: int, per_address_max: int) -> None:
        assert total_max > 0
        assert per_address_max > 0
        self.total_max = total_max
        self.per_address_max = per_address_max
        self._by_host: Counter[str] = Counter()
        self._count = 0

    @property
    def count(self) -> int:
        return self._count

    def admit(self, host: str | None) -> Refusal | None:
        """Count a new connection from `host` in and return None, or say why it is refused."""
        if self._count >= self.total_max:
            return Refusal.SERVER_FULL
        if host is not None:
            if self._by_host[host] >= self.per_address_max:
                return Refusal.ADDRESS_FULL
            self._by_host[host] += 1
        self._count += 1
        return None

    def release(self, host: str | None) -> None:
        """An admitted connection from `host` is gone."""
        assert self._count > 0
        self._count -= 1
        if host is not None:
            remaining = self._by_host[host] - 1
            assert remaining >= 0
            if remaining:
                self._by_host[host] = remaining
            else:
                del self._by_host[host]
