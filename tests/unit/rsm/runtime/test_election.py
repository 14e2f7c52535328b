"""A replica's election znodes (`Leadership`) against a memory metadata store."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from bookie.errors import MetadataUnavailable
from bookie.meta.api import ANY_VERSION, Delete, SetData
from bookie.meta.memory import MemoryMetadataServer
from rsm.core import log_state
from rsm.core.layout import AppLayout
from rsm.core.log_format import Handoff, encode_handoff, encode_log
from rsm.core.log_state import Log
from rsm.runtime.election import Leadership
from rsm.runtime.log import LogStore

pytestmark = pytest.mark.anyio


async def test_a_withdrawal_that_failed_keeps_the_candidacy() -> None:
    """Cut off from ZooKeeper with its session alive, a replica cannot delete its candidacy:
    it must still know it, or it stands a second time and neither name is ever elected."""
    async with MemoryMetadataServer().client() as store:
        log_store = LogStore(store, AppLayout.of("app"))
        await log_store.ensure_layout()
        leadership = Leadership(
            store, log_store, replica_id="r1", address="127.0.0.1:1", retry_delay_ms=10
        )
        name = await leadership.stand()
        store.suspend()
        with pytest.raises(MetadataUnavailable):
            await leadership.withdraw()
        assert leadership.candidacy == name
        store.resume()
        await leadership.withdraw()
        assert leadership.candidacy is None
        assert await store.children(log_store.layout.election) == []


class _HandoverAfterChildren:
    """A metadata store that runs `hook` once, right after the first read of the election's
    children it answers: a handover that lands in the middle of an evaluation."""

    def __init__(self, store: Any, hook: Callable[[], Awaitable[None]]) -> None:
        self._store = store
        self._hook: Callable[[], Awaitable[None]] | None = hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def children(self, path: str) -> list[str]:
        children: list[str] = await self._store.children(path)
        hook, self._hook = self._hook, None
        if hook is not None:
            await hook()
        return children


async def test_a_handover_during_an_evaluation_elects_its_target() -> None:
    """The leader of epoch 1 (r1) hands over to r2, which stood just before, while r3 is
    evaluating: r3 read the candidates before r2 stood and the log and handoff after the
    handover.  Mixing the two would elect r3 (the lowest sequence, r2 missing) under a fresh
    handoff naming r2, and r3 would take over; the evaluation must see one state: r2."""
    server = MemoryMetadataServer()
    async with (
        server.client() as r1_store,
        server.client() as r2_store,
        server.client() as r3_store,
    ):
        layout = AppLayout.of("app")
        r1_log = LogStore(r1_store, layout)
        await r1_log.ensure_layout()

        def leadership(store: Any, replica_id: str) -> Leadership:
            return Leadership(
                store,
                LogStore(store, layout),
                replica_id=replica_id,
                address=f"127.0.0.1:{replica_id[1:]}",
                retry_delay_ms=10,
            )

        r1 = leadership(r1_store, "r1")
        r2 = leadership(r2_store, "r2")

        async def stand_and_hand_over() -> None:
            await r2.stand()
            log, version = await r1_log.read()
            closed = log_state.close(log, epoch=1, ledger_id=1, last_index=0)
            assert r1.candidacy is not None
            done = await r1_log.cas(
                [
                    SetData(layout.log, encode_log(closed), version),
                    SetData(layout.handoff, encode_handoff(Handoff("r2", 1)), ANY_VERSION),
                    Delete(layout.candidate(r1.candidacy), ANY_VERSION),
                ],
                lambda seen: seen.segments == closed.segments,
            )
            assert done

        r3 = leadership(_HandoverAfterChildren(r3_store, stand_and_hand_over), "r3")
        await r3.stand()
        await r1.stand()
        taken = log_state.takeover(Log(), new_ledger_id=1)
        assert await r1_log.cas(
            [
                SetData(layout.log, encode_log(taken), 0),
                SetData(layout.handoff, encode_handoff(Handoff("r1", 1)), ANY_VERSION),
            ],
            lambda seen: seen == taken,
        )
        view = await r3.evaluate()
        assert view.log_epoch == 1
        assert view.elect is not None
        assert view.elect.replica_id == "r2", view
