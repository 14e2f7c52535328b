"""The workload of one seed of the ledger simulation: writers, readers, recoverers.

`LedgerWorkload.run()` drives a `SimCluster` through one run while a
`Nemesis` takes its steps.  The workload runs *generations*, one after the
other, as successive leaders of a log would: each generation is a new writer
client that creates a new ledger and streams pipelined appends of random
payloads into it (random pauses, window-bound bursts), until it has written
its entries (then it closes the ledger or abandons it, as planned) or it is
fenced or broken.  A fenced writer tries to go on: it must get
`LedgerFenced` and no further acknowledgement.  Around each writer:

* readers (`recovery=False`), some following the ledger with `tail`, some
  polling the LAC and reading ranges;
* recoverers (`recovery=True`), alone or several at once, most of them while
  the writer still has adds in flight; sometimes their connections are reset
  a moment after they start, so fencing requests are lost in flight.

Readers and recoverers start once the writer has pushed a number of entries
planned in advance (then after a short delay), not at a random time, so they
meet the writer while it writes instead of after it stopped.

Everything observed goes to the ledger's `LedgerChecker` at once; so does
every version of the ledger's metadata (`_MetadataObserver`).  The first
violation anywhere cancels the run.  When the nemesis is done, every fault
ends; then the writers finish, a last recoverer closes each ledger, the
readers reach their ends, and a fresh client reads each closed ledger back.
In a survivable run all of that must happen within `LIVENESS_MS` of virtual
time; a harsh run that does not get there is reported unfinished.

Retries: clients retry retryable errors after a pause that doubles from
retry to retry (`RETRY_DELAY_MS`), for ever while faults last (the run's own
deadline bounds them); a non-retryable error where none is possible is a
violation.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import anyio
import anyio.abc

from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import ReadHandle
from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerMetadata
from bookie.errors import BookieError, LedgerClosed, LedgerFenced
from bookie.meta import ledger_format
from bookie.meta.layout import MetadataLayout
from bookie.testing.ledger_checker import TRACE_TAIL_LINES, InvariantViolation, LedgerChecker
from bookie.testing.ledger_scenario import (
    HARSH_FAULT_WEIGHTS,
    ActorPlan,
    GenerationPlan,
    Scenario,
    SimOptions,
    draw_generation,
)
from bookie.testing.nemesis import Nemesis
from bookie.testing.simcluster import SimCluster, Trace

T = TypeVar("T")

GENERATIONS_MAX = 12
"""Writers (ledgers) one run starts at most, however long its nemesis lasts."""

LIVENESS_MS = 120_000
"""Virtual time a survivable run has, once faults stop, to close its ledgers and read them."""

RETRY_DELAY_MS = (20.0, 2_000.0)
"""A client retries a retryable error after the first pause, doubled at each retry in a row
up to the second (each with up to half of it taken off at random)."""

READ_BATCH_MAX = 16
"""Entries a polling reader or a recoverer asks for at once."""

POLL_INTERVAL_MS = (10.0, 640.0)
"""A polling reader that caught up asks for the LAC again after the first pause; the pause
doubles while nothing new comes, up to the second."""

PASSWORD = b"simulated"


class _Backoff:
    """The pauses of one client between its retries in a row (see `RETRY_DELAY_MS`)."""

    __slots__ = ("_pause_ms", "_rng")

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._pause_ms = RETRY_DELAY_MS[0]

    async def pause(self) -> None:
        await anyio.sleep(self._rng.uniform(0.5, 1.0) * self._pause_ms / 1000)
        self._pause_ms = min(2 * self._pause_ms, RETRY_DELAY_MS[1])

    def reset(self) -> None:
        """Progress was made: the next retry pauses the least again."""
        self._pause_ms = RETRY_DELAY_MS[0]


@dataclass(frozen=True, slots=True)
class LedgerOutcome:
    ledger_id: int
    closed: tuple[int, int] | None
    """(last entry id, length) of the closed ledger; None if it never closed (harsh run)."""
    acknowledged: int
    """Entries acknowledged to its writer."""


class _MetadataObserver:
    """Hands every version of a ledger's metadata record to its checker, as it is written.

    A one-shot watch on the metadata server, re-armed at each firing on a
    session of its own that no fault touches; reading and re-arming happen in
    one synchronous step, so no version is missed.
    """

    def __init__(
        self, cluster: SimCluster, ledger_id: int, name: str, checker: LedgerChecker
    ) -> None:
        self._session = cluster.metadata.session()
        self._path = MetadataLayout(cluster.config.root).ledger(ledger_id)
        self._name = name
        self._checker = checker
        self._trace = cluster.trace
        self._stats = cluster.stats
        self._version = -1
        self._segments = 1

    def start(self) -> None:
        self._observe()

    def close(self) -> None:
        self._session.close()

    def _observe(self) -> None:
        stored = self._session.get(self._path)
        if stored.version != self._version:
            self._version = stored.version
            metadata = ledger_format.decode(stored.value)
            self._trace.record(self._name, f"metadata v{stored.version} {_describe(metadata)}")
            if len(metadata.ensembles) > self._segments:
                self._segments = len(metadata.ensembles)
                self._stats["ensemble-change"] += 1
            try:
                self._checker.on_metadata(metadata, stored.version)
            except InvariantViolation:
                # Recorded, and the run is being cancelled: do not raise into the
                # shell whose metadata operation ran this callback.
                return
        self._session.add_watch(self._path, self._observe)


def _describe(metadata: LedgerMetadata) -> str:
    segments = " ".join(f"{first}:{','.join(ensemble)}" for first, ensemble in metadata.ensembles)
    end = f" last={metadata.last_entry_id} length={metadata.length}" if metadata.is_closed else ""
    return f"{metadata.state.name}{end} [{segments}]"


class LedgerWorkload:
    """The workload of one seed; see the module docstring."""

    def __init__(
        self,
        seed: int,
        replay: str,
        scenario: Scenario,
        options: SimOptions,
        cluster: SimCluster,
    ) -> None:
        self.seed = seed
        self.replay = replay
        self.scenario = scenario
        self.options = options
        self.cluster = cluster
        self.rng = cluster.derive_rng()
        weights = HARSH_FAULT_WEIGHTS if not scenario.survivable else {}
        self.nemesis = Nemesis(
            cluster,
            cluster.derive_rng(),
            kinds={kind: weights.get(kind, 1) for kind in options.faults},
            crashed_max=scenario.crashed_max,
            pause_ms_max=scenario.nemesis_pause_ms_max,
            focus=self._current_ensemble,
        )
        self.ledgers: list[_Ledger] = []
        self.violation: InvariantViolation | None = None
        self._faults_over = anyio.Event()
        self._scope = anyio.CancelScope()

    @property
    def trace(self) -> Trace:
        return self.cluster.trace

    def fail(self, invariant: str, detail: str) -> InvariantViolation:
        violation = InvariantViolation(
            self.seed, invariant, detail, self.trace.tail(TRACE_TAIL_LINES), self.replay
        )
        self.on_violation(violation)
        return violation

    def on_violation(self, violation: InvariantViolation) -> None:
        """The first violation anywhere stops the run (it is raised once the run unwound)."""
        if self.violation is None:
            self.violation = violation
            self._scope.cancel()

    def _current_ensemble(self) -> list[str]:
        if not self.ledgers:
            return []
        metadata = self.ledgers[-1].checker.metadata
        return [] if metadata is None else list(metadata.current_ensemble)

    async def run(self) -> bool:
        """Drive the workload; return whether it finished (see the module docstring)."""
        scenario = self.scenario
        self.trace.record(
            "world",
            f"E={scenario.ensemble_size} Qw={scenario.write_quorum} Qa={scenario.ack_quorum} "
            f"bookies={scenario.world.bookie_count} "
            f"{'survivable' if scenario.survivable else 'harsh'}",
        )
        finished = False
        with self._scope:
            try:
                async with anyio.create_task_group() as actors:
                    writers_done = anyio.Event()
                    actors.start_soon(self._write_generations, actors, writers_done)
                    await self.nemesis.run(self.options.steps)
                    self.nemesis.quiesce()
                    self._faults_over.set()
                    self.trace.record("world", "faults stop")
                    finished = await self._finish(writers_done)
                    actors.cancel_scope.cancel()
            finally:
                for ledger in self.ledgers:
                    ledger.close()
        return finished

    async def _write_generations(
        self, actors: anyio.abc.TaskGroup, writers_done: anyio.Event
    ) -> None:
        budget = self.options.entries_max
        try:
            for number in range(1, GENERATIONS_MAX + 1):
                plan = draw_generation(self.rng, number, self.scenario, budget)
                await self._write_generation(plan, actors)
                budget -= plan.entries
                if self._faults_over.is_set() or budget <= 0:
                    return
        finally:
            writers_done.set()

    async def _write_generation(self, plan: GenerationPlan, actors: anyio.abc.TaskGroup) -> None:
        scenario = self.scenario
        name = f"writer-{plan.number}"
        async with self.cluster.client(name, scenario.client_config) as client:
            handle = await self.retry(
                name,
                lambda: client.create_ledger(
                    scenario.ensemble_size,
                    scenario.write_quorum,
                    scenario.ack_quorum,
                    password=PASSWORD,
                ),
            )
            ledger = _Ledger(self, plan, handle)
            self.ledgers.append(ledger)
            for reader in plan.readers:
                actors.start_soon(ledger.run_actor, ledger.read, reader, ledger.new_actor())
            for recoverer in plan.recoverers:
                actors.start_soon(ledger.run_actor, ledger.recover, recoverer, ledger.new_actor())
            async with anyio.create_task_group() as writer:
                writer.start_soon(ledger.watch_acks)
                await ledger.write()

    async def _finish(self, writers_done: anyio.Event) -> bool:
        """After the faults: every ledger must close, its readers end, its bytes read back."""
        try:
            with anyio.fail_after(LIVENESS_MS / 1000):
                await writers_done.wait()
                for ledger in self.ledgers:
                    await ledger.recover(ActorPlan(f"final-recoverer-{ledger.number}", 0, 0.0))
                for ledger in self.ledgers:
                    await ledger.wait_actors()
                async with self.cluster.client("auditor", self.scenario.client_config) as client:
                    for ledger in self.ledgers:
                        await ledger.read_back(client)
        except TimeoutError:
            if self.scenario.survivable:
                closed = [ledger.checker.closed is not None for ledger in self.ledgers]
                raise self.fail(
                    "liveness",
                    f"not done {LIVENESS_MS} ms after the faults stopped "
                    f"(ledgers closed: {closed})",
                ) from None
            self.trace.record("world", "unfinished: harsh run, safety checked only")
            return False
        for ledger in self.ledgers:
            ledger.checker.check_final()
        return True

    async def retry(
        self,
        name: str,
        attempt: Callable[[], Awaitable[T]],
        *,
        invariant: str = "unexpected-error",
    ) -> T:
        """`attempt()` until it returns; retryable errors are retried after a pause, any
        other breaks `invariant`."""
        backoff = _Backoff(self.rng)
        while True:
            try:
                return await attempt()
            except BookieError as error:
                if not error.retryable:
                    raise self.fail(invariant, f"{name} got a non-retryable {error!r}") from error
                self.trace.record(name, f"retry after {error!r}")
                self.cluster.stats[f"retry-{type(error).__name__}"] += 1
                await backoff.pause()


class _Ledger:
    """One generation: its writer, readers and recoverers, and the checker of its ledger."""

    def __init__(self, run: LedgerWorkload, plan: GenerationPlan, handle: WriteHandle) -> None:
        self.run = run
        self.plan = plan
        self.number = plan.number
        self.handle = handle
        self.ledger_id = handle.ledger_id
        self.name = f"ledger-{self.ledger_id}"
        self.rng = run.rng
        self.trace = run.trace
        self.stats = run.cluster.stats
        self.checker = LedgerChecker(
            run.seed,
            run.trace,
            replay=run.replay,
            ledger_name=f"ledger {self.ledger_id}",
            on_violation=run.on_violation,
        )
        self.checker.attach_writer(lambda: handle.last_add_confirmed)
        self.writer_done = anyio.Event()
        self._pushed = anyio.Event()
        self._actors_done: list[anyio.Event] = []
        self._observer = _MetadataObserver(run.cluster, self.ledger_id, self.name, self.checker)
        self._observer.start()

    def close(self) -> None:
        self._observer.close()

    def outcome(self) -> LedgerOutcome:
        return LedgerOutcome(self.ledger_id, self.checker.closed, self.checker.writer_lac + 1)

    # --- the writer ---------------------------------------------------------------------------

    def _payload(self, index: int) -> bytes:
        size = self.rng.randint(0, self.run.scenario.payload_bytes_max)
        return f"{self.ledger_id}/{index}:".encode() + self.rng.randbytes(size)

    async def write(self) -> None:
        """Stream the generation's entries, then close or abandon the ledger."""
        handle = self.handle
        think_ms_mean = self.plan.think_ms_mean
        writer = f"writer-{self.number}"
        try:
            for index in range(self.plan.entries):
                if think_ms_mean:
                    await anyio.sleep(self.rng.expovariate(1 / think_ms_mean) / 1000)
                await handle.wait_for_capacity()
                payload = self._payload(index)
                entry_id = handle.append_nowait(payload)
                self.checker.on_pushed(entry_id, payload)
                self.trace.record(writer, f"push {entry_id} ({len(payload)} bytes)")
                self._wake_followers()
            await handle.wait_confirmed(handle.last_add_pushed)
            self.checker.on_writer_lac()
            if self.plan.closes:
                await handle.close()
                self.trace.record(writer, f"closed at {handle.last_add_confirmed}")
        except LedgerFenced as error:
            await self._go_on_after_fencing(writer, error)
        except BookieError as error:
            self.trace.record(writer, f"stopped: {error!r}")
            self.stats["writer-broken"] += 1
            self.checker.on_writer_lac()
        finally:
            self.writer_done.set()
            self._wake_followers()

    def _wake_followers(self) -> None:
        self._pushed.set()
        self._pushed = anyio.Event()

    async def _wait_pushed(self, count: int) -> None:
        """Return once the writer pushed `count` entries, or stopped."""
        while len(self.checker.pushed) < count and not self.writer_done.is_set():
            await self._pushed.wait()

    async def watch_acks(self) -> None:
        """Wait for acknowledgements as an application would, and report each LAC seen."""
        handle = self.handle
        while True:
            target = self.checker.writer_lac + 1
            if target > handle.last_add_pushed:
                if self.writer_done.is_set():
                    return
                await self._pushed.wait()
                continue
            try:
                await handle.wait_confirmed(target)
            except LedgerFenced:
                self.checker.on_writer_fenced()
                return
            except BookieError:
                self.checker.on_writer_lac()
                return
            self.checker.on_writer_lac()

    async def _go_on_after_fencing(self, writer: str, error: LedgerFenced) -> None:
        """A fenced writer tries to carry on: every attempt must be refused."""
        handle = self.handle
        self.trace.record(writer, f"fenced: {error}")
        self.stats["writer-fenced"] += 1
        self.checker.on_writer_fenced()
        for _ in range(self.rng.randint(1, 3)):
            try:
                entry_id = handle.append_nowait(b"after fencing")
            except (LedgerFenced, LedgerClosed):
                continue
            except BookieError as refusal:
                raise self.checker.fail(
                    "fenced-writer-stays-fenced", f"an append after fencing raised {refusal!r}"
                ) from refusal
            raise self.checker.fail(
                "fenced-writer-stays-fenced", f"an append after fencing got entry id {entry_id}"
            )
        try:
            await handle.close()
        except (LedgerFenced, LedgerClosed):
            pass
        else:
            raise self.checker.fail("fenced-writer-stays-fenced", "close after fencing succeeded")
        self.checker.on_writer_lac()

    # --- readers and recoverers ---------------------------------------------------------------

    def new_actor(self) -> anyio.Event:
        done = anyio.Event()
        self._actors_done.append(done)
        return done

    async def wait_actors(self) -> None:
        for done in self._actors_done:
            await done.wait()

    async def run_actor(
        self, body: Callable[[ActorPlan], Awaitable[None]], plan: ActorPlan, done: anyio.Event
    ) -> None:
        try:
            await self._wait_pushed(plan.after_entries)
            await anyio.sleep(plan.delay_ms / 1000)
            await body(plan)
        finally:
            done.set()

    async def recover(self, plan: ActorPlan) -> None:
        name = plan.name
        run = self.run
        handle = self.handle
        async with run.cluster.client(name, run.scenario.client_config) as client:
            in_flight = handle.last_add_pushed - handle.last_add_confirmed
            live = not self.writer_done.is_set() and in_flight > 0
            self.trace.record(name, f"recover {self.name} ({in_flight} adds in flight)")
            if live:
                self.stats["recovery-raced-writer"] += 1
            async with anyio.create_task_group() as disturbance:
                if plan.reset_after_ms is not None:
                    peer = None
                    if plan.reset_link_index is not None:
                        ensemble = handle.metadata.current_ensemble
                        # Bookie ids are their hosts' names in the simulated world.
                        peer = ensemble[plan.reset_link_index % len(ensemble)]
                    disturbance.start_soon(run.nemesis.reset_later, name, plan.reset_after_ms, peer)
                recovered = await run.retry(
                    name, lambda: client.open_ledger(self.ledger_id, PASSWORD, recovery=True)
                )
                disturbance.cancel_scope.cancel()
            self.trace.record(name, f"recovered: {_describe(recovered.metadata)}")
            self.stats["recovery"] += 1
            self.checker.on_recovered(name, recovered.metadata)
            last_entry_id = recovered.metadata.last_entry_id
            if last_entry_id >= 0:
                first = self.rng.randint(0, last_entry_id)
                last = min(last_entry_id, first + READ_BATCH_MAX - 1)
                payloads = await run.retry(
                    name, lambda: recovered.read(first, last), invariant="acked-in-closed-ledger"
                )
                self.checker.on_read_back(name, first, payloads)

    async def read_back(self, client: LedgerClient) -> None:
        """A fresh client opens the closed ledger and reads every entry of it."""
        name = "auditor"
        handle = await self.run.retry(
            name, lambda: client.open_ledger(self.ledger_id, PASSWORD, recovery=False)
        )
        self.checker.on_recovered(name, handle.metadata)
        last_entry_id = handle.metadata.last_entry_id
        if last_entry_id >= 0:
            payloads = await self.run.retry(
                name, lambda: handle.read(0, last_entry_id), invariant="acked-in-closed-ledger"
            )
            self.checker.on_read_back(name, 0, payloads)
        self.trace.record(name, f"read back {self.name}: entries 0..{last_entry_id}")

    async def read(self, plan: ActorPlan) -> None:
        name = plan.name
        run = self.run
        async with run.cluster.client(name, run.scenario.client_config) as client:
            handle = await run.retry(
                name, lambda: client.open_ledger(self.ledger_id, PASSWORD, recovery=False)
            )
            self.trace.record(name, f"opened {self.name}, LAC {handle.last_add_confirmed}")
            self._report_lac(name, handle)
            if plan.tail:
                await self._tail(name, handle)
            else:
                handle = await self._poll(name, client, handle)
            self.trace.record(name, f"read to the end ({handle.last_add_confirmed})")
            self.checker.on_reader_done(name)

    def _report_lac(self, name: str, handle: ReadHandle) -> None:
        self.checker.on_reader_lac(name, handle.last_add_confirmed, closed=handle.is_closed)

    def _report_entry(self, name: str, handle: ReadHandle, entry_id: int, payload: bytes) -> None:
        self._report_lac(name, handle)
        self.trace.record(name, f"read {entry_id} (LAC {handle.last_add_confirmed})")
        self.checker.on_reader_entry(
            name, entry_id, payload, handle.last_add_confirmed, in_order=True
        )

    async def _tail(self, name: str, handle: ReadHandle) -> None:
        backoff = _Backoff(self.rng)
        async with handle.tail(0) as entries:
            while True:
                try:
                    entry = await anext(entries)
                except StopAsyncIteration:
                    return
                except BookieError as error:
                    await self._pause_after(name, error, backoff)
                    continue
                backoff.reset()
                self._report_entry(name, handle, entry.entry_id, entry.payload)

    async def _poll(self, name: str, client: LedgerClient, handle: ReadHandle) -> ReadHandle:
        """Read up to the LAC, ask for the LAC again, ...; return the handle that saw the end."""
        next_entry_id = 0
        backoff = _Backoff(self.rng)
        pause_ms, pause_ms_max = POLL_INTERVAL_MS
        while not (handle.is_closed and next_entry_id > handle.last_add_confirmed):
            try:
                if next_entry_id <= handle.last_add_confirmed:
                    last = min(handle.last_add_confirmed, next_entry_id + READ_BATCH_MAX - 1)
                    for entry in await handle.read_entries(next_entry_id, last):
                        self._report_entry(name, handle, entry.entry_id, entry.payload)
                    next_entry_id = last + 1
                    pause_ms = POLL_INTERVAL_MS[0]
                    backoff.reset()
                    continue
                await anyio.sleep(pause_ms / 1000)
                pause_ms = min(2 * pause_ms, pause_ms_max)
                metadata = await client.ledger_metadata(self.ledger_id)
                if metadata.is_closed:
                    # A closed handle knows the end; this one would poll a LAC for ever.
                    handle = await client.open_ledger(self.ledger_id, PASSWORD, recovery=False)
                else:
                    await handle.read_last_add_confirmed()
                self._report_lac(name, handle)
            except BookieError as error:
                await self._pause_after(name, error, backoff)
        return handle

    async def _pause_after(self, name: str, error: BookieError, backoff: _Backoff) -> None:
        """A reader's error: retryable ones are waited out; others mean a confirmed entry
        could not be read."""
        if not error.retryable:
            raise self.checker.fail(
                "confirmed-entry-readable", f"{name} could not read on: {error!r}"
            ) from error
        self.trace.record(name, f"retry after {error!r}")
        self.stats[f"retry-{type(error).__name__}"] += 1
        await backoff.pause()
