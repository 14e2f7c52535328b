"""Commands the server answers itself: PING, ECHO, QUIT, SELECT, HELLO, RESET, READONLY,
READWRITE, CLIENT, CONFIG, INFO, TIME."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kvstore.connection.server_commands import (
    REDIS_VERSION,
    ClientState,
    ServerStatus,
    Watch,
    answer,
    human_bytes,
    info_text,
)
from kvstore.errors import RedisError
from kvstore.protocol.commands import resolve
from kvstore.protocol.resp import Reply, RespMap, Verbatim, encode_replies

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
    caught_up=True,
    lag_entries=3,
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

    def config(self) -> dict[str, str]:
        return {"save": "", "appendonly": "no", "maxclients": "10000"}


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


def hello_map(proto: int, client_id: int) -> RespMap:
    return RespMap(
        (
            (b"server", b"redis"),
            (b"version", REDIS_VERSION.encode()),
            (b"proto", proto),
            (b"id", client_id),
            (b"mode", b"standalone"),
            (b"role", b"master"),
            (b"modules", []),
        )
    )


def test_hello_switches_the_protocol_and_answers_the_server_map() -> None:
    client = ClientState(17)
    assert call(b"HELLO", client=client) == hello_map(2, 17)
    assert protocol_of(client) == 2
    assert call(b"HELLO", b"3", client=client) == hello_map(3, 17)
    assert protocol_of(client) == 3
    assert call(b"HELLO", client=client) == hello_map(3, 17), "no version: keep the current one"
    assert call(b"HELLO", b"2", client=client) == hello_map(2, 17)
    assert protocol_of(client) == 2


def protocol_of(client: ClientState) -> int:
    return 3 if client.resp3 else 2


def test_hello_refuses_other_versions_and_keeps_the_protocol() -> None:
    client = ClientState(1, resp3=True)
    assert error_of(b"HELLO", b"1", client=client) == "NOPROTO unsupported protocol version"
    assert error_of(b"HELLO", b"4") == "NOPROTO unsupported protocol version"
    assert error_of(b"HELLO", b"x") == "ERR Protocol version is not an integer or out of range"
    assert error_of(b"HELLO", b"2", b"bad", client=client) == (
        "ERR Syntax error in HELLO option 'bad'"
    )
    assert client.resp3, "a refused HELLO changes nothing"


def test_the_hello_map_in_each_protocol_is_what_redis_7_sends() -> None:
    # Captured from redis-server 7.0 (version and id replaced).
    resp3 = (
        b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.0\r\n"
        b"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:3\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
        b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n"
    )
    assert encode_replies([hello_map(3, 3)], resp3=True) == resp3
    resp2 = encode_replies([hello_map(2, 3)])
    assert resp2.startswith(b"*14\r\n$6\r\nserver\r\n")
    assert b"$5\r\nproto\r\n:2\r\n" in resp2


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


def test_reset_forgets_everything_but_the_id() -> None:
    client = ClientState(
        9, name=b"n", resp3=True, stale_reads=True, in_transaction=True, transaction_error="E"
    )
    client.watches[b"k"] = Watch(b"k", 1, 2)
    assert call(b"RESET", client=client) == "RESET"
    assert client == ClientState(9)


def test_readonly_and_readwrite_choose_the_read_consistency() -> None:
    client = ClientState(1)
    assert call(b"READONLY", client=client) == "OK"
    assert client.stale_reads
    assert call(b"readwrite", client=client) == "OK"
    assert not client.stale_reads


def test_config_get_matches_patterns_without_regard_to_case() -> None:
    assert call(b"CONFIG", b"GET", b"save") == RespMap([(b"save", b"")])
    assert call(b"CONFIG", b"GET", b"APPEND*", b"max*") == RespMap(
        [(b"appendonly", b"no"), (b"maxclients", b"10000")]
    )
    assert call(b"CONFIG", b"GET", b"nothing") == RespMap()
    assert error_of(b"CONFIG", b"GET") == "ERR wrong number of arguments for 'config|get' command"
    assert error_of(b"CONFIG", b"SET", b"a", b"b") == (
        "ERR unknown subcommand 'SET'. Try CONFIG HELP."
    )
    assert isinstance(call(b"CONFIG", b"HELP"), list)


def test_time_is_the_servers_clock() -> None:
    assert call(b"TIME") == [b"1700000000", b"123456"]


def test_info_sections() -> None:
    text = info_text([], STATUS).decode()
    sections = text.split("\r\n\r\n")
    assert [section.split("\r\n", 1)[0] for section in sections] == [
        "# Server",
        "# Clients",
        "# Memory",
        "# Persistence",
        "# Stats",
        "# Replication",
        "# CPU",
        "# Cluster",
        "# Keyspace",
    ]
    assert f"redis_version:{REDIS_VERSION}\r\n" in text
    assert "uptime_in_seconds:90061\r\nuptime_in_days:1\r\n" in text
    assert "# Cluster\r\ncluster_enabled:0\r\n" in text
    assert "master_repl_offset:1234\r\n" in text
    assert "rdb_changes_since_last_save:1234\r\n" in text
    assert "rsm_role:follower\r\nrsm_leader:10.0.0.1:6380\r\n" in text
    assert "rsm_epoch:7\r\nrsm_applied_index:1234\r\nrsm_caught_up:1\r\n" in text
    assert "rsm_lag_entries:3\r\n" in text
    assert text.endswith("# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=0\r\n")
    keyspace = call(b"INFO", b"KEYSPACE")
    assert keyspace == Verbatim(b"# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=0\r\n")
    assert type(keyspace) is Verbatim, "a verbatim string in RESP3, as Redis's"
    assert call(b"INFO", b"server", b"clients").startswith(b"# Server\r\n")  # type: ignore[union-attr]
    everything = call(b"INFO", b"everything")
    assert isinstance(everything, bytes)
    assert everything == call(b"INFO", b"default", b"commandstats", b"errorstats")
    assert b"\r\n# CPU\r\n" in everything
    assert b"\r\n# Commandstats\r\n" in everything
    assert b"\r\n# Errorstats\r\n" in everything
    assert call(b"INFO", b"all") == everything
    assert call(b"INFO", b"default") == call(b"INFO")
    assert call(b"INFO", b"nonsense") == b""


def test_info_of_an_empty_store_has_no_keyspace_line() -> None:
    empty = replace(STATUS, keys=0, keys_with_ttl=0, leader_address=None)
    text = info_text([b"keyspace", b"replication"], empty)
    assert text.endswith(b"rsm_lag_entries:3\r\n\r\n# Keyspace\r\n")
    assert b"rsm_leader:\r\n" in text


def test_info_persistence_counts_from_the_newest_snapshot() -> None:
    saved = replace(STATUS, snapshot_index=1000, snapshot_created_ms=1_699_999_000_000)
    text = info_text([b"persistence"], saved).decode()
    assert "rdb_changes_since_last_save:234\r\n" in text
    assert "rdb_last_save_time:1699999000\r\n" in text
    assert text.endswith("rsm_snapshot_index:1000\r\n")
    assert "rsm_snapshot_index" not in info_text([b"persistence"], STATUS).decode()


def test_replication_id_changes_with_the_epoch() -> None:
    def replid(status: ServerStatus) -> str:
        text = info_text([b"replication"], status).decode()
        return text.split("master_replid:")[1].split("\r\n")[0]

    assert len(replid(STATUS)) == 40
    assert replid(STATUS) == replid(replace(STATUS, applied_index=99))
    assert replid(STATUS) != replid(replace(STATUS, epoch=8))


@pytest.mark.parametrize(
    ("count", "shown"),
    [(0, "0B"), (1023, "1023B"), (1024, "1.00K"), (1536, "1.50K"), (5 * 1024**3, "5.00G")],
)
def test_human_bytes_as_redis_writes_them(count: int, shown: str) -> None:
    assert human_bytes(count) == shown
