"""`kvstore up`: ZooKeeper, bookies and key-value replica processes on this machine, resumable.

`LocalKvCluster` is an `async with` block: it starts a `bookie.local.cluster`
(a standalone ZooKeeper unless one is given, and N `bookie serve`
processes), then M `kvstore serve` processes, and returns once every
replica is registered, a leader serves and every replica has caught up.
The first replica starts alone and leads before the others start, so that
a store starts with the same leader every time, the one its README shows.
Leaving the block stops the followers, then the leader (SIGTERM: each stops
gracefully, the leader closing its segment, so the next start needs no
recovery; SIGKILL only past `bookie.limits.process_stop_timeout_ms`), then
the bookies, then ZooKeeper.

Everything persists under the data directory, so the next run resumes the
same data: same ports, same replica ids, the same log::

    DIR/cluster.toml, DIR/zookeeper/, DIR/bookie-N/   the bookie cluster (bookie.local.cluster)
    DIR/kvstore.toml                                  app, ZooKeeper, replica names and ports
    DIR/kv-N/replica.log                              replica N's log (JSON lines), appended
    DIR/tls/                                          with TLS: the CA and certificates

With `zk` ("host:port[,...][/chroot]") the cluster uses that ZooKeeper: its
bookies register under `<chroot>/ledgers` and the replicas use the chroot
as their root, so several clusters (or tests) can share one ZooKeeper.

Replica ports: a new cluster gives replica i the Redis port `base_port + i
- 1` and the framework port `base_port + 1000 + i - 1`, or free ports when
those are taken (or `base_port` is 0); `kvstore.toml` keeps them.  Every
replica serves its admin HTTP API (docs/observability.md) on loopback, at
`base_port + 2000 + i - 1` when free, else on a free port, chosen at each
start (so `kvstore.toml` does not keep it), unless `KvSettings.admin` is
False (the benchmark's metrics-off runs).  Bookies
take the bookie default ports (3181, ...), or free ports when `base_port` is 0.

With TLS (`KvSettings.tls`, `kvstore up --tls`, decided when the store is
created and kept in `kvstore.toml`), the launcher makes a local CA and
certificates (`bookie.local.certificates`) in DIR/tls/; each bookie gets a
mutual-TLS listener next to its plain one, and each replica a TLS RESP port
(`base_port + 3000 + i - 1` when free; `kvstore.toml` keeps them), its
framework port on mutual TLS, and its ledger client on the bookies' TLS
listeners.  The plain RESP ports stay open on loopback.  A store that starts
its own ZooKeeper runs it on mutual TLS only (`bookie.local.cluster`): every
process dials it with the node certificate, and `zk_client_tls` says how
tools do (the client certificate; `kvstore status --data-dir` and the log
tools use it by themselves).

Invariants: at most one launcher runs per data directory (the bookie
cluster's lock); replica processes run only while the bookie cluster does;
each replica's process is in its own session, so Ctrl-C reaches the
launcher only and the launcher stops everything in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

import anyio
import anyio.abc

from bookie import limits as bookie_limits
from bookie.errors import BookieError
from bookie.local.certificates import (
    CLIENT_NAME,
    NODE_NAME,
    DevelopmentCertificates,
    development_certificates,
)
from bookie.local.cluster import (
    BOOKIE_CONFIG_FILE,
    CLUSTER_FILE,
    ClusterError,
    LocalCluster,
    pick_port,
    read_saved_toml,
)
from bookie.local.zookeeper import port_is_free
from bookie.meta.zk import ZkMetadataStore
from bookie.meta.zk_tls import ZkTls
from bookie.net.tls import client_context
from kvstore.runtime.node import DEFAULT_APP
from rsm import limits as rsm_limits
from rsm.client import Client, connect, tcp_connector, tls_connector
from rsm.config import ReplicaConfig
from rsm.errors import InvalidConfig, RsmError
from rsm.host import split_zk
from rsm.link import Connector

HOST: Final = "127.0.0.1"
KV_FILE: Final = "kvstore.toml"
_KV_KEYS: Final = ("app", "zk", "replicas", "resp_ports", "ports")
"""What every `kvstore.toml` holds."""
REPLICA_LOG_FILE: Final = "replica.log"
LEDGER_ROOT: Final = "/ledgers"
FRAMEWORK_PORT_OFFSET: Final = 1000
ADMIN_PORT_OFFSET: Final = 2000
TLS_PORT_OFFSET: Final = 3000
TLS_DIRECTORY: Final = "tls"
READY_POLL_S: Final = 0.1
"""How often a starting cluster is looked at (not a synchronisation: a progress poll)."""
STATUS_TIMEOUT_S: Final = 2.0
LOG_LINES_SHOWN: Final = 20


def serve_command(
    replica: LocalReplica,
    zk: str,
    ledger_root: str,
    settings: KvSettings,
    tls: DevelopmentCertificates | None = None,
) -> list[str]:
    """The command line of a `kvstore serve` process with this launcher's interpreter
    (with `tls`: its RESP TLS port, the framework port and the bookies on mutual TLS)."""
    return [
        sys.executable,
        "-m",
        "kvstore.tools.cli",
        "serve",
        "--zk",
        zk,
        "--app",
        settings.app,
        "--replica-id",
        replica.name,
        "--listen",
        f"{HOST}:{replica.port}",
        "--resp",
        f"{HOST}:{replica.resp_port}",
        "--ledger-root",
        ledger_root,
        "--session-timeout-ms",
        str(settings.session_timeout_ms),
        *(["--admin", f"{HOST}:{replica.admin_port}"] if settings.admin else []),
        *access_options(settings),
        "--ledger-digest",
        settings.ledger_digest,
        *([] if tls is None else _tls_flags(replica, tls)),
    ]


def access_options(settings: KvSettings) -> list[str]:
    """The `kvstore serve` options naming the access files (absolute: replicas run elsewhere)."""
    options: list[str] = []
    if settings.acl_file is not None:
        options += ["--acl-file", str(settings.acl_file.absolute())]
    if settings.requirepass_file is not None:
        options += ["--requirepass-file", str(settings.requirepass_file.absolute())]
    return options


def _tls_flags(replica: LocalReplica, tls: DevelopmentCertificates) -> list[str]:
    assert replica.resp_tls_port is not None
    return [
        "--resp-tls",
        f"{HOST}:{replica.resp_tls_port}",
        "--tls-replicas",
        "--tls-bookies",
        "--tls-cert-file",
        str(tls.node),
        "--tls-ca-file",
        str(tls.ca),
        "--tls-require-client-cert",
        "--tls-allowed-clients",
        f"{NODE_NAME},{CLIENT_NAME}",
    ]


def tls_client_connector(tls: DevelopmentCertificates) -> Connector:
    """How a tool reaches the replicas of a cluster started with TLS: as its client."""
    return tls_connector(client_context(tls.ca, tls.client))


@dataclass(frozen=True, slots=True)
class KvSettings:
    """What a new cluster is created with (a resumed one keeps what `kvstore.toml` says)."""

    replicas: int = 3
    bookies: int = 3
    base_port: int = 6379
    app: str = DEFAULT_APP
    session_timeout_ms: int = rsm_limits.replica_session_timeout_ms_default
    """The replicas' ZooKeeper session timeout (the bookies keep their own default)."""
    admin: bool = True
    """Replicas serve their admin HTTP API (metrics, status page); the bookies always do."""
    acl_file: Path | None = None
    """The replicas' ACL users (`kvstore serve --acl-file`), read at each start."""
    requirepass_file: Path | None = None
    """The replicas' default password (`kvstore serve --requirepass-file`)."""
    ledger_digest: str = "crc32c"
    """How the ledgers the replicas create are checked (`kvstore serve --ledger-digest`)."""
    tls: bool = False
    """Everything on TLS too, with a local CA (`bookie.local.certificates`)."""


