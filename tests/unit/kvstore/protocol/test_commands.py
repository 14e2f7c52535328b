"""The command table: lookup, Redis's arity and unknown-command errors, COMMAND's replies."""

from __future__ import annotations

import pytest
from kvstore.errors import RedisError
from kvstore.protocol.commands import COMMANDS, Route, command_reply, lookup, resolve
from kvstore.protocol.resp import Reply, RespMap, RespSet, encode_replies
from kvstore.state_machine import KVStore

from rsm.core.state_machine import COMMAND, QUERY


def error_of(*args: bytes) -> str:
    with pytest.raises(RedisError) as raised:
        resolve(list(args))
    return raised.value.message


def test_names_are_case_insensitive() -> None:
    assert resolve([b"gEt", b"k"]).name == "get"
    assert resolve([b"CLIENT", b"SetName", b"x"]).name == "client|setname"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"GET",), "ERR wrong number of arguments for 'get' command"),
        ((b"get", b"a", b"b"), "ERR wrong number of arguments for 'get' command"),
        ((b"SET", b"k"), "ERR wrong number of arguments for 'set' command"),
        ((b"DBSIZE", b"x"), "ERR wrong number of arguments for 'dbsize' command"),
        ((b"MSET", b"a"), "ERR wrong number of arguments for 'mset' command"),
        ((b"CLIENT",), "ERR wrong number of arguments for 'client' command"),
        ((b"client", b"setname"), "ERR wrong number of arguments for 'client|setname' command"),
        ((b"client", b"id", b"x"), "ERR wrong number of arguments for 'client|id' command"),
        ((b"COMMAND", b"COUNT", b"x"), "ERR wrong number of arguments for 'command|count' command"),
    ],
)
def test_arity_errors(args: tuple[bytes, ...], message: str) -> None:
    assert error_of(*args) == message


def test_unknown_commands_quote_their_first_arguments() -> None:
    assert error_of(b"foo", b"a", b"b") == (
        "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
    )
    assert error_of(b"foo") == "ERR unknown command 'foo', with args beginning with: "
    # At most 128 characters of arguments, each cut to what is left.
    long = error_of(b"x", b"a" * 100, b"b" * 100, b"c")
    quoted = "'" + "a" * 100 + "' '" + "b" * 25 + "' "
    assert long == "ERR unknown command 'x', with args beginning with: " + quoted
    assert error_of(b"n" * 200).startswith("ERR unknown command '" + "n" * 128 + "',")
    # Client bytes are echoed as bytes, up to a NUL (a C string to Redis).
    assert error_of(b"\xe9t\xe9", b"a\x00b") == (
        "ERR unknown command '\xe9t\xe9', with args beginning with: 'a' "
    )


@pytest.mark.parametrize(
    "name", [b"LPUSH", b"HSET", b"SADD", b"ZADD", b"XADD", b"EVAL", b"SUBSCRIBE", b"PFADD"]
)
def test_other_data_types_are_unknown_commands(name: bytes) -> None:
    assert error_of(name, b"k", b"v") == (
        f"ERR unknown command '{name.decode()}', with args beginning with: 'k' 'v' "
    )


def test_unknown_subcommands() -> None:
    assert error_of(b"client", b"Nope") == "ERR unknown subcommand 'Nope'. Try CLIENT HELP."
    assert error_of(b"Command", b"x", b"y") == "ERR unknown subcommand 'x'. Try COMMAND HELP."


def test_every_routed_command_is_a_state_machine_operation_of_the_same_kind() -> None:
    operations = {**KVStore._rsm_newest_commands, **KVStore._rsm_queries}
    routed = {name: spec for name, spec in COMMANDS.items() if spec.route is not Route.SERVER}
    for name, spec in routed.items():
        operation = operations[name]
        assert operation.kind == (COMMAND if spec.route is Route.COMMAND else QUERY), name
        if spec.route is Route.COMMAND:
            assert "write" in spec.flags, name
        else:
            assert "readonly" in spec.flags, name
    # Everything the store offers is reachable, except the helpers of INFO, WATCH and
    # EXEC (which the connection calls itself).
    assert set(operations) - set(routed) == {"keyspace", "position", "exec"}


