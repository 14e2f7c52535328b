"""The seeded whole-cluster simulation of the state-machine framework: run, check, replay.

One seed is one run (`run_seed`): a world of 3-5 bookies (`SimCluster`), three
replicas of a key-value `SimStore` and 2-3 clients (`RsmCluster`,
`KvWorkload`), with every knob that matters drawn from the seed
(`draw_scenario`: latencies, fsync times, session timeouts, batching, segment
size so rollovers happen, ledger and client timeouts, the bounds of the
replicas' session table).  While an
`RsmNemesis` takes its steps (replica and bookie crashes, partitions of every
shape, connection resets, session expiry of the leader or a follower,
graceful transfers, latency spikes, slow disks), the clients send random
key-value operations, each recorded in a history.  Then every fault ends,
the clients stop, each client makes one more write, and every running replica
must catch up with the leader: that is the liveness check, and it must pass
within `LIVENESS_MS` of virtual time.  Then the replicas stop abruptly and
the final log is read and replayed by a fresh host.

The invariants, by the name a failure reports:

1. `replica-failed`: no replica incarnation stops with an error (a replica
   that refuses to diverge stops: I3 failed somewhere).
2. `applied-prefix`: every incarnation's applied sequence (index, epoch, op,
   result of each command) is a contiguous run of the canonical one, the
   final log replayed through a fresh `Applier` (I3; prefix consistency): it
   starts at the log's first command, or, for an incarnation that started
   from a snapshot, right after the snapshot's index; `final-state`: once
   every replica caught up, each replica's state hash equals the canonical
   replay's (a snapshot that restored a wrong state is caught here).
3. `applied-once`: no op is applied twice in the canonical sequence, although
   a retry may be logged twice (session dedup); `acknowledged-in-log`: every
   command acknowledged to a client is in it exactly once, with the answer the
   client got (I2: acknowledged means durable).
4. `one-leader-per-epoch`: within an epoch, commands were applied as leader
   (that is, acknowledged by Qa bookies to that leader) by one replica only,
   the one whose leader-start marker opens the epoch; `epochs-increase`: the
   epochs of the log's segments never decrease (I4).
5. `linearizable`: the client history is linearizable per key (Wing & Gong
   with Lowe's memoization, `rsm.testing.check_per_key`; indeterminate
   operations as INFO).  A check that runs out of budget is counted
   (`linearizability-unknown`), not failed.
6. `liveness`: the final writes are acknowledged and every replica catches
   up with the leader after the faults stop (a client that had to give its
   final write up because its session expired writes once more, and that
   write must be acknowledged).

7. `serves-while-down`, in runs whose faults include machine crashes: once
   the nemesis' steps are done, every fault but the crashes ends; then, if at
   most Qa - 1 bookies are down (so every acknowledged entry has a copy up),
   at least Qa are up (E with striping, Qw < E: a recovery then re-adds an
   entry whose write set lost a bookie onto one outside the ensemble) and at
   least one replica is, a write must be acknowledged within
   `SERVE_WHILE_DOWN_MS` of virtual time, before anything that crashed is
   restarted (degraded segments: rsm/runtime/segment_ledger.py).

8. `re-replicated`, in runs whose faults include losing a bookie for good
   (`RsmFault.BOOKIE_LOSS`; such runs have a bookie more than the ledgers'
   ensemble size and run a standalone autorecovery on a host of its own):
   after the liveness check, within `RE_REPLICATED_MS` of virtual time, no
   sealed segment of any ledger names the lost bookie, every entry of every
   sealed segment is on at least Qa bookies of its write set that are up, and
   no closed ledger is still marked under-replicated.

What is replicated and who calls it is the run's `Application`: by default
(`FRAMEWORK`) the `SimStore` called by the framework's own clients
(`KvWorkload`); another application brings its state machine, what runs beside
each replica (its own server) and its clients, and `main` gives it this
command line (`kvstore.testing.kv_sim` is one).  Its commands must be observed
as `Applied` records whose `op` is unique per command (a retry logged twice
and applied once counts once), and its clients' history must be key-value
operations (`KvModel`).

Some fault kinds are asked for by name only (`--faults KIND,...`; the default
set is `ALL_FAULTS`, so that every seed recorded before them replays as it
did): machine crashes (invariant 7), a bookie lost for good (invariant 8), and
stalls (`--faults stall`: one bookie, two bookies at once or the leader
stopped by SIGSTOP and resumed, `rsm.testing.nemesis`), which every invariant
above covers as it is.

A run is a pure function of (seed, options): two runs of one seed give equal
traces, which is how a failure is replayed.  `python -m rsm.testing.rsm_sim
--seeds N [--first S]` runs seeds in a row and prints a summary, and for each
failure the seed, the invariant and the command that replays it.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from bookie import limits as bookie_limits
from bookie.autorecovery.settings import AutoRecoverySettings
from bookie.client.config import ClientConfig as LedgerConfig
from bookie.core.rereplication import segment_ranges
from bookie.errors import NoSuchLedgerError
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from bookie.testing.ledger_checker import TRACE_TAIL_LINES, InvariantViolation
from bookie.testing.seeds import (
    parse_seed_arguments,
    print_failure,
    run_command_line,
    run_each,
    seed_parser,
)
from bookie.testing.simcluster import SimCluster, Trace, WorldConfig
from bookie.testing.simloop import run_simulation
from rsm import limits
from rsm.client import ClientConfig as RsmClientConfig
from rsm.config import ReplicaConfig
from rsm.errors import RsmError
from rsm.testing.cluster import Beside, FinalLog, MachineFactory, RsmCluster, events_traced
from rsm.testing.history import History, HistoryRecorder, Value
from rsm.testing.linearizability import Verdict, check_per_key
from rsm.testing.models import KvModel, kv_key
from rsm.testing.nemesis import ALL_FAULTS, RsmFault, RsmNemesis
from rsm.testing.workload import Applied, KvWorkload, WorkloadPlan, observed_store

__all__ = [
    "FRAMEWORK",
    "Application",
    "RunReport",
    "Scenario",
    "SimOptions",
    "Summary",
    "Workload",
    "draw_scenario",
    "main",
    "replay_command",
    "run_seed",
    "run_seeds",
]

STEPS_DEFAULT = 8
"""Nemesis steps per seed unless told otherwise."""

OPS_PER_STEP = 12
"""Client operations per nemesis step, all clients together: what keeps a seed near a second."""

NEMESIS_PAUSES_MS_MAX = (50.0, 300.0, 1_000.0, 3_000.0)
"""The longest pause between two nemesis steps is one of these."""

START_MS = 30_000
"""Virtual time within which the first leader must serve."""

LIVENESS_MS = 90_000
"""Virtual time, after the faults stop, within which the clients and replicas must be done."""

SERVE_WHILE_DOWN_MS = 60_000
"""Virtual time within which a store with machines down but enough bookies and a replica up
must acknowledge a write (invariant 7)."""

PROBE_ATTEMPT_MS = 5_000
"""How long invariant 7's write waits on one leader before it asks again."""

