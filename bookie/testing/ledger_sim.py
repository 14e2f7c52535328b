"""The seeded simulation of ledger clients and bookies: one seed, many seeds, the command line.

A run is one seed, put together from:

* `ledger_scenario`: what the seed decides up front (5-7 bookies, (E, Qw, Qa)
  with E <= 5, client knobs, survivable or harsh, how hard the nemesis hits);
* `simcluster`: the world of real bookie servers and ledger clients over a
  simulated network, disks and metadata service, on a virtual-time loop;
* `nemesis`: crashes that lose unsynced data, partitions, connection resets,
  slow disks, latency spikes, session expiry, metadata outages;
* `ledger_workload`: generations of writers, with readers and recoverers
  racing them, then the end of the faults and the final checks;
* `ledger_checker`: the invariants, checked at every event observed.

`run_seed` returns a `RunReport`, or raises the first `InvariantViolation`:
the seed, the invariant's name, the last trace lines and the command line
that replays it.  An exception nobody expected is reported the same way, as
`unexpected-error`, and so is a run stuck past `RUN_MS_MAX` of virtual time.

A run is a pure function of (seed, options): two runs of one seed, even in
one process, give equal reports and traces, line for line.  That is how a
failure replays, and the tests check it.

`python -m bookie.testing.ledger_sim --seeds N [--first SEED] [--steps S]
[--mode mixed|survivable|harsh] [--faults crash,...] [--verbose]` runs seeds in
a row, prints one line per seed and a summary, and for each failure the seed,
the invariant and the command that replays it (with `--verbose`, which
prints the whole trace); it exits 1 if any seed failed.
"""

from __future__ import annotations

import logging
import random
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import anyio

from bookie.testing.ledger_checker import TRACE_TAIL_LINES, InvariantViolation
from bookie.testing.ledger_scenario import (
    STEPS_DEFAULT,
    Mode,
    Scenario,
    SimOptions,
    draw_scenario,
    replay_command,
)
from bookie.testing.ledger_workload import LedgerOutcome, LedgerWorkload
from bookie.testing.nemesis import ALL_FAULTS, FaultKind
from bookie.testing.seeds import (
    parse_seed_arguments,
    print_failure,
    run_command_line,
    run_each,
    seed_parser,
)
from bookie.testing.sim_logs import TraceLogHandler, logs_traced
from bookie.testing.simcluster import SimCluster, Trace
from bookie.testing.simloop import run_simulation

__all__ = [
    "Mode",
    "RunReport",
    "SimOptions",
    "Summary",
    "main",
    "replay_command",
    "run_seed",
    "run_seeds",
]

RUN_MS_MAX = 3_600_000
"""Virtual time after which a run is stuck (a bug, whatever the mode)."""


@dataclass(frozen=True, slots=True)
class RunReport:
    """What one run did; two runs of one seed give equal reports."""

    seed: int
    scenario: Scenario
    trace: tuple[str, ...]
    stats: dict[str, int]
    ledgers: tuple[LedgerOutcome, ...]
    finished: bool
    """Whether every ledger closed and was read back after the faults stopped."""

    @property
    def acknowledged(self) -> int:
        return sum(ledger.acknowledged for ledger in self.ledgers)


def run_seed(seed: int, options: SimOptions | None = None) -> RunReport:
    """Run one seed; raise `InvariantViolation` if it breaks an invariant (see the module)."""
    options = SimOptions() if options is None else options
    rng = random.Random(seed)
    scenario = draw_scenario(rng, options)
    trace = Trace()
    replay = replay_command(seed, options)

    async def main() -> RunReport:
        run: LedgerWorkload | None = None
        try:
            with anyio.fail_after(RUN_MS_MAX / 1000):
                async with SimCluster.start(
                    random.Random(rng.getrandbits(64)), scenario.world, trace
                ) as cluster:
                    run = LedgerWorkload(seed, replay, scenario, options, cluster)
                    handler = TraceLogHandler(trace, cluster.stats, lambda: "log")
                    with logs_traced(handler, {"bookie": logging.WARNING}):
                        finished = await run.run()
                    stats = dict(sorted(cluster.stats.items()))
                    trace.record("world", f"end: fingerprint {cluster.fingerprint()}")
        except Exception as error:
            if run is not None and run.violation is not None:
                raise run.violation.with_trace(trace.lines) from error
            violation = InvariantViolation(
                seed, "unexpected-error", repr(error), trace.tail(TRACE_TAIL_LINES), replay
            )
            raise violation.with_trace(trace.lines) from error
        assert run is not None
        if run.violation is not None:
            raise run.violation.with_trace(trace.lines)
        return RunReport(
            seed=seed,
            scenario=scenario,
            trace=tuple(trace.lines),
            stats=stats,
            ledgers=tuple(ledger.outcome() for ledger in run.ledgers),
            finished=finished,
        )

    return run_simulation(main)


# --- command line -----------------------------------------------------------------------------


@dataclass(slots=True)
class Summary:
    """What a sequence of runs did, for the command line and the tests."""

    runs: int = 0
    finished: int = 0
    ledgers: int = 0
    acknowledged: int = 0
    stats: Counter[str] = field(default_factory=Counter)
    failures: list[InvariantViolation] = field(default_factory=list)

    def add(self, report: RunReport) -> None:
        self.runs += 1
        self.finished += report.finished
        self.ledgers += len(report.ledgers)
        self.acknowledged += report.acknowledged
        self.stats.update(report.stats)

    def lines(self) -> list[str]:
        lines = [
            f"{self.runs} runs, {len(self.failures)} failed, {self.finished} finished "
            "(the others: harsh runs, safety checked only), "
            f"{self.ledgers} ledgers, {self.acknowledged} entries acknowledged",
            "faults and events: "
            + ", ".join(f"{name}={count}" for name, count in sorted(self.stats.items())),
        ]
        for violation in self.failures:
            lines.append(
                f"FAILED seed {violation.seed} ({violation.invariant}): {violation.replay}"
            )
        return lines


def run_seeds(
    seeds: Sequence[int],
    options: SimOptions,
    *,
    on_report: Callable[[RunReport], None] = lambda _report: None,
    on_failure: Callable[[InvariantViolation], None] = lambda _violation: None,
) -> Summary:
    """Run each seed; a failure is collected (and reported) and the next seed runs."""
    return run_each(
        seeds,
        lambda seed: run_seed(seed, options),
        Summary(),
        on_report=on_report,
        on_failure=on_failure,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = seed_parser(
        "python -m bookie.testing.ledger_sim",
        "Seeded simulation of ledger clients and bookies under faults.",
        steps_default=STEPS_DEFAULT,
        kinds=FaultKind,
        all_faults=ALL_FAULTS,
    )
    parser.add_argument("--mode", choices=[mode.value for mode in Mode], default=Mode.MIXED.value)
    arguments = parse_seed_arguments(parser, argv)
    options = SimOptions(steps=arguments.steps, mode=Mode(arguments.mode), faults=arguments.faults)

    def on_report(report: RunReport) -> None:
        if arguments.verbose:
            print("\n".join(report.trace))
        closed = sum(ledger.closed is not None for ledger in report.ledgers)
        print(
            f"seed {report.seed}: ok, {len(report.ledgers)} ledgers ({closed} closed), "
            f"{report.acknowledged} entries acknowledged"
        )

    return run_command_line(
        arguments,
        lambda seeds: run_seeds(
            seeds, options, on_report=on_report, on_failure=print_failure(arguments.verbose)
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
