"""The commands the server answers itself, without the state machine (PING, HELLO, INFO, ...).

Pure.  `answer` takes a resolved spec (`commands.resolve`, `Route.SERVER`),
the request's words, the connection's `ClientState` and a `ServerView`
(where the shell supplies its clock, its settings and its replica's status),
and returns the reply, raising `RedisError` with Redis's text.  The
transaction commands (MULTI, EXEC, DISCARD, WATCH) are not answered here
but by `kvstore.connection.dispatch`, which needs the state machine; their
state lives in `ClientState` too.  UNWATCH is answered here (OK, forgetting
the watched keys), at once or, queued inside MULTI, at EXEC.

* PING -> PONG, PING msg -> msg (more is an arity error); ECHO msg -> msg.
* QUIT -> OK, and the connection closes once the reply is written
  (`ClientState.close_after_reply`).
* SELECT 0 -> OK; there is one database, so any other index is
  "ERR DB index is out of range".
* HELLO [2|3] switches the connection to that protocol version (RESP2 or
  RESP3, see `kvstore.protocol.resp`) and answers the server map (server, version,
  proto, id, mode, role, modules) in it; without a version it keeps the
  current one; other versions -> "NOPROTO unsupported protocol version".
  AUTH user password logs in first (WRONGPASS, and nothing else changes,
  when the pair is refused); a connection not logged in by then is refused
  with Redis's "NOAUTH HELLO must be called with the client already
  authenticated, ...".  SETNAME names the connection.
* AUTH [username] password -> OK, the connection logged in as that user
  (`kvstore.connection.acl`; without a username, "default"); a refused pair
  -> WRONGPASS, counted, and the connection stays as it was; AUTH password
  when the default user needs none -> Redis's "ERR AUTH <password> called
  without any password configured for the default user. ...".
* ACL WHOAMI / USERS / LIST / CAT [category] / HELP: the users come from
  configuration, so ACL SETUSER, DELUSER, LOAD and SAVE are not here.
* RESET -> RESET: back to RESP2, linearizable reads, no name, no
  transaction, no watched keys, and logged in as a new connection is.
* READONLY / READWRITE: this connection's reads are answered from the local
  replica's state, possibly stale (READONLY), or linearizably (READWRITE,
  the default).  Redis without cluster mode refuses both; here every
  replica can serve reads, so they mean what they mean for a cluster
  replica.
* CONFIG GET pattern [pattern ...] -> a map of the matching settings
  (`ServerView.config`, read-only); CONFIG HELP.
* CLIENT SETNAME / GETNAME / SETINFO (LIB-NAME, LIB-VER) / ID / HELP.
* COMMAND ...: see `commands.command_reply`.
* INFO [section ...]: the sections and fields Redis tooling reads, with
  true values: server, clients, memory (the process's resident memory:
  Python does not count its heap apart), persistence (the last save is
  the application's newest snapshot; durability is the replicated log,
  so no AOF), stats, replication (Redis's role is always "master", since
  every replica accepts writes and forwards them to the leader;
  `master_replid` changes with the epoch, as Redis's with a failover, and
  `master_repl_offset` is the applied index; the `rsm_*` fields say what
  this replica is in the cluster: leader or follower, the leader's
  address, epoch, applied index, whether it has caught up with the log,
  and its lag: the log entries it knows are confirmed and has not applied
  yet), cpu, cluster (`cluster_enabled:0`) and keyspace, by default;
  "all" and "everything" add commandstats and errorstats (per command
  name and per error code: `command_stats.py`); unknown sections give
  nothing.  Fields this server cannot fill truly (the time spent in each
  command, key hits and misses, ops per second) are left
  out rather than shown as 0.  The text is a verbatim string in RESP3, as
  Redis's.
* TIME -> [unix seconds, microseconds] from the server's clock (not
  logged time: TIME is about this server, not the data).

Invariants: only `ClientState` changes, and only through SETNAME,
SETINFO, HELLO, AUTH, RESET, READONLY, READWRITE and QUIT; besides, the
`AccessControl` counts refused logins.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from kvstore import errors, limits
from kvstore.connection import acl
from kvstore.connection.acl import AccessControl, Restriction
from kvstore.connection.command_stats import CommandStats, commandstats_fields, errorstats_fields
from kvstore.errors import RedisError, c_text
from kvstore.protocol import commands, numbers
from kvstore.protocol.commands import CommandSpec, Route
from kvstore.protocol.glob import GlobPattern
from kvstore.protocol.resp import Reply, RespMap, Verbatim

REDIS_VERSION: Final = "7.2.0"
"""The Redis version this server answers as (HELLO, INFO): the behaviour it follows."""

_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_NAME_BYTE_MIN: Final = 0x21
_NAME_BYTE_MAX: Final = 0x7E
"""Client names and library attributes are printable ASCII without spaces ('!' to '~')."""
_DEFAULT_SECTIONS: Final = (
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "cluster",
    "keyspace",
)
_INFO_SECTIONS: Final = (
    *_DEFAULT_SECTIONS[:7],
    "commandstats",
    "errorstats",
    *_DEFAULT_SECTIONS[7:],
)
"""Every section in the order Redis writes them (commandstats and errorstats after cpu)."""
_HUMAN_UNITS: Final = ("K", "M", "G", "T", "P")
_KIB: Final = 1024
_MS_PER_SECOND: Final = 1000
_MS_PER_DAY: Final = 86_400_000
_US_PER_SECOND: Final = 1_000_000


@dataclass(frozen=True, slots=True)
class Watch:
    """A watched key and the position (index, logged time) of the state its WATCH read."""

    key: bytes
    index: int
    time_ms: int


@dataclass(slots=True)
class ClientState:
    """What one connection keeps between its commands; owned and mutated by that connection."""

    client_id: int
    name: bytes | None = None
    library_name: bytes | None = None
    library_version: bytes | None = None
    close_after_reply: bool = False
    """Set by QUIT: write the pending replies, then close."""
    resp3: bool = False
    """Replies are RESP3 (after HELLO 3), else RESP2."""
    stale_reads: bool = False
    """READONLY: reads are answered from the local replica, possibly stale."""
    in_transaction: bool = False
    """Between MULTI and EXEC/DISCARD: commands are queued."""
    queued: list[tuple[CommandSpec, list[bytes]]] = field(default_factory=list)
    queued_bytes: int = 0
    transaction_error: str | None = None
    """Why EXEC must refuse the transaction (a command failed to queue), or None."""
    watches: dict[bytes, Watch] = field(default_factory=dict)
    watched_bytes: int = 0
    """What the watched keys will add to EXEC's logged command (see `limits`)."""
    stats: CommandStats = field(default_factory=CommandStats, compare=False, repr=False)
    """The connection's commands and error replies, counted (`command_stats.py`)."""
    user: str = acl.DEFAULT_USER
    """Who the connection is logged in as (ACL WHOAMI)."""
    restriction: Restriction | None = None
    """What the connection may run (`kvstore.connection.acl`); None: everything."""

    def log_in(self, user: acl.User) -> None:
        self.user = user.name
        self.restriction = user.restriction

    def watch(self, watch: Watch) -> None:
        """Watch a key (a key watched already keeps its older position, as in Redis)."""
        if watch.key not in self.watches:
            self.watches[watch.key] = watch
            self.watched_bytes += len(watch.key) + limits.transaction_item_overhead_bytes

    def unwatch(self) -> None:
        self.watches.clear()
        self.watched_bytes = 0

    def end_transaction(self) -> None:
        """Leave MULTI and forget the watched keys (what EXEC, DISCARD and RESET do)."""
        self.in_transaction = False
        self.queued = []
        self.queued_bytes = 0
        self.transaction_error = None
        self.unwatch()