@dataclass(slots=True)
class LocalReplica:
    """One replica process of the cluster."""

    name: str
    directory: Path
    resp_port: int
    port: int
    admin_port: int = 0
    resp_tls_port: int | None = None
    process: anyio.abc.Process | None = None
    log: IO[bytes] | None = None
    exits: list[int] = field(default_factory=list)

    @property
    def resp_address(self) -> str:
        return f"{HOST}:{self.resp_port}"

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"

    @property
    def log_file(self) -> Path:
        return self.directory / REPLICA_LOG_FILE

    def log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-LOG_LINES_SHOWN:])


class LocalKvCluster:
    """A whole local key-value store, for the block (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        zk: str | None = None,
        settings: KvSettings | None = None,
        bookie_config: Mapping[str, object] | None = None,
        replica_options: Sequence[str] = (),
        replica_zk: Mapping[str, str] | None = None,
    ) -> None:
        """`bookie_config` adds keys to every bookie's configuration (`bookie serve --help`
        lists them), e.g. a shorter autorecovery grace period; `replica_options` adds flags
        to every replica's command line (`kvstore serve --help`), e.g. a shorter command
        timeout; `replica_zk` gives the named replicas a ZooKeeper connect string of their
        own (with the chroot), e.g. through a proxy a test can cut."""
        self.data_dir = data_dir.absolute()
        self._requested = settings or KvSettings()
        self._zk = zk
        hosts, chroot = split_zk(zk) if zk else (None, None)
        self._zk_hosts = hosts
        self._chroot = chroot
        self.settings = self._requested
        self._replica_options = tuple(replica_options)
        self._replica_zk = dict(replica_zk or {})
        saved_tls = _saved_tls(self.data_dir)
        if self._requested.tls and saved_tls is False:
            raise ClusterError(
                f"the store in {self.data_dir} was created without TLS: start it without "
                "--tls, or create one with TLS in another --data-dir"
            )
        self.tls = (
            development_certificates(self.data_dir / TLS_DIRECTORY)
            if self._requested.tls or saved_tls
            else None
        )
        """The cluster's certificates, when it runs with TLS (decided when it is created)."""
        self.bookies = LocalCluster(
            self.data_dir,
            bookies=self._requested.bookies,
            zk_servers=hosts,
            zk_root=chroot + LEDGER_ROOT if chroot else None,
            bookie_base_port=bookie_limits.port_default if self._requested.base_port else 0,
            # The bookies' autorecovery copies the store's ledgers: it needs their password.
            bookie_config={
                "autorecovery_password": ReplicaConfig().ledger_password.decode(),
                **(bookie_config or {}),
            },
            tls=self.tls,
        )
        self.replicas: list[LocalReplica] = []
        self.leader: str | None = None
        """The name of the replica that led when the cluster became ready."""
        self.resumed = False
        self._client: Client | None = None
        self._lifetime: contextlib.AbstractAsyncContextManager[LocalKvCluster] | None = None

    @property
    def zk(self) -> str:
        """The connect string replicas and clients use (with the chroot, if any)."""
        return self.bookies.zk_servers + (self._chroot or "")

    @property
    def ledger_root(self) -> str:
        return LEDGER_ROOT

    # --- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> LocalKvCluster:
        assert self._lifetime is None, "a LocalKvCluster is entered once"
        self._lifetime = self._run()
        return await self._lifetime.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        assert self._lifetime is not None
        return await self._lifetime.__aexit__(exc_type, exc, traceback)

    @contextlib.asynccontextmanager
    async def _run(self) -> AsyncIterator[LocalKvCluster]:
        async with self.bookies:
            self._prepare()
            hosts, chroot = split_zk(self.zk)
            connector = tcp_connector if self.tls is None else tls_client_connector(self.tls)
            async with (
                ZkMetadataStore.connect(hosts, root=chroot, tls=self.bookies.zk_tls) as store,
                connect(self.settings.app, store=store, connector=connector) as client,
            ):
                self._client = client
                try:
                    first, *others = self.replicas
                    await self.start(first.name)
                    for replica in others:
                        await self.start(replica.name, wait=False)
                    await self.wait_ready()
                    yield self
                finally:
                    with anyio.CancelScope(shield=True):
                        await self._stop_replicas()
                    self._client = None

    def _prepare(self) -> None:
        """Read `kvstore.toml`, or write it for a new cluster; check the ports are free."""
        path = self.data_dir / KV_FILE
        if path.exists():
            self.resumed = True
            saved = _read_toml(path, _KV_KEYS)
            tls = bool(saved.get("tls", False))
            self.settings = KvSettings(
                replicas=len(saved["replicas"]),
                bookies=self._requested.bookies,
                base_port=self._requested.base_port,
                app=saved["app"],
                session_timeout_ms=self._requested.session_timeout_ms,
                admin=self._requested.admin,
                acl_file=self._requested.acl_file,
                requirepass_file=self._requested.requirepass_file,
                ledger_digest=self._requested.ledger_digest,
                tls=tls,
            )
            names, resp_ports, ports = saved["replicas"], saved["resp_ports"], saved["ports"]
            tls_ports = saved.get("resp_tls_ports") or [None] * len(names)
            for name, resp_port, port, tls_port in zip(
                names, resp_ports, ports, tls_ports, strict=True
            ):
                for needed in (resp_port, port, tls_port):
                    if needed is not None and not port_is_free(needed):
                        raise ClusterError(
                            f"port {needed} of {name} is in use: is another cluster running? "
                            f"Stop it (the ports are in {path})"
                        )
                self.replicas.append(
                    LocalReplica(
                        name, self.data_dir / name, resp_port, port, resp_tls_port=tls_port
                    )
                )
        else:
            taken: set[int] = set()
            base = self.settings.base_port
            for number in range(1, self.settings.replicas + 1):
                resp_port = pick_port(base + number - 1 if base else 0, taken)
                port = pick_port(base + FRAMEWORK_PORT_OFFSET + number - 1 if base else 0, taken)
                tls_port = None
                if self.tls is not None:
                    tls_port = pick_port(base + TLS_PORT_OFFSET + number - 1 if base else 0, taken)
                name = f"kv-{number}"
                self.replicas.append(
                    LocalReplica(
                        name, self.data_dir / name, resp_port, port, resp_tls_port=tls_port
                    )
                )
            saved_tls: dict[str, bool | list[int]] = {}
            if self.tls is not None:
                saved_tls = {
                    "tls": True,
                    "resp_tls_ports": [r.resp_tls_port or 0 for r in self.replicas],
                }
            path.write_text(
                _toml(
                    {
                        "app": self.settings.app,
                        "zk": self._zk or "",
                        "replicas": [replica.name for replica in self.replicas],
                        "resp_ports": [replica.resp_port for replica in self.replicas],
                        "ports": [replica.port for replica in self.replicas],
                        **saved_tls,
                    }
                )
            )
        taken = {port for replica in self.replicas for port in (replica.resp_port, replica.port)}
        taken |= {replica.resp_tls_port or 0 for replica in self.replicas}
        taken |= {bookie.admin_port for bookie in self.bookies.bookies}
        base = self.settings.base_port
        for number, replica in enumerate(self.replicas, start=1):
            preferred = base + ADMIN_PORT_OFFSET + number - 1 if base else 0
            replica.admin_port = pick_port(preferred, taken)
            replica.directory.mkdir(parents=True, exist_ok=True)

    # --- replicas -----------------------------------------------------------------------------

    def replica(self, name: str) -> LocalReplica:
        for replica in self.replicas:
            if replica.name == name:
                return replica
        raise KeyError(name)

    async def start(self, name: str, *, wait: bool = True) -> None:
        """Start replica `name` (stopped or never started); with `wait`, until it caught up."""
        replica = self.replica(name)
        assert replica.process is None or replica.process.returncode is not None
        if replica.log is None:
            replica.log = replica.log_file.open("ab")
        replica.process = await anyio.open_process(
            [
                *serve_command(
                    replica,
                    self._replica_zk.get(name, self.zk),
                    self.ledger_root,
                    self.settings,
                    self.tls,
                ),
                *self._replica_options,
            ],
            stdin=None,
            stdout=replica.log,
            stderr=replica.log,
            cwd=replica.directory,
            env={**os.environ, **self.bookies.zk_environment},
            start_new_session=True,
        )
        if wait:
            await self.wait_ready()

    def kill(self, name: str) -> None:
        """SIGKILL replica `name`: no graceful stop, its ledger stays open (a crash)."""
        process = self.replica(name).process
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            process.kill()

    async def stop(self, name: str) -> int:
        """Stop replica `name` gracefully (SIGTERM, SIGKILL past the stop timeout); its status."""
        replica = self.replica(name)
        process = replica.process
        assert process is not None
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        with anyio.move_on_after(bookie_limits.process_stop_timeout_ms / 1000):
            await process.wait()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
        status = await process.wait()
        await process.aclose()
        replica.process = None
        return status

    async def _stop_replicas(self) -> None:
        """Followers first, the leader last: it then hands over to nobody and closes its segment,
        and the next start needs no recovery."""
        running = [r for r in self.replicas if r.process is not None]
        leader = await self._leader_name()
        for replica in sorted(running, key=lambda r: r.name == leader):
            await self.stop(replica.name)
        for replica in self.replicas:
            if replica.log is not None:
                replica.log.close()
                replica.log = None

    async def _leader_name(self) -> str | None:
        client = self._client
        if client is None:
            return None
        with anyio.move_on_after(STATUS_TIMEOUT_S):
            try:
                status = await client.status()
            except RsmError:
                return None
            leader_id = status.get("leader_id")
            return leader_id if isinstance(leader_id, str) else None
        return None

    async def wait_ready(self) -> None:
        """Return once every running replica is registered and caught up and a leader serves;
        `ClusterError` when a replica exits or the wait exceeds the start timeout."""
        client = self._client
        assert client is not None
        names = {r.name for r in self.replicas if r.process is not None}
        with anyio.move_on_after(bookie_limits.process_start_timeout_ms / 1000):
            while True:
                self._check_running()
                leader = await self._ready(client, names)
                if leader is not None:
                    self.leader = leader
                    return
                await anyio.sleep(READY_POLL_S)
        raise ClusterError(
            f"the replicas were not ready within {bookie_limits.process_start_timeout_ms} ms; "
            f"see their logs under {self.data_dir}"
        )

    def _check_running(self) -> None:
        for replica in self.replicas:
            process = replica.process
            if process is not None and process.returncode is not None:
                raise ClusterError(
                    f"{replica.name} exited with status {process.returncode}:\n{replica.log_tail()}"
                )

    async def _ready(self, client: Client, names: set[str]) -> str | None:
        """The leader's name when every replica in `names` is up and caught up, else None."""
        try:
            members = await client.replicas()
        except (RsmError, BookieError):
            return None
        if not names <= set(members):
            return None
        leader = None
        for name in names:
            try:
                with anyio.fail_after(STATUS_TIMEOUT_S):
                    status: dict[str, Any] = await client.status(members[name])
            except (TimeoutError, RsmError, BookieError):
                return None
            if not status.get("caught_up"):
                return None
            if status.get("serving"):
                leader = name
        return leader


