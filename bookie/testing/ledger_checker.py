"""The invariants of one ledger under simulation, checked at every event the workload sees.

The workload (`bookie.testing.ledger_sim`) tells a `LedgerChecker` everything
it observes: entries the writer pushed, the LAC its handle reports, every
metadata version of the ledger (a watch on the metadata server, so no change
goes unseen), what each recoverer decided, what each reader read and the LAC
it was told.  Each report is checked at once against everything seen before,
and the whole ledger once more at the end.  The invariants, by name:

1. `acked-in-closed-ledger`: every entry acknowledged to the writer is at or
   below the closed ledger's last entry, and the closed ledger reads back, from
   a fresh client, exactly the bytes pushed for each of its entries (so every
   acknowledged entry with its own bytes).  Also `read-in-closed-ledger`: an
   entry any reader was given is in the closed ledger (read once, readable for
   ever).
2. `recoverers-agree`: every recoverer, and every later opener, sees the
   last entry and length of the one closed metadata record, which never
   changes once written; `close-length` checks that length against the bytes.
3. `no-ack-above-close`: no entry above the close point is ever acknowledged
   to the writer, whether the acknowledgement came before or after the close;
   once fenced, its LAC never moves again (`fenced-writer-stays-fenced`).
4. `lac-monotonic` / `lac-within-pushed`: the LAC of the writer's handle and of
   each reader never decreases and never passes the last entry pushed; a
   reader's LAC also never passes the writer's own (`reader-lac-confirmed`)
   while the ledger is open.
5. `read-within-lac` / `read-bytes`: a reader is never given an entry above
   the LAC it was told, and every entry it is given has the bytes pushed for
   that id; a reader gets ids 0, 1, 2, ... in order (`reader-order`); reading
   on never fails with a non-retryable error (`confirmed-entry-readable`:
   every entry up to a LAC is there to read).
6. `liveness` (survivable runs): once faults stop, recovery completes and
   the ledger closes; every reader reaches its end.

Also `metadata-transitions`: states go OPEN -> IN_RECOVERY -> CLOSED (or OPEN
-> CLOSED), never back, and segments start at strictly increasing entries.

The first violation raises `InvariantViolation` with the seed, the
invariant's name, what was seen, the last trace lines and the command line
that replays the seed; it is also kept in `violation` and `on_violation` is
called, so a violation raised inside some shell's callback still stops and
fails the run.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from bookie.core.metadata import LedgerMetadata, LedgerState
from bookie.testing.simcluster import Trace

TRACE_TAIL_LINES = 40
"""Trace lines a violation shows: enough to see how the run got there."""

_NEXT_STATES = {
    LedgerState.OPEN: (LedgerState.OPEN, LedgerState.IN_RECOVERY, LedgerState.CLOSED),
    LedgerState.IN_RECOVERY: (LedgerState.IN_RECOVERY, LedgerState.CLOSED),
    LedgerState.CLOSED: (LedgerState.CLOSED,),
}


class InvariantViolation(AssertionError):
    """A simulated run broke an invariant; the message says which, where, and how to replay."""

    def __init__(
        self, seed: int, invariant: str, detail: str, trace_tail: Sequence[str], replay: str
    ) -> None:
        self.seed = seed
        self.invariant = invariant
        self.detail = detail
        self.trace_tail = list(trace_tail)
        self.replay = replay
        self.trace: tuple[str, ...] = ()
        """The run's whole trace, once the run has ended (`run_seed` fills it in)."""
        lines = "\n".join(f"    {line}" for line in self.trace_tail)
        super().__init__(
            f"seed {seed}: invariant {invariant!r} violated: {detail}\n"
            f"  replay: {replay}\n  last trace lines:\n{lines}"
        )

    def with_trace(self, lines: Sequence[str]) -> InvariantViolation:
        """This violation, with the run's whole trace (`lines`) filled in."""
        self.trace = tuple(lines)
        return self