@dataclass(frozen=True, slots=True)
class ProcessStatus:
    """The server's process, for INFO's server, memory and cpu sections."""

    run_id: str = "0" * 40
    """Random per process, 40 hex digits (Redis's run_id)."""
    os: str = ""
    executable: str = ""
    rss_bytes: int = 0
    peak_rss_bytes: int = 0
    system_memory_bytes: int = 0
    cpu_user_s: float = 0.0
    cpu_sys_s: float = 0.0
    cpu_user_children_s: float = 0.0
    cpu_sys_children_s: float = 0.0


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
    caught_up: bool
    """The replica has read the log up to its end (or close to it, see rsm's election)."""
    lag_entries: int
    """Log entries confirmed and not applied here yet, in the ledger it reads (0 on the
    leader; rsm's `LogFollower.lag_entries`)."""
    keys: int
    keys_with_ttl: int
    expired_keys: int = 0
    """Keys this process deleted for having expired (`kvstore.store.state`)."""
    app: str = ""
    connections_max: int = 0
    connections_received: int = 0
    connections_rejected: int = 0
    acl_access_denied_auth: int = 0
    acl_access_denied_cmd: int = 0
    acl_access_denied_key: int = 0
    snapshot_index: int | None = None
    """The application's newest snapshot (None: none yet)."""
    snapshot_created_ms: int | None = None
    process: ProcessStatus = field(default_factory=ProcessStatus)
    commands: CommandStats = field(default_factory=CommandStats)
    """Every connection's counts since the server started, closed connections' included."""


