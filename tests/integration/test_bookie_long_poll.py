"""Long-poll READ on a real bookie process: a parked read wakes when the LAC passes
`previous_lac`, and one that sees no new LAC times out cleanly (EOK, no entry)."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.local.zookeeper import LocalZooKeeper
from bookie.wire.messages import ReadResponse

from .support.entries import KEY, packet
from .support.processes import HOST, BookieCluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGER = 9
POLL_TIMEOUT_MS = 20_000
SHORT_POLL_MS = 300


async def test_long_poll_wakes_on_new_lac_and_times_out(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = cluster.add_bookie()
        await cluster.start(setup)
        async with (
            BookieConnection.connect(HOST, setup.port) as writer,
            BookieConnection.connect(HOST, setup.port) as reader,
        ):
            for entry_id in range(3):
                await writer.add(LEDGER, entry_id, KEY, packet(LEDGER, entry_id))
            # Entry 2 carries LAC 1: a tailer that knows LAC 1 waits for entry 2 to be confirmed.
            answers: list[ReadResponse] = []
            parked = time.monotonic()
            async with anyio.create_task_group() as tasks:

                async def poll() -> None:
                    answers.append(
                        await reader.read(
                            LEDGER, 2, previous_lac=1, long_poll_timeout_ms=POLL_TIMEOUT_MS
                        )
                    )

                tasks.start_soon(poll)
                await writer.add(LEDGER, 3, KEY, packet(LEDGER, 3))
            woke_after_s = time.monotonic() - parked
            assert answers[0].status == 0
            assert answers[0].packet == packet(LEDGER, 2)
            assert answers[0].lac == 2
            assert woke_after_s < POLL_TIMEOUT_MS / 1000 / 2

            started = time.monotonic()
            timed_out = await reader.read(
                LEDGER, 3, previous_lac=2, long_poll_timeout_ms=SHORT_POLL_MS
            )
            waited_s = time.monotonic() - started
            assert timed_out.status == 0
            assert timed_out.packet is None
            assert timed_out.lac == 2
            assert waited_s >= SHORT_POLL_MS / 1000 * 0.9
            # The connection is still usable after a poll timed out.
            info = await reader.bookie_info()
            assert info.read_only is False