def _saved_tls(data_dir: Path) -> bool | None:
    """Whether the store in `data_dir` was created with TLS (None: there is none yet)."""
    path = data_dir / KV_FILE
    if not path.exists():
        return None
    return bool(_read_toml(path).get("tls", False))


def _read_toml(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """One of the data directory's TOML files; `InvalidConfig` naming it when it cannot be
    read, is not TOML, or lacks one of the `required` keys."""
    try:
        return read_saved_toml(path, required)
    except ClusterError as error:
        raise InvalidConfig(str(error)) from error


def saved_zk_client_tls(data_dir: Path, saved: Mapping[str, Any]) -> ZkTls | None:
    """How a tool dials the ZooKeeper of the store in `data_dir` (`saved`: `read_saved`'s):
    over TLS with the client certificate when the store runs its own on TLS, else None."""
    if not saved.get("zk_tls"):
        return None
    certificates = development_certificates(data_dir / TLS_DIRECTORY)
    return ZkTls(certificates.ca, certificates.client)


def _toml(values: dict[str, str | bool | list[str] | list[int]]) -> str:
    """`key = value` lines; JSON's strings and arrays of strings or integers are valid TOML."""
    return "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())


def read_saved(data_dir: Path) -> dict[str, Any]:
    """`kvstore.toml` and `cluster.toml` of a data directory, merged, with `bookies`: each
    bookie's address (its id) from `bookie-N/bookie.toml`, in N's order (for `kvstore
    status`), and `zk_tls`: whether the store's own ZooKeeper is on TLS.  `ClusterError`
    when there is no store; `InvalidConfig` naming a file that is missing, unreadable or
    not TOML."""
    kv_file = data_dir / KV_FILE
    if not kv_file.exists():
        raise ClusterError(f"{data_dir} holds no key-value store (no {KV_FILE}); run kvstore up")
    saved = _read_toml(kv_file, _KV_KEYS)
    cluster_file = data_dir / CLUSTER_FILE
    if not cluster_file.exists():
        raise InvalidConfig(
            f"{cluster_file} is missing (the store's bookie cluster settings): start the "
            f"store with kvstore up --data-dir {data_dir}, which writes it again"
        )
    cluster = _read_toml(cluster_file, ("zk_port",))
    saved["zk_tls"] = not saved["zk"] and bool(cluster.get("zk_tls", False))
    if not saved["zk"]:
        saved["zk"] = f"{HOST}:{cluster['zk_port']}"
    saved["bookies"] = []
    numbered = (
        (int(directory.name.removeprefix("bookie-")), directory / BOOKIE_CONFIG_FILE)
        for directory in data_dir.glob("bookie-*")
        if directory.name.removeprefix("bookie-").isdigit()
    )
    for _, config_file in sorted(numbered):
        if config_file.exists():  # else the bookie was never set up: there is nothing to show
            bookie = _read_toml(config_file, ("listen_address",))
            saved["bookies"].append(str(bookie["listen_address"]))
    return saved
