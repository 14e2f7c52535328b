"""The seeded whole-cluster simulation of the framework (rsm/testing/rsm_sim.py): many seeds
hold every invariant, every kind of fault really happens among them, a bookie lost for good
is re-replicated, stalled bookies and leaders (SIGSTOP) resume without breaking anything, a
seed replays exactly, and a replica whose terms keep failing backs off instead of
spinning."""

from __future__ import annotations

import contextlib
import itertools
import random

import anyio
import pytest

from bookie.client.config import ClientConfig as LedgerConfig
from bookie.testing.ledger_checker import InvariantViolation
from bookie.testing.simcluster import SimCluster, Trace, WorldConfig, trace_difference
from bookie.testing.simloop import run_simulation
from rsm.client import ClientConfig as RsmClientConfig
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_log
from rsm.errors import RsmError
from rsm.testing.cluster import APP, RsmCluster
from rsm.testing.nemesis import ALL_FAULTS, RsmFault
from rsm.testing.rsm_sim import SimOptions, main, replay_command, run_seed, run_seeds
from tests.unit.rsm.runtime.harness import wait_until

CI_SEEDS = 100
"""As many seeds as run in about two minutes on a busy 2-core machine (40 take 45 s)."""

LONG_SEEDS = 80
"""Seeds of twice the nemesis steps, in about half a minute; `make soak STEPS=16` runs
thousands."""

EXPECTED_EVENTS = (
    "replica-crash-leader",
    "replica-restart",
    "bookie-crash",
    "bookie-restart",
    "partition-zk",
    "partition-bookies",
    "partition-leader",
    "partition-split",
    "session-expired-while-cut",
    "reset",
    "session-expiry-leader",
    "session-expiry-follower",
    "session-expiry-leader-unnoticed",
    "transfer-done",
    "latency-spike",
    "slow-disk",
    "takeover-recovered",
    "step-down-session",
    "retry-deduplicated",
    "rsm.rollover",
)
"""What a batch of seeds must have done at least once, or it did not test what it claims:
each fault kind and shape (a leader that hears of its expired session late among them), a
successor that recovered (fenced) its predecessor's ledger, a leader that stepped down when
its session was in trouble, a retry logged twice and applied once (session dedup), a
rollover."""


def test_seeds_hold_every_invariant_and_meet_every_fault() -> None:
    summary = run_seeds(range(CI_SEEDS), SimOptions())
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.acknowledged > 20 * CI_SEEDS
    missing = [event for event in EXPECTED_EVENTS if summary.stats[event] == 0]
    assert not missing, f"never happened in {CI_SEEDS} seeds: {missing}; {summary.lines()}"


MACHINE_CRASH_SEEDS = 60
"""Runs of machine crashes: about 35 s on a busy 2-core machine."""

MACHINE_FAULTS = (RsmFault.MACHINE_CRASH, RsmFault.REPLICA_CRASH, RsmFault.BOOKIE_CRASH)


def test_machine_crashes_keep_every_invariant_and_the_store_serves_while_they_last() -> None:
    """A bookie and a replica of one machine power-cut together (with lone crashes of
    either): safety holds, and while machines are still down, once at most Qa - 1 bookies
    and not every replica are, a write is acknowledged within a bound (invariant 7 of
    rsm/testing/rsm_sim.py), on degraded segments where too few bookies are left for E."""
    summary = run_seeds(
        range(50_000, 50_000 + MACHINE_CRASH_SEEDS), SimOptions(faults=MACHINE_FAULTS)
    )
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    stats = summary.stats
    assert stats["machine-crash"] >= MACHINE_CRASH_SEEDS // 2
    assert stats["machine-crash-leader"] >= 1
    assert stats["serve-while-down"] >= MACHINE_CRASH_SEEDS // 2, summary.lines()
    assert stats["rsm.degraded"] >= 1, "some successor had too few bookies for E"
    assert stats["rsm.replication_restored"] >= 1


BOOKIE_LOSS_SEEDS = 20
LOSS_FAULTS = (RsmFault.BOOKIE_LOSS, RsmFault.REPLICA_CRASH, RsmFault.BOOKIE_CRASH)


