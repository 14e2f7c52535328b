"""The bookie process's configuration: keys, defaults, validation, file and flags.

A bookie is configured by a TOML file (flat `key = value` pairs) and by
command-line flags, one flag per key (`--group-wait-ms 2` sets
`group_wait_ms`); a flag wins over the file.  Every default comes from
`bookie.limits`.  `KEYS` is the one table of keys: the loader, the command
line (`bookie serve --help`) and docs/operations.md all follow it.

Validation happens here, once, with messages that name the key and say what
is accepted (`InvalidConfig`); the rest of the process trusts a
`BookieConfig`.  Relative paths in a file are relative to the file's
directory (so a cluster directory can be moved as a whole), relative paths in
flags to the working directory; a `BookieConfig` holds absolute paths only.

Invariants of a `BookieConfig`:

* `ledger_dirs` is non-empty and has no duplicates; every path is absolute;
* `0 < disk_usage_low_water_mark < disk_usage_threshold <= 1`;
* `bookie_id` is a valid znode name other than "readonly";
* the advertised address is a concrete host (never a wildcard such as
  0.0.0.0) with a port from 1 to 65535.

Some keys can change while the bookie runs (`bookie serve` re-reads its file
on SIGHUP): the forced read-only switch, the disk thresholds and the log
level (`RELOADABLE`).  Others need a restart; `restart_needed` names them.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import ssl
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from bookie import limits
from bookie.address import Address, parse_address
from bookie.core.tokens import TokenTable
from bookie.errors import InvalidAddress, InvalidConfig
from bookie.logs import FORMATS, LEVELS
from bookie.meta import paths
from bookie.meta.layout import READONLY_DIRECTORY
from bookie.net.credentials import read_token_table
from bookie.net.tls import TlsListen, client_context, server_context
from bookie.storage.file import StorageConfig

WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::", "*"})
EVENT_LOOPS: Final = ("asyncio", "uvloop")


def address_setting(text: str, what: str) -> Address:
    """The address a setting names (`bookie.address`, empty host allowed), or `InvalidConfig`."""
    try:
        return parse_address(text, empty_host=True)
    except InvalidAddress as error:
        raise InvalidConfig(f"{what} = {error}") from error


@dataclass(frozen=True, slots=True)
class Key:
    """One configuration key: its kind, default, and what it means."""

    kind: str
    """text, optional_text, address, optional_address, path, optional_path, paths, int,
    fraction, bool, choice."""
    default: object
    help: str
    bounds: tuple[int, int] | None = None
    choices: tuple[str, ...] = ()
    reloadable: bool = False
    flag: str | None = None
    """An extra, shorter flag name (`--zk` for `zk_servers`)."""


REQUIRED: Final = object()
"""The default of a key that has none: the operator must set it."""

KEYS: Final[Mapping[str, Key]] = {
    "bookie_id": Key(
        "optional_text",
        None,
        "the bookie's identity in ZooKeeper (default: the advertised address); set it "
        "to keep the identity when the address changes",
    ),
    "listen_address": Key(
        "address",
        f"127.0.0.1:{limits.port_default}",
        "host:port the server binds (0.0.0.0:PORT for every interface)",
        flag="--listen",
    ),
    "advertised_address": Key(
        "optional_address",
        None,
        "host:port clients connect to, registered in ZooKeeper (default: listen_address; "
        "required when listening on a wildcard address)",
    ),
    "rack": Key("optional_text", None, "rack name, for rack-aware placement"),
    "admin_address": Key(
        "optional_address",
        None,
        "host:port of the admin HTTP server (/metrics, /health, /api/...; docs/observability.md)"
        "; off unless set, and keep it on loopback: its POSTs change the bookie",
        flag="--admin",
    ),
    "journal_dir": Key("path", REQUIRED, "directory of the journal (write-ahead log)"),
    "ledger_dirs": Key("paths", REQUIRED, "directories of entry logs and indexes (one or more)"),
    "zk_servers": Key(
        "text", "127.0.0.1:2181", "ZooKeeper connect string host:port[,host:port...]", flag="--zk"
    ),
    "zk_root": Key("text", limits.metadata_root_default, "the cluster's root znode"),
    "zk_session_timeout_ms": Key(
        "int",
        limits.zk_session_timeout_ms_default,
        "ZooKeeper session timeout; a dead bookie leaves the registry after about this long",
        bounds=(limits.zk_session_timeout_ms_min, limits.zk_session_timeout_ms_max),
    ),
    "group_wait_ms": Key(
        "int",
        limits.journal_group_wait_ms_default,
        "group commit: fsync when the oldest waiting add has waited this long",
        bounds=(0, limits.journal_group_wait_ms_max),
    ),
    "journal_sync_on_loop_us_max": Key(
        "int",
        limits.journal_sync_on_loop_us_default,
        "sync journal groups on the event loop while the last one took at most this long"
        " (0: always in the journal's thread)",
        bounds=(0, limits.journal_sync_on_loop_us_max),
    ),
    "group_bytes": Key(
        "int",
        limits.journal_group_bytes_default,
        "group commit: fsync when this many bytes are buffered",
        bounds=(1, limits.journal_buffer_bytes_max),
    ),
    "flush_when_queue_empty": Key(
        "bool",
        limits.journal_flush_when_queue_empty_default,
        "group commit: fsync as soon as no add is queued (lowest latency at light load)",
    ),
    "journal_file_size_bytes_max": Key(
        "int",
        limits.journal_file_size_bytes_max_default,
        "a journal file is closed and a new one started past this size",
        bounds=(limits.configurable_file_size_bytes_min, limits.configurable_file_size_bytes_max),
    ),
    "journal_files_kept": Key(
        "int",
        limits.journal_files_kept_default,
        "journal files older than the checkpoint kept for inspection",
        bounds=(0, 1_000),
    ),
    "entry_log_size_bytes_max": Key(
        "int",
        limits.entry_log_size_bytes_max_default,
        "an entry log is closed and a new one started past this size",
        bounds=(limits.configurable_file_size_bytes_min, limits.configurable_file_size_bytes_max),
    ),
    "checkpoint_interval_ms": Key(
        "int",
        limits.checkpoint_interval_ms_default,
        "how often ledger storage is flushed and the journal mark advanced",
        bounds=(limits.configurable_interval_ms_min, limits.configurable_interval_ms_max),
    ),
    "gc_interval_ms": Key(
        "int",
        limits.gc_interval_ms_default,
        "how often ledgers gone from metadata are deleted and sparse entry logs compacted",
        bounds=(limits.configurable_interval_ms_min, limits.configurable_interval_ms_max),
    ),
    "compaction_live_fraction_threshold": Key(
        "fraction",
        limits.compaction_live_fraction_threshold_default,
        "an entry log whose live bytes fall under this fraction is compacted (0-1)",
    ),
    "compaction_rate_bytes_per_s": Key(
        "int",
        limits.compaction_rate_bytes_per_s_default,
        "compaction copies at most this many bytes per second, so adds are not starved",
        bounds=(1, limits.configurable_file_size_bytes_max),
    ),
    "disk_usage_threshold": Key(
        "fraction",
        limits.disk_usage_threshold_default,
        "turn read-only when any data disk is this full (0-1)",
        reloadable=True,
    ),
    "disk_usage_low_water_mark": Key(
        "fraction",
        limits.disk_usage_low_water_mark_default,
        "turn writable again when every data disk is under this (0-1)",
        reloadable=True,
    ),
    "disk_check_interval_ms": Key(
        "int",
        limits.disk_check_interval_ms_default,
        "how often disk usage is checked",
        bounds=(limits.configurable_interval_ms_min, limits.configurable_interval_ms_max),
    ),
    "read_only": Key(
        "bool", False, "force read-only mode whatever the disk usage", reloadable=True
    ),
    "shutdown_drain_ms": Key(
        "int",
        limits.shutdown_drain_ms_max,
        "on SIGTERM, how long pending adds may take to be synced and answered",
        bounds=(0, limits.shutdown_drain_ms_max),
    ),
    "autorecovery": Key(
        "bool",
        True,
        "run autorecovery in this process: stand for auditor, repair under-replicated ledgers",
    ),
    "autorecovery_grace_ms": Key(
        "int",
        limits.autorecovery_grace_ms_default,
        "a bookie unregistered for this long is lost: its ledgers are marked for repair",
        bounds=(0, limits.configurable_interval_ms_max),
    ),
    "autorecovery_poll_interval_ms": Key(
        "int",
        limits.autorecovery_poll_interval_ms_default,
        "how often replication workers look for marked ledgers",
        bounds=(limits.configurable_interval_ms_min, limits.configurable_interval_ms_max),
    ),
    "autorecovery_presence_interval_ms": Key(
        "int",
        limits.autorecovery_presence_interval_ms_default,
        "how often the auditor checks that bookies that are up hold every entry they should",
        bounds=(limits.configurable_interval_ms_min, limits.configurable_interval_ms_max),
    ),
    "autorecovery_presence_sample_entries": Key(
        "int",
        limits.autorecovery_presence_sample_entries_default,
        "a presence check compares at most this many entries of a ledger per bookie, drawn "
        "at random (0: every entry)",
        bounds=(0, limits.configurable_file_size_bytes_max),
    ),
    "autorecovery_open_ledger_grace_ms": Key(
        "int",
        limits.autorecovery_open_ledger_grace_ms_default,
        "an open ledger missing a lost bookie, whose writer is not known alive, is fenced "
        "and recovered after making no progress for this long",
        bounds=(0, limits.configurable_interval_ms_max),
    ),
    "autorecovery_rate_entries_per_s": Key(
        "int",
        0,
        "autorecovery copies at most this many entries per second (0: no bound)",
        bounds=(0, limits.configurable_file_size_bytes_max),
    ),
    "autorecovery_rate_bytes_per_s": Key(
        "int",
        0,
        "autorecovery copies at most this many bytes per second (0: no bound)",
        bounds=(0, limits.configurable_file_size_bytes_max),
    ),
    "client_tokens_file": Key(
        "optional_path",
        None,
        "a file of 'PRINCIPAL TOKEN' lines: when set, a client is served only after it "
        "presented one of these tokens (docs/security.md, client tokens)",
    ),
    "autorecovery_password": Key(
        "optional_text",
        None,
        "a ledger password autorecovery may use, besides the empty one",
    ),
    # TLS (docs/security.md): a second listener next to listen_address.
    "tls_listen_address": Key(
        "optional_address",
        None,
        "host:port of a TLS listener serving the same protocol as listen_address; off unless "
        "set (needs tls_cert_file)",
    ),
    "tls_advertised_address": Key(
        "optional_address",
        None,
        "host:port clients with TLS connect to, registered in ZooKeeper (default: "
        "tls_listen_address)",
    ),
    "tls_cert_file": Key(
        "optional_path",
        None,
        "PEM certificate chain of the TLS listener (the key too, unless tls_key_file is set)",
    ),
    "tls_key_file": Key("optional_path", None, "PEM private key of tls_cert_file"),
    "tls_ca_file": Key(
        "optional_path", None, "PEM CA certificates that client certificates are verified with"
    ),
    "tls_require_client_cert": Key(
        "bool", False, "refuse TLS clients without a certificate signed by tls_ca_file"
    ),
    "tls_admin": Key(
        "bool",
        False,
        "serve the admin API (admin_address) over HTTPS with tls_cert_file, mutual as the "
        "TLS listener is",
    ),
    "tls_allowed_clients": Key(
        "optional_text",
        None,
        "comma-separated client certificate subject common names served on the TLS "
        "listener (default: any certificate tls_ca_file verifies); needs "
        "tls_require_client_cert",
    ),
    "log_level": Key("choice", "info", "log level", choices=LEVELS, reloadable=True),
    "log_format": Key("choice", "json", "json lines, or text for a terminal", choices=FORMATS),
    "event_loop": Key(
        "choice",
        "uvloop",
        "asyncio event loop implementation (uvloop falls back to asyncio if not installed)",
        choices=EVENT_LOOPS,
    ),
}

RELOADABLE: Final = frozenset(name for name, key in KEYS.items() if key.reloadable)


@dataclass(frozen=True, slots=True)
class BookieConfig:
    """A validated configuration; see the module docstring for its invariants."""

    bookie_id: str
    listen_address: Address
    advertised_address: Address
    rack: str | None
    admin_address: Address | None
    journal_dir: Path
    ledger_dirs: tuple[Path, ...]
    zk_servers: str
    zk_root: str
    zk_session_timeout_ms: int
    group_wait_ms: int
    journal_sync_on_loop_us_max: int
    group_bytes: int
    flush_when_queue_empty: bool
    journal_file_size_bytes_max: int
    journal_files_kept: int
    entry_log_size_bytes_max: int
    checkpoint_interval_ms: int
    gc_interval_ms: int
    compaction_live_fraction_threshold: float
    compaction_rate_bytes_per_s: int
    disk_usage_threshold: float
    disk_usage_low_water_mark: float
    disk_check_interval_ms: int
    read_only: bool
    shutdown_drain_ms: int
    autorecovery: bool
    autorecovery_grace_ms: int
    autorecovery_poll_interval_ms: int
    autorecovery_presence_interval_ms: int
    autorecovery_presence_sample_entries: int
    autorecovery_open_ledger_grace_ms: int
    autorecovery_rate_entries_per_s: int
    autorecovery_rate_bytes_per_s: int
    client_tokens_file: Path | None
    autorecovery_password: str | None = field(repr=False)
    tls_listen_address: Address | None
    tls_advertised_address: Address | None
    tls_cert_file: Path | None
    tls_key_file: Path | None
    tls_ca_file: Path | None
    tls_require_client_cert: bool
    tls_admin: bool
    tls_allowed_clients: str | None
    log_level: str
    log_format: str
    event_loop: str

    def __post_init__(self) -> None:
        assert self.ledger_dirs
        assert len(set(self.ledger_dirs)) == len(self.ledger_dirs)
        assert all(path.is_absolute() for path in (self.journal_dir, *self.ledger_dirs))
        assert 0.0 < self.disk_usage_low_water_mark < self.disk_usage_threshold <= 1.0
        assert self.advertised_address.host not in WILDCARD_HOSTS

    def tls_context(self) -> ssl.SSLContext | None:
        """The server context of the TLS listener and the HTTPS admin API, its files loaded
        (None without a certificate).  `InvalidConfig` if a file cannot be used."""
        if self.tls_cert_file is None:
            return None
        return server_context(
            self.tls_cert_file,
            self.tls_key_file,
            self.tls_ca_file,
            require_client_cert=self.tls_require_client_cert,
        )

    @property
    def tls_allowed_names(self) -> frozenset[str] | None:
        allowed = self.tls_allowed_clients
        return None if allowed is None else frozenset(name.strip() for name in allowed.split(","))

    def tls_listen(self) -> TlsListen | None:
        """The TLS listener's settings, its files loaded (None without one).  Raises
        `InvalidConfig` if a file cannot be used."""
        address = self.tls_listen_address
        context = self.tls_context()
        if address is None or context is None:
            return None
        return TlsListen(address.host, address.port, context, self.tls_allowed_names)

    def peer_tls(self) -> ssl.SSLContext | None:
        """With a TLS listener, the client context this bookie's own autorecovery reaches the
        other bookies' TLS listeners with: their certificates checked against `tls_ca_file`,
        this bookie's certificate as its client certificate (None without a listener).
        Raises `InvalidConfig` if a file cannot be used."""
        if self.tls_listen_address is None or self.tls_cert_file is None:
            return None
        return client_context(self.tls_ca_file, self.tls_cert_file, self.tls_key_file)

    @property
    def data_dirs(self) -> tuple[Path, ...]:
        """The journal directory and the ledger directories, each once, in that order."""
        return tuple(dict.fromkeys((self.journal_dir, *self.ledger_dirs)))

    def storage_config(self) -> StorageConfig:
        return StorageConfig(
            journal_dir=self.journal_dir,
            ledger_dirs=self.ledger_dirs,
            group_wait_ms=self.group_wait_ms,
            journal_sync_on_loop_us_max=self.journal_sync_on_loop_us_max,
            group_bytes=self.group_bytes,
            flush_when_queue_empty=self.flush_when_queue_empty,
            journal_file_size_bytes_max=self.journal_file_size_bytes_max,
            journal_files_kept=self.journal_files_kept,
            entry_log_size_bytes_max=self.entry_log_size_bytes_max,
            checkpoint_interval_ms=self.checkpoint_interval_ms,
            compaction_live_fraction_threshold=self.compaction_live_fraction_threshold,
            compaction_rate_bytes_per_s=self.compaction_rate_bytes_per_s,
        )


def read_client_tokens(config: BookieConfig) -> TokenTable | None:
    """The token table `client_tokens_file` names, or None; `InvalidConfig` if it cannot be
    read or is not one (the message names the file and a line, never a token)."""
    path = config.client_tokens_file
    return None if path is None else read_token_table(path, "client_tokens_file")


def restart_needed(old: BookieConfig, new: BookieConfig) -> list[str]:
    """Keys that differ between `old` and `new` and cannot change while running."""
    return [
        item.name
        for item in dataclasses.fields(BookieConfig)
        if item.name not in RELOADABLE and getattr(old, item.name) != getattr(new, item.name)
    ]


# --- loading ----------------------------------------------------------------------------------


def load_config(file: Path | None, flags: Mapping[str, object] | None = None) -> BookieConfig:
    """The configuration from `file` (TOML; None: defaults only) overridden by `flags`.

    `flags` maps key names to values as the command line gives them: strings
    (parsed here, as `flag_value` does), lists of strings for `ledger_dirs`,
    bools for bool keys.  Raises `InvalidConfig`.
    """
    raw: dict[str, tuple[object, Path]] = {}
    if file is not None:
        for name, value in read_file(file).items():
            raw[name] = (value, file.absolute().parent)
    cwd = Path.cwd()
    for name, value in (flags or {}).items():
        _check_name(name, "flag")
        raw[name] = (flag_value(name, value) if isinstance(value, str) else value, cwd)
    return build_config(raw)


def read_file(file: Path) -> dict[str, object]:
    """The key/value pairs of a TOML config file; `InvalidConfig` if unreadable or unknown."""
    try:
        with file.open("rb") as handle:
            data = tomllib.load(handle)
    except OSError as error:
        raise InvalidConfig(f"cannot read config file {file}: {error.strerror}") from error
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise InvalidConfig(f"config file {file} is not valid TOML: {error}") from error
    for name, value in data.items():
        if isinstance(value, dict):
            raise InvalidConfig(f"{file}: [{name}] is a table; the config file has flat keys only")
        _check_name(name, f"key in {file}")
    return data


def _check_name(name: str, what: str) -> None:
    if name not in KEYS:
        close = difflib.get_close_matches(name, KEYS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidConfig(f"unknown {what} {name!r}{hint}")


def flag_value(name: str, text: str) -> object:
    """A command-line string for key `name`, as the TOML value it stands for."""
    kind = KEYS[name].kind
    try:
        if kind == "int":
            return int(text.replace("_", ""))
        if kind == "fraction":
            return float(text)
    except ValueError as error:
        raise InvalidConfig(f"--{name.replace('_', '-')} {text!r}: not a number") from error
    if kind == "bool":
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise InvalidConfig(f"--{name.replace('_', '-')} {text!r}: expected true or false")
        return lowered == "true"
    return text


def build_config(raw: Mapping[str, tuple[object, Path]]) -> BookieConfig:
    """Validate raw values (each with the directory its relative paths are relative to)."""
    values: dict[str, object] = {}
    for name, key in KEYS.items():
        if name in raw:
            value, base = raw[name]
            values[name] = _validate(name, key, value, base)
        elif key.default is REQUIRED:
            raise InvalidConfig(
                f"{name} is not set: pass --{name.replace('_', '-')} or set {name} "
                "in the config file"
            )
        else:
            values[name] = _validate(name, key, key.default, Path.cwd())
    return _finish(values)


def _validate(name: str, key: Key, value: object, base: Path) -> object:
    kind = key.kind
    if kind in ("optional_text", "optional_address", "optional_path") and value is None:
        return None
    if kind in ("text", "optional_text"):
        return _text(name, value)
    if kind in ("address", "optional_address"):
        return address_setting(_text(name, value), name)
    if kind in ("path", "optional_path"):
        return _path(name, value, base)
    if kind == "paths":
        return _paths(name, value, base)
    if kind == "int":
        return _int(name, key, value)
    if kind == "fraction":
        return _fraction(name, value)
    if kind == "bool":
        if type(value) is not bool:
            raise InvalidConfig(f"{name} = {value!r}: expected true or false")
        return value
    assert kind == "choice", kind
    if value not in key.choices:
        raise InvalidConfig(f"{name} = {value!r}: expected one of {', '.join(key.choices)}")
    return value


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidConfig(f"{name} = {value!r}: expected a non-empty string")
    return value


def _path(name: str, value: object, base: Path) -> Path:
    text = _text(name, value)
    path = Path(os.path.expanduser(text))
    return Path(os.path.normpath(path if path.is_absolute() else base / path))


def _paths(name: str, value: object, base: Path) -> tuple[Path, ...]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise InvalidConfig(f"{name} = {value!r}: expected a non-empty list of directories")
    result = tuple(_path(name, item, base) for item in items)
    if len(set(result)) != len(result):
        raise InvalidConfig(f"{name}: a directory is listed twice: {[str(p) for p in result]}")
    return result


def _int(name: str, key: Key, value: object) -> int:
    if type(value) is not int:
        raise InvalidConfig(f"{name} = {value!r}: expected an integer")
    assert key.bounds is not None
    low, high = key.bounds
    if not low <= value <= high:
        raise InvalidConfig(f"{name} = {value}: must be from {low} to {high}")
    return value


def _fraction(name: str, value: object) -> float:
    if type(value) not in (int, float):
        raise InvalidConfig(f"{name} = {value!r}: expected a number between 0 and 1")
    number = float(value)  # type: ignore[arg-type]
    if not 0.0 < number <= 1.0:
        raise InvalidConfig(f"{name} = {value}: must be more than 0 and at most 1")
    return number


def _finish(values: dict[str, object]) -> BookieConfig:
    """Relations between keys, and the derived defaults."""
    advertised = _default_advertised(values, "listen_address", "advertised_address")
    if advertised.host in WILDCARD_HOSTS:
        raise InvalidConfig(
            f"advertised_address {advertised} is a wildcard: give the host clients connect to"
        )
    bookie_id = values["bookie_id"]
    if bookie_id is None:
        bookie_id = values["bookie_id"] = str(advertised)
    assert isinstance(bookie_id, str)
    if not paths.is_valid_name(bookie_id) or bookie_id == READONLY_DIRECTORY:
        raise InvalidConfig(
            f"bookie_id {bookie_id!r} cannot name a znode: no '/', not '.', '..' or "
            f"{READONLY_DIRECTORY!r}"
        )
    root = values["zk_root"]
    assert isinstance(root, str)
    if not paths.is_valid(root) or root == paths.ROOT:
        raise InvalidConfig(
            f"zk_root {root!r}: expected an absolute znode path below '/', e.g. /ledgers"
        )
    servers = values["zk_servers"]
    assert isinstance(servers, str)
    for server in servers.split(","):
        address_setting(server.strip(), "zk_servers")
    threshold = values["disk_usage_threshold"]
    low_water = values["disk_usage_low_water_mark"]
    assert isinstance(threshold, float)
    assert isinstance(low_water, float)
    if not low_water < threshold:
        raise InvalidConfig(
            f"disk_usage_low_water_mark ({low_water}) must be below disk_usage_threshold "
            f"({threshold}), or the bookie would flip between read-only and writable"
        )
    _check_tls(values)
    config = BookieConfig(**values)  # type: ignore[arg-type]
    config.tls_context()  # the files are read once here, so a bad one fails at start-up
    return config


def _check_tls(values: dict[str, object]) -> None:
    """The TLS keys make sense together; the TLS advertised address defaults."""
    listen = values["tls_listen_address"]
    if values["tls_admin"] and values["tls_cert_file"] is None:
        raise InvalidConfig("tls_admin is set: tls_cert_file must be set too")
    if listen is None:
        if values["tls_advertised_address"] is not None:
            raise InvalidConfig(
                "tls_advertised_address is set but tls_listen_address is not: set it to the "
                "host:port of the TLS listener"
            )
        if values["tls_cert_file"] is not None and not values["tls_admin"]:
            raise InvalidConfig(
                "tls_cert_file is set but neither tls_listen_address nor tls_admin: say what "
                "it is for"
            )
        return
    if values["tls_cert_file"] is None:
        raise InvalidConfig("tls_listen_address is set: tls_cert_file must be set too")
    if values["tls_allowed_clients"] is not None and not values["tls_require_client_cert"]:
        raise InvalidConfig("tls_allowed_clients needs tls_require_client_cert = true")
    _default_advertised(values, "tls_listen_address", "tls_advertised_address")


def _default_advertised(values: dict[str, object], listen_key: str, advertised_key: str) -> Address:
    """The address advertised for a listener: as set, else the listen address when it
    is not a wildcard (written into `values`)."""
    listen = values[listen_key]
    assert isinstance(listen, Address)
    advertised = values[advertised_key]
    if advertised is None:
        if listen.host in WILDCARD_HOSTS:
            raise InvalidConfig(
                f"{listen_key} {listen} binds every interface, so clients cannot be told "
                f"where to connect: set {advertised_key} to the host:port they should use"
            )
        advertised = values[advertised_key] = listen
    assert isinstance(advertised, Address)
    return advertised


# --- writing ----------------------------------------------------------------------------------


def render_toml(values: Mapping[str, object]) -> str:
    """A config file holding `values` (key -> str, int, float, bool, Path or list of them).

    Used by launchers that write a bookie's config; `read_file` of the text
    gives the values back (paths as strings).
    """
    lines = []
    for name, value in values.items():
        _check_name(name, "key")
        lines.append(f"{name} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path | Address):
        return '"' + "".join(_toml_character(character) for character in str(value)) + '"'
    assert isinstance(value, Sequence), f"cannot write {value!r} as TOML"
    return "[" + ", ".join(_toml_value(item) for item in value) + "]"


def _toml_character(character: str) -> str:
    """One character inside a TOML basic string: quotes, backslashes and control
    characters (which TOML forbids raw, DEL included) escaped."""
    if character in ('"', "\\"):
        return "\\" + character
    if character < " " or character == "\x7f":
        return f"\\u{ord(character):04x}"
    return character
