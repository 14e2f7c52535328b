"""`LedgerClient`: create, open (with or without recovery), delete and list ledgers.

The entry point of the ledger layer (docs/ledgers.md, "Using the client").  Opened with
`async with LedgerClient.open(store) as client:` over any `MetadataStore`; it
owns one task group for its whole life, in which run the bookie watch
(`BookieRegistry`), the connections (`ConnectionPool`), and every task its
handles need (ensemble changes, closes, explicit-LAC timers, tail watches).
Leaving the block cancels all of it; handles still open then fail their
waiters with `ClientClosed` (outcome unknown).

Determinism under simulation: the client reads time only through anyio,
takes its randomness from `rng`, its byte streams from `connector` and the
creation time it stamps on ledgers from `wall_clock_ms`; a seeded simulation
passes its own of each.

Passwords: the metadata keeps SHA-256(b"password" + password), so an open with
the wrong password fails (`UnauthorizedLedgerAccess`) before any bookie is
contacted; the bookies check the master key, SHA-256(b"ledger" + password),
on every add and fencing read.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import random
import ssl
import weakref
from collections.abc import AsyncIterator, Callable, Mapping

import anyio

from bookie import limits
from bookie.client.bookie_conn import checked_response
from bookie.client.config import ClientConfig
from bookie.client.connections import ConnectionPool, Connector
from bookie.client.context import ClientContext
from bookie.client.read_handle import ReadHandle
from bookie.client.recovery import recover
from bookie.client.registry import BookieRegistry
from bookie.client.stats import ClientStats
from bookie.client.write_handle import WriteHandle
from bookie.clock import system_wall_clock_ms
from bookie.core.metadata import LedgerMetadata, new_ledger
from bookie.core.placement import (
    REQUESTED_SIZES_KEY,
    choose_ensemble,
    ledger_sizes,
    requested_sizes,
)
from bookie.core.quorum import check_quorum
from bookie.errors import BookieError, ClientClosed, NoNode, UnauthorizedLedgerAccess
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import read_instance_id
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from bookie.wire.messages import GetBookieInfoRequest, GetBookieInfoResponse, Response
from bookie.wire.packet import DigestType


def password_hash(password: bytes) -> bytes:
    """What ledger metadata keeps of a password: enough to refuse a wrong one early."""
    return hashlib.sha256(b"password" + password).digest()


class LedgerClient:
    """A client of one cluster's ledgers; create it with `LedgerClient.open`."""

    def __init__(
        self,
        context: ClientContext,
        wall_clock_ms: Callable[[], int],
    ) -> None:
        self._context = context
        self._wall_clock_ms = wall_clock_ms
        self._write_handles: weakref.WeakSet[WriteHandle] = weakref.WeakSet()

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        store: MetadataStore,
        *,
        root: str = limits.metadata_root_default,
        connector: Connector | None = None,
        rng: random.Random | None = None,
        config: ClientConfig | None = None,
        wall_clock_ms: Callable[[], int] = system_wall_clock_ms,
    ) -> AsyncIterator[LedgerClient]:
        """Open a client of the cluster rooted at `root` in `store`.

        Reads the cluster's instance id (every bookie it connects to must state it)
        and lists the registered bookies before the block starts (raises what the
        store raises); `connector` opens byte streams to bookies (without one
        the client connects over TCP itself), `rng` drives placement (a fresh,
        OS-seeded one by default).
        """
        config = ClientConfig() if config is None else config
        rng = random.Random() if rng is None else rng
        try:
            instance_id: str | None = await read_instance_id(store, root)
        except NoNode:
            instance_id = None  # no bookie has started yet: bookie ids are checked alone
        try:
            async with anyio.create_task_group() as task_group:
                pool = ConnectionPool(connector, config, task_group, instance_id=instance_id)
                registry = BookieRegistry(
                    store,
                    root,
                    pool,
                    retry_delay_ms=config.metadata_retry_delay_ms,
                    tls=config.tls is not None,
                )
                await registry.refresh()
                task_group.start_soon(registry.watch)
                context = ClientContext(
                    pool=pool,
                    ledgers=LedgerManager(store, root),
                    registry=registry,
                    config=config,
                    rng=rng,
                    task_group=task_group,
                    stats=ClientStats(),
                    marks=UnderReplication(store, root),
                )
                client = cls(context, wall_clock_ms)
                try:
                    yield client
                finally:
                    client._shut_down()
                    task_group.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # The client's own tasks do not raise, so a group holds the error of
            # the caller's block: hand it back as it was raised, not wrapped.
            if len(group.exceptions) == 1:
                raise group.exceptions[0] from None
            raise

    # --- bookies ------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        """The cluster's root path in the metadata store."""
        return self._context.ledgers.layout.root

    @property
    def stats(self) -> ClientStats:
        """What the client counts for its metrics (`bookie.client.stats.client_metrics`)."""
        return self._context.stats

    @property
    def writable_bookies(self) -> Mapping[str, str | None]:
        """Writable bookie id -> rack, as last seen in the registrations."""
        return self._context.registry.writable

    @property
    def read_only_bookies(self) -> frozenset[str]:
        return self._context.registry.read_only

    def bookie_address(self, bookie_id: str) -> str | None:
        """Where the client connects to `bookie_id` (its last registered address)."""
        return self._context.pool.address(bookie_id)

    @property
    def tls(self) -> ssl.SSLContext | None:
        """The context of its connections to bookies (None: plain TCP)."""
        return self._context.config.tls

    async def bookie_info(
        self, bookie_id: str, *, timeout_ms: int = limits.read_timeout_ms_default
    ) -> GetBookieInfoResponse:
        """`bookie_id`'s disk use and mode, asked over the client's own connection to it
        (kept open, on TLS when the client's are): what a status page asks every few
        seconds costs no new connection.  Raises `BookieUnavailable` (not registered,
        unreachable, or backing off after a failure), `ClientTimeout`, or the
        `StatusError` of its answer."""
        self._check_open()
        answered = anyio.Event()
        outcome: list[Response | BookieError] = []

        def on_response(result: Response | BookieError) -> None:
            outcome.append(result)
            answered.set()

        request = GetBookieInfoRequest(0)
        pool = self._context.pool
        pool.submit(bookie_id, request, on_response, timeout_ms)
        await answered.wait()
        return checked_response(outcome[0], request, GetBookieInfoResponse, pool.address(bookie_id))

    # --- ledgers ------------------------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 3,
        ack_quorum: int = 2,
        *,
        digest_type: DigestType = DigestType.CRC32C,
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        degraded: bool = False,
    ) -> WriteHandle:
        """Create a ledger on `ensemble_size` writable bookies and return its write handle.

        With `degraded`, fewer writable bookies than E but at least Qa make a
        smaller ledger on those (placement rule 4: E' = their count, Qw' =
        min(Qw, E'), Qa kept), marked in its custom metadata; the handle's
        `metadata` says which sizes it got.

        Raises `InvalidLedgerConfig` unless E >= Qw >= Qa >= 1, `NotEnoughBookies`
        when fewer than E bookies are writable (fewer than Qa with `degraded`),
        and metadata errors.
        """
        self._check_open()
        check_quorum(ensemble_size, write_quorum, ack_quorum)
        context = self._context
        writable = context.registry.writable
        custom = dict(custom_metadata or {})
        if degraded:
            sizes = ledger_sizes(
                len(writable),
                ensemble_size=ensemble_size,
                write_quorum=write_quorum,
                ack_quorum=ack_quorum,
            )
            if sizes != (ensemble_size, write_quorum):
                custom[REQUESTED_SIZES_KEY] = requested_sizes(
                    ensemble_size, write_quorum, ack_quorum
                )
                ensemble_size, write_quorum = sizes
        ensemble = choose_ensemble(
            writable,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            rng=context.rng,
        )
        ledger_id = await context.ledgers.allocate_id()
        metadata = new_ledger(
            ledger_id,
            ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            digest_type=digest_type,
            password_hash=password_hash(password),
            ctime_ms=self._wall_clock_ms(),
            custom=custom,
        )
        await context.ledgers.create(metadata)
        handle = WriteHandle(context, metadata, password)
        self._write_handles.add(handle)
        return handle

    async def open_ledger(
        self, ledger_id: int, password: bytes = b"", *, recovery: bool = True
    ) -> ReadHandle:
        """Open a ledger for reading.

        With `recovery` (the default) an unclosed ledger is recovered first:
        fenced, so its writer can get nothing more acknowledged, its end found
        and re-replicated, and its metadata closed; the handle then reads up to
        that end.  Without, nothing is fenced: the handle reads up to the LAC
        the bookies report and may follow the ledger with `tail`.

        Raises `NoSuchLedgerError`, `UnauthorizedLedgerAccess` (wrong password,
        checked before contacting any bookie), `RecoveryFailed` (retryable),
        and what reads raise.
        """
        self._check_open()
        context = self._context
        metadata, version = await context.ledgers.read(ledger_id)
        if not hmac.compare_digest(metadata.password_hash, password_hash(password)):
            raise UnauthorizedLedgerAccess(f"wrong password for ledger {ledger_id}")
        if recovery and not metadata.is_closed:
            metadata, version = await recover(context, ledger_id, password)
        handle = ReadHandle(context, metadata, version, password, last_add_confirmed=-1)
        if not metadata.is_closed:
            await handle.read_last_add_confirmed()
        return handle

    async def delete_ledger(self, ledger_id: int) -> None:
        """Remove the ledger's metadata; bookies reclaim its entries by garbage collection.

        Raises `NoSuchLedgerError` if it does not exist.
        """
        self._check_open()
        await self._context.ledgers.delete(ledger_id)

    async def list_ledgers(self) -> list[int]:
        """Every ledger id of the cluster, ascending (complete, or an exception)."""
        self._check_open()
        return await self._context.ledgers.list_ledgers()

    def metadata_path(self, ledger_id: int) -> str:
        """The znode of the ledger's metadata in the client's store, for a caller's own
        transactions (a check that the ledger still exists, a conditional delete)."""
        return self._context.ledgers.layout.ledger(ledger_id)

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """The ledger's current metadata; `NoSuchLedgerError` if it does not exist."""
        self._check_open()
        metadata, _version = await self._context.ledgers.read(ledger_id)
        return metadata

    # --- lifetime -----------------------------------------------------------------------------

    def _check_open(self) -> None:
        self._context.pool.check_open()

    def _shut_down(self) -> None:
        error = ClientClosed("the ledger client was closed")
        for handle in list(self._write_handles):
            handle.shut_down(error)
        self._context.pool.close()
