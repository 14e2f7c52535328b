"""A ZooKeeper and N bookie processes on this machine, for `make run` and for launchers.

    python -m bookie.local.cluster [--data-dir DIR] [--bookies 3] [--zk HOSTS]

starts a standalone ZooKeeper (`bookie.local.zookeeper.LocalZooKeeper`,
unless `--zk` names one to use) and N `bookie serve` processes, waits until
every bookie is registered, prints where everything is, and runs until Ctrl-C
(SIGINT) or SIGTERM.  Then it stops the bookies first (SIGTERM: each drains
and checkpoints; SIGKILL only past `limits.process_stop_timeout_ms`) and
ZooKeeper last, so no bookie ever runs without its ZooKeeper.

Everything persists under the data directory, so a second run resumes the
same cluster: same ZooKeeper data and port, same bookie ports, cookies and
ledgers (and so every application's log and snapshots); removing the
directory while nothing runs starts the next one from nothing::

    DIR/cluster.toml           ZooKeeper port, the cluster root, and whether ZooKeeper is on TLS
    DIR/zookeeper/             ZooKeeper's own data and log
    DIR/bookie-N/bookie.toml   bookie N's configuration (its port, its directories)
    DIR/bookie-N/journal/      its journal;  DIR/bookie-N/ledgers/: entry logs and index
    DIR/bookie-N/bookie.log    its log (JSON lines), appended to by every run
    DIR/.lock                  held while a launcher runs on DIR (one at a time)

Given certificates (`LocalCluster(tls=...)`, bookie/local/certificates.py),
each bookie created gets a mutual-TLS listener next to its plain one, on its
port + 100 when free (its config file keeps it), and a cluster created with
its own ZooKeeper runs it on mutual TLS only (`zk_tls = true` in
cluster.toml; a cluster.toml without the key: plain).  The bookies, and
whatever else the launcher starts with `zk_environment`, dial it with the
node certificate (`BOOKIE_ZK_TLS_*`, bookie/meta/zk_tls.py); people and
tools with the client certificate (`zk_client_tls`).

Each bookie serves its admin HTTP API (docs/observability.md) on loopback:
bookie N on port 8080 + N - 1 when free, else on a free port, chosen at each
start; the banner prints where.

`LocalCluster` is the same thing as an `async with` block, for other
launchers (the key-value store's) and tools.  Bookie processes are the real
`bookie serve` (`python -m bookie.tools.cli serve`), with the launcher's interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shlex
import signal
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final

import anyio
import anyio.abc
import anyio.to_thread

from bookie import limits
from bookie.local.certificates import (
    CLIENT_NAME,
    NODE_NAME,
    DevelopmentCertificates,
    write_file,
)
from bookie.local.zookeeper import (
    LocalZooKeeper,
    ZooKeeperTls,
    ZooKeeperUnavailable,
    free_port,
    port_is_free,
)
from bookie.meta.bookies import Bookies, list_bookies, watch_bookies
from bookie.meta.zk import ZkMetadataStore
from bookie.meta.zk_tls import ZkTls
from bookie.server.config import address_setting, render_toml

HOST: Final = "127.0.0.1"
TLS_PORT_OFFSET: Final = 100
"""A new bookie's TLS port is its port plus this, when free."""
ZK_PORT_PREFERRED: Final = 2181
CLUSTER_FILE: Final = "cluster.toml"
BOOKIE_CONFIG_FILE: Final = "bookie.toml"
BOOKIE_LOG_FILE: Final = "bookie.log"
ADMIN_PORT_PREFERRED: Final = 8080
"""Bookie N serves its admin HTTP API on this port + N - 1 when free (else on any free one)."""
_FAILURE_EVENTS: Final = ("bookie.refused", "bookie.failed", "bookie.invalid_config")


class ClusterError(Exception):
    """The local cluster could not start; the message says what to do."""


