"""What the seeded simulations' command lines share (`bookie.testing.ledger_sim` and
`rsm.testing.rsm_sim`): running seeds one after another with each failure collected
rather than stopping the run, their common flags, and fault lists given by name.

Each simulation keeps what is its own: the run of one seed, its summary's counters,
and the line it prints per seed.
"""

from __future__ import annotations

import argparse
import enum
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from bookie.testing.ledger_checker import InvariantViolation

R = TypeVar("R")
R_contra = TypeVar("R_contra", contravariant=True)
E = TypeVar("E", bound=enum.Enum)


class SeedSummary(Protocol[R_contra]):
    """A simulation's summary of many runs."""

    runs: int
    failures: list[InvariantViolation]

    def add(self, report: R_contra) -> None: ...

    def lines(self) -> list[str]: ...


S = TypeVar("S", bound=SeedSummary[Any])


def run_each(
    seeds: Sequence[int],
    run_seed: Callable[[int], R],
    summary: S,
    *,
    on_report: Callable[[R], None],
    on_failure: Callable[[InvariantViolation], None],
) -> S:
    """Run each seed into `summary`; a failure is collected (and reported) and the next
    seed runs."""
    for seed in seeds:
        try:
            report = run_seed(seed)
        except InvariantViolation as violation:
            summary.runs += 1
            summary.failures.append(violation)
            on_failure(violation)
            continue
        summary.add(report)
        on_report(report)
    return summary


def fault_names(kinds: type[E]) -> Callable[[str], tuple[E, ...]]:
    """An argparse type: a comma-separated list of `kinds` values."""

    def parse(text: str) -> tuple[E, ...]:
        try:
            return tuple(kinds(name.strip()) for name in text.split(",") if name.strip())
        except ValueError as error:
            known = ", ".join(str(kind.value) for kind in kinds)
            raise argparse.ArgumentTypeError(f"{error}; known faults: {known}") from error

    return parse


def seed_parser(
    prog: str, description: str, *, steps_default: int, kinds: type[E], all_faults: tuple[E, ...]
) -> argparse.ArgumentParser:
    """The flags both simulations take: --seeds, --first, --steps, --faults, --verbose."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--first", type=int, default=0, help="the first seed")
    parser.add_argument("--steps", type=int, default=steps_default, help="nemesis steps per seed")
    parser.add_argument(
        "--faults",
        type=fault_names(kinds),
        default=all_faults,
        help="comma-separated fault kinds the nemesis may use (default: all)",
    )
    parser.add_argument("--verbose", action="store_true", help="print every run's trace")
    return parser


def parse_seed_arguments(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    arguments = parser.parse_args(argv)
    if arguments.seeds < 0 or arguments.steps < 0:
        parser.error("--seeds and --steps must not be negative")
    return arguments


def run_command_line(
    arguments: argparse.Namespace,
    run_seeds: Callable[[Sequence[int]], SeedSummary[Any]],
) -> int:
    """Run the seeds the flags name, print the summary and the time taken; the exit
    status is 1 when any seed failed."""
    started = time.monotonic()
    summary = run_seeds(range(arguments.first, arguments.first + arguments.seeds))
    print("\n".join(summary.lines()))
    print(f"{time.monotonic() - started:.1f} s")
    return 1 if summary.failures else 0


def print_failure(verbose: bool) -> Callable[[InvariantViolation], None]:
    """The failure report both command lines print (with the trace when verbose)."""

    def report(violation: InvariantViolation) -> None:
        if verbose:
            print("\n".join(violation.trace))
        print(str(violation), file=sys.stderr)

    return report