def test_key_positions() -> None:
    assert resolve([b"GET", b"k"]).keys([b"GET", b"k"]) == [b"k"]
    mset = [b"MSET", b"a", b"1", b"b", b"2"]
    assert resolve(mset).keys(mset) == [b"a", b"b"]
    delete = [b"DEL", b"a", b"b", b"c"]
    assert resolve(delete).keys(delete) == [b"a", b"b", b"c"]
    assert resolve([b"PING"]).keys([b"PING"]) == []
    assert resolve([b"SCAN", b"0"]).keys([b"SCAN", b"0"]) == []


def test_command_count_and_info() -> None:
    count = resolve([b"COMMAND", b"COUNT"])
    assert command_reply(count, [b"COMMAND", b"COUNT"]) == len(COMMANDS)
    info = [b"COMMAND", b"INFO", b"get", b"nope", b"client|setname"]
    get, missing, setname = as_list(command_reply(resolve(info), info))
    assert get == [
        b"get",
        2,
        RespSet(["readonly", "fast"]),
        1,
        1,
        1,
        RespSet(["@read", "@string", "@fast"]),
        RespSet(),
        [],
        [],
    ]
    # Flags and categories are sets in RESP3, as redis-server 7.0 sends them.
    encoded = encode_replies([get], resp3=True)
    assert encoded.startswith(
        b"*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n"
        b"~3\r\n+@read\r\n+@string\r\n+@fast\r\n~0\r\n"
    )
    assert missing is None
    assert as_list(setname)[:2] == [b"client|setname", 3]
    everything = as_list(command_reply(resolve([b"COMMAND"]), [b"COMMAND"]))
    assert len(everything) == len(COMMANDS)
    client = next(as_list(entry) for entry in everything if as_list(entry)[0] == b"client")
    assert [as_list(sub)[0] for sub in as_list(client[9])] == [
        b"client|setname",
        b"client|getname",
        b"client|setinfo",
        b"client|id",
        b"client|help",
    ]


def as_list(reply: Reply) -> list[Reply]:
    assert isinstance(reply, list)
    return reply


def test_command_docs_is_a_map_redis_cli_can_read() -> None:
    docs = command_reply(resolve([b"COMMAND", b"DOCS"]), [b"COMMAND", b"DOCS"])
    assert isinstance(docs, RespMap)
    assert len(docs) == len(COMMANDS)
    for _name, entry in docs:
        assert isinstance(entry, RespMap)
        fields = dict(entry)
        assert {b"summary", b"since", b"group", b"complexity"} <= set(fields)
        assert all(
            isinstance(value, bytes) for key, value in fields.items() if key != b"subcommands"
        )
    one = [b"COMMAND", b"DOCS", b"GET", b"nope"]
    assert command_reply(resolve(one), one) == RespMap([(b"get", COMMANDS["get"].docs())])
    # RESP2 flattens maps into arrays of keys and values, as Redis does.
    assert encode_replies([command_reply(resolve(one), one)]).startswith(
        b"*2\r\n$3\r\nget\r\n*8\r\n$7\r\nsummary\r\n"
    )
    assert encode_replies([command_reply(resolve(one), one)], resp3=True).startswith(
        b"%1\r\n$3\r\nget\r\n%4\r\n$7\r\nsummary\r\n"
    )


def test_command_list_and_its_filters() -> None:
    def names(*options: bytes) -> object:
        call = [b"COMMAND", b"LIST", *options]
        return command_reply(resolve(call), call)

    every = names()
    assert isinstance(every, list)
    assert b"get" in every
    assert b"client|setname" in every
    matching = names(b"FILTERBY", b"PATTERN", b"GET*")
    assert isinstance(matching, list)
    assert sorted(matching) == [b"get", b"getdel", b"getex", b"getrange", b"getset"]
    assert names(b"filterby", b"aclcat", b"connection") == [
        name
        for name in every
        if "@connection" in lookup(name).categories  # type: ignore[union-attr]
    ]
    assert names(b"FILTERBY", b"MODULE", b"json") == []
    with pytest.raises(RedisError, match="syntax error"):
        names(b"FILTERBY", b"PATTERN")
    with pytest.raises(RedisError, match="syntax error"):
        names(b"FILTERBY", b"COLOR", b"red")


def test_lookup() -> None:
    assert lookup(b"GET") is COMMANDS["get"]
    assert lookup(b"client|SETNAME") is COMMANDS["client"].subcommands["setname"]
    assert lookup(b"get|x") is None
    assert lookup(b"nope") is None
