"""The key-value store in the seeded simulation (examples/kvstore/testing/kv_sim.py): Redis
clients through the RESP server, the router and forwarding, under faults.  A handful of seeds
hold every invariant with followers forwarding and leaders failing over, and with bookies and
leaders stalled (SIGSTOP) and resumed, and a seed replays exactly."""

from __future__ import annotations

import dataclasses
import random
from contextlib import AbstractAsyncContextManager

import anyio
import pytest
from kvstore.runtime.node import StoreSettings, redis_server
from kvstore.testing.kv_sim import OPTIONS, main
from kvstore.testing.workload import (
    RESP_PORT,
    ErrorReply,
    RedisConnection,
    Reply,
    observed_kvstore,
)

from bookie.client.config import ClientConfig as LedgerConfig
from bookie.testing.simcluster import SimCluster, Trace, WorldConfig, trace_difference
from bookie.testing.simloop import run_simulation
from rsm import Replica
from rsm.client import ClientConfig as RsmClientConfig
from rsm.config import ReplicaConfig
from rsm.testing.cluster import RsmCluster, SimReplica
from rsm.testing.nemesis import RsmFault
from rsm.testing.rsm_sim import run_seed, run_seeds
from tests.sim.test_simcluster import wait_until

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


STALL_SEEDS = 12
"""Runs of stalls with crashes and partitions: a few seconds."""


def test_stalled_bookies_and_leaders_keep_every_invariant() -> None:
    """Bookies (one, or two at once: no write can be acknowledged meanwhile) and leaders
    stopped and resumed among replica crashes and partitions: every invariant holds, every
    final write of every Redis connection is acknowledged, and none went unanswered once
    the faults were over (what a CI run of tests/integration/test_stalled_bookies.py once
    saw)."""
    faults = (RsmFault.STALL, RsmFault.REPLICA_CRASH, RsmFault.PARTITION)
    options = dataclasses.replace(OPTIONS, faults=faults)
    summary = run_seeds(range(70_000, 70_000 + STALL_SEEDS), options)
    assert not summary.failures, "\n\n".join(str(failure) for failure in summary.failures)
    stats = summary.stats
    assert stats["stall-bookies"] >= 1, summary.lines()
    assert stats["stall-leader"] >= 1, summary.lines()
    assert stats["final-write-no-answer"] == 0, summary.lines()


@pytest.mark.parametrize(
    ("seed", "faults"),
    [(2, OPTIONS.faults), (70_001, (RsmFault.STALL, RsmFault.REPLICA_CRASH, RsmFault.PARTITION))],
    ids=["default", "stalls"],
)
def test_a_seed_replays_exactly(seed: int, faults: tuple[RsmFault, ...]) -> None:
    options = dataclasses.replace(OPTIONS, faults=faults)
    first = run_seed(seed, options)
    second = run_seed(seed, options)
    assert trace_difference(first.trace, second.trace) is None
    assert first.stats == second.stats
    assert first.acknowledged > 0


def test_the_command_line_runs_seeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--seeds", "1", "--first", "2", "--steps", "3"]) == 0
    output = capsys.readouterr().out
    assert "seed 2: ok" in output


DEADLINE_MS = 10_000
"""The router's command deadline in the stalled-bookies test below."""


def test_a_read_at_the_leader_is_answered_while_two_bookies_stall() -> None:
    """Three bookies, E = Qw = 3, Qa = 2, two of them stopped (SIGSTOP) for longer than a
    Redis command's deadline, no write meanwhile: a GET sent to the leader's own Redis
    server is answered TRYAGAIN soon after the deadline, as one sent to a follower is.  The
    leader's read rounds fail (`WriterNotConfirmed`); once they have failed for
    `limits.read_rounds_failing_ms_max` the reads waiting for them are answered Unavailable
    and the router sends them again until its deadline.  Before that bound, the GET waited
    for as long as the stall lasted, unanswered."""

    async def main() -> Reply | None:
        world_config = WorldConfig(bookie_count=3, bookie_session_timeout_ms=60_000)
        async with SimCluster.start(random.Random(3), world_config, Trace()) as world:
            settings = StoreSettings(command_deadline_ms=DEADLINE_MS)

            def beside(
                cluster: RsmCluster, sim: SimReplica, replica: Replica
            ) -> AbstractAsyncContextManager[object]:
                return redis_server(
                    replica,
                    world.network.listen(f"{sim.name}:{RESP_PORT}"),
                    port=RESP_PORT,
                    settings=settings,
                    connector=world.network.connector(sim.name),
                    rng=world.derive_rng(),
                )

            cluster = RsmCluster(
                world,
                replica_config=ReplicaConfig(ensemble_size=3, write_quorum=3, ack_quorum=2),
                ledger_config=LedgerConfig(add_timeout_ms=2_000),
                client_config=RsmClientConfig(),
                session_timeout_ms=4_000,
                machine=observed_kvstore,
                beside=beside,
            )
            async with cluster.running():
                with anyio.fail_after(30):
                    await wait_until(lambda: cluster.leader() is not None)
                leader = cluster.leader()
                assert leader is not None
                stream = await world.network.connect("client", f"{leader.name}:{RESP_PORT}")
                connection = RedisConnection(stream, leader.name, leader.name)
                assert await connection.command([b"SET", b"k", b"v"]) == "OK"
                cluster.stall(["bookie-1", "bookie-2"], 4 * DEADLINE_MS)
                with anyio.move_on_after((DEADLINE_MS + 5_000) / 1000):
                    return await connection.command([b"GET", b"k"])
                return None

    reply = run_simulation(main)
    assert reply is not None, "the GET got no answer at all"
    assert isinstance(reply, ErrorReply), reply
    assert reply.startswith("TRYAGAIN"), reply
