"""TLS for the servers and clients the system owns: contexts from files, a TLS server
for asyncio protocols that counts what it refuses, and errors in words.

Contexts.  `server_context` and `client_context` build `ssl.SSLContext`s from
PEM files (a certificate chain, its private key, the CA certificates that
verify the peer); every problem with the files (missing, unreadable, not PEM,
a key that is not the certificate's, a key encrypted with a passphrase, which
nothing asks for) is an `InvalidConfig` naming the file,
raised at start-up.  Both require TLS 1.2 or later; a client verifies the
server's certificate and host name, a server with `require_client_cert`
verifies the client's.

`TlsServer` accepts TCP connections and runs each one's handshake in a task of
its own (`loop.connect_accepted_socket` with the context: asyncio's and
uvloop's TLS servers drop a failed handshake without a word) before the
connection's protocol sees it: a handshake that
fails (a certificate from another CA, an expired one, none where one is
required, not TLS at all, too slow) closes that connection, is counted by
reason (`refusals`) and logged (event `tls.refused`), and the server goes on
serving the others.  A connection whose handshake succeeds is handed to a
protocol from `protocol_factory` exactly as a plain TCP server would hand it
(`connection_made`, then the bytes received), so the protocol is the same
with TLS or without, and a server without TLS never passes through here.

`TlsStreamListener` does the same in front of an anyio listener (the replica
protocol's), handing its handler anyio `TLSStream`s; `connect_tls` is the
matching client side for anyio streams.

Invariants: at most `limits.tls_handshakes_max` handshakes run at once per
listener (more are closed at accept, counted as "too many handshakes"); each
lasts at most
`limits.tls_handshake_timeout_ms`; a protocol's `connection_made` is called
only after a handshake that succeeded and, with `allowed_names`, a client
certificate whose subject common name is allowed; `refusals` holds at most
`limits.tls_refusal_reasons_max` reasons plus "other".
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSAttribute, TLSStream

from bookie import limits
from bookie.errors import InvalidConfig
from bookie.logs import emit
from bookie.net.accepting import AcceptRetry, accept_with_retry, serve_listener
from bookie.net.admission import peer_host
from bookie.tls_keys import EncryptedKey, encrypted_key_message, refuse_passphrase

logger = logging.getLogger(__name__)

_OTHER: Final = "other"

_EXPLAINED: Final = {
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate",
    "PEER_DID_NOT_RETURN_A_CERTIFICATE": "no client certificate, and one is required",
    "TLSV1_ALERT_UNKNOWN_CA": "the peer does not trust the CA that signed our certificate",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED": "the peer refused our certificate: it has expired",
    "SSLV3_ALERT_BAD_CERTIFICATE": "the peer refused our certificate",
    "WRONG_VERSION_NUMBER": "the peer does not speak TLS",
    "HTTP_REQUEST": "the peer sent plain HTTP, not TLS",
    "UNSUPPORTED_PROTOCOL": "the peer's TLS version is too old",
}
"""OpenSSL's reasons, in words."""


# --- contexts ---------------------------------------------------------------------------------


def server_context(
    cert_file: Path, key_file: Path | None, ca_file: Path | None, *, require_client_cert: bool
) -> ssl.SSLContext:
    """A server's context: its certificate chain and key (None: in `cert_file`); with
    `ca_file`, client
    certificates signed by those CAs are verified (required with `require_client_cert`,
    else only when offered).  `InvalidConfig` if a file is not what it should be."""
    if require_client_cert and ca_file is None:
        raise InvalidConfig(
            "TLS: requiring client certificates needs the CA file that verifies them"
        )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_chain(context, cert_file, key_file)
    if ca_file is not None:
        _load_ca(context, ca_file)
        context.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    return context


