"""The development cluster's certificates: made once and reused, keys readable by their
owner only, and usable as `kvstore up --tls` uses them (the node's as server and client,
mutual TLS between them over a real socket pair)."""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path

from bookie.local.certificates import CLIENT_NAME, NODE_NAME, development_certificates
from bookie.net.tls import client_context, common_name, server_context


def test_made_once_then_reused_with_private_keys(tmp_path: Path) -> None:
    made = development_certificates(tmp_path / "tls")
    first = made.node.read_bytes()
    again = development_certificates(tmp_path / "tls")
    assert again == made
    assert again.node.read_bytes() == first
    for private in (made.ca_key, made.node, made.client):
        assert private.stat().st_mode & 0o777 == 0o600, private


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str) -> object:
    """Both sides of one handshake over a socket pair; the client certificate the server saw."""
    left, right = socket.socketpair()
    seen: list[object] = []

    def serve() -> None:
        with server.wrap_socket(left, server_side=True) as secured:
            seen.append(secured.getpeercert())
            secured.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    with client.wrap_socket(right, server_hostname=host) as secured:
        assert secured.recv(2) == b"ok"
    thread.join(timeout=10)
    return seen[0]


def test_the_node_certificate_serves_loopback_and_clients_are_verified(tmp_path: Path) -> None:
    made = development_certificates(tmp_path)
    server = server_context(made.node, None, made.ca, require_client_cert=True)
    for host, client_chain, name in (
        ("127.0.0.1", made.client, CLIENT_NAME),
        ("localhost", made.node, NODE_NAME),
    ):
        peer = _handshake(server, client_context(made.ca, client_chain), host)
        assert common_name(peer) == name