RE_REPLICATED_MS = 120_000
"""Virtual time, after the liveness check, within which autorecovery must have copied a lost
bookie's share elsewhere (invariant 8)."""

RE_REPLICATED_POLL_S = 0.5
"""How often (virtual time) invariant 8 looks at the ledgers again."""

STALL_BOOKIE_SESSION_TIMEOUTS_MS = (bookie_limits.zk_session_timeout_ms_default, 60_000)
"""In runs with stalls, the bookies' session timeout is one of these or the one drawn for every
run: stalls of two bookies then last as long as a client's deadline and more, and the bookies
stay registered throughout."""

RUN_MS_MAX = 3_600_000
"""Virtual time after which a run is stuck (a bug)."""

POLL_S = 0.01
"""How often (virtual time) the run looks whether the replicas caught up."""

LINEARIZABILITY_NODES_MAX = 2_000_000

REPLICAS = 3

AUTORECOVERY_HOST = "autorecovery"
"""The host of the standalone autorecovery of runs that lose a bookie (invariant 8)."""


class Workload(Protocol):
    """The clients of one run, as `run_seed` drives and checks them (`KvWorkload` is one)."""

    recorder: HistoryRecorder
    """Every call, on the virtual clock: key-value operations (`KvModel`)."""
    acknowledged: dict[str, tuple[str, Value]]
    """Op label -> (kind, the answer) of commands acknowledged to a client."""
    stats: Counter[str]

    def running(self) -> AbstractAsyncContextManager[None]:
        """The clients call for the block; leaving it waits for the calls in flight."""
        ...

    def stop(self) -> None:
        """Start no new call."""
        ...

    async def wait_idle(self) -> None:
        """Return once no call is in flight (after `stop`)."""
        ...

    async def final_round(self) -> list[str]:
        """One more write per client after the faults; the clients whose write failed."""
        ...


