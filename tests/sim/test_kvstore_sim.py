"""The key-value store in the seeded simulation (examples/kvstore/testing/kv_sim.py): Redis
clients through the RESP server, the router and forwarding, under faults.  A handful of seeds
hold every invariant with followers forwarding and leaders failing over, and a seed replays
exactly."""

from __future__ import annotations

import pytest
from kvstore.testing.kv_sim import OPTIONS, main

from bookie.testing.simcluster import trace_difference
from rsm.testing.rsm_sim import run_seed, run_seeds

SEEDS = 40
"""As many seeds as run in about ten seconds on a 2-core machine."""

EXPECTED_EVENTS = (
    "redis-set-ok",
    "redis-get-ok",
    "redis-incr-ok",
    "redis-del-ok",
    "redis-ok-from-follower",
    "redis-lost",
    "replica-crash-leader",
    "partition-split",
    "session-expiry-leader",
    "transfer-done",
    "takeover-recovered",
    "overloaded-refused",
)
"""What the seeds must have done at least once: every kind of command answered, some of them
through a follower's server (forwarded to the leader), connections lost under commands, leaders
crashed, cut off, expired and handed over, a successor that fenced its predecessor, and a new
connection's session refused while the session table was full of recent ones."""


def test_seeds_hold_every_invariant_with_forwarding_and_failovers() -> None:
    summary = run_seeds(range(SEEDS), OPTIONS)
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.acknowledged > 5 * SEEDS
    missing = [event for event in EXPECTED_EVENTS if summary.stats[event] == 0]
    assert not missing, f"never happened in {SEEDS} seeds: {missing}; {summary.lines()}"


def test_a_seed_replays_exactly() -> None:
    first = run_seed(2, OPTIONS)
    second = run_seed(2, OPTIONS)
    assert trace_difference(first.trace, second.trace) is None
    assert first.stats == second.stats
    assert first.acknowledged > 0


def test_the_command_line_runs_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "1", "--first", "2", "--steps", "3"]) == 0
    output = capsys.readouterr().out
    assert "seed 2: ok" in output