class ServerView(Protocol):
    """What the connection commands need from the server shell."""

    def clock_us(self) -> int:
        """The server's wall clock, microseconds since the Unix epoch."""
        ...

    def status(self) -> ServerStatus:
        """The replica's status for INFO."""
        ...

    def config(self) -> Mapping[str, str]:
        """The settings CONFIG GET shows, by lower-case name."""
        ...

    def access_control(self) -> AccessControl:
        """The users, and the refusals counted."""
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
        return _hello(args, client, server.access_control())
    if name == "auth":
        return _auth(args, client, server.access_control())
    if name.startswith("acl|"):
        return _acl(name, args, client, server.access_control())
    if name == "reset":
        _reset(client, server.access_control())
        return "RESET"
    if name in ("readonly", "readwrite"):
        client.stale_reads = name == "readonly"
        return "OK"
    if name == "unwatch":
        client.unwatch()
        return "OK"
    if name.startswith("client|"):
        return _client(name, args, client)
    if name.startswith("command"):
        return commands.command_reply(spec, args)
    if name.startswith("config|"):
        return _config(name, args, server.config())
    if name == "info":
        return Verbatim(info_text([arg.lower() for arg in args[1:]], server.status()))
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
        raise RedisError(errors.DB_INDEX_OUT_OF_RANGE)
    return "OK"


def _hello(args: Sequence[bytes], client: ClientState, access: AccessControl) -> RespMap:
    """HELLO [protover [AUTH username password] [SETNAME clientname]], checked in Redis's order."""
    position = 1
    resp3 = client.resp3
    if len(args) >= 2:
        version = numbers.require_int(
            args[1], "ERR Protocol version is not an integer or out of range"
        )
        if version not in (2, 3):
            raise RedisError("NOPROTO unsupported protocol version")
        resp3 = version == 3
        position = 2
    login: tuple[bytes, bytes] | None = None
    new_name: bytes | None = None
    while position < len(args):
        option = args[position].lower()
        remaining = len(args) - 1 - position
        if option == b"auth" and remaining >= 2:
            login = (args[position + 1], args[position + 2])
            position += 3
        elif option == b"setname" and remaining >= 1:
            new_name = args[position + 1]
            position += 2
        else:
            raise RedisError(f"ERR Syntax error in HELLO option '{c_text(args[position])}'")
    if login is not None:
        _log_in(client, access, *login)
    elif client.restriction is not None and not client.restriction.logged_in:
        raise RedisError(_HELLO_NOAUTH)
    if new_name is not None:
        _set_name(client, new_name)
    client.resp3 = resp3
    return RespMap(
        (
            (b"server", b"redis"),
            (b"version", REDIS_VERSION.encode("ascii")),
            (b"proto", 3 if resp3 else 2),
            (b"id", client.client_id),
            (b"mode", b"standalone"),
            (b"role", b"master"),
            (b"modules", []),
        )
    )


def _auth(args: Sequence[bytes], client: ClientState, access: AccessControl) -> str:
    """AUTH [username] password (see the module docstring)."""
    if len(args) > 3:
        raise RedisError(errors.SYNTAX)
    if len(args) == 2:
        default = access.users.get(acl.DEFAULT_USER)
        if default is not None and default.nopass:
            raise RedisError(_AUTH_WITHOUT_PASSWORD)
        _log_in(client, access, acl.DEFAULT_USER.encode("ascii"), args[1])
    else:
        _log_in(client, access, args[1], args[2])
    return "OK"