@dataclass(frozen=True, slots=True)
class Application:
    """What a run replicates and who calls it (see the module docstring)."""

    command: str
    """The command line that runs it (`main`'s), for the replay command."""
    machine: MachineFactory
    workload: Callable[[Scenario, RsmCluster, random.Random], Workload]
    """The clients of a run (given their own `Random`)."""
    beside: Callable[[Scenario], Beside | None] = lambda _scenario: None
    """What runs beside each replica incarnation (`RsmCluster.beside`)."""
    scenario: Callable[[Scenario], Scenario] = lambda scenario: scenario
    """What the application changes in the scenario a seed drew (`draw_scenario`)."""


def _framework_clients(scenario: Scenario, cluster: RsmCluster, rng: random.Random) -> Workload:
    return KvWorkload(scenario.workload, rng, cluster.trace, cluster.client)


FRAMEWORK = Application("python -m rsm.testing.rsm_sim", observed_store, _framework_clients)
"""The `SimStore`, called by the framework's own clients."""


@dataclass(frozen=True, slots=True)
class SimOptions:
    """What a run depends on besides its seed (all of it goes into the replay command)."""

    steps: int = STEPS_DEFAULT
    faults: tuple[RsmFault, ...] = ALL_FAULTS
    application: Application = FRAMEWORK

    def __post_init__(self) -> None:
        assert self.steps >= 0


def replay_command(seed: int, options: SimOptions) -> str:
    """The command line that runs exactly this seed again, with its trace."""
    words = [options.application.command, f"--seeds 1 --first {seed} --steps {options.steps}"]
    if options.faults != ALL_FAULTS:
        words.append("--faults " + ",".join(kind.value for kind in options.faults))
    words.append("--verbose")
    return " ".join(words)


# --- what a seed decides ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a seed decides before the run starts."""

    world: WorldConfig
    replica_config: ReplicaConfig
    ledger_config: LedgerConfig
    client_config: RsmClientConfig
    session_timeout_ms: int
    """The replicas' and clients' metadata sessions expire this long after a cut or a crash."""
    workload: WorkloadPlan
    replicas_down_max: int
    bookies_down_max: int
    nemesis_pause_ms_max: float
    lease_clock_rates: tuple[float, ...]
    """Per replica: how fast its lease clock runs against virtual time, within the bound
    (`limits.lease_clock_rate_error`) that a successor's wait for a read lease assumes."""


