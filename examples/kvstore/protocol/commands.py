"""The command table: what the server accepts, how a call is checked, and where it runs.

Pure.  Every command has a spec with Redis's metadata (arity, flags, key
positions, ACL categories, documentation) and a `Route`:

* `Route.COMMAND`: a `KVStore` `@command`, logged and applied on every replica;
* `Route.QUERY`: a `KVStore` `@query`, answered from one replica's state
  (DEBUG too: its subcommands are its query's first argument);
* `Route.SERVER`: answered by the server itself (`kvstore.connection.server_commands`):
  PING, ECHO, QUIT, SELECT, HELLO, AUTH, RESET, READONLY, READWRITE,
  CLIENT ..., CONFIG ..., COMMAND ..., ACL ..., INFO, TIME; and the transaction commands MULTI,
  EXEC, DISCARD, WATCH, UNWATCH, which the connection handles with the
  state machine's help (`kvstore.connection.dispatch`).

For the first two, the state machine's command or query has the spec's
name ("del" included), and takes the arguments after the command name.

`resolve(args)` finds the spec for a request and checks its argument count
the way Redis does, raising Redis's errors:

    ERR unknown command 'foo', with args beginning with: 'a' 'b'
    ERR unknown subcommand 'foo'. Try CLIENT HELP.
    ERR wrong number of arguments for 'get' command
    ERR wrong number of arguments for 'client|setname' command

Arity follows Redis: n > 0 means exactly n words (the name included),
n < 0 at least -n.  Commands on lists, hashes, sets and the rest of Redis
are not here, so they get the unknown-command error, exactly as Redis
answers a command it does not have.  CAS is this store's own
compare-and-set.

Key positions (`first_key`, `last_key`, `key_step`; 0 = no keys, a
negative last counts from the end) are Redis's, for COMMAND INFO and for
routing by key (`CommandSpec.keys`).

The COMMAND command's replies are built here from the table: COMMAND,
COUNT, INFO, DOCS (summary, since, group, complexity and subcommands; no
argument descriptions, which redis-cli does without), LIST (FILTERBY
PATTERN / ACLCAT / MODULE) and HELP.

Invariants: names are lower case and unique; a subcommand's name is
"container|sub"; only containers (ACL, CLIENT, COMMAND, CONFIG) have subcommands.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kvstore import errors
from kvstore.errors import RedisError, c_text
from kvstore.protocol.glob import GlobPattern
from kvstore.protocol.resp import Reply, RespMap, RespSet

ERROR_ARGUMENT_CHARS_MAX: Final = 128
"""Redis prints at most this many characters of client arguments in an error."""


class Route(enum.Enum):
    """Where a command runs."""

    COMMAND = "command"
    QUERY = "query"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class CommandSpec:
    """One command (or subcommand) and Redis's metadata about it."""

    name: str
    arity: int
    route: Route
    flags: tuple[str, ...]
    categories: tuple[str, ...]
    first_key: int
    last_key: int
    key_step: int
    group: str
    since: str
    summary: str
    complexity: str
    subcommands: Mapping[str, CommandSpec] = field(default_factory=dict)

    def check_arity(self, word_count: int) -> None:
        """Raise Redis's arity error unless `word_count` words (name included) fit."""
        if (self.arity > 0 and word_count != self.arity) or word_count < -self.arity:
            raise RedisError(errors.wrong_arity(self.name))

    def keys(self, args: Sequence[bytes]) -> list[bytes]:
        """The keys a call names (args[0] is the command name), for routing."""
        if self.first_key == 0:
            return []
        last = self.last_key if self.last_key >= 0 else len(args) + self.last_key
        return list(args[self.first_key : last + 1 : self.key_step])

    def info(self) -> list[Reply]:
        """This command's COMMAND INFO entry (Redis 7's ten fields; no tips or key specs).

        Flags and categories are sets, as Redis 7 answers them (RESP3 `~`).
        """
        return [
            self.name.encode("ascii"),
            self.arity,
            RespSet(self.flags),
            self.first_key,
            self.last_key,
            self.key_step,
            RespSet(self.categories),
            RespSet(),
            [],
            [sub.info() for sub in self.subcommands.values()],
        ]

    def docs(self) -> RespMap:
        """This command's COMMAND DOCS map (summary, since, group, complexity, subcommands)."""
        entry: list[tuple[Reply, Reply]] = [
            (b"summary", self.summary.encode("ascii")),
            (b"since", self.since.encode("ascii")),
            (b"group", self.group.encode("ascii")),
            (b"complexity", self.complexity.encode("ascii")),
        ]
        if self.subcommands:
            nested = RespMap(
                (sub.name.encode("ascii"), sub.docs()) for sub in self.subcommands.values()
            )
            entry.append((b"subcommands", nested))
        return RespMap(entry)


