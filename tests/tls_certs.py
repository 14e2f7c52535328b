"""Certificates for the TLS tests, made with `trustme`: a CA, a server certificate for
loopback, client certificates, an expired one, and another CA that nobody trusts.

`Certificates.make(directory)` writes them as PEM files (each chain file holds the
private key first, then the certificate chain) and returns their paths.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import trustme

LOOPBACK = ("127.0.0.1", "localhost")
CLIENT_NAME = "client-1"
OTHER_CLIENT_NAME = "client-2"


@dataclass(frozen=True)
class Certificates:
    ca: Path
    """The CA everyone trusts."""
    server: Path
    """Server chain for 127.0.0.1 and localhost, signed by `ca`."""
    client: Path
    """Client chain with common name `CLIENT_NAME`, signed by `ca`."""
    other_client: Path
    """Client chain with common name `OTHER_CLIENT_NAME`, signed by `ca`."""
    expired_server: Path
    """Server chain signed by `ca`, expired yesterday."""
    expired_client: Path
    """Client chain signed by `ca`, expired yesterday."""
    rogue_ca: Path
    """A CA nobody trusts."""
    rogue_server: Path
    """Server chain for loopback signed by `rogue_ca`."""
    rogue_client: Path
    """Client chain signed by `rogue_ca`."""

    @classmethod
    def make(cls, directory: Path) -> Certificates:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        rogue = trustme.CA()
        now = datetime.datetime.now(datetime.UTC)
        expired = {
            "not_before": now - datetime.timedelta(days=30),
            "not_after": now - datetime.timedelta(days=1),
        }

        def write(name: str, certificate: trustme.LeafCert) -> Path:
            path = directory / name
            certificate.private_key_and_cert_chain_pem.write_to_path(str(path))
            return path

        ca.cert_pem.write_to_path(str(directory / "ca.pem"))
        rogue.cert_pem.write_to_path(str(directory / "rogue-ca.pem"))
        return cls(
            ca=directory / "ca.pem",
            server=write("server.pem", ca.issue_cert(*LOOPBACK, common_name="server")),
            client=write("client.pem", ca.issue_cert(CLIENT_NAME, common_name=CLIENT_NAME)),
            other_client=write(
                "other-client.pem", ca.issue_cert(OTHER_CLIENT_NAME, common_name=OTHER_CLIENT_NAME)
            ),
            expired_server=write(
                "expired-server.pem", ca.issue_cert(*LOOPBACK, common_name="server", **expired)
            ),
            expired_client=write(
                "expired-client.pem",
                ca.issue_cert(CLIENT_NAME, common_name=CLIENT_NAME, **expired),
            ),
            rogue_ca=directory / "rogue-ca.pem",
            rogue_server=write("rogue-server.pem", rogue.issue_cert(*LOOPBACK)),
            rogue_client=write("rogue-client.pem", rogue.issue_cert(CLIENT_NAME)),
        )