def draw_scenario(rng: random.Random, options: SimOptions) -> Scenario:
    """The scenario of one seed (`rng` is the seed's own `Random`)."""
    bookie_count = rng.choice([3, 4, 5])
    ensemble_size, write_quorum, ack_quorum = rng.choice([(3, 3, 2), (3, 3, 2), (3, 2, 2)])
    latency_ms_min, latency_ms_max = rng.choice([(0.05, 1.0), (0.1, 3.0), (0.5, 10.0)])
    fsync_ms_min, fsync_ms_max = rng.choice([(0.05, 0.5), (0.2, 2.0), (1.0, 8.0)])
    world = WorldConfig(
        bookie_count=bookie_count,
        latency_ms_min=latency_ms_min,
        latency_ms_max=latency_ms_max,
        fsync_ms_min=fsync_ms_min,
        fsync_ms_max=fsync_ms_max,
        connect_timeout_ms=rng.choice([200, 1_000]),
        bookie_session_timeout_ms=rng.choice([500, 2_000]),
    )
    replica_config = ReplicaConfig(
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        pipeline_batches_max=rng.choice([1, 2, 4]),
        batch_commands_max=rng.choice([1, 4, 4_096]),
        segment_entries_max=rng.choice([5, 25, 100_000]),
        retry_delay_ms=rng.choice([20, 100]),
        transfer_wait_ms_max=rng.choice([1_000, 5_000]),
        stop_drain_ms_max=2_000,
        # Snapshots are taken inline (a fork cannot run on the virtual-time loop),
        # often in half the runs so restarts and lagging followers load them (no
        # gate on the log's growth: it would space them out by the state's size).
        # The log is not truncated: the final check replays it from its first index.
        snapshot_capture="inline",
        snapshot_every_commands=rng.choice([10, 30, limits.snapshot_every_commands_default]),
        snapshot_log_growth_percent=0,
        snapshot_check_interval_ms=rng.choice([100, 500]),
        truncation=False,
    )
    read_timeout_ms = rng.choice([500, 2_000])
    ledger_config = LedgerConfig(
        add_timeout_ms=rng.choice([300, 1_000, 2_000]),
        read_timeout_ms=read_timeout_ms,
        speculative_read_timeout_ms=rng.randint(50, read_timeout_ms - 1),
        connect_timeout_ms=rng.choice([200, 1_000]),
        explicit_lac_interval_ms=rng.choice([10, 50]),
        long_poll_timeout_ms=rng.choice([200, 1_000]),
        tail_retry_delay_ms=rng.choice([20, 100]),
        metadata_retry_delay_ms=rng.choice([20, 100]),
    )
    attempt_timeout_ms = rng.choice([300, 1_000, 3_000])
    client_config = RsmClientConfig(
        attempt_timeout_ms=attempt_timeout_ms,
        deadline_ms=rng.choice([10_000, 30_000]),
        connect_timeout_ms=min(attempt_timeout_ms, 1_000),
        outstanding_commands_max=rng.choice([2, 1_000]),
    )
    nemesis_pause_ms_max = rng.choice(NEMESIS_PAUSES_MS_MAX)
    clients = rng.choice([2, 3])
    slots = rng.choice([1, 2])
    ops_max = OPS_PER_STEP * max(options.steps, 1)
    # The clients spread their operations over the nemesis' lifetime, so that
    # faults keep meeting clients that call.
    nemesis_ms = options.steps * nemesis_pause_ms_max / 2
    workload = WorkloadPlan(
        clients=clients,
        slots=slots,
        keys=rng.choice([1, 2, 3]),
        ops_max=ops_max,
        think_ms_mean=rng.uniform(0.3, 1.0) * nemesis_ms * clients * slots / ops_max,
        read_fraction=rng.choice([0.1, 0.3]),
    )
    if RsmFault.BOOKIE_LOSS in options.faults:
        # A bookie to spare once one is lost, so that every segment can be repaired.
        world = dataclasses.replace(world, bookie_count=max(bookie_count, ensemble_size + 1))
    # Drawn last, so that the draws above stay what they were before leases.
    replica_config = dataclasses.replace(replica_config, read_lease_ms=rng.choice([0, 200, 2_000]))
    error = limits.lease_clock_rate_error
    lease_clock_rates = tuple(
        rng.choice([1 - error, 1.0, 1 + error, rng.uniform(1 - error, 1 + error)])
        for _ in range(REPLICAS)
    )
    # The session table's bounds, in some runs as tight as rsm/limits.py allows against
    # the clients' settings: a session per client, idle times just past a client's
    # deadline in logged time (which may run `logged_time_rate_max` times as fast), results
    # for just its open commands.  Drawn from a generator of their own,
    # seeded from this one's state without drawing from it, so that every other draw of
    # the seed, and its run, stay what they were before (the seeds of the regression
    # tests still replay their bugs).
    bounds = random.Random(repr(rng.getstate()))
    session_wait_ms = int(client_config.deadline_ms * limits.logged_time_rate_max) + 1_000
    replica_config = dataclasses.replace(
        replica_config,
        sessions_max=bounds.choice([limits.sessions_max_default, clients]),
        session_ttl_ms=bounds.choice([limits.session_ttl_ms_default, session_wait_ms]),
        session_evict_idle_ms=bounds.choice(
            [limits.session_evict_idle_ms_default, session_wait_ms]
        ),
        session_results_max=bounds.choice(
            [limits.session_results_max_default, client_config.outstanding_commands_max]
        ),
    )
    if RsmFault.STALL in options.faults:
        # Bookies whose registration outlives a stall as long as a client's deadline, as
        # with the bookies' default session timeout or tests/integration/test_stalled_bookies.py's
        # (in some runs): drawn from a generator of its own, as the bounds above are.
        stalls = random.Random(repr(rng.getstate()) + " stalls")
        world = dataclasses.replace(
            world,
            bookie_session_timeout_ms=stalls.choice(
                [world.bookie_session_timeout_ms, *STALL_BOOKIE_SESSION_TIMEOUTS_MS]
            ),
        )
    return Scenario(
        world=world,
        replica_config=replica_config,
        ledger_config=ledger_config,
        client_config=client_config,
        session_timeout_ms=rng.choice([500, 1_500, 4_000]),
        workload=workload,
        replicas_down_max=rng.choice([1, 2]),
        bookies_down_max=rng.choice([1, 1, 2]),
        nemesis_pause_ms_max=nemesis_pause_ms_max,
        lease_clock_rates=lease_clock_rates,
    )


