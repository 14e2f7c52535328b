"""`kvstore serve`'s TLS flags: the framework's (`rsm.tls_flags`: the replica's port,
the bookies, the admin API, the node's certificate) and a second RESP port.

* `--resp-tls HOST:PORT`: a second RESP port, for Redis clients with TLS, with
  the node's certificate; `--resp-tls-require-client-cert` makes it mutual.

Bad combinations and unusable files are `InvalidConfig` (rsm's), raised before
anything starts.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from bookie.address import parse_address
from bookie.errors import InvalidAddress
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.net.tls import TlsListen, server_context
from rsm.errors import InvalidConfig
from rsm.tls_flags import ReplicaTls, add_replica_tls_arguments, replica_tls


@dataclass(frozen=True)
class NodeTls:
    """What of a node runs on TLS: the framework's part, and the RESP port (None: none)."""

    replica: ReplicaTls
    resp: TlsListen | None = None


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    tls = add_replica_tls_arguments(parser)
    tls.add_argument("--resp-tls", metavar="HOST:PORT", help="serve Redis clients with TLS here")
    tls.add_argument(
        "--resp-tls-require-client-cert",
        action="store_true",
        help="the TLS RESP port refuses clients without a certificate --tls-ca-file verifies",
    )


def node_tls(arguments: argparse.Namespace) -> NodeTls:
    """The TLS settings the flags ask for; `InvalidConfig` saying what is wrong."""
    replica = replica_tls(arguments)
    resp_address = arguments.resp_tls
    if resp_address is None:
        return NodeTls(replica)
    cert_file: Path | None = arguments.tls_cert_file
    if cert_file is None:
        raise InvalidConfig("--resp-tls needs --tls-cert-file")
    try:
        address = parse_address(resp_address, port_zero=True)
    except InvalidAddress as error:
        raise InvalidConfig(f"--resp-tls {resp_address!r}: {error}") from error
    try:
        context = server_context(
            cert_file,
            arguments.tls_key_file,
            arguments.tls_ca_file,
            require_client_cert=arguments.resp_tls_require_client_cert,
        )
    except BookieInvalidConfig as error:
        raise InvalidConfig(str(error)) from error
    return NodeTls(replica, TlsListen(address.host, address.port, context))
