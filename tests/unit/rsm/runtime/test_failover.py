"""Leaders that die, get fenced or lose ZooKeeper: someone else takes over, nothing
acknowledged is lost, nothing is applied twice."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.abc
import pytest

from rsm.client import ClientConfig, connect, tcp_connector
from rsm.config import ReplicaConfig
from rsm.core.layout import AppLayout
from rsm.core.log_format import decode_log
from rsm.core.log_state import SegmentState
from rsm.errors import NotLeader, OutcomeUnknown
from rsm.runtime.replica import Replica
from tests.unit.rsm.runtime.harness import APP, Replicas, replica_cluster, wait_until

pytestmark = pytest.mark.anyio

NAMES = ("a", "b", "c")


async def start_three(replicas: Replicas, config: ReplicaConfig | None = None) -> Replica:
    for name in NAMES:
        await replicas.start(name, config=config)
    return await replicas.wait_leader()


def values(replicas: Replicas) -> set[int]:
    return {running.replica.machine.value for running in replicas.running.values()}  # type: ignore[attr-defined]


async def all_converge_to(replicas: Replicas, value: int) -> None:
    await wait_until(lambda: values(replicas) == {value})


def fenced_on(replicas: Replicas, ledger_id: int) -> list[str]:
    """The bookies on which `ledger_id` is fenced."""
    cluster = replicas.cluster
    return [
        bookie_id
        for bookie_id in cluster.bookie_ids
        if any(
            record.ledger_id == ledger_id and record.fenced
            for record in cluster.storage(bookie_id).recovered_ledgers()
        )
    ]


async def test_a_killed_leader_is_replaced_by_one_that_fences_it() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        term = leader.term
        assert term is not None
        old_epoch, old_ledger = term.epoch, term.segment.ledger_id
        async with replicas.client() as client:
            for _ in range(10):
                await client.call("add", 1)
            await replicas.kill(leader.replica_id)
            assert await client.call("add", 1) == 11
        successor = await replicas.wait_leader()
        assert successor.epoch == old_epoch + 1
        assert fenced_on(replicas, old_ledger), "the successor recovered (fenced) the old ledger"
        async with replicas.cluster.store_factory() as store:
            log = decode_log((await store.get(AppLayout.of(APP).log)).value)
        [old] = [s for s in log.segments if s.ledger_id == old_ledger]
        # Index 1 is the first leader's marker, 2..11 its ten commands.
        assert (old.state, old.last_index) == (SegmentState.CLOSED, 11)
        await all_converge_to(replicas, 11)


class _Switch:
    """Drops everything a client receives while `dropping` is set."""

    def __init__(self) -> None:
        self.dropping = False
        self.dropped_bytes = 0


class _LossyStream(anyio.abc.ByteStream):
    def __init__(self, inner: anyio.abc.ByteStream, switch: _Switch) -> None:
        self._inner = inner
        self._switch = switch

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            data = await self._inner.receive(max_bytes)
            if not self._switch.dropping:
                return data
            self._switch.dropped_bytes += len(data)

    async def send(self, item: bytes) -> None:
        await self._inner.send(item)

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()

    @property
    def extra_attributes(self) -> dict[Any, Callable[[], Any]]:
        return {}


def lossy_connector(switch: _Switch) -> Callable[[str], Awaitable[anyio.abc.ByteStream]]:
    async def connect_lossy(address: str) -> anyio.abc.ByteStream:
        return _LossyStream(await tcp_connector(address), switch)

    return connect_lossy


async def test_a_retry_after_the_leader_dies_returns_the_first_result_applied_once() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        switch = _Switch()
        config = ClientConfig(attempt_timeout_ms=20_000)
        async with (
            replicas.cluster.store_factory() as store,
            connect(
                APP,
                store=store,
                connector=lossy_connector(switch),
                rng=random.Random(5),
                config=config,
            ) as client,
        ):
            assert await client.call("add", 1) == 1
            results: list[int] = []

            async def add_five() -> None:
                results.append(await client.call("add", 5))

            switch.dropping = True
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(add_five)
                # Applied and answered by the leader, but the answer never arrives.
                await wait_until(
                    lambda: leader.machine.value == 6 and switch.dropped_bytes > 0  # type: ignore[attr-defined]
                )
                switch.dropping = False
                await replicas.kill(leader.replica_id)
            assert results == [6], "the retry got the recorded result of the first attempt"
            assert await client.call("add", 0) == 6, "the command was applied once"
        await all_converge_to(replicas, 6)


async def test_a_fenced_leader_fails_pending_requests_with_a_retryable_error() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        async with replicas.client() as client:
            for _ in range(3):
                await client.call("add", 1)
            term = leader.term
            assert term is not None
            async with replicas.cluster.client() as intruder:
                # Someone else recovery-opens the leader's ledger: that fences it.
                await intruder.open_ledger(term.segment.ledger_id, ReplicaConfig().ledger_password)
            with pytest.raises(OutcomeUnknown) as raised:
                await leader.call("add", 100)
            assert raised.value.retryable
            assert not leader.is_leader
            # The fenced leader stood aside: another replica takes over and goes on.
            await replicas.wait_leader(exclude=leader.replica_id)
            assert await client.call("add", 1) == 4
        await all_converge_to(replicas, 4)


async def test_session_expiry_makes_the_leader_step_down_and_rejoin_later() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        old_epoch = leader.epoch
        async with replicas.client() as client:
            await client.call("add", 1)
            replicas.memory_store(leader.replica_id).expire_session()
            await wait_until(lambda: not leader.is_leader)
            with pytest.raises(NotLeader):
                await leader.call("add", 1)
            successor = await replicas.wait_leader(exclude=leader.replica_id)
            assert successor.epoch > old_epoch
            assert await client.call("add", 1) == 2
        # With a new session, the old leader stands again once caught up.
        await wait_until(lambda: leader.status()["candidate"])
        await all_converge_to(replicas, 2)


async def test_a_disconnected_leader_keeps_leading_while_its_session_lives() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        old_epoch = leader.epoch
        assert await leader.call("add", 1) == 1
        store = replicas.memory_store(leader.replica_id)
        store.suspend()
        # Its ledger, not ZooKeeper, decides what it acknowledges: a dropped connection
        # whose session lives costs no failover.
        assert await leader.call("add", 1) == 2
        assert leader.is_leader
        others = [r for r in replicas.running.values() if r.replica is not leader]
        assert len(others) == 2
        assert not any(r.replica.is_leader for r in others)
        store.resume()
        assert await leader.call("add", 1) == 3
        assert leader.is_leader
        assert leader.epoch == old_epoch
        await all_converge_to(replicas, 3)


async def test_a_follower_hears_of_its_new_leader() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        follower = next(r.replica for r in replicas.running.values() if r.replica is not leader)
        heard: list[str | None] = []

        async def listen() -> None:
            while True:
                heard.append(await follower.wait_leader_change())

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(listen)
            await wait_until(lambda: follower.status()["leader_id"] == leader.replica_id)
            await anyio.wait_all_tasks_blocked()
            # Re-readings of the znode may wake it; none names another leader.
            assert set(heard) <= {leader.address}
            replicas.memory_store(leader.replica_id).expire_session()
            successor = await replicas.wait_leader(exclude=leader.replica_id)
            await wait_until(lambda: successor.address in heard)
            task_group.cancel_scope.cancel()
        after = heard[heard.index(successor.address) :]
        assert set(after) == {successor.address}, "nothing older is heard after the successor"
