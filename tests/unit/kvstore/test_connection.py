"""Commands the server answers itself: PING, ECHO, QUIT, SELECT, HELLO, CLIENT, INFO, TIME."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kvstore.commands import resolve
from kvstore.connection import REDIS_VERSION, ClientState, ServerStatus, answer, info_text
from kvstore.errors import RedisError
from kvstore.resp import Reply

STATUS = ServerStatus(
    process_id=4242,
    tcp_port=6380,
    uptime_ms=90_061_000,
    clock_us=1_700_000_000_123_456,
    connected_clients=3,
    replica_role="follower",
    leader_address="10.0.0.1:6380",
    epoch=7,
    applied_index=1234,
    lag_entries=5,
    keys=10,
    keys_with_ttl=2,
)


class FixedServer:
    def __init__(self, status: ServerStatus = STATUS) -> None:
        self._status = status

    def clock_us(self) -> int:
        return self._status.clock_us

    def status(self) -> ServerStatus:
        return self._status


def call(*args: bytes, client: ClientState | None = None) -> Reply:
    request = list(args)
    return answer(resolve(request), request, client or ClientState(1), FixedServer())


def error_of(*args: bytes, client: ClientState | None = None) -> str:
    with pytest.raises(RedisError) as raised:
        call(*args, client=client)
    return raised.value.message


def test_ping_and_echo() -> None:
    assert call(b"PING") == "PONG"
    assert call(b"ping", b"hello") == b"hello"
    assert error_of(b"PING", b"a", b"b") == "ERR wrong number of arguments for 'ping' command"
    assert call(b"ECHO", b"\x00x") == b"\x00x"


def test_quit_closes_after_the_reply() -> None:
    client = ClientState(1)
    assert call(b"QUIT", b"anything", client=client) == "OK"
    assert client.close_after_reply


def test_select_knows_one_database() -> None:
    assert call(b"SELECT", b"0") == "OK"
    assert error_of(b"SELECT", b"1") == "ERR DB index is out of range"
    assert error_of(b"SELECT", b"-1") == "ERR DB index is out of range"
    assert error_of(b"SELECT", b"x") == "ERR value is not an integer or out of range"
    assert error_of(b"SELECT", b"4294967296") == (
        "ERR value is out of range, value must between -2147483648 and 2147483647"
    )


def test_hello_answers_as_a_resp2_only_server() -> None:
    expected = [
        b"server", b"redis", b"version", REDIS_VERSION.encode(), b"proto", 2, b"id", 17,
        b"mode", b"standalone", b"role", b"master", b"modules", [],
    ]  # fmt: skip
    assert call(b"HELLO", client=ClientState(17)) == expected
    assert call(b"HELLO", b"2", client=ClientState(17)) == expected
    assert error_of(b"HELLO", b"3") == "NOPROTO unsupported protocol version"
    assert error_of(b"HELLO", b"1") == "NOPROTO unsupported protocol version"
    assert error_of(b"HELLO", b"x") == "ERR Protocol version is not an integer or out of range"


def test_hello_options() -> None:
    client = ClientState(1)
    call(b"HELLO", b"2", b"AUTH", b"default", b"any", b"SETNAME", b"me", client=client)
    assert client.name == b"me"
    assert error_of(b"HELLO", b"2", b"AUTH", b"bob", b"pw") == (
        "WRONGPASS invalid username-password pair or user is disabled."
    )
    assert error_of(b"HELLO", b"2", b"AUTH", b"default") == (
        "ERR Syntax error in HELLO option 'AUTH'"
    )
    assert error_of(b"HELLO", b"2", b"SETNAME") == "ERR Syntax error in HELLO option 'SETNAME'"
    assert error_of(b"HELLO", b"2", b"bad") == "ERR Syntax error in HELLO option 'bad'"
    assert error_of(b"HELLO", b"2", b"SETNAME", b"a b", client=client) == (
        "ERR Client names cannot contain spaces, newlines or special characters."
    )
    assert client.name == b"me"


def test_client_names_and_library_info() -> None:
    client = ClientState(5)
    assert call(b"CLIENT", b"GETNAME", client=client) is None
    assert call(b"CLIENT", b"SETNAME", b"worker-1", client=client) == "OK"
    assert call(b"client", b"getname", client=client) == b"worker-1"
    assert error_of(b"CLIENT", b"SETNAME", b"bad\nname", client=client) == (
        "ERR Client names cannot contain spaces, newlines or special characters."
    )
    assert call(b"CLIENT", b"SETNAME", b"", client=client) == "OK"
    assert call(b"CLIENT", b"GETNAME", client=client) is None
    assert call(b"CLIENT", b"ID", client=client) == 5
    assert call(b"CLIENT", b"SETINFO", b"LIB-NAME", b"redis-py", client=client) == "OK"
    assert call(b"CLIENT", b"SETINFO", b"lib-ver", b"8.1.0", client=client) == "OK"
    assert (client.library_name, client.library_version) == (b"redis-py", b"8.1.0")
    assert error_of(b"CLIENT", b"SETINFO", b"LIB-VER", b"1 2", client=client) == (
        "ERR LIB-VER cannot contain spaces, newlines or special characters."
    )
    assert error_of(b"CLIENT", b"SETINFO", b"color", b"red") == "ERR Unrecognized option 'color'"
    help_lines = call(b"CLIENT", b"HELP")
    assert isinstance(help_lines, list)
    assert all(isinstance(line, str) for line in help_lines)


def test_time_is_the_servers_clock() -> None:
    assert call(b"TIME") == [b"1700000000", b"123456"]


def test_info_sections() -> None:
    text = info_text([], STATUS).decode()
    sections = text.split("\r\n\r\n")
    assert [section.split("\r\n", 1)[0] for section in sections] == [
        "# Server",
        "# Clients",
        "# Replication",
        "# Keyspace",
    ]
    assert f"redis_version:{REDIS_VERSION}\r\n" in text
    assert "uptime_in_seconds:90061\r\nuptime_in_days:1\r\n" in text
    assert "role:master\r\nrsm_role:follower\r\nrsm_leader:10.0.0.1:6380\r\n" in text
    assert "rsm_epoch:7\r\nrsm_applied_index:1234\r\nrsm_lag_entries:5\r\n" in text
    assert text.endswith("# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=0\r\n")
    assert call(b"INFO", b"KEYSPACE") == b"# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=0\r\n"
    assert call(b"INFO", b"server", b"clients").startswith(b"# Server\r\n")  # type: ignore[union-attr]
    assert call(b"INFO", b"everything") == call(b"INFO")
    assert call(b"INFO", b"nonsense") == b""


def test_info_of_an_empty_store_has_no_keyspace_line() -> None:
    empty = replace(STATUS, keys=0, keys_with_ttl=0, leader_address=None)
    text = info_text([b"keyspace", b"replication"], empty)
    assert text.endswith(b"rsm_lag_entries:5\r\n\r\n# Keyspace\r\n")
    assert b"rsm_leader:\r\n" in text
