"""The TLS flags of a command that runs a replica (`rsm run`, an application's own serve
command) or talks to replicas (`rsm status`, `call`, ...), and the settings they give.

One certificate and key (`--tls-cert-file`, `--tls-key-file`) are a replica
process's identity: the certificate of its TLS listeners, and its client
certificate when it connects to other replicas or to bookies with TLS.
`--tls-ca-file` holds the CAs it trusts, both ways.  What runs on TLS:

* `--tls-replicas`: the replica's port (`--listen`) speaks TLS, and the
  process connects to other replicas with TLS, to their TLS ports;
* `--tls-listen HOST:PORT` (and `--tls-advertise`, the address told to
  others): a second, TLS, port beside a plain `--listen`, for moving a store
  to TLS one replica at a time (docs/security.md); the process connects to
  other replicas' plain ports, as its own `--listen` is plain;
* on the replica's TLS port, either way, `--tls-allowed-clients` names the
  client certificates served, `--tls-require-client-cert` makes it mutual;
* `--tls-bookies`: the ledger client connects to the bookies' TLS listeners;
* `--tls-admin`: the admin API (`--admin`) is served over HTTPS, as the
  replica's port is.

A command that only talks to replicas takes `--tls-ca-file` (and
`--tls-cert-file`, `--tls-key-file` under mutual TLS): `add_client_tls_arguments`,
`client_connector`.  Bad combinations and unusable files are `InvalidConfig`,
raised before anything starts.
"""

from __future__ import annotations

import argparse
import ssl
from dataclasses import dataclass
from pathlib import Path

from bookie.address import parse_address
from bookie.client.config import ClientConfig
from bookie.errors import InvalidAddress
from bookie.errors import InvalidConfig as BookieInvalidConfig
from bookie.net.tls import client_context, server_context
from bookie.net.tls_flags import add_bookie_tls_arguments
from rsm.client import tcp_connector, tls_connector
from rsm.errors import InvalidConfig
from rsm.link import Connector


@dataclass(frozen=True)
class ReplicaTls:
    """What of a replica process runs on TLS, with its contexts (None: plain)."""

    server: ssl.SSLContext | None = None
    """The replica's TLS port's context, with `--tls-replicas` or `--tls-listen`."""
    listen: str | None = None
    """The TLS port beside a plain `--listen` (`--tls-listen`), if any."""
    advertise: str | None = None
    """The address told to others for `listen` (`--tls-advertise`), if not `listen`."""
    allowed_names: frozenset[str] | None = None
    client: ssl.SSLContext | None = None
    """For connections to other replicas (with `server`) and to bookies."""
    bookies: bool = False
    admin: ssl.SSLContext | None = None
    """The admin API's server context (HTTPS), if any."""

    def connector(self) -> Connector:
        """How the process connects to other replicas: as its own `--listen` speaks."""
        if self.server is None or self.listen is not None:
            return tcp_connector
        assert self.client is not None
        return tls_connector(self.client)

    def ledger_config(self) -> ClientConfig | None:
        """The ledger client's settings (None: the defaults, plain TCP)."""
        return ClientConfig(tls=self.client) if self.bookies else None


def add_replica_tls_arguments(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """The flags of a command that runs a replica, in their own group (returned, for a
    command's own TLS flags)."""
    tls = parser.add_argument_group("TLS (docs/security.md)")
    tls.add_argument(
        "--tls-replicas", action="store_true", help="the replica's port (--listen) speaks TLS"
    )
    tls.add_argument(
        "--tls-listen",
        metavar="HOST:PORT",
        help="a second port for the replica protocol, with TLS, beside a plain --listen",
    )
    tls.add_argument(
        "--tls-advertise",
        metavar="HOST:PORT",
        help="the address of --tls-listen told to others (default: --tls-listen's)",
    )
    tls.add_argument("--tls-admin", action="store_true", help="serve --admin over HTTPS")
    add_bookie_tls_arguments(tls)
    tls.add_argument(
        "--tls-require-client-cert",
        action="store_true",
        help="the replica's TLS port refuses clients without a certificate --tls-ca-file verifies",
    )
    tls.add_argument(
        "--tls-allowed-clients",
        metavar="NAMES",
        help="comma-separated client certificate common names the replica's TLS port serves",
    )
    return tls


def replica_tls(arguments: argparse.Namespace) -> ReplicaTls:
    """The settings `add_replica_tls_arguments`'s flags ask for; `InvalidConfig` saying
    what is wrong."""
    replicas, bookies, admin = arguments.tls_replicas, arguments.tls_bookies, arguments.tls_admin
    listen: str | None = arguments.tls_listen
    if arguments.tls_advertise is not None and listen is None:
        raise InvalidConfig("--tls-advertise needs --tls-listen")
    if listen is not None and replicas:
        raise InvalidConfig(
            "--tls-listen adds a TLS port beside a plain --listen; with --tls-replicas, "
            "--listen speaks TLS itself: give one or the other"
        )
    for flag, address in (("--tls-listen", listen), ("--tls-advertise", arguments.tls_advertise)):
        if address is None:
            continue
        try:
            parse_address(address, port_zero=flag == "--tls-listen")
        except InvalidAddress as error:
            raise InvalidConfig(f"{flag} {address!r}: {error}") from error
    serves_tls = replicas or listen is not None
    if not (serves_tls or bookies or admin):
        return ReplicaTls()
    cert_file: Path | None = arguments.tls_cert_file
    key_file: Path | None = arguments.tls_key_file
    ca_file: Path | None = arguments.tls_ca_file
    if cert_file is None and (serves_tls or admin):
        raise InvalidConfig("--tls-replicas, --tls-listen and --tls-admin need --tls-cert-file")
    if ca_file is None and (replicas or bookies):
        raise InvalidConfig("--tls-replicas and --tls-bookies need --tls-ca-file")
    names = arguments.tls_allowed_clients
    if names is not None and not arguments.tls_require_client_cert:
        raise InvalidConfig("--tls-allowed-clients needs --tls-require-client-cert")
    try:
        server = None
        if serves_tls or admin:
            assert cert_file is not None
            server = server_context(
                cert_file, key_file, ca_file, require_client_cert=arguments.tls_require_client_cert
            )
        client = client_context(ca_file, cert_file, key_file) if replicas or bookies else None
    except BookieInvalidConfig as error:
        raise InvalidConfig(str(error)) from error
    return ReplicaTls(
        server=server if serves_tls else None,
        listen=listen,
        advertise=arguments.tls_advertise,
        allowed_names=(
            None if names is None else frozenset(name.strip() for name in names.split(","))
        ),
        client=client,
        bookies=bookies,
        admin=server if admin else None,
    )


def add_client_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that talks to replicas' TLS ports (`--tls-replicas`,
    `--tls-listen`)."""
    tls = parser.add_argument_group("TLS: talk to the replicas' TLS ports")
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
    try:
        context = client_context(ca_file, arguments.tls_cert_file, arguments.tls_key_file)
    except BookieInvalidConfig as error:
        raise InvalidConfig(str(error)) from error
    return tls_connector(context)
