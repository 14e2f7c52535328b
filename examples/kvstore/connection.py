"""The commands the server answers itself, without the state machine (PING, HELLO, INFO, ...).

Pure.  `answer` takes a resolved spec (`commands.resolve`, `Route.SERVER`),
the request's words, the connection's `ClientState` and a `ServerView`
(where the shell supplies its clock and its replica's status), and returns
the reply, raising `RedisError` with Redis's text:

* PING -> PONG, PING msg -> msg (more is an arity error); ECHO msg -> msg.
* QUIT -> OK, and the connection closes once the reply is written
  (`ClientState.close_after_reply`).
* SELECT 0 -> OK; there is one database, so any other index is
  "ERR DB index is out of range".
* HELLO answers as a RESP2-only Redis: HELLO and HELLO 2 give the server
  map as a flat array (server, version, proto 2, id, mode, role, modules);
  HELLO 3 (or any other version) -> "NOPROTO unsupported protocol
  version".  AUTH succeeds for the user "default" with any password, as
  for a Redis without a password; other users get WRONGPASS.  SETNAME
  names the connection.
* CLIENT SETNAME / GETNAME / SETINFO (LIB-NAME, LIB-VER) / ID / HELP.
* COMMAND ...: see `commands.command_reply`.
* INFO [section ...]: sections server, clients, replication (Redis's
  role is always "master", since every replica accepts writes and
  forwards them to the leader; the `rsm_*` fields say what this replica
  is in the cluster: leader or follower, the leader's address, epoch,
  applied index and lag) and keyspace; "default", "all" and "everything"
  give all four; unknown sections give nothing.
* TIME -> [unix seconds, microseconds] from the server's clock (not
  logged time: TIME is about this server, not the data).

Invariants: only `ClientState` changes, and only through SETNAME,
SETINFO, HELLO SETNAME and QUIT.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from kvstore import commands, errors, numbers
from kvstore.commands import CommandSpec, Route
from kvstore.errors import RedisError, c_text
from kvstore.resp import Reply

REDIS_VERSION: Final = "7.2.0"
"""The Redis version this server answers as (HELLO, INFO): the behaviour it follows."""

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_NAME_BYTE_MIN: Final = 0x21
_NAME_BYTE_MAX: Final = 0x7E
"""Client names and library attributes are printable ASCII without spaces ('!' to '~')."""
_INFO_SECTIONS: Final = ("server", "clients", "replication", "keyspace")
_MS_PER_SECOND: Final = 1000
_MS_PER_DAY: Final = 86_400_000
_US_PER_SECOND: Final = 1_000_000


@dataclass(slots=True)
class ClientState:
    """What one connection keeps between its commands; owned and mutated by that connection."""

    client_id: int
    name: bytes | None = None
    library_name: bytes | None = None
    library_version: bytes | None = None
    close_after_reply: bool = False
    """Set by QUIT: write the pending replies, then close."""


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What INFO reports, gathered by the server when INFO is asked."""

    process_id: int
    tcp_port: int
    uptime_ms: int
    clock_us: int
    connected_clients: int
    replica_role: str
    """"leader" or "follower" (or whatever the replica runtime calls its state)."""
    leader_address: str | None
    epoch: int
    applied_index: int
    lag_entries: int
    keys: int
    keys_with_ttl: int


class ServerView(Protocol):
    """What the connection commands need from the server shell."""

    def clock_us(self) -> int:
        """The server's wall clock, microseconds since the Unix epoch."""
        ...

    def status(self) -> ServerStatus:
        """The replica's status for INFO."""
        ...


def answer(
    spec: CommandSpec, args: Sequence[bytes], client: ClientState, server: ServerView
) -> Reply:
    """The reply to a server-answered command; `RedisError` for Redis's errors."""
    assert spec.route is Route.SERVER
    name = spec.name
    if name == "ping":
        if len(args) > 2:
            raise RedisError(errors.wrong_arity("ping"))
        return "PONG" if len(args) == 1 else args[1]
    if name == "echo":
        return args[1]
    if name == "quit":
        client.close_after_reply = True
        return "OK"
    if name == "select":
        return _select(args[1])
    if name == "hello":
        return _hello(args, client)
    if name.startswith("client|"):
        return _client(name, args, client)
    if name.startswith("command"):
        return commands.command_reply(spec, args)
    if name == "info":
        return info_text([arg.lower() for arg in args[1:]], server.status())
    assert name == "time", name
    seconds, microseconds = divmod(server.clock_us(), _US_PER_SECOND)
    return [b"%d" % seconds, b"%d" % microseconds]


def _select(raw_index: bytes) -> str:
    index = numbers.require_int(raw_index)
    if index < _INT32_MIN or index > _INT32_MAX:
        raise RedisError(
            f"ERR value is out of range, value must between {_INT32_MIN} and {_INT32_MAX}"
        )
    if index != 0:
        raise RedisError("ERR DB index is out of range")
    return "OK"