# --- one run ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunReport:
    """What one run did; two runs of one seed give equal reports."""

    seed: int
    scenario: Scenario
    trace: tuple[str, ...]
    stats: dict[str, int]
    acknowledged: int
    log_end_index: int
    operations: int
    verdict: Verdict


@dataclass(slots=True)
class _Outcome:
    """What the run saw, for the checks."""

    final: FinalLog | None = None
    final_hashes: dict[str, tuple[int, bytes]] = field(default_factory=dict)
    """Replica label -> (applied index, state hash) once every replica caught up."""
    history: History = ()
    liveness: str | None = None
    """Why liveness failed, or None."""
    serving: str | None = None
    """Why the store did not serve while machines were down (invariant 7), or None."""
    re_replicated: str | None = None
    """What a lost bookie left under-replicated (invariant 8), or None."""


def run_seed(seed: int, options: SimOptions | None = None) -> RunReport:
    """Run one seed; raise `InvariantViolation` if it breaks an invariant (see the module)."""
    options = SimOptions() if options is None else options
    rng = random.Random(seed)
    scenario = options.application.scenario(draw_scenario(rng, options))
    trace = Trace()
    replay = replay_command(seed, options)
    stats: Counter[str] = Counter()
    outcome = _Outcome()

    def violation(invariant: str, detail: str) -> InvariantViolation:
        found = InvariantViolation(seed, invariant, detail, trace.tail(TRACE_TAIL_LINES), replay)
        return found.with_trace(trace.lines)

    async def main() -> tuple[RsmCluster, Workload]:
        with anyio.fail_after(RUN_MS_MAX / 1000):
            async with SimCluster.start(
                random.Random(rng.getrandbits(64)), scenario.world, trace
            ) as world:
                with events_traced(trace, world.stats):
                    cluster, workload = await _run(world, scenario, rng, options, outcome)
                    outcome.final = await cluster.read_log()
                _trace_applied(trace, cluster, outcome.final)
                stats.update(world.stats)
                stats.update(workload.stats)
                trace.record("world", f"end: fingerprint {world.fingerprint()}")
        return cluster, workload

    try:
        cluster, workload = run_simulation(main)
    except InvariantViolation as found:
        found.with_trace(trace.lines)
        raise
    except Exception as error:
        raise violation("unexpected-error", repr(error)) from error
    final = outcome.final
    assert final is not None
    for invariant, detail in _problems(cluster, workload, final, outcome.final_hashes):
        raise violation(invariant, detail)
    if outcome.serving is not None:
        raise violation("serves-while-down", outcome.serving)
    if outcome.liveness is not None:
        raise violation("liveness", outcome.liveness)
    if outcome.re_replicated is not None:
        raise violation("re-replicated", outcome.re_replicated)
    result = check_per_key(outcome.history, KvModel(), kv_key, nodes_max=LINEARIZABILITY_NODES_MAX)
    if result.verdict is Verdict.NOT_LINEARIZABLE:
        raise violation("linearizable", result.explain())
    if result.verdict is Verdict.UNKNOWN:
        stats["linearizability-unknown"] += 1
    duplicates = (
        final.command_items - len(final.applied) - final.sessions_expired - final.overloaded
    )
    if duplicates:
        stats["retry-deduplicated"] += duplicates
    if final.sessions_expired:
        stats["session-expired-refused"] += final.sessions_expired
    if final.overloaded:
        stats["overloaded-refused"] += final.overloaded
    return RunReport(
        seed=seed,
        scenario=scenario,
        trace=tuple(trace.lines),
        stats=dict(sorted(stats.items())),
        acknowledged=len(workload.acknowledged),
        log_end_index=final.end_index,
        operations=len(outcome.history),
        verdict=result.verdict,
    )