def _spec(
    name: str,
    arity: int,
    route: Route,
    flags: str,
    categories: str,
    *,
    keys: tuple[int, int, int] = (0, 0, 0),
    group: str,
    since: str,
    summary: str,
    complexity: str = "O(1)",
    subcommands: Sequence[CommandSpec] = (),
) -> CommandSpec:
    """A spec from space-separated flags and categories (the table below stays readable)."""
    first_key, last_key, key_step = keys
    return CommandSpec(
        name=name,
        arity=arity,
        route=route,
        flags=tuple(flags.split()),
        categories=tuple(categories.split()),
        first_key=first_key,
        last_key=last_key,
        key_step=key_step,
        group=group,
        since=since,
        summary=summary,
        complexity=complexity,
        subcommands={sub.name.split("|", 1)[1]: sub for sub in subcommands},
    )


_WRITE: Final = Route.COMMAND
_READ: Final = Route.QUERY
_SERVER: Final = Route.SERVER
_ONE_KEY: Final = (1, 1, 1)
_ALL_KEYS: Final = (1, -1, 1)
_KEY_VALUE_PAIRS: Final = (1, -1, 2)
_SOURCE_DESTINATION: Final = (1, 2, 1)
_STRING_WRITE: Final = "@write @string @slow"
_STRING_WRITE_FAST: Final = "@write @string @fast"
_STRING_READ_FAST: Final = "@read @string @fast"
_KEYSPACE_WRITE_FAST: Final = "@keyspace @write @fast"
_KEYSPACE_READ_FAST: Final = "@keyspace @read @fast"
_CONNECTION_SLOW: Final = "@slow @connection"
_CONNECTION_FAST: Final = "@fast @connection"
_TRANSACTION_FAST: Final = "@fast @transaction"
_TRANSACTION_FLAGS: Final = "noscript loading stale fast allow_busy"
_CONFIG_FLAGS: Final = "admin noscript loading stale"
_ACL_ADMIN_FLAGS: Final = "admin noscript loading stale"
_ACL_ADMIN: Final = "@admin @slow @dangerous"

