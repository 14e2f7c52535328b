"""The client's own behaviour with replicas: sessions that expire, the seq window, giving up."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest

from rsm import limits
from rsm.client import ClientConfig, connect
from rsm.core.layout import AppLayout
from rsm.errors import InvalidConfig, NoSuchApplication, Timeout
from rsm.runtime.log import LogStore
from tests.unit.rsm.runtime.harness import APP, replica_cluster, replica_config, wait_until

pytestmark = pytest.mark.anyio

START_MS = 1_700_000_000_000


class SteppedClocks:
    """A machine whose time the test moves on: the wall clock from `START_MS`, and the steady
    clock (the loop's) moved on as much, so that logged time follows a step at once
    (rsm/core/logged_time.py keeps it from following a wall clock's step alone)."""

    def __init__(self) -> None:
        self.wall_ms = START_MS

    def step(self, delta_ms: int) -> None:
        self.wall_ms += delta_ms

    def options(self) -> dict[str, Any]:
        """`Replica` arguments for the two clocks."""
        loop = asyncio.get_running_loop()
        return {
            "wall_clock_ms": lambda: self.wall_ms,
            "lease_clock_s": lambda: loop.time() + (self.wall_ms - START_MS) / 1000,
        }


async def test_a_call_of_an_idle_expired_session_goes_again_under_a_new_one() -> None:
    clocks = SteppedClocks()
    config = replica_config(session_ttl_ms=1_000)
    async with replica_cluster() as replicas:
        leader = await replicas.start("a", config=config, **clocks.options())
        await replicas.wait_leader()
        async with replicas.client() as idle, replicas.client() as busy:
            assert await idle.call("add", 1) == 1
            clocks.step(5_000)
            # Another client's command moves logged time on: the idle session expires.
            assert await busy.call("add", 1) == 2
            assert len(leader.session_table) == 1
            assert await idle.call("add", 1) == 3, "refused once, then applied once"
            assert await idle.call("add", 1) == 4
            assert len(leader.session_table) == 2


async def test_a_new_session_waits_for_room_while_the_session_table_is_full_of_recent_ones() -> (
    None
):
    clocks = SteppedClocks()
    config = replica_config(sessions_max=1, session_evict_idle_ms=1_000)
    async with replica_cluster() as replicas:
        leader = await replicas.start("a", config=config, **clocks.options())
        await replicas.wait_leader()
        async with replicas.client() as first, replicas.client() as second:
            assert await first.call("add", 1) == 1
            refused_from = leader.applied_index
            results: list[int] = []

            async def second_add() -> None:
                results.append(await second.call("add", 1))

            async with anyio.create_task_group() as task_group:
                task_group.start_soon(second_add)
                # Each refused attempt is logged and applies nothing.
                await wait_until(lambda: leader.applied_index >= refused_from + 2)
                assert leader.machine.value == 1  # type: ignore[attr-defined]
                assert len(leader.session_table) == 1
                clocks.step(1_000)
            assert results == [2], "applied once, when the idle session made room"
            assert len(leader.session_table) == 1


async def test_many_calls_wait_for_room_in_the_open_seq_window() -> None:
    async with replica_cluster() as replicas:
        await replicas.start("a")
        await replicas.wait_leader()
        async with replicas.client(outstanding_commands_max=2) as client:
            results: list[int] = []

            async def add() -> None:
                results.append(await client.call("add", 1))

            async with anyio.create_task_group() as task_group:
                for _ in range(20):
                    task_group.start_soon(add)
        assert sorted(results) == list(range(1, 21))


async def test_without_a_leader_a_call_gives_up_with_timeout() -> None:
    async with replica_cluster() as replicas:
        # The application exists (its log does), but no replica of it runs.
        async with replicas.cluster.store_factory() as store:
            await LogStore(store, AppLayout.of(APP)).ensure_layout()
        async with replicas.client(deadline_ms=300, attempt_timeout_ms=100) as client:
            with pytest.raises(Timeout) as raised:
                await client.call("add", 1)
        assert raised.value.retryable


async def test_a_call_of_an_application_that_never_ran_fails_at_once() -> None:
    async with replica_cluster() as replicas:
        async with replicas.client(require_application=True) as client:
            # Far sooner than the deadline it would wait for a leader that may come.
            with (
                anyio.fail_after(limits.client_deadline_ms_default / 1000 / 4),
                pytest.raises(NoSuchApplication) as raised,
            ):
                await client.call("add", 1)
        assert not raised.value.retryable
        assert raised.value.app == APP


def test_a_deadline_must_end_before_the_replicas_may_evict_the_session() -> None:
    # Logged time may run 1.5 times as fast (rsm/core/logged_time.py): 60 s of it is 40 s.
    assert ClientConfig(deadline_ms=39_999).deadline_ms
    with pytest.raises(InvalidConfig, match="deadline_ms must be below 40000"):
        ClientConfig(deadline_ms=40_000)


async def test_connect_needs_a_metadata_store_or_zookeeper() -> None:
    with pytest.raises(InvalidConfig):
        async with connect("counter"):
            pass