async def _run(
    world: SimCluster,
    scenario: Scenario,
    rng: random.Random,
    options: SimOptions,
    outcome: _Outcome,
) -> tuple[RsmCluster, Workload]:
    application = options.application
    cluster = RsmCluster(
        world,
        replica_config=scenario.replica_config,
        ledger_config=scenario.ledger_config,
        client_config=scenario.client_config,
        session_timeout_ms=scenario.session_timeout_ms,
        replica_count=REPLICAS,
        lease_clock_rates=scenario.lease_clock_rates,
        machine=application.machine,
        beside=application.beside(scenario),
    )
    workload = application.workload(scenario, cluster, random.Random(rng.getrandbits(64)))
    nemesis = RsmNemesis(
        cluster,
        random.Random(rng.getrandbits(64)),
        kinds=dict.fromkeys(options.faults, 1),
        replicas_down_max=scenario.replicas_down_max,
        bookies_down_max=scenario.bookies_down_max,
        pause_ms_max=scenario.nemesis_pause_ms_max,
    )
    async with cluster.running(), anyio.create_task_group() as autorecovery:
        if RsmFault.BOOKIE_LOSS in options.faults:
            autorecovery.start_soon(
                world.run_autorecovery, AUTORECOVERY_HOST, _autorecovery_settings(scenario)
            )
        try:
            with anyio.fail_after(START_MS / 1000):
                await _wait_for(lambda: cluster.leader() is not None)
        except TimeoutError:
            outcome.liveness = f"no leader served within {START_MS} ms of the start"
            return cluster, workload
        async with workload.running():
            await nemesis.run(options.steps)
            if RsmFault.MACHINE_CRASH in options.faults:
                outcome.serving = await _serves_while_down(world, cluster, scenario, nemesis)
            nemesis.quiesce()
            world.trace.record("world", "faults stopped")
            workload.stop()
            try:
                with anyio.fail_after(LIVENESS_MS / 1000):
                    await workload.wait_idle()
                    failed = await workload.final_round()
                    if failed:
                        outcome.liveness = f"the final writes of {failed} were not acknowledged"
                    else:
                        await _wait_for(lambda: _caught_up(cluster))
                        outcome.final_hashes = _state_hashes(cluster)
            except TimeoutError:
                outcome.liveness = (
                    f"the clients and replicas were not done {LIVENESS_MS} ms after the faults "
                    f"stopped (applied: {_applied_indexes(cluster)})"
                )
            if nemesis.bookies_lost and outcome.liveness is None:
                outcome.re_replicated = await _re_replicated(world, nemesis.bookies_lost)
        outcome.history = workload.recorder.history()
        autorecovery.cancel_scope.cancel()
    return cluster, workload


def _autorecovery_settings(scenario: Scenario) -> AutoRecoverySettings:
    """What the run's standalone autorecovery runs with: short grace periods and retries, so
    that it copies within invariant 8's bound."""
    return AutoRecoverySettings(
        owner=AUTORECOVERY_HOST,
        root=scenario.world.root,
        grace_ms=1_000,
        poll_interval_ms=200,
        audit_interval_ms=5_000,
        open_ledger_grace_ms=10_000,
        retry_delay_ms_max=5_000,
        passwords=(b"", scenario.replica_config.ledger_password),
        timeout_ms=scenario.ledger_config.read_timeout_ms,
    )


async def _re_replicated(world: SimCluster, lost: Sequence[str]) -> str | None:
    """Invariant 8: what is still under-replicated `RE_REPLICATED_MS` after it started to
    look, or None once nothing is."""
    problem: str | None = "not looked at"
    with anyio.move_on_after(RE_REPLICATED_MS / 1000):
        while problem is not None:
            problem = await _under_replicated(world, lost)
            if problem is not None:
                await anyio.sleep(RE_REPLICATED_POLL_S)
    if problem is None:
        world.trace.record("world", "re-replicated")
        world.stats["re-replicated"] += 1
        return None
    return f"{problem} {RE_REPLICATED_MS} ms after the liveness check"


async def _under_replicated(world: SimCluster, lost: Sequence[str]) -> str | None:
    """The first thing found under-replicated (invariant 8), or None."""
    root = world.config.root
    async with world.metadata.client() as store:
        ledgers = LedgerManager(store, root)
        marks = UnderReplication(store, root)
        for ledger_id in await ledgers.list_ledgers():
            try:
                metadata, _version = await ledgers.read(ledger_id)
            except NoSuchLedgerError:
                continue
            for first, last, ensemble in segment_ranges(metadata):
                named = [bookie_id for bookie_id in ensemble if bookie_id in lost]
                if named:
                    return f"ledger {ledger_id}: its segment from entry {first} names {named}"
                for entry_id in range(first, last + 1):
                    write_set = [ensemble[i] for i in metadata.quorum.write_set(entry_id)]
                    holders = [
                        bookie_id
                        for bookie_id in world.holders(ledger_id, entry_id)
                        if bookie_id in write_set and world.bookies[bookie_id].up
                    ]
                    if len(holders) < metadata.ack_quorum:
                        return f"ledger {ledger_id}: entry {entry_id} is on {holders} only"
            if metadata.is_closed and await marks.read_mark(ledger_id) is not None:
                return f"ledger {ledger_id} is closed and still marked"
    return None


