"""`free_port`: a port nobody listens on, and never one already handed out (`taken`); and
`pick_port`, which prefers a given port.  Free ports are chosen below the system's
ephemeral range, which outgoing connections take their source ports from.

Servers get their ports before they bind them, so the system may hand the same port
out twice meanwhile; a bookie then starts with another bookie's address (seen in CI:
two bookies of one test given port 37347, the second refused by the first's cookie)."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator

import pytest

from bookie import limits
from bookie.local import zookeeper
from bookie.local.cluster import pick_port
from bookie.local.zookeeper import free_port


class RepeatingSockets:
    """Stands in for `socket.socket`: binding to port 0 yields `ports` in turn."""

    def __init__(self, ports: list[int]) -> None:
        self._ports: Iterator[int] = iter(ports)
        self._port = 0

    def __call__(self, family: int, kind: int) -> contextlib.nullcontext[RepeatingSockets]:
        return contextlib.nullcontext(self)

    def bind(self, address: tuple[str, int]) -> None:
        self._port = next(self._ports)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self._port)


def test_a_port_handed_out_already_is_not_handed_out_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No room below the ephemeral range: the system's free ports, one of them taken.
    monkeypatch.setattr(zookeeper, "ephemeral_ports_low", lambda: limits.local_free_port_low)
    monkeypatch.setattr(zookeeper.socket, "socket", RepeatingSockets([5000, 5000, 5000, 5001]))
    assert free_port(taken={5000}) == 5001


def test_free_ports_lie_below_the_ephemeral_range_and_skip_taken_ones() -> None:
    """Outgoing connections take their source ports from the ephemeral range: a server
    restarted on a port from there could find a client's connection holding it."""
    taken: set[int] = set()
    for _ in range(50):
        port = free_port(taken=taken)
        assert limits.local_free_port_low <= port < zookeeper.ephemeral_ports_low()
        assert port not in taken
        taken.add(port)


def test_a_free_port_can_be_bound() -> None:
    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", port))


def test_pick_port_takes_the_preferred_port_unless_it_is_handed_out_or_bound() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bound:
        bound.bind(("127.0.0.1", 0))
        bound.listen()
        busy = bound.getsockname()[1]
        preferred = free_port()
        taken: set[int] = set()
        assert pick_port(preferred, taken) == preferred
        assert taken == {preferred}
        other = pick_port(preferred, taken)
        assert other != preferred
        assert pick_port(busy, taken) not in {busy, preferred, other}
        assert pick_port(0, taken) not in {busy, preferred, other, 0}
        assert len(taken) == 4