def client_context(
    ca_file: Path | None, cert_file: Path | None = None, key_file: Path | None = None
) -> ssl.SSLContext:
    """A client's context: servers verified against `ca_file` (None: the system's CAs),
    host names checked; with `cert_file` (and `key_file`, unless the key is in the
    certificate file) a client certificate for mutual TLS.  `InvalidConfig` if a file
    is not what it should be."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if ca_file is None:
        context.load_default_certs()
    else:
        _load_ca(context, ca_file)
    if cert_file is not None:
        _load_chain(context, cert_file, key_file)
    elif key_file is not None:
        raise InvalidConfig(f"TLS: key file {key_file} is given without its certificate file")
    return context


def _load_chain(context: ssl.SSLContext, cert_file: Path, key_file: Path | None) -> None:
    _check_readable(cert_file, "certificate file")
    if key_file is not None:
        _check_readable(key_file, "key file")
    try:
        context.load_cert_chain(cert_file, key_file, password=refuse_passphrase)
    except EncryptedKey:
        raise InvalidConfig(f"TLS: {encrypted_key_message(key_file or cert_file)}") from None
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise InvalidConfig(
                f"TLS: the key in {key_file or cert_file} is not the key of the certificate "
                f"in {cert_file}"
            ) from error
        raise InvalidConfig(
            f"TLS: cannot load the certificate {cert_file} and its key "
            f"{key_file or cert_file}: not a PEM certificate chain and private key "
            f"({error.reason or error})"
        ) from error
    except OSError as error:
        raise InvalidConfig(
            f"TLS: cannot load the certificate {cert_file} and its key "
            f"{key_file or cert_file}: {error.strerror or error}"
        ) from error


def _load_ca(context: ssl.SSLContext, ca_file: Path) -> None:
    _check_readable(ca_file, "CA file")
    try:
        context.load_verify_locations(cafile=ca_file)
    except ssl.SSLError as error:
        raise InvalidConfig(
            f"TLS: CA file {ca_file} holds no PEM certificate ({error.reason or error})"
        ) from error


def _check_readable(path: Path, what: str) -> None:
    try:
        with path.open("rb"):
            pass
    except OSError as error:
        raise InvalidConfig(f"TLS: cannot read {what} {path}: {error.strerror}") from error


# --- errors in words --------------------------------------------------------------------------


def describe(error: BaseException) -> str:
    """What went wrong with a TLS connection, for a person: a refused certificate says
    why, an OpenSSL reason is explained where it is known."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"TLS: the peer's certificate was refused: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        reason = error.reason or type(error).__name__
        explained = _EXPLAINED.get(reason)
        return f"TLS: {explained} ({reason})" if explained else f"TLS: {reason}"
    if isinstance(error, TimeoutError):
        return "TLS: the handshake took too long"
    return f"TLS: {type(error).__name__}: {error}"


def refusal_reason(error: BaseException) -> str:
    """A short, bounded-vocabulary reason for a refused handshake, for counting."""
    if isinstance(error, ssl.SSLCertVerificationError):
        return str(error.verify_message or "certificate verify failed")
    if isinstance(error, ssl.SSLError):
        reason = error.reason or type(error).__name__
        return _EXPLAINED.get(reason, reason)
    if isinstance(error, TimeoutError):
        return "handshake timeout"
    if isinstance(error, ConnectionError | EOFError):
        return "connection lost during the handshake"
    return type(error).__name__


def common_name(peer_certificate: Any) -> str | None:
    """The subject common name of a certificate as `SSLObject.getpeercert()` gives it."""
    if not isinstance(peer_certificate, dict):
        return None
    for relative_name in peer_certificate.get("subject", ()):
        for key, value in relative_name:
            if key == "commonName":
                return str(value)
    return None


@dataclass(frozen=True, slots=True)
class TlsListen:
    """Where and how a server listens for TLS, next to its plain listener."""

    host: str
    port: int
    context: ssl.SSLContext
    allowed_names: frozenset[str] | None = None
    """Client certificate subject common names served (None: any the CA signed)."""


# --- the server -------------------------------------------------------------------------------


class TlsCounts:
    """What a TLS listener counts: handshakes that succeeded, refusals by reason (each
    logged as `tls.refused`), and the allowed client names it checks."""

    def __init__(self, name: str, allowed_names: Collection[str] | None) -> None:
        self.name = name
        self._allowed_names = None if allowed_names is None else frozenset(allowed_names)
        self.accepted = 0
        """Connections whose handshake succeeded."""
        self.refusals: Counter[str] = Counter()
        """Refused connections by reason."""
        self.handshakes = 0
        """Handshakes in progress."""

    def refused_total(self) -> int:
        return sum(self.refusals.values())

    def begin_handshake(self, peer: object) -> bool:
        """Count a handshake in, or refuse it (False) past `limits.tls_handshakes_max`; a
        handshake counted in is counted out by `end_handshake`."""
        if self.handshakes >= limits.tls_handshakes_max:
            self.refuse(peer, "too many handshakes")
            return False
        self.handshakes += 1
        return True

    def end_handshake(self) -> None:
        self.handshakes -= 1

    def admits(self, peer_certificate: Any, peer: object) -> bool:
        """Whether a connection whose handshake succeeded is served (counted either way)."""
        if self._allowed_names is not None:
            name = common_name(peer_certificate)
            if name not in self._allowed_names:
                self.refuse(peer, "client certificate not allowed", subject=name)
                return False
        self.accepted += 1
        return True

    def refuse(self, peer: object, reason: str, **fields: Any) -> None:
        refusals = self.refusals
        if reason not in refusals and len(refusals) >= limits.tls_refusal_reasons_max:
            reason = _OTHER
        refusals[reason] += 1
        emit(
            logger,
            logging.WARNING,
            "tls.refused",
            server=self.name,
            peer=peer_host(peer),
            reason=reason,
            **fields,
        )


