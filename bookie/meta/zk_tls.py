"""ZooKeeper over TLS: whether a ZooKeeper session speaks TLS, and with which files.

Where the settings come from: three environment variables, read when a
process connects to ZooKeeper (`bookie.meta.zk.ZkMetadataStore.connect`, the
one place every process opens its sessions: bookies and their autorecovery,
`bookie autorecovery`, `bookie shell`, replicas, `rsm`, `kvstore`, the Spark
sources on the driver and on every executor), so one setting, the same for
all of them, moves a cluster's ZooKeeper traffic to TLS:

    BOOKIE_ZK_TLS_CA_FILE    PEM CAs the servers' certificates are checked against;
                             set: every session uses TLS, the server's certificate
                             verified and its host name checked against the address
                             dialled (ZooKeeper's `secureClientPort`)
    BOOKIE_ZK_TLS_CERT_FILE  PEM client certificate chain, for servers with
                             `ssl.clientAuth=need` (needs the CA file)
    BOOKIE_ZK_TLS_KEY_FILE   its private key (default: the certificate file, which
                             then holds the key too)

Unset (or empty) CA file: plain TCP, as before.  Errors: `InvalidConfig`
naming the variable and the file, raised before any connection is tried.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from bookie.errors import InvalidConfig

ZK_TLS_CA_FILE_ENV: Final = "BOOKIE_ZK_TLS_CA_FILE"
ZK_TLS_CERT_FILE_ENV: Final = "BOOKIE_ZK_TLS_CERT_FILE"
ZK_TLS_KEY_FILE_ENV: Final = "BOOKIE_ZK_TLS_KEY_FILE"


@dataclass(frozen=True, slots=True)
class ZkTls:
    """The files of a ZooKeeper session over TLS."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    def kazoo_options(self) -> dict[str, Any]:
        """What `KazooClient` takes for it: TLS, certificates verified, host names checked
        (kazoo loads a client certificate only given both files)."""
        options: dict[str, Any] = {
            "use_ssl": True,
            "verify_certs": True,
            "check_hostname": True,
            "ca": str(self.ca_file),
        }
        if self.cert_file is not None:
            options["certfile"] = str(self.cert_file)
            options["keyfile"] = str(self.key_file or self.cert_file)
        return options


def zk_tls_from_environment(environment: Mapping[str, str] | None = None) -> ZkTls | None:
    """The settings the variables give (None: no CA file, plain TCP); `InvalidConfig`
    naming the variable when a file cannot be read or a variable is set alone."""
    values = os.environ if environment is None else environment
    ca, cert, key = (
        values.get(name, "")
        for name in (ZK_TLS_CA_FILE_ENV, ZK_TLS_CERT_FILE_ENV, ZK_TLS_KEY_FILE_ENV)
    )
    if not ca:
        if cert or key:
            raise InvalidConfig(
                f"{ZK_TLS_CERT_FILE_ENV} and {ZK_TLS_KEY_FILE_ENV} need {ZK_TLS_CA_FILE_ENV}"
            )
        return None
    if key and not cert:
        raise InvalidConfig(f"{ZK_TLS_KEY_FILE_ENV} needs {ZK_TLS_CERT_FILE_ENV}")
    return ZkTls(
        _readable(ZK_TLS_CA_FILE_ENV, ca),
        _readable(ZK_TLS_CERT_FILE_ENV, cert) if cert else None,
        _readable(ZK_TLS_KEY_FILE_ENV, key) if key else None,
    )


def _readable(variable: str, path: str) -> Path:
    try:
        with open(path, "rb"):
            pass
    except OSError as error:
        raise InvalidConfig(f"{variable}={path}: cannot read it: {error.strerror}") from None
    return Path(path)