class LedgerChecker:
    """Everything observed about one ledger, checked as it comes; see the module docstring."""

    def __init__(
        self,
        seed: int,
        trace: Trace,
        *,
        replay: str,
        ledger_name: str = "ledger",
        on_violation: Callable[[InvariantViolation], None] = lambda _violation: None,
    ) -> None:
        self._seed = seed
        self._ledger_name = ledger_name
        self._trace = trace
        self._replay = replay
        self.on_violation = on_violation
        """Called once, with the first violation (the run uses it to cancel itself)."""
        self.violation: InvariantViolation | None = None
        self.pushed: list[bytes] = []
        """Payload of every entry the writer pushed, by entry id."""
        self._lengths = [0]
        """`_lengths[n]`: bytes of entries 0 .. n - 1, for the close-length check."""
        self._writer_lac: Callable[[], int] | None = None
        self.writer_lac = -1
        """The highest LAC the writer's handle reported."""
        self.fenced_lac: int | None = None
        """The writer's LAC when it learnt it was fenced; it must never move after."""
        self.metadata: LedgerMetadata | None = None
        """The newest metadata record of the ledger."""
        self._version = -1
        self.closed: tuple[int, int] | None = None
        """(last entry id, length) of the closed record."""
        self.recovered: dict[str, tuple[int, int]] = {}
        self._reader_lac: dict[str, int] = {}
        self._reader_next: dict[str, int] = {}
        self._read_max = -1
        """Highest entry id any reader was given."""

    # --- failing ------------------------------------------------------------------------------

    def fail(self, invariant: str, detail: str) -> InvariantViolation:
        """Record the violation (the first one wins), stop the run, and return it to raise."""
        violation = InvariantViolation(
            self._seed,
            invariant,
            f"{self._ledger_name}: {detail}",
            self._trace.tail(TRACE_TAIL_LINES),
            self._replay,
        )
        if self.violation is None:
            self.violation = violation
            self.on_violation(violation)
        return violation

    def _check(self, condition: bool, invariant: str, detail: Callable[[], str]) -> None:
        if not condition:
            raise self.fail(invariant, detail())

    # --- the writer ---------------------------------------------------------------------------

    def attach_writer(self, last_add_confirmed: Callable[[], int]) -> None:
        """Where to read the writer handle's LAC (the acknowledgements it gave) at any time."""
        self._writer_lac = last_add_confirmed

    def on_pushed(self, entry_id: int, payload: bytes) -> None:
        self._check(
            entry_id == len(self.pushed),
            "lac-within-pushed",
            lambda: f"entry id {entry_id} pushed after {len(self.pushed)} entries",
        )
        self.pushed.append(payload)
        self._lengths.append(self._lengths[-1] + len(payload))

    def on_writer_lac(self) -> None:
        """Check the LAC the writer's handle reports now (invariants 3 and 4)."""
        assert self._writer_lac is not None, "attach_writer first"
        lac = self._writer_lac()
        previous = self.writer_lac
        self._check(
            lac >= previous,
            "lac-monotonic",
            lambda: f"writer LAC went from {previous} down to {lac}",
        )
        self._check(
            lac < len(self.pushed),
            "lac-within-pushed",
            lambda: f"writer LAC {lac} but only {len(self.pushed)} entries pushed",
        )
        fenced_lac = self.fenced_lac
        self._check(
            fenced_lac is None or lac == fenced_lac,
            "fenced-writer-stays-fenced",
            lambda: f"writer LAC moved from {fenced_lac} to {lac} after it was fenced",
        )
        if lac > previous:
            self.writer_lac = lac
            self._trace.record("checker", f"writer acknowledged up to {lac}")
        self._check_acks_within_close()

    def on_writer_fenced(self) -> None:
        self.on_writer_lac()
        if self.fenced_lac is None:
            self.fenced_lac = self.writer_lac

    def _check_acks_within_close(self) -> None:
        closed = self.closed
        if closed is None:
            return
        acked = self.writer_lac
        self._check(
            acked <= closed[0],
            "no-ack-above-close",
            lambda: f"entry {acked} acknowledged to the writer, ledger closed at {closed[0]}",
        )

    # --- metadata -----------------------------------------------------------------------------

    def on_metadata(self, metadata: LedgerMetadata, version: int) -> None:
        """A new version of the ledger's metadata record."""
        previous = self.metadata
        self._check(
            version > self._version,
            "metadata-transitions",
            lambda: f"metadata version {version} after {self._version}",
        )
        if previous is not None:
            self._check(
                metadata.state in _NEXT_STATES[previous.state],
                "metadata-transitions",
                lambda: f"state {previous.state.name} -> {metadata.state.name}",
            )
        starts = [first for first, _ in metadata.ensembles]
        self._check(
            starts[0] == 0 and all(a < b for a, b in itertools.pairwise(starts)),
            "metadata-transitions",
            lambda: f"segments start at {starts}",
        )
        self.metadata = metadata
        self._version = version
        if metadata.state is LedgerState.CLOSED:
            self._on_closed(metadata.last_entry_id, metadata.length)

    def _on_closed(self, last_entry_id: int, length: int) -> None:
        closed = self.closed
        self._check(
            closed is None or closed == (last_entry_id, length),
            "recoverers-agree",
            lambda: f"closed record changed from {closed} to {(last_entry_id, length)}",
        )
        if closed is not None:
            return
        self.closed = (last_entry_id, length)
        self._trace.record("checker", f"ledger closed at {last_entry_id} (length {length})")
        self._check(
            last_entry_id < len(self.pushed),
            "acked-in-closed-ledger",
            lambda: f"closed at {last_entry_id}, only {len(self.pushed)} entries pushed",
        )
        expected = self._lengths[last_entry_id + 1]
        self._check(
            length == expected,
            "close-length",
            lambda: f"closed with length {length}, entries 0..{last_entry_id} hold {expected}",
        )
        if self._writer_lac is not None:
            self.on_writer_lac()
        read_max = self._read_max
        self._check(
            read_max <= last_entry_id,
            "read-in-closed-ledger",
            lambda: f"a reader was given entry {read_max}, ledger closed at {last_entry_id}",
        )
        for name, lac in self._reader_lac.items():
            if lac > last_entry_id:
                raise self.fail(
                    "no-ack-above-close",
                    f"{name} was told LAC {lac}, ledger closed at {last_entry_id}",
                )

    # --- recoverers and openers ---------------------------------------------------------------

    def on_recovered(self, name: str, metadata: LedgerMetadata) -> None:
        """`name` opened the ledger with recovery (or opened it closed) and got `metadata`."""
        end = (metadata.last_entry_id, metadata.length)
        self._check(
            metadata.is_closed,
            "recoverers-agree",
            lambda: f"{name} finished recovery with a {metadata.state.name} record",
        )
        closed = self.closed
        self._check(
            closed == end,
            "recoverers-agree",
            lambda: f"{name} sees the ledger end at {end}, the closed record says {closed}",
        )
        self.recovered[name] = end

    # --- readers ------------------------------------------------------------------------------

    def on_reader_lac(self, name: str, lac: int, *, closed: bool) -> None:
        """Reader `name`'s handle reports `lac` (it knows the ledger closed when `closed`)."""
        previous = self._reader_lac.get(name, -1)
        self._check(
            lac >= previous,
            "lac-monotonic",
            lambda: f"{name}'s LAC went from {previous} down to {lac}",
        )
        self._check(
            lac < len(self.pushed),
            "lac-within-pushed",
            lambda: f"{name} was told LAC {lac}, only {len(self.pushed)} entries pushed",
        )
        if not closed and self._writer_lac is not None:
            writer_lac = self._writer_lac()
            self._check(
                lac <= writer_lac,
                "reader-lac-confirmed",
                lambda: f"{name} was told LAC {lac}, the writer confirmed only {writer_lac}",
            )
        ledger_closed = self.closed
        self._check(
            ledger_closed is None or lac <= ledger_closed[0],
            "no-ack-above-close",
            lambda: f"{name} was told LAC {lac}, ledger closed at {ledger_closed}",
        )
        self._reader_lac[name] = max(previous, lac)

    def on_reader_entry(
        self, name: str, entry_id: int, payload: bytes, lac: int, *, in_order: bool
    ) -> None:
        """Reader `name` was given entry `entry_id` while its handle's LAC was `lac`."""
        self._check(
            entry_id <= lac,
            "read-within-lac",
            lambda: f"{name} was given entry {entry_id} above its LAC {lac}",
        )
        self._check(
            entry_id < len(self.pushed) and payload == self.pushed[entry_id],
            "read-bytes",
            lambda: f"{name} read entry {entry_id} with bytes that were never pushed for it",
        )
        if in_order:
            expected = self._reader_next.get(name, 0)
            self._check(
                entry_id == expected,
                "reader-order",
                lambda: f"{name} was given entry {entry_id}, expected {expected}",
            )
            self._reader_next[name] = entry_id + 1
        self._read_max = max(self._read_max, entry_id)
        closed = self.closed
        self._check(
            closed is None or entry_id <= closed[0],
            "read-in-closed-ledger",
            lambda: f"{name} was given entry {entry_id}, ledger closed at {closed}",
        )

    def on_reader_done(self, name: str) -> None:
        """Reader `name` read to the end of the closed ledger: it must have had every entry."""
        closed = self.closed
        self._check(
            closed is not None,
            "liveness",
            lambda: f"{name} ended its reading before the ledger was closed",
        )
        assert closed is not None
        got = self._reader_next.get(name, 0)
        self._check(
            got == closed[0] + 1,
            "reader-order",
            lambda: f"{name} ended after {got} entries, the ledger has {closed[0] + 1}",
        )

    # --- the end ------------------------------------------------------------------------------

    def on_read_back(self, name: str, first_entry_id: int, payloads: Sequence[bytes]) -> None:
        """A fresh client read `payloads` from the closed ledger, from `first_entry_id` on."""
        closed = self.closed
        self._check(
            closed is not None,
            "liveness",
            lambda: f"{name} read the ledger back before it was closed",
        )
        assert closed is not None
        for entry_id, payload in enumerate(payloads, start=first_entry_id):
            if entry_id > closed[0] or payload != self.pushed[entry_id]:
                raise self.fail(
                    "acked-in-closed-ledger",
                    f"{name} read entry {entry_id} of the closed ledger (ends at {closed[0]}) "
                    "with other bytes than were pushed for it",
                )

    def check_final(self) -> None:
        """The end-of-run checks that need no more reads (invariants 1 and 3)."""
        closed = self.closed
        self._check(closed is not None, "liveness", lambda: "the ledger never closed")
        assert closed is not None
        if self._writer_lac is not None:
            # The writer's LAC once more: an acknowledgement that reached a fenced
            # or abandoned writer after anyone last looked is still caught.
            self.on_writer_lac()
        acked = self.writer_lac
        self._check(
            acked <= closed[0],
            "acked-in-closed-ledger",
            lambda: f"entry {acked} was acknowledged, the closed ledger ends at {closed[0]}",
        )