def _log_in(client: ClientState, access: AccessControl, username: bytes, password: bytes) -> None:
    user = access.authenticate(username, password)
    if user is None:
        raise RedisError(acl.WRONGPASS)
    client.log_in(user)


_AUTH_WITHOUT_PASSWORD: Final = (
    "ERR AUTH <password> called without any password configured for the default user. "
    "Are you sure your configuration is correct?"
)
_HELLO_NOAUTH: Final = (
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the "
    "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and "
    "select the RESP protocol version at the same time"
)
_ACL_HELP: Final = (
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "LIST",
    "    Show users details in config file format.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Print this help.",
)


def _acl(name: str, args: Sequence[bytes], client: ClientState, access: AccessControl) -> Reply:
    """ACL WHOAMI, USERS, LIST, CAT, HELP."""
    if name == "acl|whoami":
        return client.user.encode("latin-1")
    if name == "acl|users":
        return [user.encode("latin-1") for user in sorted(access.users)]
    if name == "acl|list":
        return [access.users[user].describe().encode("latin-1") for user in sorted(access.users)]
    if name == "acl|cat":
        if len(args) > 3:
            raise RedisError(errors.wrong_arity("acl|cat"))
        if len(args) == 2:
            return [category.encode("ascii") for category in acl.CATEGORIES]
        category = args[2].lower().decode("latin-1")
        if category not in acl.CATEGORIES:
            raise RedisError(f"ERR Unknown category '{c_text(args[2])}'")
        return [command.encode("ascii") for command in acl.category_commands(category)]
    assert name == "acl|help", name
    return list(_ACL_HELP)


def _reset(client: ClientState, access: AccessControl) -> None:
    """RESET: the connection as it was when it was opened (its id stays)."""
    client.end_transaction()
    client.user = acl.DEFAULT_USER
    client.restriction = access.initial
    client.name = None
    client.resp3 = False
    client.stale_reads = False


_CONFIG_HELP: Final = (
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "HELP",
    "    Print this help.",
)


def _config(name: str, args: Sequence[bytes], settings: Mapping[str, str]) -> Reply:
    """CONFIG GET (settings matching any pattern, case-insensitively) or CONFIG HELP."""
    if name == "config|help":
        return list(_CONFIG_HELP)
    assert name == "config|get", name
    patterns = [GlobPattern(pattern.lower()) for pattern in args[2:]]
    return RespMap(
        (key.encode("latin-1"), value.encode("latin-1"))
        for key, value in settings.items()
        if any(pattern.matches(key.encode("latin-1")) for pattern in patterns)
    )


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
    """The INFO reply: the asked sections, `# Name` then `field:value` lines, CRLF-separated.

    As Redis: no section, or "default", gives the default ones; "all" and
    "everything" add commandstats and errorstats."""
    wanted = {section.decode("latin-1").lower() for section in sections}
    if wanted & {"all", "everything"}:
        wanted = set(_INFO_SECTIONS)
    elif not wanted or "default" in wanted:
        wanted |= set(_DEFAULT_SECTIONS)
    blocks = [_info_section(section, status) for section in _INFO_SECTIONS if section in wanted]
    return "\r\n".join(blocks).encode("latin-1")


def human_bytes(count: int) -> str:
    """Bytes as Redis's `*_human` fields write them: `512B`, `1.50K`, `2.00M`, ..."""
    if count < _KIB:
        return f"{count}B"
    value = float(count)
    for unit in _HUMAN_UNITS:
        value /= _KIB
        if value < _KIB or unit == _HUMAN_UNITS[-1]:
            break
    return f"{value:.2f}{unit}"


