"""Redis AUTH and ACL users on a running store (two replica processes), with redis-py.

The replicas read one ACL file: the default user has a password (what
`requirepass` gives), a read-only and a read-write user, and a user who is
off.  Clients without the password are refused every command but the
login ones, a wrong password is refused and counted while the connection
goes on, a read-only user cannot write, on either replica, in RESP2 and
RESP3; and no password shows in the replicas' logs, INFO or ACL LIST.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.exceptions
from redis.utils import str_if_bytes

from bookie.local.zookeeper import LocalZooKeeper
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

DEFAULT_PASSWORD = "default-Pa55word"
READER_PASSWORD = "reader-Pa55word"
WRITER_PASSWORD = "writer-Pa55word"
SECRETS = (DEFAULT_PASSWORD, READER_PASSWORD, WRITER_PASSWORD, "ghost-Pa55word")
ACL_FILE = f"""\
user default on >{DEFAULT_PASSWORD} ~* +@all
user reader on >{READER_PASSWORD} ~* -@all +@read +@connection
user writer on >{WRITER_PASSWORD} ~app:* +@all -@dangerous
user ghost off >ghost-Pa55word ~* +@all
"""


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    directory = tmp_path_factory.mktemp("auth")
    acl_file = directory / "users.acl"
    acl_file.write_text(ACL_FILE)
    root = f"/kvauth-{os.getpid()}"
    with running_store(
        zookeeper, root, directory / "store", replicas=2, acl_file=acl_file
    ) as running:
        yield running


def info_stats(store: Store, name: str) -> dict[str, int]:
    with store.client(name, password=DEFAULT_PASSWORD) as client:
        stats: dict[str, int] = client.info("stats")
        return stats


def test_without_the_password_only_logging_in_is_served(store: Store) -> None:
    for name in store.names:
        with store.client(name, protocol=2) as client:
            with pytest.raises(
                redis.exceptions.AuthenticationError, match=r"^Authentication required"
            ):
                client.get("app:k")
            with pytest.raises(
                redis.exceptions.AuthenticationError, match=r"^Authentication required"
            ):
                client.set("app:k", "v")
        with (
            store.client(name, protocol=3) as client,
            pytest.raises(redis.exceptions.AuthenticationError, match=r"^HELLO must be called"),
        ):
            client.ping()


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_default_password_and_users_log_in(store: Store, protocol: int) -> None:
    first, second = store.names
    key = f"app:{protocol}"
    with store.client(first, password=DEFAULT_PASSWORD, protocol=protocol) as client:
        assert client.set(key, "by default")
        assert str_if_bytes(client.acl_whoami()) == "default"
    with store.client(
        second, username="writer", password=WRITER_PASSWORD, protocol=protocol
    ) as client:
        assert client.get(key) == b"by default"
        assert client.incr(f"{key}:n") == 1
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a key"):
            client.set("elsewhere", "v")
        with pytest.raises(redis.exceptions.NoPermissionError, match="'flushall' command"):
            client.flushall()
    with store.client(
        first, username="reader", password=READER_PASSWORD, protocol=protocol
    ) as client:
        assert client.mget(key, f"{key}:n") == [b"by default", b"1"]
        with pytest.raises(redis.exceptions.NoPermissionError, match="'set' command"):
            client.set(key, "by reader")
        with pytest.raises(redis.exceptions.NoPermissionError, match="'del' command"):
            client.delete(key)
        assert client.get(key) == b"by default", "the refused writes changed nothing"


def test_a_wrong_password_is_refused_counted_and_the_connection_goes_on(store: Store) -> None:
    name = store.names[1]
    before = info_stats(store, name)["acl_access_denied_auth"]
    for username, password in (("writer", "wrong"), ("ghost", "ghost-Pa55word"), ("nobody", "x")):
        with (
            store.client(name, username=username, password=password) as client,
            pytest.raises(
                redis.exceptions.AuthenticationError, match=r"^invalid username-password"
            ),
        ):
            client.ping()
    with socket.create_connection(("127.0.0.1", store.port(name)), timeout=WAIT_S) as raw:
        raw.sendall(b"AUTH wrong-password\r\n")
        assert receive_line(raw) == (
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        )
        raw.sendall(f"AUTH reader {READER_PASSWORD}\r\nSET app:raw v\r\nACL WHOAMI\r\n".encode())
        assert receive_line(raw) == b"+OK\r\n"
        assert receive_line(raw) == (
            b"-NOPERM User reader has no permissions to run the 'set' command\r\n"
        )
    assert info_stats(store, name)["acl_access_denied_auth"] == before + 4
    assert info_stats(store, name)["acl_access_denied_cmd"] >= 1


def receive_line(raw: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = raw.recv(1)
        assert chunk, "the server closed the connection"
        line += chunk
    return line


def test_acl_list_shows_hashes_not_passwords(store: Store) -> None:
    with store.client(store.names[0], password=DEFAULT_PASSWORD) as client:
        assert sorted(client.acl_users()) == ["default", "ghost", "reader", "writer"]
        listing = "\n".join(client.acl_list())
        info = client.info("everything")
        settings = client.config_get("*")
    assert "user reader on #" in listing
    assert "~app:* +@all -@dangerous" in listing
    shown = listing + repr(info) + repr(settings)
    assert not [secret for secret in SECRETS if secret in shown]


def test_no_password_is_in_the_logs(store: Store) -> None:
    logs = [replica.log_file for replica in store.cluster.replicas]
    logs += list(Path(store.cluster.data_dir).rglob("*.log"))
    text = "".join(path.read_text(errors="replace") for path in set(logs))
    assert text, "the replicas log"
    assert not [secret for secret in SECRETS if secret in text]