def _hello(args: Sequence[bytes], client: ClientState) -> list[Reply]:
    """HELLO [protover [AUTH username password] [SETNAME clientname]], checked in Redis's order."""
    position = 1
    if len(args) >= 2:
        version = numbers.require_int(
            args[1], "ERR Protocol version is not an integer or out of range"
        )
        if version != 2:
            raise RedisError("NOPROTO unsupported protocol version")
        position = 2
    username: bytes | None = None
    new_name: bytes | None = None
    while position < len(args):
        option = args[position].lower()
        remaining = len(args) - 1 - position
        if option == b"auth" and remaining >= 2:
            username = args[position + 1]
            position += 3
        elif option == b"setname" and remaining >= 1:
            new_name = args[position + 1]
            position += 2
        else:
            raise RedisError(f"ERR Syntax error in HELLO option '{c_text(args[position])}'")
    if username is not None and username != b"default":
        raise RedisError("WRONGPASS invalid username-password pair or user is disabled.")
    if new_name is not None:
        _set_name(client, new_name)
    return [
        b"server",
        b"redis",
        b"version",
        REDIS_VERSION.encode("ascii"),
        b"proto",
        2,
        b"id",
        client.client_id,
        b"mode",
        b"standalone",
        b"role",
        b"master",
        b"modules",
        [],
    ]


_CLIENT_HELP: Final = (
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "SETINFO <option> <value>",
    "    Set client meta attr. Options are:",
    "    * LIB-NAME: the client lib name.",
    "    * LIB-VER: the client lib version.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "HELP",
    "    Print this help.",
)


def _client(name: str, args: Sequence[bytes], client: ClientState) -> Reply:
    if name == "client|setname":
        _set_name(client, args[2])
        return "OK"
    if name == "client|getname":
        return client.name
    if name == "client|id":
        return client.client_id
    if name == "client|setinfo":
        attribute = args[2].lower()
        value = args[3]
        if attribute not in (b"lib-name", b"lib-ver"):
            raise RedisError(f"ERR Unrecognized option '{c_text(args[2])}'")
        if not _printable(value):
            raise RedisError(
                f"ERR {c_text(args[2])} cannot contain spaces, newlines or special characters."
            )
        if attribute == b"lib-name":
            client.library_name = value or None
        else:
            client.library_version = value or None
        return "OK"
    assert name == "client|help", name
    return list(_CLIENT_HELP)


def _set_name(client: ClientState, name: bytes) -> None:
    """CLIENT SETNAME: an empty name removes the name."""
    if not _printable(name):
        raise RedisError("ERR Client names cannot contain spaces, newlines or special characters.")
    client.name = name or None


def _printable(value: bytes) -> bool:
    return all(_NAME_BYTE_MIN <= byte <= _NAME_BYTE_MAX for byte in value)


def info_text(sections: Sequence[bytes], status: ServerStatus) -> bytes:
    """The INFO reply: the asked sections, `# Name` then `field:value` lines, CRLF-separated."""
    wanted = {section.decode("latin-1") for section in sections}
    if not wanted or wanted & {"default", "all", "everything"}:
        wanted = set(_INFO_SECTIONS)
    blocks = [_info_section(section, status) for section in _INFO_SECTIONS if section in wanted]
    return "\r\n".join(blocks).encode("latin-1")


def _info_section(section: str, status: ServerStatus) -> str:
    if section == "server":
        fields = [
            ("redis_version", REDIS_VERSION),
            ("redis_mode", "standalone"),
            ("arch_bits", "64"),
            ("process_id", str(status.process_id)),
            ("tcp_port", str(status.tcp_port)),
            ("server_time_usec", str(status.clock_us)),
            ("uptime_in_seconds", str(status.uptime_ms // _MS_PER_SECOND)),
            ("uptime_in_days", str(status.uptime_ms // _MS_PER_DAY)),
        ]
    elif section == "clients":
        fields = [("connected_clients", str(status.connected_clients))]
    elif section == "replication":
        fields = [
            ("role", "master"),
            ("rsm_role", status.replica_role),
            ("rsm_leader", status.leader_address or ""),
            ("rsm_epoch", str(status.epoch)),
            ("rsm_applied_index", str(status.applied_index)),
            ("rsm_lag_entries", str(status.lag_entries)),
        ]
    else:
        assert section == "keyspace", section
        fields = []
        if status.keys:
            keyspace = f"keys={status.keys},expires={status.keys_with_ttl},avg_ttl=0"
            fields.append(("db0", keyspace))
    title = section.capitalize()
    return f"# {title}\r\n" + "".join(f"{key}:{value}\r\n" for key, value in fields)
