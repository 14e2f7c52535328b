"""State hashes in running replicas: a deterministic application is verified at every logged
hash; a deliberately non-deterministic one is caught, the index named, and applying goes on."""

from __future__ import annotations

import logging
import random
from typing import Any

import pytest

from rsm.core.state_machine import StateMachine, command, query
from tests.unit.rsm.runtime.harness import replica_cluster, wait_until
from tests.unit.rsm.snapshots.support import snapshot_config

pytestmark = pytest.mark.anyio

EVERY = 10


class Drifting(StateMachine):
    """Wrong on purpose: each replica draws its own number, so their states part."""

    def __init__(self) -> None:
        self.total = 0.0

    @command
    def drift(self) -> None:
        # The point: every replica draws its own number.
        self.total += random.random()

    @command
    def steady(self) -> None:
        self.total += 1

    @query
    def get(self) -> float:
        return self.total


async def run_three(machine: type[StateMachine], name: str, count: int) -> list[dict[str, Any]]:
    config = snapshot_config(state_hash_every_commands=EVERY, segment_entries_max=1_000)
    async with replica_cluster() as replicas:
        await replicas.start("a", machine=machine, config=config)
        leader = await replicas.wait_leader()
        for other in ("b", "c"):
            await replicas.start(other, machine=machine, config=config)
        for _ in range(count):
            await leader.call(name)
        # One more batch carries the leader's newest hash to the followers.
        await leader.call("steady")
        await wait_until(
            lambda: all(
                r.replica.applied_index == leader.applied_index for r in replicas.running.values()
            )
        )
        return [r.replica.status() for r in replicas.running.values()]


async def test_a_deterministic_application_is_verified() -> None:
    statuses = await run_three(Drifting, "steady", 4 * EVERY)
    for status in statuses:
        hashes = status["state_hashes"]
        assert hashes["divergences"] == 0
        assert hashes["diverged_at"] is None
        assert hashes["newest_index"] is not None
    followers = [s for s in statuses if not s["serving"]]
    assert all(s["state_hashes"]["verified"] >= 3 for s in followers)


async def test_a_non_deterministic_application_is_caught(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="rsm.runtime.applier")
    statuses = await run_three(Drifting, "drift", 3 * EVERY)
    leader = next(s for s in statuses if s["serving"])
    assert leader["state_hashes"]["divergences"] == 0
    for follower in (s for s in statuses if not s["serving"]):
        hashes = follower["state_hashes"]
        assert hashes["divergences"] >= 1
        assert hashes["diverged_at"] is not None
        assert hashes["diverged_at"] >= EVERY
        assert follower["applied_index"] == leader["applied_index"]
    alarms = [r for r in caplog.records if r.getMessage() == "rsm.diverged"]
    assert alarms
    named = {r.bookie_fields["index"] for r in alarms}  # type: ignore[attr-defined]
    assert named >= {s["state_hashes"]["diverged_at"] for s in statuses if not s["serving"]}
