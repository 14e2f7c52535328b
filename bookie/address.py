"""Network addresses as text: the one parser of `host:port`, and its inverse.

Accepted format: `host:port`, or `[host]:port` for an IPv6 host.

* The port is the text after the last colon: ASCII digits (leading zeros
  allowed) naming 1 to 65535; with `port_zero`, also 0, which asks a
  listener for any free port.
* The host is everything before the last colon, without the brackets when it
  is enclosed in them, so `[::1]:3181` and `::1:3181` both name host `::1`.
  It is not otherwise checked (resolving it is the connecting side's
  business); it may be empty (every interface, for a listener) only with
  `empty_host`.

`str(Address)` writes the host in brackets when it holds a colon, so parsing
what it writes gives the same `Address` back.  Anything else raises
`InvalidAddress`, whose message quotes the text and says what is expected;
callers turn it into their own error where the address came from (a
configuration key, a bookie registration, a replica address).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bookie.errors import InvalidAddress

PORT_MAX: Final = 0xFFFF


@dataclass(frozen=True, slots=True)
class Address:
    """A TCP endpoint, written `host:port` (`[host]:port` for an IPv6 host)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_address(text: str, *, empty_host: bool = False, port_zero: bool = False) -> Address:
    """The `Address` that `text` names (format: the module docstring), or `InvalidAddress`."""
    head, separator, port_text = text.rpartition(":")
    host = head[1:-1] if head.startswith("[") and head.endswith("]") else head
    if (
        not separator
        or not (host or empty_host)
        or not (port_text.isascii() and port_text.isdigit())
    ):
        raise InvalidAddress(f"{text!r}: expected host:port, e.g. 127.0.0.1:3181")
    port_min = 0 if port_zero else 1
    if (
        len(port_text.lstrip("0")) > len(str(PORT_MAX))
        or not port_min <= int(port_text) <= PORT_MAX
    ):
        raise InvalidAddress(f"{text!r}: the port must be from {port_min} to {PORT_MAX}")
    return Address(host, int(port_text))