async def _serves_while_down(
    world: SimCluster, cluster: RsmCluster, scenario: Scenario, nemesis: RsmNemesis
) -> str | None:
    """Invariant 7: why the store did not acknowledge a write in time, or None."""
    nemesis.end_transient_faults()
    config = scenario.replica_config
    bookies_down = len(nemesis.bookies_down)
    bookies_up = sum(1 for bookie in world.bookies.values() if bookie.up)
    # With striping (Qw < E), recovering a ledger re-adds an entry whose write set lost a
    # bookie onto one outside the ensemble, so E bookies must be up; with Qw = E, Qa do.
    needed = (
        config.ack_quorum if config.write_quorum == config.ensemble_size else (config.ensemble_size)
    )
    if bookies_down > config.ack_quorum - 1 or bookies_up < needed or not cluster.up():
        world.stats["serve-while-down-not-required"] += 1
        return None
    world.trace.record("world", f"a write must be acknowledged, {bookies_down} bookie(s) down")
    started_s = anyio.current_time()
    # In process on the leader, without a session: a client's session could be refused
    # by a session table sized to the workload's clients.
    with anyio.move_on_after(SERVE_WHILE_DOWN_MS / 1000):
        for attempt in itertools.count():
            leader = cluster.leader()
            replica = None if leader is None else leader.replica
            if replica is None:
                await anyio.sleep(POLL_S)
                continue
            with anyio.move_on_after(PROBE_ATTEMPT_MS / 1000):
                try:
                    await replica.call("kv", "set", "prober", ["written"], f"prober-{attempt}")
                except RsmError:
                    await anyio.sleep(POLL_S)
                    continue
                waited_ms = round((anyio.current_time() - started_s) * 1000)
                world.trace.record("world", f"served while down after {waited_ms} ms")
                world.stats["serve-while-down"] += 1
                return None
    return (
        f"no write acknowledged within {SERVE_WHILE_DOWN_MS} ms with {bookies_down} bookie(s) "
        f"down and replicas {[replica.name for replica in cluster.up()]} up"
    )


async def _wait_for(condition: Callable[[], bool]) -> None:
    """Let the simulation run until `condition()` holds (bounded by the caller)."""
    while not condition():
        await anyio.sleep(POLL_S)


def _caught_up(cluster: RsmCluster) -> bool:
    """A leader serves, and every replica has applied what it applied."""
    leader = cluster.leader()
    if leader is None or leader.replica is None:
        return False
    index = leader.replica.applied_index
    return all(
        replica.replica is not None and replica.replica.applied_index == index
        for replica in cluster.replicas.values()
    )


def _state_hashes(cluster: RsmCluster) -> dict[str, tuple[int, bytes]]:
    """Each running replica's applied index and state hash."""
    hashes: dict[str, tuple[int, bytes]] = {}
    for sim in cluster.replicas.values():
        replica = sim.replica
        if replica is not None:
            hashes[sim.label] = (replica.applied_index, replica.machine.state_hash())
    return hashes


def _applied_indexes(cluster: RsmCluster) -> dict[str, int | None]:
    return {
        replica.label: replica.replica.applied_index if replica.replica is not None else None
        for replica in cluster.replicas.values()
    }


def _trace_applied(trace: Trace, cluster: RsmCluster, final: FinalLog) -> None:
    trace.record("checker", f"log: {final.log.segments}")
    for label, applied in [("canonical", list(final.applied)), *cluster.applied.items()]:
        last = applied[-1].index if applied else 0
        digest = zlib.crc32(repr(applied).encode())
        trace.record("checker", f"{label} applied {len(applied)} commands to {last} ({digest:08x})")