_TABLE: Final = (
    # --- strings ---
    _spec("set", -3, _WRITE, "write denyoom", _STRING_WRITE, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Set a key's value, with options"),
    _spec("setnx", 3, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Set a key's value only if the key is absent"),
    _spec("setex", 4, _WRITE, "write denyoom", _STRING_WRITE, keys=_ONE_KEY,
          group="string", since="2.0.0", summary="Set a key's value and its TTL in seconds"),
    _spec("psetex", 4, _WRITE, "write denyoom", _STRING_WRITE, keys=_ONE_KEY,
          group="string", since="2.6.0", summary="Set a key's value and its TTL in milliseconds"),
    _spec("getset", 3, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Set a key's value and return the old one"),
    _spec("getdel", 2, _WRITE, "write fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="6.2.0", summary="Return a key's value and delete the key"),
    _spec("getex", -2, _WRITE, "write fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="6.2.0", summary="Return a key's value and change its TTL"),
    _spec("mset", -3, _WRITE, "write denyoom", _STRING_WRITE, keys=_KEY_VALUE_PAIRS,
          group="string", since="1.0.1", summary="Set several keys' values",
          complexity="O(N) where N is the number of keys to set."),
    _spec("msetnx", -3, _WRITE, "write denyoom", _STRING_WRITE, keys=_KEY_VALUE_PAIRS,
          group="string", since="1.0.1", summary="Set several keys' values if none exists",
          complexity="O(N) where N is the number of keys to set."),
    _spec("append", 3, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="2.0.0", summary="Append to a key's value"),
    _spec("setrange", 4, _WRITE, "write denyoom", _STRING_WRITE, keys=_ONE_KEY,
          group="string", since="2.2.0", summary="Overwrite part of a key's value at an offset",
          complexity="O(M) where M is the length of the value argument."),
    _spec("get", 2, _READ, "readonly fast", _STRING_READ_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Return a key's value"),
    _spec("mget", -2, _READ, "readonly fast", _STRING_READ_FAST, keys=_ALL_KEYS,
          group="string", since="1.0.0", summary="Return several keys' values",
          complexity="O(N) where N is the number of keys to retrieve."),
    _spec("strlen", 2, _READ, "readonly fast", _STRING_READ_FAST, keys=_ONE_KEY,
          group="string", since="2.2.0", summary="Return the length of a key's value"),
    _spec("getrange", 4, _READ, "readonly", "@read @string @slow", keys=_ONE_KEY,
          group="string", since="2.4.0", summary="Return a substring of a key's value",
          complexity="O(N) where N is the length of the returned string."),
    _spec("incr", 2, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Add one to a key's integer value"),
    _spec("decr", 2, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Subtract one from a key's integer value"),
    _spec("incrby", 3, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Add an integer to a key's integer value"),
    _spec("decrby", 3, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="1.0.0", summary="Subtract an integer from a key's value"),
    _spec("incrbyfloat", 3, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="2.6.0", summary="Add a floating point number to a key's value"),
    _spec("cas", 4, _WRITE, "write denyoom fast", _STRING_WRITE_FAST, keys=_ONE_KEY,
          group="string", since="0.1.0",
          summary="Set a key's value only if it currently holds an expected value"),
    # --- keys ---
    _spec("del", -2, _WRITE, "write", "@keyspace @write @slow", keys=_ALL_KEYS,
          group="generic", since="1.0.0", summary="Delete keys",
          complexity="O(N) where N is the number of keys that will be removed."),
    _spec("unlink", -2, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_ALL_KEYS,
          group="generic", since="4.0.0", summary="Delete keys",
          complexity="O(N) where N is the number of keys that will be removed."),
    _spec("rename", 3, _WRITE, "write", "@keyspace @write @slow", keys=_SOURCE_DESTINATION,
          group="generic", since="1.0.0", summary="Rename a key, replacing any key so named"),
    _spec("renamenx", 3, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_SOURCE_DESTINATION,
          group="generic", since="1.0.0", summary="Rename a key only if the new name is free"),
    _spec("copy", -3, _WRITE, "write denyoom", "@keyspace @write @slow",
          keys=_SOURCE_DESTINATION, group="generic", since="6.2.0",
          summary="Copy a key's value and TTL to another key"),
    _spec("exists", -2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ALL_KEYS,
          group="generic", since="1.0.0", summary="Count how many of the keys exist",
          complexity="O(N) where N is the number of keys to check."),
    _spec("touch", -2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ALL_KEYS,
          group="generic", since="3.2.1", summary="Count how many of the keys exist",
          complexity="O(N) where N is the number of keys that will be touched."),
    _spec("type", 2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ONE_KEY,
          group="generic", since="1.0.0", summary="Return the type of a key's value"),
    _spec("keys", 2, _READ, "readonly", "@keyspace @read @slow @dangerous",
          group="generic", since="1.0.0", summary="Return every key matching a pattern",
          complexity="O(N) with N being the number of keys in the database."),
    _spec("scan", -2, _READ, "readonly", "@keyspace @read @slow",
          group="generic", since="2.8.0", summary="Iterate over the keys",
          complexity="O(1) for every call. O(N) for a complete iteration."),
    _spec("dbsize", 1, _READ, "readonly fast", _KEYSPACE_READ_FAST,
          group="server", since="1.0.0", summary="Return the number of keys"),
    _spec("flushdb", -1, _WRITE, "write", "@keyspace @write @slow @dangerous",
          group="server", since="1.0.0", summary="Delete every key",
          complexity="O(N) where N is the number of keys in the selected database"),
    _spec("flushall", -1, _WRITE, "write", "@keyspace @write @slow @dangerous",
          group="server", since="1.0.0", summary="Delete every key",
          complexity="O(N) where N is the total number of keys in all databases"),
    # --- TTLs ---
    _spec("expire", -3, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_ONE_KEY,
          group="generic", since="1.0.0", summary="Set a key's TTL in seconds"),
    _spec("pexpire", -3, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_ONE_KEY,
          group="generic", since="2.6.0", summary="Set a key's TTL in milliseconds"),
    _spec("expireat", -3, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_ONE_KEY,
          group="generic", since="1.2.0", summary="Set a key's expiry as a Unix time in seconds"),
    _spec("pexpireat", -3, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_ONE_KEY,
          group="generic", since="2.6.0", summary="Set a key's expiry as a Unix time in ms"),
    _spec("persist", 2, _WRITE, "write fast", _KEYSPACE_WRITE_FAST, keys=_ONE_KEY,
          group="generic", since="2.2.0", summary="Remove a key's TTL"),
    _spec("ttl", 2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ONE_KEY,
          group="generic", since="1.0.0", summary="Return a key's TTL in seconds"),
    _spec("pttl", 2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ONE_KEY,
          group="generic", since="2.6.0", summary="Return a key's TTL in milliseconds"),
    _spec("expiretime", 2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ONE_KEY,
          group="generic", since="7.0.0", summary="Return a key's expiry as a Unix time in s"),
    _spec("pexpiretime", 2, _READ, "readonly fast", _KEYSPACE_READ_FAST, keys=_ONE_KEY,
          group="generic", since="7.0.0", summary="Return a key's expiry as a Unix time in ms"),
    # --- connection and server ---
    _spec("ping", -1, _SERVER, "fast", "@fast @connection",
          group="connection", since="1.0.0", summary="Answer PONG, or the message given"),
    _spec("echo", 2, _SERVER, "loading stale fast", "@fast @connection",
          group="connection", since="1.0.0", summary="Answer the message given"),
    _spec("quit", -1, _SERVER, "noscript loading stale fast no_auth allow_busy",
          "@fast @connection",
          group="connection", since="1.0.0", summary="Close the connection"),
    _spec("select", 2, _SERVER, "loading stale fast", "@fast @connection",
          group="connection", since="1.0.0", summary="Select database 0 (the only one)"),
    _spec("hello", -1, _SERVER, "noscript loading stale fast no_auth allow_busy",
          _CONNECTION_FAST,
          group="connection", since="6.0.0",
          summary="Handshake: choose RESP2 or RESP3, describe the server"),
    _spec("auth", -2, _SERVER, "noscript loading stale fast no_auth allow_busy",
          _CONNECTION_FAST,
          group="connection", since="1.0.0", summary="Log the connection in as a user"),
    _spec("reset", 1, _SERVER, "noscript loading stale fast no_auth allow_busy",
          _CONNECTION_FAST,
          group="connection", since="6.2.0", summary="Reset the connection's state"),
    _spec("readonly", 1, _SERVER, "loading stale fast", _CONNECTION_FAST,
          group="cluster", since="3.0.0",
          summary="Answer this connection's reads from this replica, possibly stale"),
    _spec("readwrite", 1, _SERVER, "loading stale fast", _CONNECTION_FAST,
          group="cluster", since="3.0.0",
          summary="Answer this connection's reads linearizably (the default)"),
    # --- transactions ---
    _spec("multi", 1, _SERVER, _TRANSACTION_FLAGS, _TRANSACTION_FAST,
          group="transactions", since="1.2.0", summary="Start a transaction"),
    _spec("exec", 1, _SERVER, "noscript loading stale skip_slowlog", "@slow @transaction",
          group="transactions", since="1.2.0", summary="Run the queued commands atomically",
          complexity="Depends on commands in the transaction"),
    _spec("discard", 1, _SERVER, _TRANSACTION_FLAGS, _TRANSACTION_FAST,
          group="transactions", since="2.0.0", summary="Drop the queued commands"),
    _spec("watch", -2, _SERVER, _TRANSACTION_FLAGS, _TRANSACTION_FAST, keys=_ALL_KEYS,
          group="transactions", since="2.2.0",
          summary="Abort the next EXEC if one of the keys changes",
          complexity="O(1) for every key."),
    _spec("unwatch", 1, _SERVER, _TRANSACTION_FLAGS, _TRANSACTION_FAST,
          group="transactions", since="2.2.0", summary="Forget the watched keys"),
    _spec("client", -2, _SERVER, "", "@slow",
          group="connection", since="2.4.0", summary="A container for connection commands",
          complexity="Depends on subcommand.",
          subcommands=(
              _spec("client|setname", 3, _SERVER, "noscript loading stale", _CONNECTION_SLOW,
                    group="connection", since="2.6.9", summary="Set the connection's name"),
              _spec("client|getname", 2, _SERVER, "noscript loading stale", _CONNECTION_SLOW,
                    group="connection", since="2.6.9", summary="Return the connection's name"),
              _spec("client|setinfo", 4, _SERVER, "noscript loading stale", _CONNECTION_SLOW,
                    group="connection", since="7.2.0",
                    summary="Set the client library's name or version"),
              _spec("client|id", 2, _SERVER, "noscript loading stale", _CONNECTION_SLOW,
                    group="connection", since="5.0.0", summary="Return the connection's id"),
              _spec("client|help", 2, _SERVER, "loading stale", _CONNECTION_SLOW,
                    group="connection", since="5.0.0", summary="Describe the subcommands"),
          )),
    _spec("command", -1, _SERVER, "loading stale", _CONNECTION_SLOW,
          group="server", since="2.8.13", summary="Describe every command",
          complexity="O(N) where N is the total number of commands",
          subcommands=(
              _spec("command|count", 2, _SERVER, "loading stale", _CONNECTION_SLOW,
                    group="server", since="2.8.13", summary="Return the number of commands"),
              _spec("command|docs", -2, _SERVER, "loading stale", _CONNECTION_SLOW,
                    group="server", since="7.0.0", summary="Document commands",
                    complexity="O(N) where N is the number of commands to look up"),
              _spec("command|info", -2, _SERVER, "loading stale", _CONNECTION_SLOW,
                    group="server", since="2.8.13", summary="Describe commands",
                    complexity="O(N) where N is the number of commands to look up"),
              _spec("command|list", -2, _SERVER, "loading stale", _CONNECTION_SLOW,
                    group="server", since="7.0.0", summary="List command names",
                    complexity="O(N) where N is the total number of commands"),
              _spec("command|help", 2, _SERVER, "loading stale", _CONNECTION_SLOW,
                    group="server", since="5.0.0", summary="Describe the subcommands"),
          )),
    _spec("config", -2, _SERVER, "", "@slow",
          group="server", since="2.0.0", summary="A container for configuration commands",
          complexity="Depends on subcommand.",
          subcommands=(
              _spec("config|get", -3, _SERVER, _CONFIG_FLAGS, "@admin @slow @dangerous",
                    group="server", since="2.0.0", summary="Return configuration parameters",
                    complexity="O(N) when N is the number of configuration parameters"),
              _spec("config|help", 2, _SERVER, "loading stale", "@slow",
                    group="server", since="5.0.0", summary="Describe the subcommands"),
          )),
    _spec("acl", -2, _SERVER, "", "@slow",
          group="server", since="6.0.0", summary="A container for ACL commands",
          complexity="Depends on subcommand.",
          subcommands=(
              _spec("acl|whoami", 2, _SERVER, "noscript loading stale", "@slow",
                    group="server", since="6.0.0", summary="Return the connection's user"),
              _spec("acl|users", 2, _SERVER, _ACL_ADMIN_FLAGS, _ACL_ADMIN,
                    group="server", since="6.0.0", summary="List the users' names",
                    complexity="O(N). Where N is the number of configured users."),
              _spec("acl|list", 2, _SERVER, _ACL_ADMIN_FLAGS, _ACL_ADMIN,
                    group="server", since="6.0.0", summary="List the users and their rules",
                    complexity="O(N). Where N is the number of configured users."),
              _spec("acl|cat", -2, _SERVER, "noscript loading stale", "@slow",
                    group="server", since="6.0.0",
                    summary="List the ACL categories, or a category's commands"),
              _spec("acl|help", 2, _SERVER, "loading stale", "@slow",
                    group="server", since="6.0.0", summary="Describe the subcommands"),
          )),
    _spec("info", -1, _SERVER, "loading stale", "@slow @dangerous",
          group="server", since="1.0.0", summary="Describe the server and the replica"),
    _spec("time", 1, _SERVER, "loading stale fast", "@fast",
          group="server", since="2.6.0", summary="Return the server's clock"),
    _spec("debug", -2, _READ, "readonly admin noscript loading stale", "@admin @slow @dangerous",
          group="server", since="1.0.0",
          summary="Digests of the data: DEBUG DIGEST, DEBUG DIGEST-VALUE key [key ...]",
          complexity="O(N) where N is the number of keys (DIGEST-VALUE: the keys given)"),
)  # fmt: skip

COMMANDS: Final[Mapping[str, CommandSpec]] = {spec.name: spec for spec in _TABLE}
"""Every top-level command by lower-case name."""


def resolve(args: Sequence[bytes]) -> CommandSpec:
    """The spec a request names, its argument count checked; `RedisError` as Redis words it."""
    assert args, "the parser returns no empty command"
    spec = COMMANDS.get(args[0].lower().decode("latin-1"))
    if spec is None:
        raise RedisError(unknown_command(args))
    if spec.subcommands and len(args) >= 2:
        sub = spec.subcommands.get(args[1].lower().decode("latin-1"))
        if sub is None:
            name = c_text(args[1])[:ERROR_ARGUMENT_CHARS_MAX]
            container = c_text(args[0].upper())
            raise RedisError(f"ERR unknown subcommand '{name}'. Try {container} HELP.")
        spec = sub
    spec.check_arity(len(args))
    return spec


def lookup(name: bytes) -> CommandSpec | None:
    """The spec named `name` ("get", "client|setname"; any case), or None."""
    container, _, sub = name.lower().decode("latin-1").partition("|")
    spec = COMMANDS.get(container)
    if spec is None or not sub:
        return spec
    return spec.subcommands.get(sub)


def unknown_command(args: Sequence[bytes]) -> str:
    """Redis's message for a command it does not have, quoting the start of the arguments."""
    name = c_text(args[0])[:ERROR_ARGUMENT_CHARS_MAX]
    quoted = ""
    for arg in args[1:]:
        if len(quoted) >= ERROR_ARGUMENT_CHARS_MAX:
            break
        quoted += "'" + c_text(arg)[: ERROR_ARGUMENT_CHARS_MAX - len(quoted)] + "' "
    return f"ERR unknown command '{name}', with args beginning with: {quoted}"


# --- the COMMAND command -----------------------------------------------------------------------

_COMMAND_HELP: Final = (
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all commands.",
    "COUNT",
    "    Return the total number of commands in this server.",
    "LIST [FILTERBY (MODULE <module-name>|ACLCAT <category>|PATTERN <pattern>)]",
    "    Return a list of all commands in this server.",
    "INFO [<command-name> ...]",
    "    Return details about the given commands, or all of them.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about the given commands, or all of them.",
    "HELP",
    "    Print this help.",
)


def command_reply(spec: CommandSpec, args: Sequence[bytes]) -> Reply:
    """The reply to COMMAND or one of its subcommands (`spec` from `resolve(args)`)."""
    if spec.name == "command":
        return [each.info() for each in COMMANDS.values()]
    if spec.name == "command|count":
        return len(COMMANDS)
    if spec.name == "command|info":
        if len(args) == 2:
            return [each.info() for each in COMMANDS.values()]
        found = [lookup(name) for name in args[2:]]
        return [None if each is None else each.info() for each in found]
    if spec.name == "command|docs":
        return _docs(args[2:])
    if spec.name == "command|list":
        return _names(args[2:])
    assert spec.name == "command|help", spec.name
    return list(_COMMAND_HELP)


def _docs(names: Sequence[bytes]) -> RespMap:
    """COMMAND DOCS: a map name -> docs; unknown names are left out."""
    if names:
        specs = [spec for spec in map(lookup, names) if spec is not None]
    else:
        specs = list(COMMANDS.values())
    return RespMap((spec.name.encode("ascii"), spec.docs()) for spec in specs)


def _names(options: Sequence[bytes]) -> list[Reply]:
    """COMMAND LIST [FILTERBY MODULE m | ACLCAT c | PATTERN p]: names, subcommands included."""
    every = [
        spec for command in COMMANDS.values() for spec in (command, *command.subcommands.values())
    ]
    if not options:
        return [spec.name.encode("ascii") for spec in every]
    if len(options) != 3 or options[0].lower() != b"filterby":
        raise RedisError(errors.SYNTAX)
    kind = options[1].lower()
    value = options[2]
    if kind == b"module":
        return []
    if kind == b"aclcat":
        category = "@" + value.lower().decode("latin-1")
        return [spec.name.encode("ascii") for spec in every if category in spec.categories]
    if kind == b"pattern":
        # Redis matches command names without regard to case.
        pattern = GlobPattern(value.lower())
        names = [spec.name.encode("ascii") for spec in every]
        return [name for name in names if pattern.matches(name)]
    raise RedisError(errors.SYNTAX)