def _info_section(section: str, status: ServerStatus) -> str:
    process = status.process
    if section == "server":
        fields = [
            ("redis_version", REDIS_VERSION),
            ("redis_git_sha1", "00000000"),
            ("redis_git_dirty", "0"),
            ("redis_mode", "standalone"),
            ("os", process.os),
            ("arch_bits", "64"),
            ("multiplexing_api", "epoll"),
            ("process_id", str(status.process_id)),
            ("run_id", process.run_id),
            ("tcp_port", str(status.tcp_port)),
            ("server_time_usec", str(status.clock_us)),
            ("uptime_in_seconds", str(status.uptime_ms // _MS_PER_SECOND)),
            ("uptime_in_days", str(status.uptime_ms // _MS_PER_DAY)),
            ("executable", process.executable),
            ("config_file", ""),
        ]
    elif section == "clients":
        fields = [
            ("connected_clients", str(status.connected_clients)),
            ("cluster_connections", "0"),
            ("maxclients", str(status.connections_max)),
            ("blocked_clients", "0"),
            ("tracking_clients", "0"),
        ]
    elif section == "memory":
        fields = [
            ("used_memory", str(process.rss_bytes)),
            ("used_memory_human", human_bytes(process.rss_bytes)),
            ("used_memory_rss", str(process.rss_bytes)),
            ("used_memory_rss_human", human_bytes(process.rss_bytes)),
            ("used_memory_peak", str(process.peak_rss_bytes)),
            ("used_memory_peak_human", human_bytes(process.peak_rss_bytes)),
            ("total_system_memory", str(process.system_memory_bytes)),
            ("total_system_memory_human", human_bytes(process.system_memory_bytes)),
            ("maxmemory", "0"),
            ("maxmemory_human", "0B"),
            ("maxmemory_policy", "noeviction"),
            ("mem_allocator", "libc"),
        ]
    elif section == "persistence":
        saved_index = status.snapshot_index or 0
        saved_ms = status.snapshot_created_ms
        if saved_ms is None:
            saved_ms = status.clock_us // 1000 - status.uptime_ms
        fields = [
            ("loading", "0"),
            ("async_loading", "0"),
            ("rdb_changes_since_last_save", str(max(0, status.applied_index - saved_index))),
            ("rdb_bgsave_in_progress", "0"),
            ("rdb_last_save_time", str(saved_ms // _MS_PER_SECOND)),
            ("rdb_last_bgsave_status", "ok"),
            ("aof_enabled", "0"),
            ("aof_rewrite_in_progress", "0"),
        ]
        if status.snapshot_index is not None:
            fields.append(("rsm_snapshot_index", str(status.snapshot_index)))
    elif section == "stats":
        fields = [
            ("total_connections_received", str(status.connections_received)),
            ("rejected_connections", str(status.connections_rejected)),
            ("total_commands_processed", str(sum(status.commands.calls.values()))),
            ("expired_keys", str(status.expired_keys)),
            ("evicted_keys", "0"),
            ("total_error_replies", str(sum(status.commands.errors.values()))),
            ("acl_access_denied_auth", str(status.acl_access_denied_auth)),
            ("acl_access_denied_cmd", str(status.acl_access_denied_cmd)),
            ("acl_access_denied_key", str(status.acl_access_denied_key)),
        ]
    elif section == "cpu":
        fields = [
            ("used_cpu_sys", f"{process.cpu_sys_s:.6f}"),
            ("used_cpu_user", f"{process.cpu_user_s:.6f}"),
            ("used_cpu_sys_children", f"{process.cpu_sys_children_s:.6f}"),
            ("used_cpu_user_children", f"{process.cpu_user_children_s:.6f}"),
        ]
    elif section == "commandstats":
        fields = commandstats_fields(status.commands)
    elif section == "errorstats":
        fields = errorstats_fields(status.commands)
    elif section == "cluster":
        fields = [("cluster_enabled", "0")]
    elif section == "replication":
        replid = hashlib.sha1(f"{status.app}:{status.epoch}".encode()).hexdigest()
        fields = [
            ("role", "master"),
            ("connected_slaves", "0"),
            ("master_failover_state", "no-failover"),
            ("master_replid", replid),
            ("master_repl_offset", str(status.applied_index)),
            ("second_repl_offset", "-1"),
            ("repl_backlog_active", "0"),
            ("rsm_role", status.replica_role),
            ("rsm_leader", status.leader_address or ""),
            ("rsm_epoch", str(status.epoch)),
            ("rsm_applied_index", str(status.applied_index)),
            ("rsm_caught_up", "1" if status.caught_up else "0"),
            ("rsm_lag_entries", str(status.lag_entries)),
        ]
    else:
        assert section == "keyspace", section
        fields = []
        if status.keys:
            keyspace = f"keys={status.keys},expires={status.keys_with_ttl},avg_ttl=0"
            fields.append(("db0", keyspace))
    title = "CPU" if section == "cpu" else section.capitalize()
    return f"# {title}\r\n" + "".join(f"{key}:{value}\r\n" for key, value in fields)