def read_saved_toml(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """A TOML file the launcher wrote; `ClusterError` naming it when it cannot be read, is
    not TOML, or lacks one of the `required` keys."""
    try:
        with path.open("rb") as handle:
            values = tomllib.load(handle)
    except OSError as error:
        raise ClusterError(f"cannot read {path}: {error.strerror}") from error
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
        raise ClusterError(f"{path} is not valid TOML: {error}") from error
    missing = [key for key in required if key not in values]
    if missing:
        raise ClusterError(f"{path} lacks {', '.join(missing)}: it was not written by this tool")
    return values


def bookie_command(config_file: Path, *flags: str) -> list[str]:
    """The command line of a `bookie serve` process with this launcher's interpreter."""
    return [sys.executable, "-m", "bookie.tools.cli", "serve", "--config", str(config_file), *flags]


def last_failure(log_file: Path) -> str | None:
    """The `reason` of the last refusal/failure event in a bookie's JSON log, if any."""
    try:
        lines = log_file.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return None
    for line in reversed(lines):
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and event.get("event") in _FAILURE_EVENTS:
                return str(event.get("reason"))
    return None


def pick_port(preferred: int, taken: set[int]) -> int:
    """`preferred` if it is above 0, free and not in `taken`, else any free port not in
    `taken`; the port is added to `taken` (ports handed out, not yet bound)."""
    usable = preferred > 0 and preferred not in taken and port_is_free(preferred)
    port = preferred if usable else free_port(HOST, taken=taken)
    taken.add(port)
    return port


def _registered_anew(seen: Bookies, left: Mapping[str, int], bookie_id: str) -> bool:
    """Whether `seen` lists `bookie_id` registered by a session other than its `left` one."""
    session = seen.sessions.get(bookie_id)
    return session is not None and session != left.get(bookie_id)


@dataclass(slots=True)
class LocalBookie:
    """One bookie process of the cluster."""

    name: str
    directory: Path
    port: int
    admin_port: int = 0
    """Where its admin HTTP API listens (chosen at each start of the cluster)."""
    tls_port: int | None = None
    """Its TLS listener's port, if it has one."""
    process: anyio.abc.Process | None = None
    log: IO[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def admin_url(self) -> str:
        return f"http://{HOST}:{self.admin_port}"

    @property
    def bookie_id(self) -> str:
        """The id it registers with: its address (the default bookie id)."""
        return self.address

    @property
    def config_file(self) -> Path:
        return self.directory / BOOKIE_CONFIG_FILE

    @property
    def log_file(self) -> Path:
        return self.directory / BOOKIE_LOG_FILE


class LocalCluster:
    """ZooKeeper plus bookie processes under one data directory (see the module docstring)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        bookies: int = 3,
        zk_servers: str | None = None,
        zk_root: str | None = None,
        bookie_base_port: int = limits.port_default,
        bookie_config: Mapping[str, object] | None = None,
        tls: DevelopmentCertificates | None = None,
    ) -> None:
        """`zk_root` applies when the cluster is created (default /ledgers); a resumed
        cluster keeps its own, and naming another one is an error.  A new bookie N listens
        on `bookie_base_port` + N - 1 when that is free (0: on any free port); a resumed one
        keeps its port.  `bookie_config` adds keys to the config file of each bookie
        created (`autorecovery_password`, say).  With `tls`, each bookie created also
        has a mutual-TLS listener (`TLS_PORT_OFFSET` above its port when free) serving
        the certificates' node and client names only, and a cluster created with its own
        ZooKeeper runs it on mutual TLS only."""
        assert bookies >= 1
        self._bookie_base_port = bookie_base_port
        self.data_dir = data_dir.absolute()
        self.bookie_count = bookies
        self._external_zk = zk_servers
        self._requested_root = zk_root
        self.zk_servers = zk_servers or ""
        self.zk_root = zk_root or limits.metadata_root_default
        self._bookie_config = dict(bookie_config or {})
        self._tls = tls
        self.bookies: list[LocalBookie] = []
        self._zookeeper: LocalZooKeeper | None = None
        self.zk_tls: ZkTls | None = None
        """How this cluster's processes dial its ZooKeeper when it is on TLS (set on start)."""
        self._lock: IO[str] | None = None
        self.resumed = False
        """True when the data directory held a cluster already."""

    # --- lifetime -----------------------------------------------------------------------------

    async def __aenter__(self) -> LocalCluster:
        try:
            await self._start()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        with anyio.CancelScope(shield=True):
            await self._stop()

    async def _start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        settings = self._cluster_settings()
        if self._external_zk is None:
            if settings.get("zk_tls", False):
                self.zk_tls = self._zk_node_tls()
            self._zookeeper = await self._start_zookeeper(int(settings["zk_port"]))
            self.zk_servers = self._zookeeper.connect_string
        self.zk_root = str(settings["zk_root"])
        taken: set[int] = set()
        for number in range(1, self.bookie_count + 1):
            bookie = self._prepare_bookie(number, taken)
            taken.add(bookie.port)
            if bookie.tls_port is not None:
                taken.add(bookie.tls_port)
            self.bookies.append(bookie)
        for number, bookie in enumerate(self.bookies, start=1):
            preferred = ADMIN_PORT_PREFERRED + number - 1 if self._bookie_base_port else 0
            bookie.admin_port = pick_port(preferred, taken)
        await self._start_bookies(self.bookies)

    def _take_lock(self) -> None:
        lock = (self.data_dir / ".lock").open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            lock.close()
            raise ClusterError(
                f"another local cluster is running from {self.data_dir}: stop it first "
                "(Ctrl-C in its terminal), or pass another --data-dir"
            ) from error
        self._lock = lock

    def _cluster_settings(self) -> dict[str, Any]:
        path = self.data_dir / CLUSTER_FILE
        if path.exists():
            self.resumed = True
            settings = read_saved_toml(path, ("zk_port", "zk_root"))
            requested = self._requested_root
            if requested is not None and requested != settings["zk_root"]:
                raise ClusterError(
                    f"the cluster in {self.data_dir} uses ZooKeeper root "
                    f"{settings['zk_root']}, not {requested}: drop --zk-root, or pass "
                    "another --data-dir for another cluster"
                )
            return settings
        port = ZK_PORT_PREFERRED if port_is_free(ZK_PORT_PREFERRED) else free_port(HOST)
        zk_tls = self._tls is not None and self._external_zk is None
        settings = {"zk_port": port, "zk_root": self.zk_root, "zk_tls": zk_tls}
        # Plain TOML of three keys; bookie configs have their own writer.
        path.write_text(
            f"zk_port = {port}\nzk_root = {json.dumps(self.zk_root)}\n"
            f"zk_tls = {json.dumps(zk_tls)}\n"
        )
        return settings

    def _zk_node_tls(self) -> ZkTls:
        if self._tls is None:
            raise ClusterError(
                f"the cluster in {self.data_dir} runs its ZooKeeper on TLS: start it with "
                "TLS (kvstore up --tls)"
            )
        return ZkTls(self._tls.ca, self._tls.node)

    @property
    def zk_environment(self) -> dict[str, str]:
        """What a process this cluster starts adds to its environment to reach ZooKeeper
        (the `BOOKIE_ZK_TLS_*` variables of `zk_tls`; none when ZooKeeper is plain)."""
        return {} if self.zk_tls is None else self.zk_tls.environment()

    @property
    def zk_client_tls(self) -> ZkTls | None:
        """How people and tools dial this cluster's ZooKeeper: with the client
        certificate when it is on TLS, None when it is plain."""
        if self.zk_tls is None or self._tls is None:
            return None
        return ZkTls(self._tls.ca, self._tls.client)

    async def _start_zookeeper(self, port: int) -> LocalZooKeeper:
        if not port_is_free(port):
            raise ClusterError(
                f"port {port}, this cluster's ZooKeeper port, is in use: is another "
                f"ZooKeeper running?  Stop it, or delete {self.data_dir / CLUSTER_FILE} to "
                "pick another port (the bookies' cookies stay valid)"
            )
        tls = None
        if self.zk_tls is not None:
            assert self._tls is not None
            tls = ZooKeeperTls(self._tls.node, self._tls.ca, require_client_cert=True)
        zookeeper = LocalZooKeeper(self.data_dir / "zookeeper", host=HOST, port=port, tls=tls)
        try:
            await anyio.to_thread.run_sync(zookeeper.start)
        except ZooKeeperUnavailable as error:
            raise ClusterError(f"ZooKeeper did not start: {error}") from error
        return zookeeper

    def _prepare_bookie(self, number: int, taken: set[int]) -> LocalBookie:
        directory = self.data_dir / f"bookie-{number}"
        config_file = directory / BOOKIE_CONFIG_FILE
        if config_file.exists():
            saved = read_saved_toml(config_file, ("listen_address",))
            port = address_setting(str(saved["listen_address"]), "listen_address").port
            tls_listen = saved.get("tls_listen_address")
            tls_port = None
            if tls_listen is not None:
                tls_port = address_setting(str(tls_listen), "tls_listen_address").port
            if self._tls is not None and tls_port is None:
                raise ClusterError(
                    f"bookie-{number} was created without TLS ({config_file}): start the "
                    "cluster without TLS, or in another data directory"
                )
            for needed in (port, tls_port):
                if needed is not None and not port_is_free(needed):
                    raise ClusterError(
                        f"port {needed} of bookie-{number} is in use: is another cluster or "
                        f"bookie running?  Stop it (the port is in {config_file})"
                    )
            return LocalBookie(f"bookie-{number}", directory, port, tls_port=tls_port)
        base = self._bookie_base_port
        port = pick_port(base + number - 1 if base else 0, taken)
        taken.add(port)
        tls_keys: dict[str, object] = {}
        tls_port = None
        if self._tls is not None:
            tls_port = pick_port(base + TLS_PORT_OFFSET + number - 1 if base else 0, taken)
            tls_keys = {
                "tls_listen_address": f"{HOST}:{tls_port}",
                "tls_cert_file": self._tls.node,
                "tls_ca_file": self._tls.ca,
                "tls_require_client_cert": True,
                "tls_allowed_clients": f"{NODE_NAME},{CLIENT_NAME}",
            }
        directory.mkdir(parents=True, exist_ok=True)
        # Private: the configuration may hold the autorecovery password (the ledgers').
        write_file(
            config_file,
            render_toml(
                {
                    "listen_address": f"{HOST}:{port}",
                    "journal_dir": "journal",
                    "ledger_dirs": ["ledgers"],
                    "zk_root": self.zk_root,
                    **self._bookie_config,
                    **tls_keys,
                }
            ).encode(),
            private=True,
        )
        return LocalBookie(f"bookie-{number}", directory, port, tls_port=tls_port)

    async def _spawn(self, bookie: LocalBookie) -> None:
        bookie.log = bookie.log_file.open("ab")
        bookie.process = await anyio.open_process(
            bookie_command(
                bookie.config_file,
                "--zk-servers",
                self.zk_servers,
                "--admin",
                f"{HOST}:{bookie.admin_port}",
            ),
            stdin=None,
            stdout=bookie.log,
            stderr=bookie.log,
            cwd=bookie.directory,
            env={**os.environ, **self.zk_environment},
            # Its own session: a Ctrl-C in the terminal reaches the launcher only,
            # which then stops the bookies in order.
            start_new_session=True,
        )

    async def _start_bookies(self, bookies: Sequence[LocalBookie]) -> None:
        """Start `bookies`; return once each is registered by its new process, not by the
        znode its previous process left (which ZooKeeper deletes only when that session
        expires); `ClusterError` if one exits first."""
        async with ZkMetadataStore.connect(self.zk_servers, tls=self.zk_tls) as store:
            left = (await list_bookies(store, self.zk_root)).sessions
            for bookie in bookies:
                await self._spawn(bookie)
            await self._wait_registered(store, bookies, left)

    async def _wait_registered(
        self, store: ZkMetadataStore, waited: Sequence[LocalBookie], left: Mapping[str, int]
    ) -> None:
        """Return once each of `waited` is registered by a session other than the one that
        held its registration before (`left`, by bookie id); `ClusterError` if one exits
        first."""
        failure: list[str] = []
        async with anyio.create_task_group() as tasks:

            async def exited(bookie: LocalBookie) -> None:
                assert bookie.process is not None
                status = await bookie.process.wait()
                reason = last_failure(bookie.log_file) or f"see {bookie.log_file}"
                failure.append(f"{bookie.name} exited with status {status}: {reason}")
                tasks.cancel_scope.cancel()

            for bookie in waited:
                tasks.start_soon(exited, bookie)
            with anyio.move_on_after(limits.process_start_timeout_ms / 1000) as waiting:
                while True:
                    seen = await list_bookies(store, self.zk_root)
                    if all(_registered_anew(seen, left, bookie.bookie_id) for bookie in waited):
                        break
                    await watch_bookies(store, seen)
            tasks.cancel_scope.cancel()
        if failure:
            raise ClusterError(failure[0])
        if waiting.cancelled_caught:
            raise ClusterError(
                f"the bookies did not register within {limits.process_start_timeout_ms} ms; "
                f"see their logs under {self.data_dir}"
            )

    async def _stop(self) -> None:
        for bookie in self.bookies:
            process = bookie.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.terminate()
        for bookie in self.bookies:
            await self._reap(bookie)
        if self._zookeeper is not None:
            await anyio.to_thread.run_sync(self._zookeeper.stop)
            self._zookeeper = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @staticmethod
    async def _reap(bookie: LocalBookie) -> None:
        process = bookie.process
        if process is not None:
            with anyio.move_on_after(limits.process_stop_timeout_ms / 1000):
                await process.wait()
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
            await process.aclose()
            bookie.process = None
        if bookie.log is not None:
            bookie.log.close()
            bookie.log = None

    def bookie(self, name: str) -> LocalBookie:
        """The bookie called `name` ("bookie-1", ...)."""
        for bookie in self.bookies:
            if bookie.name == name:
                return bookie
        raise KeyError(name)

    def kill(self, name: str) -> None:
        """SIGKILL bookie `name`: no graceful stop, what it had not synced is lost (a crash)."""
        process = self.bookie(name).process
        assert process is not None
        with contextlib.suppress(ProcessLookupError):
            process.kill()

    async def restart(self, name: str) -> None:
        """Start bookie `name` again after it stopped (or reap it first); return once it is
        registered, `ClusterError` if it exits first."""
        bookie = self.bookie(name)
        await self._reap(bookie)
        await self._start_bookies([bookie])

    async def watch_exits(self, on_exit: Callable[[LocalBookie, int], None]) -> None:
        """Call `on_exit(bookie, status)` when a bookie process exits; runs until cancelled."""

        async def watch(bookie: LocalBookie) -> None:
            assert bookie.process is not None
            on_exit(bookie, await bookie.process.wait())

        async with anyio.create_task_group() as tasks:
            for bookie in self.bookies:
                tasks.start_soon(watch, bookie)

    @property
    def zk_is_local(self) -> bool:
        """Whether this cluster started its own ZooKeeper (no --zk)."""
        return self._external_zk is None


# --- the command ------------------------------------------------------------------------------


def _banner(cluster: LocalCluster) -> str:
    data_dir = _shown(cluster.data_dir)
    state = "resumed" if cluster.resumed else "new"
    zk_kind = "local" if cluster.zk_is_local else "external"
    lines = [
        f"Local cluster up ({state}, data in {data_dir})",
        f"  ZooKeeper  {cluster.zk_servers:<21} {zk_kind}, cluster root {cluster.zk_root}",
    ]
    for bookie in cluster.bookies:
        lines.append(f"  {bookie.name:<9}  {bookie.address:<21} log {_shown(bookie.log_file)}")
    lines.append(admin_heading())
    lines += admin_lines(cluster.bookies)
    first = cluster.bookies[0].address
    lines += [
        f"Inspect:  {Path(sys.executable).parent / 'bookie'} shell bookieinfo {first}",
        f"To start from nothing, stop it, then: rm -rf {shlex.quote(data_dir)}",
        "Ctrl-C stops the bookies, then ZooKeeper; the data stays for the next run.",
    ]
    return "\n".join(lines)


def admin_heading() -> str:
    return "Admin HTTP APIs (/metrics, /ready, /api/v1/...; docs/observability.md):"


def admin_lines(bookies: Sequence[LocalBookie]) -> list[str]:
    """One banner line per bookie: where its admin HTTP API is."""
    return [f"  {bookie.name:<9}  {bookie.admin_url}" for bookie in bookies]


def _shown(path: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(path.relative_to(Path.cwd()))
    return str(path)


async def _run(data_dir: Path, bookies: int, zk_servers: str | None, zk_root: str | None) -> int:
    print(f"Starting ZooKeeper and {bookies} bookies (data in {_shown(data_dir)}) ...", flush=True)
    async with LocalCluster(
        data_dir, bookies=bookies, zk_servers=zk_servers, zk_root=zk_root
    ) as cluster:
        print(_banner(cluster), flush=True)

        def report_exit(bookie: LocalBookie, status: int) -> None:
            reason = last_failure(bookie.log_file) or "see " + _shown(bookie.log_file)
            print(
                f"{bookie.name} ({bookie.address}) exited with status {status}: {reason}; "
                "the others keep running.  Restart the cluster to bring it back.",
                file=sys.stderr,
                flush=True,
            )

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cluster.watch_exits, report_exit)
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    break
            tasks.cancel_scope.cancel()
        print("Stopping the bookies, then ZooKeeper ...", flush=True)
    print("Stopped.", flush=True)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bookie.local.cluster",
        description="Run ZooKeeper and N bookie processes locally until Ctrl-C.",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path("data"), help="where everything is kept (./data)"
    )
    parser.add_argument("--bookies", type=int, default=3, help="number of bookies (3)")
    parser.add_argument("--zk", help="use this ZooKeeper (host:port,...) instead of starting one")
    parser.add_argument(
        "--zk-root", help="the cluster's root znode, for a new cluster (default /ledgers)"
    )
    arguments = parser.parse_args(argv)
    if arguments.bookies < 1:
        parser.error("--bookies must be at least 1")
    try:
        code: int = anyio.run(
            _run, arguments.data_dir, arguments.bookies, arguments.zk, arguments.zk_root
        )
    except ClusterError as error:
        print(f"local cluster: {error}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