def test_a_bookie_lost_for_good_is_re_replicated_by_autorecovery() -> None:
    """A bookie lost for good among crashes: safety holds, and autorecovery copies its share
    of every sealed segment to the bookie to spare within a bound (invariant 8 of
    rsm/testing/rsm_sim.py)."""
    summary = run_seeds(range(60_000, 60_000 + BOOKIE_LOSS_SEEDS), SimOptions(faults=LOSS_FAULTS))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    stats = summary.stats
    assert stats["bookie-loss"] >= BOOKIE_LOSS_SEEDS // 2
    assert stats["re-replicated"] == stats["bookie-loss"], summary.lines()
    assert stats["autorecovery.bookie_lost"] >= stats["bookie-loss"]


def test_the_re_replication_invariant_fails_without_autorecovery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def idle(_world: SimCluster, _name: str, _settings: object) -> None:
        await anyio.sleep_forever()

    monkeypatch.setattr(SimCluster, "run_autorecovery", idle)
    with pytest.raises(InvariantViolation, match="re-replicated"):
        run_seed(60_003, SimOptions(faults=LOSS_FAULTS))  # loses a bookie


STALL_SEEDS = 15
"""Runs of stalls only: a few seconds."""

STALL_EVENTS = (
    "stall",
    "stall-bookie",
    "stall-bookies",
    "stall-leader",
    "stall-short",
    "stall-middle",
    "stall-long",
    "stall-end",
    "session-expired-while-stalled",
)
"""Every shape and every band of length of a stall, one repaired early, and one that
outlasted its host's session."""


def test_stalled_bookies_and_leaders_keep_every_invariant() -> None:
    """A bookie, two bookies at once (nothing can be acknowledged then, with E = Qw = 3 and
    Qa = 2) or the leader stopped (SIGSTOP: sockets open, nothing answered) and resumed
    after less than the add timeout, up to the session timeout, or past it: every
    invariant holds, and every shape and length really happened."""
    summary = run_seeds(range(70_000, 70_000 + STALL_SEEDS), SimOptions(faults=(RsmFault.STALL,)))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    missing = [event for event in STALL_EVENTS if summary.stats[event] == 0]
    assert not missing, f"never happened in {STALL_SEEDS} seeds: {missing}; {summary.lines()}"


STALL_AMONG_ALL_SEEDS = 10
"""Runs of stalls among every default fault: a few seconds."""


def test_stalls_among_every_other_fault_keep_every_invariant() -> None:
    options = SimOptions(faults=(*ALL_FAULTS, RsmFault.STALL))
    summary = run_seeds(range(71_000, 71_000 + STALL_AMONG_ALL_SEEDS), options)
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.stats["stall"] >= STALL_AMONG_ALL_SEEDS, summary.lines()


def test_a_stall_is_asked_for_by_name_on_the_command_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert "--faults stall,bookie-crash " in replay_command(
        70_000, SimOptions(faults=(RsmFault.STALL, RsmFault.BOOKIE_CRASH))
    )
    assert main(["--seeds", "1", "--first", "70000", "--steps", "3", "--faults", "stall"]) == 0
    assert "stall=" in capsys.readouterr().out


def test_a_seed_replays_exactly() -> None:
    first = run_seed(7)
    second = run_seed(7)
    assert trace_difference(first.trace, second.trace) is None
    assert first.stats == second.stats
    assert first.acknowledged > 0


def test_the_command_line_runs_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "2", "--first", "3", "--steps", "3"]) == 0
    output = capsys.readouterr().out
    assert "seed 3: ok" in output
    assert "2 runs, 0 failed" in output


@pytest.mark.slow
def test_many_long_seeds_hold_every_invariant() -> None:
    summary = run_seeds(range(1_000, 1_000 + LONG_SEEDS), SimOptions(steps=16))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)