class TlsServer(TlsCounts):
    """TLS in front of an asyncio protocol server (see the module docstring).

    `bind` listens, `serve` accepts until cancelled (it closes the socket and abandons
    the handshakes in progress as it ends)."""

    def __init__(
        self,
        context: ssl.SSLContext,
        protocol_factory: Callable[[], asyncio.Protocol],
        *,
        name: str,
        allowed_names: Collection[str] | None = None,
    ) -> None:
        """`name` says which server in log lines; `allowed_names`, when given, are the
        client certificate subject common names served (others are refused)."""
        super().__init__(name, allowed_names)
        self._context = context
        self._protocol_factory = protocol_factory
        self._socket: socket.socket | None = None

    def bind(self, host: str, port: int) -> int:
        """Listen on host:port (0: any free port); the port bound.  Raises `OSError`."""
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _, _, _, target = infos[0]
        listening = socket.create_server(target[:2], family=family)
        listening.setblocking(False)
        self._socket = listening
        return int(listening.getsockname()[1])

    async def serve(self) -> None:
        """Accept connections and run their handshakes until cancelled."""
        listening = self._socket
        assert listening is not None, "bind first"
        loop = asyncio.get_running_loop()
        retry = AcceptRetry(self.name)
        try:
            async with anyio.create_task_group() as handshakes:
                while True:
                    connection, peer = await accept_with_retry(
                        lambda: loop.sock_accept(listening), retry
                    )
                    if not self.begin_handshake(peer):
                        connection.close()
                        continue
                    handshakes.start_soon(self._handshake, connection, peer)
        finally:
            listening.close()

    def close(self) -> None:
        """Stop listening (`serve` does it as it ends; this is for a server never served)."""
        if self._socket is not None:
            self._socket.close()

    async def _handshake(self, connection: socket.socket, peer: object) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: _Gate(self, peer),
                connection,
                ssl=self._context,
                ssl_handshake_timeout=limits.tls_handshake_timeout_ms / 1000,
            )
        except (OSError, TimeoutError, EOFError) as error:
            self.refuse(peer, refusal_reason(error))
            connection.close()
        finally:
            self.end_handshake()

    def _admit(self, transport: asyncio.Transport, peer: object) -> asyncio.Protocol | None:
        """The protocol that serves a connection whose handshake succeeded, or None."""
        if not self.admits(transport.get_extra_info("peercert"), peer):
            return None
        return self._protocol_factory()


class _Gate(asyncio.Protocol):
    """A connection's protocol until its handshake succeeded: then it hands the secured
    transport to the serving protocol (which alone sees its bytes), or closes it."""

    def __init__(self, server: TlsServer, peer: object) -> None:
        self._server = server
        self._peer = peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        secured = cast(asyncio.Transport, transport)
        protocol = self._server._admit(secured, self._peer)
        if protocol is None:
            secured.abort()
            return
        secured.set_protocol(protocol)
        protocol.connection_made(secured)


class TlsStreamListener(TlsCounts, anyio.abc.Listener[anyio.abc.ByteStream]):
    """TLS in front of an anyio listener: its streams reach the handler after a handshake
    (anyio's `TLSStream`), refused as `TlsServer` refuses, and counted the same way."""

    def __init__(
        self,
        listener: anyio.abc.Listener[Any],
        context: ssl.SSLContext,
        *,
        name: str,
        allowed_names: Collection[str] | None = None,
    ) -> None:
        super().__init__(name, allowed_names)
        self._listener = listener
        self._context = context

    async def serve(
        self,
        handler: Callable[[anyio.abc.ByteStream], Any],
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        async def secured(stream: anyio.abc.ByteStream) -> None:
            peer = stream.extra(SocketAttribute.remote_address, None)
            if not self.begin_handshake(peer):
                await anyio.aclose_forcefully(stream)
                return
            try:
                with anyio.fail_after(limits.tls_handshake_timeout_ms / 1000):
                    wrapped = await TLSStream.wrap(
                        stream,
                        server_side=True,
                        ssl_context=self._context,
                        standard_compatible=False,
                    )
            except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.EndOfStream) as error:
                self.refuse(peer, refusal_reason(error.__cause__ or error))
                await anyio.aclose_forcefully(stream)
                return
            except BaseException:  # cancelled during the handshake: the server is stopping
                await anyio.aclose_forcefully(stream)
                raise
            finally:
                self.end_handshake()
            if not self.admits(wrapped.extra(TLSAttribute.peer_certificate, None), peer):
                await anyio.aclose_forcefully(wrapped)
                return
            await handler(wrapped)

        if task_group is None:
            async with anyio.create_task_group() as own:
                await serve_listener(self._listener, secured, own, server=self.name)
        else:
            await serve_listener(self._listener, secured, task_group, server=self.name)

    async def aclose(self) -> None:
        await self._listener.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._listener.extra_attributes


async def connect_tls(host: str, port: int, context: ssl.SSLContext) -> anyio.abc.ByteStream:
    """A TLS stream to host:port, its certificate checked for `host`; `OSError` saying
    what went wrong (`describe`) if the connection or its handshake fails."""
    try:
        return await anyio.connect_tcp(
            host, port, ssl_context=context, tls_standard_compatible=False
        )
    except ssl.SSLError as error:
        raise OSError(describe(error)) from error
    except anyio.BrokenResourceError as error:
        raise OSError(describe(error.__cause__ or error)) from error
