"""The flags of a command that reads or writes bookies over TLS, and the client context
they give: the one way every such command (`bookie autorecovery`, `bookie shell`, the
replicas, the `rsm` and application tools) takes them.

    --tls-bookies        connect to the bookies' TLS listeners
    --tls-ca-file FILE   PEM CAs the bookies' certificates are from (and, on a command
                         that also serves, its peers')
    --tls-cert-file FILE PEM certificate chain: the client certificate under mutual TLS
    --tls-key-file FILE  its private key, if not in the chain file

`add_bookie_tls_arguments` adds them to a parser or an argument group;
`bookie_tls_context` turns them into an `ssl.SSLContext` for
`ClientConfig(tls=...)` (None without `--tls-bookies`), or raises
`InvalidConfig` saying which flag or file is wrong, before anything connects.
"""

from __future__ import annotations

import argparse
import ssl
from pathlib import Path

from bookie.errors import InvalidConfig
from bookie.net.tls import client_context


def add_bookie_tls_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, files: bool = True
) -> argparse._ArgumentGroup:
    """Add the four flags: to `parser`'s own group "TLS", or to the group given; without
    `files`, only `--tls-bookies` (a command whose file flags are there already, for
    replicas: the same files then serve both)."""
    group = (
        parser.add_argument_group("TLS (docs/security.md)")
        if isinstance(parser, argparse.ArgumentParser)
        else parser
    )
    group.add_argument("--tls-bookies", action="store_true", help="connect to bookies with TLS")
    if not files:
        return group
    group.add_argument("--tls-cert-file", type=Path, help="PEM certificate chain (and key)")
    group.add_argument("--tls-key-file", type=Path, help="PEM private key, if not in the chain")
    group.add_argument("--tls-ca-file", type=Path, help="PEM CAs trusted for peers' certificates")
    return group


def bookie_tls_context(arguments: argparse.Namespace) -> ssl.SSLContext | None:
    """The ledger client's TLS context the flags ask for (None: no `--tls-bookies`);
    `InvalidConfig` naming the flag or the file."""
    if not arguments.tls_bookies:
        return None
    ca_file: Path | None = arguments.tls_ca_file
    if ca_file is None:
        raise InvalidConfig("--tls-bookies needs --tls-ca-file")
    return client_context(ca_file, arguments.tls_cert_file, arguments.tls_key_file)
