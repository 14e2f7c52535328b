"""The bookie process: ZooKeeper, identity, storage, server, registration, read-only mode.

`BookieNode.run()` is what `bookie serve` runs.  Start-up, in order (each step
only after the previous one succeeded):

1. connect to ZooKeeper and initialise the cluster's znodes if missing;
2. check the cookies (bookie/server/identity.py): refuse to start on a mismatch;
3. open storage (journal replay);
4. listen (event `bookie.listening`): clients that know the address may use it;
   with `admin_address` set, serve the admin HTTP API there too (event
   `admin.listening`; bookie/server/admin.py);
5. register under `available/` (or `available/readonly/`), waiting out the
   registration of a previous process of this bookie whose session has not
   expired yet (event `bookie.ready`);
6. run the disk monitor, and the hosted service if any (autorecovery, given by
   the command that starts the node), until told to stop.

Shutdown on SIGTERM or SIGINT (graceful): stop the hosted service and leave the
registry first, so clients
stop choosing this bookie; then the server drains (every pending add is
answered after its fsync, or EIO when the drain bound passes: never left
half-done); then storage syncs, checkpoints and closes; then the ZooKeeper
session ends.  A second SIGTERM/SIGINT during the drain stops at once (what
was not synced is answered by the connection closing).  SIGHUP re-reads the
configuration file and applies what can change while running (read-only
switch, disk thresholds, log level); other keys that differ from the running
configuration are logged as needing a restart (until a restart applies them).

Exit status: 0 after a signal-initiated stop, `EXIT_REFUSED` when the
identity check refuses, `EXIT_FAILED` for any other failure; each failure is
one `bookie.refused` / `bookie.failed` event with a `reason` saying what to do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import logging
import signal
import socket
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from functools import partial
from typing import Any, Final

import anyio
import anyio.abc
from prometheus_client.metrics_core import Metric

from bookie.address import Address
from bookie.core.bookie_handler import BookieIdentity
from bookie.core.tokens import TokenTable
from bookie.errors import (
    BookieError,
    CookieMismatch,
    InvalidConfig,
    MetadataUnavailable,
    NodeExists,
    StorageError,
    leaf_error,
)
from bookie.logs import configure, emit
from bookie.meta.api import MetadataStore, SessionState
from bookie.meta.bookies import BookieInfo, Cookie, Registration, init_cluster, register
from bookie.meta.session_events import SessionDowntime
from bookie.meta.zk import ZkMetadataStore
from bookie.metrics import registry
from bookie.net.http_server import serve_http
from bookie.server.admin import BookieParts, bookie_routes
from bookie.server.config import RELOADABLE, BookieConfig, restart_needed
from bookie.server.disk_monitor import DiskMonitor, measure
from bookie.server.gc import GarbageCollector
from bookie.server.identity import establish_identity
from bookie.server.metrics import bookie_metrics
from bookie.server.server import BookieServer
from bookie.storage.file import FileLedgerStorage

logger = logging.getLogger(__name__)

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
"""Bad command line or configuration (argparse uses 2 as well)."""
EXIT_REFUSED: Final = 3
"""The identity (cookie) check refused to start."""

Reload = Callable[[], BookieConfig]
"""Re-reads the configuration (file and the same flags); raises `InvalidConfig`."""

HostedService = Callable[[MetadataStore], Coroutine[Any, Any, None]]
MetricSource = Callable[[], Iterable[Metric]]
"""Work a bookie process hosts over its ZooKeeper session while it is registered
(autorecovery); cancelled at shutdown, and it must not raise for operating errors."""

_STOP_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
_LISTEN_ERRNOS: Final = frozenset({errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EACCES})


async def _log_session(store: MetadataStore) -> None:
    """Log the ZooKeeper session's transitions while registered: `bookie.session`, a
    warning when it is suspended or lost, one info line with `down_ms` once connected
    again (a lost session is followed by `bookie.reregistered`)."""
    downtime = SessionDowntime()
    async for state in store.session_events():
        down_ms = downtime.observe(state, anyio.current_time())
        if state is not SessionState.CONNECTED:
            emit(logger, logging.WARNING, "bookie.session", state=state.value)
        elif down_ms is not None:
            emit(logger, logging.INFO, "bookie.session", state=state.value, down_ms=down_ms)


def _check_can_listen(address: Address) -> None:
    """Raise the OSError binding `address` would raise now (the port is free again after)."""
    infos = socket.getaddrinfo(address.host, address.port, type=socket.SOCK_STREAM)
    family, kind, protocol, _, target = infos[0]
    with socket.socket(family, kind, protocol) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(target)


class BookieNode:
    """One bookie process's lifetime; see the module docstring."""

    def __init__(
        self,
        config: BookieConfig,
        reload: Reload | None = None,
        hosted: HostedService | None = None,
        tokens: TokenTable | None = None,
        hosted_metrics: MetricSource | None = None,
    ) -> None:
        """`tokens`: the clients it serves, when it requires client tokens;
        `hosted_metrics`: the hosted service's metric families, for `/metrics`."""
        self._config = config
        self._tokens = tokens
        self._reload = reload
        self._hosted = hosted
        self._hosted_metrics = hosted_metrics
        self._stop_scope: anyio.CancelScope | None = None
        """What a stop signal cancels: everything until serving, then only the serving part."""
        self._stopping = False
        self._monitor: DiskMonitor | None = None
        self._is_registered = False

    async def run(self) -> int:
        """Run until a stop signal; return the exit status."""
        config = self._config
        emit(
            logger,
            logging.INFO,
            "bookie.starting",
            bookie_id=config.bookie_id,
            listen_address=str(config.listen_address),
            advertised_address=str(config.advertised_address),
            journal_dir=str(config.journal_dir),
            ledger_dirs=[str(path) for path in config.ledger_dirs],
            zk_servers=config.zk_servers,
            zk_root=config.zk_root,
        )
        try:
            async with anyio.create_task_group() as signals:
                with anyio.CancelScope() as everything:
                    self._stop_scope = everything
                    signals.start_soon(self._watch_signals, everything)
                    await self._serve()
                signals.cancel_scope.cancel()
        except BaseException as error:
            # Every failure becomes one event with advice, and an exit status.
            return self._failed(leaf_error(error))
        emit(logger, logging.INFO, "bookie.stopped", bookie_id=config.bookie_id)
        return EXIT_OK

    def _failed(self, error: BaseException) -> int:
        config = self._config
        if isinstance(error, CookieMismatch):
            emit(logger, logging.ERROR, "bookie.refused", reason=str(error))
            return EXIT_REFUSED
        if isinstance(error, MetadataUnavailable):
            reason = (
                f"cannot reach ZooKeeper at {config.zk_servers}: {error}.  Is it running, and "
                "is zk_servers right?"
            )
        elif isinstance(error, NodeExists):
            reason = str(error)
        elif isinstance(error, socket.gaierror):
            reason = f"cannot resolve the host of listen_address {config.listen_address}: {error}"
        elif isinstance(error, OSError) and error.errno in _LISTEN_ERRNOS:
            reason = (
                f"cannot listen on {config.listen_address}: {error.strerror or error}.  Is "
                "another bookie (or another program) using this port, and is the host "
                "an address of this machine?"
            )
        elif isinstance(error, OSError):
            reason = f"{error}.  Check that the bookie's directories exist and are writable."
        elif isinstance(error, StorageError):
            reason = (
                f"storage cannot start: {error}.  See docs/operations.md (journal corruption) "
                "and inspect the files with `bookie shell readjournal`."
            )
        elif isinstance(error, BookieError):
            reason = f"{type(error).__name__}: {error}"
        elif isinstance(error, Exception):
            logger.exception("bookie.crashed", exc_info=error)
            reason = f"unexpected {type(error).__name__}: {error}"
        else:
            raise error
        emit(logger, logging.ERROR, "bookie.failed", reason=reason)
        return EXIT_FAILED

    # --- signals ------------------------------------------------------------------------------

    async def _watch_signals(self, everything: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(*_STOP_SIGNALS, signal.SIGHUP) as received:
            async for signum in received:
                if signum == signal.SIGHUP:
                    self._reload_config()
                    continue
                if self._stopping:
                    emit(logger, logging.WARNING, "bookie.stop_now", signal=signum.name)
                    everything.cancel()
                    continue
                self._stopping = True
                emit(logger, logging.INFO, "bookie.stop_requested", signal=signum.name)
                assert self._stop_scope is not None
                self._stop_scope.cancel()

    def _reload_config(self) -> None:
        """SIGHUP: apply the reloadable keys of the file; name the others that differ.

        The running configuration keeps its values of the keys that need a restart
        (they are what the process runs with), so each reload is compared with what
        runs, not with the file last read: a change reported once is reported again
        until a restart applies it, and a change reverted in the file is no longer
        reported."""
        if self._reload is None:
            emit(logger, logging.WARNING, "bookie.reload_ignored", reason="no config file")
            return
        try:
            new = self._reload()
        except InvalidConfig as error:
            emit(logger, logging.ERROR, "bookie.reload_failed", reason=str(error))
            return
        running = self._config
        ignored = restart_needed(running, new)
        configure(new.log_level, running.log_format)
        if self._monitor is not None:
            self._monitor.reconfigure(
                threshold=new.disk_usage_threshold,
                low_water_mark=new.disk_usage_low_water_mark,
                forced=new.read_only,
            )
        self._config = dataclasses.replace(
            running, **{name: getattr(new, name) for name in sorted(RELOADABLE)}
        )
        emit(
            logger,
            logging.INFO,
            "bookie.reloaded",
            read_only=new.read_only,
            disk_usage_threshold=new.disk_usage_threshold,
            disk_usage_low_water_mark=new.disk_usage_low_water_mark,
            log_level=new.log_level,
            restart_needed=ignored,
        )

    # --- lifetime -----------------------------------------------------------------------------

    async def _serve(self) -> None:
        config = self._config
        cluster = f"{config.zk_servers} {config.zk_root}"
        async with ZkMetadataStore.connect(
            config.zk_servers, session_timeout_ms=config.zk_session_timeout_ms
        ) as store:
            # Before any cookie is written: a first start that cannot listen must not
            # leave an identity tied to an address the bookie never served on.
            _check_can_listen(config.listen_address)
            if config.tls_listen_address is not None:
                _check_can_listen(config.tls_listen_address)
            instance_id = await init_cluster(store, config.zk_root)
            expected = Cookie(
                instance_id=instance_id,
                bookie_id=config.bookie_id,
                advertised_address=str(config.advertised_address),
                journal_dir=str(config.journal_dir),
                ledger_dirs=tuple(str(path) for path in config.ledger_dirs),
            )
            note = await establish_identity(store, expected, root=config.zk_root, cluster=cluster)
            if note is not None:
                emit(logger, logging.INFO, "bookie.cookies_written", note=note)
            async with FileLedgerStorage.open(config.storage_config()) as storage:
                monitor = self._monitor = DiskMonitor(
                    config.data_dirs,
                    threshold=config.disk_usage_threshold,
                    low_water_mark=config.disk_usage_low_water_mark,
                    interval_ms=config.disk_check_interval_ms,
                    forced=config.read_only,
                    storage_failure=lambda: storage.failure,
                )
                initial = monitor.initial_state()
                data_dirs = config.data_dirs

                def disk_space() -> tuple[int, int]:
                    usage = measure(data_dirs)
                    return usage.free_bytes, usage.total_bytes

                server = BookieServer(
                    storage,
                    disk_space,
                    host=config.listen_address.host,
                    port=config.listen_address.port,
                    read_only=initial.read_only,
                    identity=BookieIdentity(config.bookie_id, instance_id),
                    shutdown_drain_ms=config.shutdown_drain_ms,
                    tokens=self._tokens,
                    tls=config.tls_listen(),
                )
                collector = GarbageCollector(
                    server,
                    storage,
                    store,
                    root=config.zk_root,
                    interval_ms=config.gc_interval_ms,
                    compactor=storage,
                )
                parts = BookieParts(
                    bookie_id=config.bookie_id,
                    address=str(config.advertised_address),
                    root=config.zk_root,
                    store=store,
                    server=server,
                    storage=storage,
                    collector=collector,
                    monitor=monitor,
                    registries=[],
                    registered=lambda: self._is_registered,
                )
                async with server, collector, self._admin(parts):
                    emit(
                        logger,
                        logging.INFO,
                        "bookie.listening",
                        address=str(config.listen_address),
                        port=server.port,
                        tls_port=server.tls_port,
                        read_only=initial.read_only,
                        reasons=initial.reasons,
                    )
                    await self._registered(store, server, monitor, initial.read_only)
                    emit(
                        logger,
                        logging.INFO,
                        "bookie.stopping",
                        pending_requests=server.pending_requests,
                        connections=server.connection_count,
                    )
                emit(logger, logging.INFO, "bookie.drained")

    @contextlib.asynccontextmanager
    async def _admin(self, parts: BookieParts) -> AsyncIterator[None]:
        """The admin HTTP server while the block runs, if `admin_address` is set."""
        address = self._config.admin_address
        if address is None:
            yield
            return
        sources: list[MetricSource] = [
            partial(bookie_metrics, parts.server, parts.storage, parts.collector)
        ]
        if self._hosted_metrics is not None:
            sources.append(self._hosted_metrics)
        parts.registries.append(registry(*sources))
        config = self._config
        tls = config.tls_context() if config.tls_admin else None
        async with serve_http(
            address, bookie_routes(parts), tls=tls, tls_allowed_names=config.tls_allowed_names
        ):
            yield

    def _reregistered(self, registration: Registration) -> None:
        emit(
            logger,
            logging.INFO,
            "bookie.reregistered",
            bookie_id=self._config.bookie_id,
            registration=registration.path,
        )

    async def _registered(
        self,
        store: ZkMetadataStore,
        server: BookieServer,
        monitor: DiskMonitor,
        read_only: bool,
    ) -> None:
        """Register and serve until a stop signal cancels this part only."""
        config = self._config
        tls = config.tls_advertised_address
        info = BookieInfo(
            address=str(config.advertised_address),
            rack=config.rack,
            tls_address=None if tls is None else str(tls),
        )
        with anyio.CancelScope() as serving:
            self._stop_scope = serving
            if self._stopping:
                serving.cancel()
            async with register(
                store,
                config.bookie_id,
                info,
                read_only=read_only,
                root=config.zk_root,
                stale_wait_ms=2 * config.zk_session_timeout_ms,
                on_reregistered=self._reregistered,
            ) as registration:
                self._is_registered = True
                emit(
                    logger,
                    logging.INFO,
                    "bookie.ready",
                    bookie_id=config.bookie_id,
                    address=str(config.advertised_address),
                    registration=registration.path,
                )

                async def apply(value: bool) -> None:
                    # The server switch goes first both ways: turning read-only, adds
                    # stop at once (a disk is filling up); turning writable, a bookie
                    # listed as writable always takes adds.
                    server.read_only = value
                    await registration.set_read_only(value)

                async with anyio.create_task_group() as hosted:
                    hosted.start_soon(_log_session, store)
                    if self._hosted is not None:
                        hosted.start_soon(self._hosted, store)
                    try:
                        await monitor.run(apply)
                    finally:
                        self._is_registered = False
                    hosted.cancel_scope.cancel()
