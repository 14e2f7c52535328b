"""The seeded simulation of ledger clients and bookies, in the normal test run.

* A couple of hundred seeds, in batches of ten so that a batch stays short;
  a failure names the seed, the invariant, the last trace lines and the
  command line that replays it.
* A seed run twice gives the same trace, line for line.
* Each fault kind, used alone, really happens and has an effect, and
  recoveries really race live writers: the simulation cannot silently stop
  testing something.
* With a protocol bug planted on purpose, some seed fails: the checks bite.
* A longer run (more seeds, more nemesis steps) is marked slow; the same
  runs go on for as long as wanted with `python -m bookie.testing.ledger_sim`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bookie.core.quorum import Quorum
from bookie.testing.ledger_sim import (
    Mode,
    SimOptions,
    Summary,
    main,
    replay_command,
    run_seed,
    run_seeds,
)
from bookie.testing.nemesis import FaultKind
from bookie.testing.simcluster import trace_difference

BATCH = 10
SEEDS = 200
KIND_SEEDS = range(1_000, 1_006)
"""Seeds a fault kind alone gets to show its effect (each run has several faults)."""


def assert_no_failures(summary: Summary) -> None:
    assert not summary.failures, "\n\n".join(str(violation) for violation in summary.failures)


@pytest.mark.parametrize("first", range(0, SEEDS, BATCH), ids=lambda first: f"seeds-{first}")
def test_seeds_keep_every_invariant(first: int) -> None:
    summary = run_seeds(range(first, first + BATCH), SimOptions())
    assert_no_failures(summary)
    assert summary.runs == BATCH
    assert summary.acknowledged > 0


@pytest.mark.parametrize("seed", [3, 1_004])
def test_a_seed_replays_exactly(seed: int) -> None:
    options = SimOptions(mode=Mode.HARSH)
    first, second = run_seed(seed, options), run_seed(seed, options)
    assert trace_difference(first.trace, second.trace) is None
    assert first == second
    assert first.stats.get("crash", 0) > 0, "a replay worth checking has crashes in it"


@pytest.mark.parametrize(
    ("kind", "effects"),
    [
        (FaultKind.CRASH, ["crash-lost-unsynced", "restart", "retry-RecoveryFailed"]),
        (FaultKind.PARTITION, ["heal", "retry-BookieUnavailable"]),
        (FaultKind.RESET, ["reset-broke-connections", "ensemble-change"]),
        (FaultKind.SLOW_DISK, ["speed-up", "ensemble-change"]),
        (FaultKind.LATENCY_SPIKE, ["spike-end", "ensemble-change", "retry-RecoveryFailed"]),
        (FaultKind.SESSION_EXPIRY, ["session-expiry-bookie", "session-expiry-client"]),
        (FaultKind.METADATA_OUTAGE, ["reconnect", "retry-MetadataUnavailable"]),
    ],
    ids=lambda value: value.value if isinstance(value, FaultKind) else None,
)
def test_each_fault_kind_happens_and_bites(kind: FaultKind, effects: list[str]) -> None:
    # Harsh, so that crashes are allowed whatever the ledger's ack quorum.
    summary = run_seeds(KIND_SEEDS, SimOptions(mode=Mode.HARSH, faults=(kind,)))
    assert_no_failures(summary)
    assert summary.stats[kind.value] > 0
    missing = [effect for effect in effects if summary.stats[effect] == 0]
    assert not missing, f"{kind.value} never led to {missing}: {dict(summary.stats)}"


def test_recoveries_race_live_writers_and_fence_them() -> None:
    summary = run_seeds(range(2_000, 2_005), SimOptions(faults=()))
    assert_no_failures(summary)
    assert summary.stats["recovery-raced-writer"] > 0
    assert summary.stats["writer-fenced"] > 0
    assert summary.finished == summary.runs


def test_a_planted_recovery_bug_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # Recovery declaring an entry absent on the first "no such entry" instead of
    # Qw - Qa + 1 of them truncates the ledger below acknowledged entries.
    monkeypatch.setattr(Quorum, "absent", lambda _quorum, no_entry_count: no_entry_count >= 1)
    for seed in range(40):
        failures = run_seeds([seed], SimOptions()).failures
        if failures:
            break
    else:
        pytest.fail("no seed caught recovery declaring acknowledged entries absent")
    [violation] = failures
    assert violation.seed == seed
    assert violation.invariant in {"no-ack-above-close", "acked-in-closed-ledger"}
    assert replay_command(seed, SimOptions()) in str(violation)
    assert violation.trace_tail[-1] in violation.trace, "the whole trace comes along"


def test_the_replay_command_replays_the_seed_in_another_process() -> None:
    # Another process hashes strings differently: a run must not depend on that.
    seed = 7
    report = run_seed(seed)
    command = replay_command(seed, SimOptions()).split()
    assert command[:3] == ["python", "-m", "bookie.testing.ledger_sim"]
    environment = {**os.environ, "PYTHONHASHSEED": "4242"}
    replayed = subprocess.run(
        [sys.executable, *command[1:]],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=environment,
    )
    assert replayed.stdout.splitlines()[: len(report.trace)] == list(report.trace)


def test_the_command_line_runs_seeds_and_prints_a_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--seeds", "2", "--first", "11", "--steps", "3", "--faults", "crash,reset"]) == 0
    output = capsys.readouterr().out
    assert "seed 11: ok" in output
    assert "seed 12: ok" in output
    assert "2 runs, 0 failed" in output


def test_the_replay_command_carries_every_option() -> None:
    options = SimOptions(steps=3, mode=Mode.HARSH, faults=(FaultKind.CRASH, FaultKind.RESET))
    assert replay_command(17, options) == (
        "python -m bookie.testing.ledger_sim --seeds 1 --first 17 --steps 3 "
        "--mode harsh --faults crash,reset --verbose"
    )


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(Mode), ids=lambda mode: mode.value)
def test_a_longer_run(mode: Mode) -> None:
    summary = run_seeds(range(10_000, 10_040), SimOptions(steps=30, mode=mode))
    assert_no_failures(summary)
