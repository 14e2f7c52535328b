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

How a session dials (`ZkTls.handler`).  kazoo's own TLS dialling trusts the
system's CAs besides the one it is given, and leaves the socket of a failed
handshake to the garbage collector, so the sessions dial through a kazoo
handler of our own instead: it makes a TCP connection and a TLS handshake
with one `ssl.SSLContext` built once from the files, which trusts the CA file
alone; a handshake that fails closes its socket before the error reaches
kazoo (which then retries, as with any connection that drops).
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kazoo.handlers.threading import SequentialThreadingHandler

from bookie.errors import InvalidConfig
from bookie.tls_keys import EncryptedKey, encrypted_key_message, refuse_passphrase

ZK_TLS_CA_FILE_ENV: Final = "BOOKIE_ZK_TLS_CA_FILE"
ZK_TLS_CERT_FILE_ENV: Final = "BOOKIE_ZK_TLS_CERT_FILE"
ZK_TLS_KEY_FILE_ENV: Final = "BOOKIE_ZK_TLS_KEY_FILE"


@dataclass(frozen=True, slots=True)
class ZkTls:
    """The files of a ZooKeeper session over TLS."""

    ca_file: Path
    cert_file: Path | None = None
    key_file: Path | None = None

    def context(self) -> ssl.SSLContext:
        """A client context that trusts the CA file's certificates and no others, checks
        the server's host name, and presents the client certificate if there is one;
        `InvalidConfig` naming the variable when a file holds no usable certificate or key."""
        try:
            context = ssl.create_default_context(cafile=str(self.ca_file))
        except (ssl.SSLError, OSError) as error:
            raise InvalidConfig(
                f"{ZK_TLS_CA_FILE_ENV}={self.ca_file}: no CA certificate in it ({error})"
            ) from None
        if self.cert_file is not None:
            key_file = self.key_file or self.cert_file
            try:
                context.load_cert_chain(self.cert_file, key_file, password=refuse_passphrase)
            except EncryptedKey:
                variable = ZK_TLS_KEY_FILE_ENV if self.key_file else ZK_TLS_CERT_FILE_ENV
                raise InvalidConfig(f"{variable}: {encrypted_key_message(key_file)}") from None
            except (ssl.SSLError, OSError) as error:
                raise InvalidConfig(
                    f"{ZK_TLS_CERT_FILE_ENV}={self.cert_file} with key {key_file}:"
                    f" not a certificate chain and its key ({error})"
                ) from None
        return context

    def handler(self) -> TlsHandler:
        """A kazoo handler whose connections speak TLS with `context()`."""
        return TlsHandler(self.context())

    def environment(self) -> dict[str, str]:
        """The variables that give a child process these settings, each of the three set
        (empty: not given), so none of the parent's own comes through."""
        return {
            ZK_TLS_CA_FILE_ENV: str(self.ca_file),
            ZK_TLS_CERT_FILE_ENV: "" if self.cert_file is None else str(self.cert_file),
            ZK_TLS_KEY_FILE_ENV: "" if self.key_file is None else str(self.key_file),
        }


class TlsHandler(SequentialThreadingHandler):  # type: ignore[misc]  # kazoo is untyped
    """kazoo's threading handler, dialling TLS with one context of ours (see the module
    docstring); kazoo's own TLS arguments are ignored."""

    def __init__(self, context: ssl.SSLContext) -> None:
        super().__init__()
        self._context = context

    def create_connection(
        self,
        address: tuple[str, int],
        hostname: str | None = None,
        timeout: float | None = None,
        **ignored: Any,
    ) -> ssl.SSLSocket:
        raw = socket.create_connection(address, timeout)
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # Connected: the handshake happens here, under the connection's timeout.
            return self._context.wrap_socket(raw, server_hostname=hostname or address[0])
        except BaseException:
            raw.close()
            raise


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
