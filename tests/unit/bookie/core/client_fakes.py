"""Test doubles for the ledger client's cores: in-memory bookies, a network that holds
every request until the test delivers it, and a metadata znode with compare-and-set.

A scenario is then a script: which request reaches which bookie when, and what
comes back.  The bookies follow the protocol's rules that the client cores rely
on (fencing, recovery adds, ENOLEDGER/ENOENTRY, READ of entry -1, the LAC they
remember), nothing more; the real rules live in `bookie/core/bookie_handler.py`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bookie.core import placement
from bookie.core.metadata import (
    LedgerMetadata,
    mark_in_recovery_transform,
    new_ledger,
    recovery_close_transform,
    writer_close_transform,
    writer_ensemble_change_transform,
)
from bookie.core.reader import SendRead
from bookie.core.recovery import (
    ChooseReplacements,
    CloseRecovered,
    Recovery,
    RecoveryAborted,
    RecoveryFinished,
)
from bookie.core.writer import (
    AddsConfirmed,
    AddsFailed,
    ChangeEnsemble,
    CloseFailed,
    CloseLedger,
    SendAdd,
    SendExplicitLac,
    Writer,
)
from bookie.errors import BookieError, Status
from bookie.wire.messages import ADD_FLAG_RECOVERY, ReadResponse
from bookie.wire.packet import Digest, DigestType, packet_lac

LEDGER_ID = 7
DIGEST = Digest(DigestType.CRC32C, b"password")

EOK = int(Status.EOK)
ENOENTRY = int(Status.ENOENTRY)
ENOLEDGER = int(Status.ENOLEDGER)
EIO = int(Status.EIO)
EFENCED = int(Status.EFENCED)
EUA = int(Status.EUA)


def make_metadata(
    bookies: Sequence[str] = ("b1", "b2", "b3"), write_quorum: int = 3, ack_quorum: int = 2
) -> LedgerMetadata:
    """An OPEN ledger on `bookies` (BookKeeper's test default: E=3, Qw=3, Qa=2)."""
    return new_ledger(
        LEDGER_ID,
        bookies,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ctime_ms=0,
    )


def payload_of(entry_id: int) -> bytes:
    """A payload whose length differs per entry, so lengths are checked for real."""
    return f"entry-{entry_id}".encode() * (1 + entry_id % 3)


def ledger_length(last_entry_id: int) -> int:
    return sum(len(payload_of(e)) for e in range(last_entry_id + 1))


def packet_for(entry_id: int, lac: int) -> bytes:
    """The packet the writer would have sent for `entry_id` while its LAC was `lac`."""
    return DIGEST.build_entry(
        LEDGER_ID, entry_id, lac, ledger_length(entry_id), payload_of(entry_id)
    )


class FakeBookie:
    """One ledger's worth of a bookie: its entries, its fence flag, its LAC."""

    def __init__(self, bookie_id: str) -> None:
        self.bookie_id = bookie_id
        self.entries: dict[int, bytes] = {}
        self.known = False
        """Whether the bookie has a handle for the ledger (an add or a fence created it)."""
        self.fenced = False
        self.lac = -1
        self.down = False
        """A down bookie answers every request with EIO."""

    def seed(self, entry_id: int, packet: bytes) -> None:
        self.entries[entry_id] = packet
        self.known = True
        self.lac = max(self.lac, packet_lac(packet))

    def add(self, entry_id: int, packet: bytes, flags: int) -> int:
        if self.down:
            return EIO
        if self.fenced and not flags & ADD_FLAG_RECOVERY:
            return EFENCED
        self.seed(entry_id, packet)
        return EOK

    def read(self, entry_id: int, fence: bool) -> ReadResponse:
        if self.down:
            return ReadResponse(0, EIO, "down")
        if fence:
            self.fenced = True
            self.known = True
        if not self.known:
            return ReadResponse(0, ENOLEDGER, "no ledger", LEDGER_ID, entry_id, None, -1)
        if entry_id == -1:
            if not self.entries:
                return ReadResponse(0, ENOENTRY, "empty", LEDGER_ID, -1, None, self.lac)
            entry_id = max(self.entries)
        packet = self.entries.get(entry_id)
        if packet is None:
            return ReadResponse(0, ENOENTRY, "no entry", LEDGER_ID, entry_id, None, self.lac)
        return ReadResponse(0, EOK, None, LEDGER_ID, entry_id, packet, self.lac)


class MetadataCell:
    """The ledger's znode: a record replaced only through a CAS-loop transform."""

    def __init__(self, metadata: LedgerMetadata) -> None:
        self.metadata = metadata
        self.version = 0

    def update(
        self, transform: Callable[[LedgerMetadata], LedgerMetadata | None]
    ) -> LedgerMetadata:
        updated = transform(self.metadata)
        if updated is not None:
            self.metadata = updated
            self.version += 1
        return self.metadata


@dataclass
class Request:
    """A request sent by a client core and not yet delivered to its bookie."""

    client: str
    bookie_id: str
    op: str
    """"add", "read" or "write_lac"."""
    entry_id: int
    packet: bytes | None = None
    flags: int = 0
    fence: bool = False


@dataclass
class ClientLog:
    """What a driven core reported to its shell."""

    confirmed: list[int] = field(default_factory=list)
    failed: dict[int, BookieError] = field(default_factory=dict)
    close_failures: list[BookieError] = field(default_factory=list)
    explicit_lacs: list[int] = field(default_factory=list)
    finished: LedgerMetadata | None = None
    aborted: BookieError | None = None


class Cluster:
    """Bookies, the metadata znode, held requests, and the cores talking to them.

    Every effect a core produces is carried out as its shell would: network
    sends become held `Request`s; placement and metadata CAS loops run at once
    (against `available`, with a seeded Random).
    """

    def __init__(self, metadata: LedgerMetadata, spare_bookies: Iterable[str] = ()) -> None:
        every_bookie = [b for _, ensemble in metadata.ensembles for b in ensemble]
        self.bookies = {b: FakeBookie(b) for b in [*every_bookie, *spare_bookies]}
        self.cell = MetadataCell(metadata)
        self.available: dict[str, str | None] = dict.fromkeys(
            [*metadata.current_ensemble, *spare_bookies]
        )
        """Writable bookies placement may choose from: the last ensemble and the spares."""
        self.bad_bookies: set[str] = set()
        """Bookies that failed a request: placement never picks them again (quarantine)."""
        self.rng = random.Random(0)
        self.in_flight: list[Request] = []
        self.writers: dict[str, Writer] = {}
        self.recoveries: dict[str, Recovery] = {}
        self.logs: dict[str, ClientLog] = {}

    # --- clients ------------------------------------------------------------------------------

    def add_writer(self, name: str, writer: Writer) -> Writer:
        self.writers[name] = writer
        self.logs[name] = ClientLog()
        return writer

    def start_recovery(self, name: str, **options: int) -> Recovery:
        """Step 0 as a shell does it (CAS to IN_RECOVERY), then start the core."""
        recovery = Recovery(self.cell.update(mark_in_recovery_transform), DIGEST, **options)
        self.recoveries[name] = recovery
        self.logs[name] = ClientLog()
        recovery.start()
        self.pump(name)
        return recovery

    def append(self, name: str, count: int = 1) -> list[int]:
        writer = self.writers[name]
        ids = []
        for _ in range(count):
            entry_id = writer.last_add_pushed + 1
            ids.append(writer.append(payload_of(entry_id)))
        self.pump(name)
        return ids

    # --- the shell ----------------------------------------------------------------------------

    def pump(self, name: str) -> None:
        """Carry out every effect the named core has produced, until it produces none."""
        core: Writer | Recovery = self.writers.get(name) or self.recoveries[name]
        log = self.logs[name]
        while effects := core.take_effects():
            for effect in effects:
                self._carry_out(name, core, log, effect)

    def _carry_out(
        self, name: str, core: Writer | Recovery, log: ClientLog, effect: object
    ) -> None:
        if isinstance(effect, SendAdd):
            for bookie_id in effect.bookie_ids:
                self.in_flight.append(
                    Request(name, bookie_id, "add", effect.entry_id, effect.packet, effect.flags)
                )
        elif isinstance(effect, SendRead):
            self.in_flight.append(
                Request(name, effect.bookie_id, "read", effect.entry_id, fence=effect.fence)
            )
        elif isinstance(effect, SendExplicitLac):
            log.explicit_lacs.append(effect.lac)
        elif isinstance(effect, AddsConfirmed):
            assert effect.first_entry_id == len(log.confirmed), "confirmations are in order"
            log.confirmed.extend(range(effect.first_entry_id, effect.last_entry_id + 1))
        elif isinstance(effect, AddsFailed):
            for entry_id in range(effect.first_entry_id, effect.last_entry_id + 1):
                log.failed[entry_id] = effect.error
        elif isinstance(effect, ChangeEnsemble):
            assert isinstance(core, Writer)
            self._change_ensemble(core, effect)
        elif isinstance(effect, CloseLedger):
            assert isinstance(core, Writer)
            try:
                closed = self.cell.update(
                    lambda md: writer_close_transform(md, effect.last_entry_id, effect.length)
                )
            except BookieError as error:
                core.on_close_failed(error)
            else:
                core.on_closed(closed)
        elif isinstance(effect, CloseFailed):
            log.close_failures.append(effect.error)
        elif isinstance(effect, ChooseReplacements):
            assert isinstance(core, Recovery)
            self.bad_bookies.update(effect.failed.values())
            try:
                chosen = placement.choose_replacements(
                    self.available,
                    effect.ensemble,
                    list(effect.failed),
                    write_quorum=self.cell.metadata.write_quorum,
                    rng=self.rng,
                    excluded=self.bad_bookies,
                )
            except BookieError as error:
                core.on_replacements_failed(error)
            else:
                core.on_replacements(chosen)
        elif isinstance(effect, CloseRecovered):
            assert isinstance(core, Recovery)
            try:
                closed = self.cell.update(
                    lambda md: recovery_close_transform(
                        md,
                        effect.started_ensembles,
                        effect.recovered_ensembles,
                        effect.last_entry_id,
                        effect.length,
                    )
                )
            except BookieError as error:
                core.on_close_failed(error)
            else:
                core.on_closed(closed)
        elif isinstance(effect, RecoveryFinished):
            log.finished = effect.metadata
        elif isinstance(effect, RecoveryAborted):
            log.aborted = effect.error
        else:
            raise AssertionError(f"unexpected effect {effect!r}")

    def _change_ensemble(self, writer: Writer, effect: ChangeEnsemble) -> None:
        self.bad_bookies.update(effect.failed.values())
        try:
            chosen = placement.choose_replacements(
                self.available,
                effect.ensemble,
                list(effect.failed),
                write_quorum=self.cell.metadata.write_quorum,
                rng=self.rng,
                excluded=self.bad_bookies,
            )
            changed = self.cell.update(
                lambda md: writer_ensemble_change_transform(
                    md, effect.ensemble, effect.first_entry_id, chosen
                )
            )
        except BookieError as error:
            writer.on_ensemble_change_failed(error)
        else:
            writer.on_ensemble_changed(changed)

    # --- the network --------------------------------------------------------------------------

    def pending(self, client: str | None = None, **match: object) -> list[Request]:
        return [r for r in self.in_flight if _matches(r, client, match)]

    def deliver(self, client: str | None = None, **match: object) -> int:
        """Deliver every held request that matches; return how many."""
        chosen = self.pending(client, **match)
        for request in chosen:
            self.in_flight.remove(request)
            self.deliver_request(request)
        return len(chosen)

    def deliver_one(self, client: str | None = None, **match: object) -> None:
        """Deliver exactly one matching request (the test asserts there is exactly one)."""
        chosen = self.pending(client, **match)
        assert len(chosen) == 1, f"expected one request matching {client} {match}: {chosen}"
        self.in_flight.remove(chosen[0])
        self.deliver_request(chosen[0])

    def time_out(self, client: str | None = None, **match: object) -> int:
        """Drop every matching request before it arrives; report a timeout to its client."""
        chosen = self.pending(client, **match)
        for request in chosen:
            self.in_flight.remove(request)
            self._report_timeout(request)
        return len(chosen)

    def time_out_request(self, request: Request) -> None:
        """A request taken with `take` never arrives; its client sees a timeout."""
        self._report_timeout(request)

    def take(self, index: int) -> Request:
        """Remove the held request at `index`, for the caller to deliver or lose."""
        return self.in_flight.pop(index)

    def lose_reply(self, request: Request) -> None:
        """The request reaches its bookie, which acts on it; the answer is lost (a timeout)."""
        bookie = self.bookies[request.bookie_id]
        if request.op == "add":
            assert request.packet is not None
            bookie.add(request.entry_id, request.packet, request.flags)
        else:
            bookie.read(request.entry_id, request.fence)
        self._report_timeout(request)

    def _report_timeout(self, request: Request) -> None:
        core = self.writers.get(request.client) or self.recoveries[request.client]
        if request.op == "add":
            core.on_add_timeout(request.bookie_id, request.entry_id)
        elif isinstance(core, Recovery):
            core.on_read_timeout(request.bookie_id, request.entry_id)
        self.pump(request.client)

    def deliver_all_but(self, bookie_id: str) -> int:
        """Deliver every held request except those to `bookie_id` (a slow bookie)."""
        chosen = [r for r in self.in_flight if r.bookie_id != bookie_id]
        for request in chosen:
            self.in_flight.remove(request)
            self.deliver_request(request)
        return len(chosen)

    def deliver_all(self, rng: random.Random | None = None, steps_max: int = 100_000) -> None:
        """Deliver held requests (in a random order when `rng` is given) until none is left."""
        for _ in range(steps_max):
            if not self.in_flight:
                return
            index = rng.randrange(len(self.in_flight)) if rng else 0
            self.deliver_request(self.in_flight.pop(index))
        raise AssertionError("the cores never went quiet")

    def deliver_request(self, request: Request) -> None:
        """The request reaches its bookie and the answer reaches the client."""
        bookie = self.bookies[request.bookie_id]
        core = self.writers.get(request.client) or self.recoveries[request.client]
        if request.op == "add":
            assert request.packet is not None
            status = bookie.add(request.entry_id, request.packet, request.flags)
            core.on_add_response(request.bookie_id, request.entry_id, status)
        else:
            assert isinstance(core, Recovery)
            response = bookie.read(request.entry_id, request.fence)
            core.on_read_response(request.bookie_id, request.entry_id, response)
        self.pump(request.client)


def _matches(request: Request, client: str | None, match: dict[str, object]) -> bool:
    if client is not None and request.client != client:
        return False
    return all(getattr(request, key) == value for key, value in match.items())