def test_replicas_whose_terms_fail_at_once_back_off() -> None:
    """With three bookies, E = 3 and Qw = 2, a crashed bookie that is still registered makes
    every new ledger fail at once, at its first add that goes to that bookie.  Replicas
    taking over and stepping down in turn must wait between terms (longer each time), not
    spin through epochs in no time; once the bookie is back, a leader serves."""

    async def main() -> tuple[int, bool]:
        world_config = WorldConfig(bookie_count=3, bookie_session_timeout_ms=30_000)
        async with SimCluster.start(random.Random(5), world_config, Trace()) as world:
            cluster = RsmCluster(
                world,
                replica_config=ReplicaConfig(retry_delay_ms=20, write_quorum=2, ack_quorum=2),
                ledger_config=LedgerConfig(add_timeout_ms=500, connect_timeout_ms=200),
                client_config=RsmClientConfig(),
                session_timeout_ms=1_000,
            )
            async with cluster.running():
                await wait_until(cluster.leader, timeout_s=30)
                world.crash("bookie-1")
                async with cluster.client("client-1") as client:
                    # Writes make the leaders use their ledgers, for ten seconds.
                    with anyio.move_on_after(10):
                        for number in itertools.count():
                            with contextlib.suppress(RsmError):
                                await client.call("kv", "set", "k", [str(number)], f"op-{number}")
                store = world.metadata.client()
                async with store:
                    log = decode_log((await store.get(AppLayout.of(APP).log)).value)
                world.restart("bookie-1")
                await wait_until(cluster.leader, timeout_s=30)
                return log.epoch, cluster.leader() is not None

    epochs, served = run_simulation(main)
    # Three replicas, each waiting 20, 40, ... 5000 ms between its failed terms: a few
    # dozen terms in ten seconds at most (thousands per millisecond without the back-off).
    assert epochs < 40
    assert served


def test_replicas_that_all_stood_aside_stand_again() -> None:
    """Seed 9256: a slow bookie made every replica's term fail in turn, so each stood aside
    for a while.  A stand-aside timer fired a hair before the deadline it was set for,
    `_may_stand` refused, nothing woke the election again, and no replica led for the
    rest of the run: the final writes were never acknowledged."""
    summary = run_seeds([9256], SimOptions(steps=8))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.acknowledged > 0


def test_a_follower_is_not_stalled_by_a_bookie_that_missed_entries() -> None:
    """Seed 9647: a bookie of the open ledger crashed, no replacement was found (the
    ensemble change was deferred), and the leader went on writing to the other two.  The
    crashed bookie came back without those entries and never saw the LAC move again; a
    follower whose long poll had been parked there polled it again after each timeout,
    forever, and stayed three commands behind to the end of the run."""
    summary = run_seeds([9647], SimOptions(steps=8))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)


def test_replicas_stand_when_the_open_ledger_was_closed_before_the_log_says_so() -> None:
    """Seed 20006 (120 steps): the leader's ledger refused an entry (no replacement
    bookie), so its writer closed it, and the leader died before any takeover recorded
    that in the log.  The one caught-up candidate died too; every replica started after it
    read the closed ledger to its end and waited for the log to move before standing, so
    none stood and no takeover ever moved the log: the final writes were never
    acknowledged."""
    summary = run_seeds([20006], SimOptions(steps=120))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.acknowledged > 0


def test_a_write_of_a_session_no_replica_knows_goes_again_under_a_new_one() -> None:
    """Seed 23006 (200 steps, crashes, slow disks, transfers): no leader for eleven
    simulated seconds; every write of one client timed out, so it gave their seqs up and
    its final write acknowledged them, while no replica had ever seen its session:
    `SessionExpired`.  Nothing of that write was logged before, so the client sends it
    again under a new session; the workload once counted the answer as a liveness failure."""
    faults = (
        RsmFault.BOOKIE_CRASH,
        RsmFault.SLOW_DISK,
        RsmFault.TRANSFER,
        RsmFault.REPLICA_CRASH,
    )
    summary = run_seeds([23006], SimOptions(steps=200, faults=faults))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.stats["session-expired-refused"] >= 1  # more where the TTL is short
    assert "client-SessionExpired" not in summary.stats


def test_a_client_whose_session_expired_in_the_faults_makes_its_final_write_again() -> None:
    """Seed 1931 (16 steps, sessions dropped 16 s after their last command): the faults
    kept one client from the replicas for longer than that, so they dropped its session.
    An attempt of its final write may have been logged under the old session, so the
    client gave the write up (`Timeout`, caused by `SessionExpired`) rather than risk
    applying it twice, and the liveness check once counted that as a failure.  The client
    now writes once more, under its new session, and that write is acknowledged."""
    summary = run_seeds([1931], SimOptions(steps=16))
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    assert summary.stats["final-write-again-after-session-expired"] == 1