def _problems(
    cluster: RsmCluster,
    workload: Workload,
    final: FinalLog,
    final_hashes: dict[str, tuple[int, bytes]],
) -> list[tuple[str, str]]:
    """Every broken invariant of 1-4 (see the module docstring), as (name, detail)."""
    problems = [("replica-failed", failure) for failure in cluster.failures]
    canonical = list(final.applied)
    position = {applied.index: number for number, applied in enumerate(canonical)}
    for label, sequence in cluster.applied.items():
        start = position.get(sequence[0].index, -1) if sequence else 0
        if start > 0 and not cluster.loaded_snapshot(label):
            start = -1
        if start < 0 or sequence != canonical[start : start + len(sequence)]:
            problems.append(
                ("applied-prefix", _first_difference(label, sequence, canonical[max(start, 0) :]))
            )
    for label, (index, state_hash) in final_hashes.items():
        if index == final.end_index and state_hash != final.state_hash:
            problems.append(
                (
                    "final-state",
                    f"{label} at index {index} hashes {state_hash.hex()[:16]}, "
                    f"the log's replay {final.state_hash.hex()[:16]}",
                )
            )
    by_op: dict[str, Applied] = {}
    for applied in canonical:
        if applied.op in by_op:
            problems.append(
                ("applied-once", f"op {applied.op} applied at {by_op[applied.op]} and {applied}")
            )
        by_op[applied.op] = applied
    for op, (kind, answer) in workload.acknowledged.items():
        found = by_op.get(op)
        if found is None:
            problems.append(("acknowledged-in-log", f"acknowledged {kind} {op} is not in the log"))
        elif (found.kind, found.result) != (kind, answer):
            problems.append(
                (
                    "acknowledged-in-log",
                    f"{op} answered {kind} -> {answer!r}, the log applies {found}",
                )
            )
    for epoch, leaders in sorted(cluster.leaders.items()):
        marker = final.markers.get(epoch)
        if len(leaders) > 1 or (marker is not None and leaders != [marker]):
            problems.append(
                (
                    "one-leader-per-epoch",
                    f"epoch {epoch}: applied as leader by {leaders}, its marker names {marker}",
                )
            )
    epochs = [segment.epoch for segment in final.log.segments]
    if epochs != sorted(epochs) or (epochs and epochs[-1] > final.log.epoch):
        problems.append(
            ("epochs-increase", f"segment epochs {epochs}, log epoch {final.log.epoch}")
        )
    return problems


def _first_difference(label: str, applied: list[Applied], canonical: list[Applied]) -> str:
    for position, (mine, theirs) in enumerate(zip(applied, canonical, strict=False)):
        if mine != theirs:
            return f"{label}'s command #{position + 1} is {mine}, the log's is {theirs}"
    return f"{label} applied {len(applied)} commands, the log has only {len(canonical)}"


# --- command line -----------------------------------------------------------------------------


@dataclass(slots=True)
class Summary:
    """What a sequence of runs did, for the command line and the tests."""

    runs: int = 0
    acknowledged: int = 0
    operations: int = 0
    stats: Counter[str] = field(default_factory=Counter)
    failures: list[InvariantViolation] = field(default_factory=list)

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.acknowledged += report.acknowledged
        self.operations += report.operations
        self.stats.update(report.stats)

    def lines(self) -> list[str]:
        lines = [
            f"{self.runs} runs, {len(self.failures)} failed, {self.operations} client operations, "
            f"{self.acknowledged} commands acknowledged",
            "faults and events: "
            + ", ".join(f"{name}={count}" for name, count in sorted(self.stats.items())),
        ]
        for failure in self.failures:
            lines.append(f"FAILED seed {failure.seed} ({failure.invariant}): {failure.replay}")
        return lines


def run_seeds(
    seeds: Sequence[int],
    options: SimOptions,
    *,
    on_report: Callable[[RunReport], None] = lambda _report: None,
    on_failure: Callable[[InvariantViolation], None] = lambda _failure: None,
) -> Summary:
    """Run each seed; a failure is collected (and reported) and the next seed runs."""
    return run_each(
        seeds,
        lambda seed: run_seed(seed, options),
        Summary(),
        on_report=on_report,
        on_failure=on_failure,
    )


def main(argv: Sequence[str] | None = None, application: Application = FRAMEWORK) -> int:
    parser = seed_parser(
        application.command,
        "Seeded whole-cluster simulation of replicated state machines under faults.",
        steps_default=STEPS_DEFAULT,
        kinds=RsmFault,
        all_faults=ALL_FAULTS,
    )
    arguments = parse_seed_arguments(parser, argv)
    options = SimOptions(steps=arguments.steps, faults=arguments.faults, application=application)

    def on_report(report: RunReport) -> None:
        if arguments.verbose:
            print("\n".join(report.trace))
        print(
            f"seed {report.seed}: ok, {report.operations} operations, "
            f"{report.acknowledged} commands acknowledged, log end {report.log_end_index}, "
            f"history {report.verdict.value}"
        )

    return run_command_line(
        arguments,
        lambda seeds: run_seeds(
            seeds, options, on_report=on_report, on_failure=print_failure(arguments.verbose)
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
