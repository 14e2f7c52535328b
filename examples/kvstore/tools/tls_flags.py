"""`kvstore serve`'s TLS flags, and the TLS settings of a node they give.

One certificate and key (`--tls-cert-file`, `--tls-key-file`) are the node's
identity: the certificate of its TLS listeners, and its client certificate
when it connects to other replicas or to bookies with TLS.  `--tls-ca-file`
holds the CAs it trusts, both ways.  What runs on TLS:

* `--resp-tls HOST:PORT`: a second RESP port, for Redis clients with TLS;
* `--tls-replicas`: the framework's port (`--listen`) speaks TLS, and the node
  forwards to other replicas with TLS (every replica of a store must agree);
  `--tls-allowed-clients` names the client certificates it serves there;
* `--tls-bookies`: the node's ledger client connects to the bookies' TLS
  listeners;
* `--tls-admin`: the admin API (`--admin`) is served over HTTPS, as the
  framework port is (mutual with `--tls-require-client-cert`, names from
  `--tls-allowed-clients`).

`kvstore status --zk` reaches replicas whose framework port is on TLS with
`--tls-ca-file` (and `--tls-cert-file`, `--tls-key-file` under mutual TLS):
`add_client_tls_arguments`, `client_connector`.

`--tls-require-client-cert` makes the framework port's TLS mutual, and
`--resp-tls-require-client-cert` the RESP port's.
Bad combinations and unusable files are `InvalidConfig` (bookie's), raised
before anything starts.
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from pathlib import Path

from bookie.address import parse_address
from bookie.errors import InvalidAddress, InvalidConfig
from bookie.net.tls import TlsListen, client_context, server_context
from rsm.client import tcp_connector, tls_connector
from rsm.link import Connector


@dataclass(frozen=True)
class NodeTls:
    """What of a node runs on TLS, with its contexts (None: plain)."""

    resp: TlsListen | None = None
    replica_server: ssl.SSLContext | None = None
    replica_allowed_names: frozenset[str] | None = None
    client: ssl.SSLContext | None = None
    """For connections to other replicas (with `replica_server`) and to bookies."""
    bookies: bool = False
    admin: ssl.SSLContext | None = None
    """The admin API's server context (HTTPS), if any."""

    def connector(self) -> Connector:
        """How the node connects to other replicas."""
        if self.replica_server is None:
            return tcp_connector
        assert self.client is not None
        return tls_connector(self.client)


def add_tls_arguments(parser: argparse.ArgumentParser) -> None:
    tls = parser.add_argument_group("TLS (docs/security.md)")
    tls.add_argument("--resp-tls", metavar="HOST:PORT", help="serve Redis clients with TLS here")
    tls.add_argument("--tls-replicas", action="store_true", help="the framework's port speaks TLS")
    tls.add_argument("--tls-bookies", action="store_true", help="connect to bookies with TLS")
    tls.add_argument("--tls-admin", action="store_true", help="serve --admin over HTTPS")
    tls.add_argument("--tls-cert-file", type=Path, help="PEM certificate chain (and key)")
    tls.add_argument("--tls-key-file", type=Path, help="PEM private key, if not in the chain")
    tls.add_argument("--tls-ca-file", type=Path, help="PEM CAs trusted for peers' certificates")
    tls.add_argument(
        "--tls-require-client-cert",
        action="store_true",
        help="the framework port refuses clients without a certificate --tls-ca-file verifies",
    )
    tls.add_argument(
        "--resp-tls-require-client-cert",
        action="store_true",
        help="the TLS RESP port refuses clients without a certificate --tls-ca-file verifies",
    )
    tls.add_argument(
        "--tls-allowed-clients",
        metavar="NAMES",
        help="comma-separated client certificate common names the framework's port serves",
    )


def add_client_tls_arguments(parser: argparse.ArgumentParser) -> None:
    tls = parser.add_argument_group("TLS, for replicas started with --tls-replicas")
    tls.add_argument("--tls-ca-file", type=Path, help="PEM CAs the replicas' certificates are from")
    tls.add_argument("--tls-cert-file", type=Path, help="PEM client certificate chain (and key)")
    tls.add_argument("--tls-key-file", type=Path, help="PEM private key, if not in the chain")


def client_connector(arguments: argparse.Namespace) -> Connector | None:
    """How a tool reaches the replicas, from `add_client_tls_arguments`'s flags (None: no
    TLS flag given); `InvalidConfig` if the files cannot be used."""
    ca_file: Path | None = arguments.tls_ca_file
    if ca_file is None:
        if arguments.tls_cert_file is not None or arguments.tls_key_file is not None:
            raise InvalidConfig("--tls-cert-file and --tls-key-file need --tls-ca-file")
        return None
    return tls_connector(client_context(ca_file, arguments.tls_cert_file, arguments.tls_key_file))


def node_tls(arguments: argparse.Namespace) -> NodeTls:
    """The TLS settings the flags ask for; `InvalidConfig` saying what is wrong."""
    resp_address = arguments.resp_tls
    replicas = arguments.tls_replicas
    bookies = arguments.tls_bookies
    admin = arguments.tls_admin
    if resp_address is None and not replicas and not bookies and not admin:
        return NodeTls()
    cert_file: Path | None = arguments.tls_cert_file
    key_file: Path | None = arguments.tls_key_file
    ca_file: Path | None = arguments.tls_ca_file
    if cert_file is None and (resp_address is not None or replicas or admin):
        raise InvalidConfig("--resp-tls, --tls-replicas and --tls-admin need --tls-cert-file")
    if ca_file is None and (replicas or bookies):
        raise InvalidConfig("--tls-replicas and --tls-bookies need --tls-ca-file")
    names = arguments.tls_allowed_clients
    if names is not None and not arguments.tls_require_client_cert:
        raise InvalidConfig("--tls-allowed-clients needs --tls-require-client-cert")
    server = None
    if replicas or admin:
        assert cert_file is not None
        server = server_context(
            cert_file, key_file, ca_file, require_client_cert=arguments.tls_require_client_cert
        )
    resp = None
    if resp_address is not None:
        try:
            address = parse_address(resp_address, port_zero=True)
        except InvalidAddress as error:
            raise InvalidConfig(f"--resp-tls {resp_address!r}: {error}") from error
        assert cert_file is not None
        resp_context = server_context(
            cert_file,
            key_file,
            ca_file,
            require_client_cert=arguments.resp_tls_require_client_cert,
        )
        resp = TlsListen(address.host, address.port, resp_context)
    return NodeTls(
        resp=resp,
        replica_server=server if replicas else None,
        admin=server if admin else None,
        replica_allowed_names=(
            None if names is None else frozenset(name.strip() for name in names.split(","))
        ),
        client=client_context(ca_file, cert_file, key_file) if replicas or bookies else None,
        bookies=bookies,
    )
