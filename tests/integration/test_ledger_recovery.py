"""Ledger recovery with real bookie processes and a real ZooKeeper (BookKeeper's
`LedgerRecoveryTest` and `LedgerRecovery2Test`).

Faults are real: a slow bookie is a stopped process (SIGSTOP, so its socket
stays open and its answers never come), a failed bookie is a killed one
(SIGKILL), and a restart reuses its directories.  Where a scenario needs
messages in one exact order (a fence that never reaches a bookie, an add that
reaches one bookie before a recovery and another after), a `WireTap` in the
client holds or drops the chosen frames on their way to the real processes.

What every test checks is that recovery never closes a ledger below an
acknowledged entry (G6), that the closed ledger reads back as written, and
that the old writer is fenced (G4).
"""

from __future__ import annotations

import signal
from pathlib import Path

import anyio
import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.client.read_handle import ReadHandle
from bookie.client.write_handle import WriteHandle
from bookie.core.metadata import LedgerState
from bookie.errors import (
    LedgerFenced,
    NotEnoughBookies,
    ReadBeyondLastAddConfirmed,
    Status,
)
from bookie.local.zookeeper import LocalZooKeeper
from bookie.wire.messages import READ_FLAG_FENCE, AddResponse, ReadRequest, ReadResponse, Request

from .support.entries import read_all
from .support.ledgers import (
    PASSWORD,
    Verdict,
    WireTap,
    entry_payload,
    hold_all,
    is_fencing_last_entry_read,
    is_recovery_add,
    ledger_client,
    running_bookies,
    scenario_config,
    start_bookies,
)
from .support.processes import HOST, WAIT_S, BookieProcess

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

PATIENT_WRITER = scenario_config(add_timeout_ms=120_000)
"""A writer that never replaces a bookie during the test: only recovery may change things."""


def payloads(count: int) -> list[bytes]:
    return [entry_payload(number) for number in range(count)]


async def append_entries(writer: WriteHandle, first: int, count: int) -> None:
    for number in range(first, first + count):
        assert await writer.append(entry_payload(number)) == number


async def append_burst(writer: WriteHandle, count: int) -> None:
    """`count` adds sent before any is confirmed, so each carries LAC -1: a recovery
    must then read and re-add every one of them."""
    for number in range(count):
        writer.append_nowait(entry_payload(number))
    with anyio.fail_after(WAIT_S):
        await writer.wait_confirmed(count - 1)


async def check_closed_at(reader: ReadHandle, last_entry_id: int) -> None:
    assert reader.is_closed
    assert reader.metadata.state is LedgerState.CLOSED
    assert reader.last_add_confirmed == reader.metadata.last_entry_id == last_entry_id
    expected = payloads(last_entry_id + 1)
    assert reader.metadata.length == sum(map(len, expected))
    if expected:
        assert await reader.read(0, last_entry_id) == expected


async def check_fenced(writer: WriteHandle) -> None:
    with anyio.fail_after(WAIT_S), pytest.raises(LedgerFenced):
        await writer.append(b"after the recovery")


def process_of(bookies: list[BookieProcess], bookie_id: str) -> BookieProcess:
    return next(bookie for bookie in bookies if bookie.setup.bookie_id == bookie_id)


async def kill(bookie: BookieProcess) -> None:
    bookie.kill()
    assert await bookie.wait_exit() == -signal.SIGKILL


async def test_recovery_with_a_slow_bookie(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """Each bookie of the ensemble in turn is stopped while the writer goes on (Qa = 2
    still acknowledges); recovery must find the end without waiting for it.  The
    recoverer's own timeouts are far longer than the test's bound, so a recovery that
    needed an answer from the stopped bookie would fail the test, not just be slow."""
    patient_reader = scenario_config(read_timeout_ms=120_000, add_timeout_ms=120_000)
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, bookies),
        ledger_client(cluster, seed=1, config=PATIENT_WRITER) as writer_client,
        ledger_client(cluster, seed=2, config=patient_reader) as reader_client,
    ):
        for slow_index in range(3):
            writer = await writer_client.create_ledger(3, 3, 2, password=PASSWORD)
            await append_entries(writer, 0, 5)
            slow = process_of(bookies, writer.metadata.current_ensemble[slow_index])
            slow.send(signal.SIGSTOP)
            try:
                await append_entries(writer, 5, 10)
                with anyio.fail_after(WAIT_S):
                    reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD)
                await check_closed_at(reader, 14)
                await check_fenced(writer)
            finally:
                slow.send(signal.SIGCONT)


async def test_bookie_failure_during_recovery(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """BOOKKEEPER-355: a bookie of the ensemble is down, so recovery must replace it, and
    the only replacement dies as the first recovery add reaches it.  That recovery fails
    and leaves the ledger IN_RECOVERY; once the first bookie is back (restarted from its
    directories) another client recovers the ledger in full."""
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, bookies),
        ledger_client(cluster, seed=1) as writer_client,
    ):
        writer = await writer_client.create_ledger(3, 2, 2, password=PASSWORD)
        await append_entries(writer, 0, 10)
        ensemble = writer.metadata.current_ensemble
        [spare] = await start_bookies(cluster, [cluster.add_bookie(ledger_dirs=1)])
        down = process_of(bookies, ensemble[0])
        await kill(down)

        tap = WireTap()
        tap.hold(spare.setup.address)
        failures: list[NotEnoughBookies] = []
        async with ledger_client(cluster, seed=2, tap=tap) as first_recoverer:

            async def recover() -> None:
                try:
                    await first_recoverer.open_ledger(writer.ledger_id, PASSWORD)
                except NotEnoughBookies as error:
                    failures.append(error)

            with anyio.fail_after(WAIT_S):
                async with anyio.create_task_group() as task_group:
                    task_group.start_soon(recover)
                    await tap.wait_until(lambda: tap.held_count(spare.setup.address) > 0)
                    assert all(map(is_recovery_add, tap.requests(spare.setup.address)))
                    await kill(spare)
        assert len(failures) == 1

        metadata = await writer_client.ledger_metadata(writer.ledger_id)
        assert metadata.state is LedgerState.IN_RECOVERY
        assert metadata.ensembles == ((0, ensemble),)

        await cluster.start(down.setup, wait_for="bookie.ready")
        async with ledger_client(cluster, seed=3) as second_recoverer:
            reader = await second_recoverer.open_ledger(writer.ledger_id, PASSWORD)
            await check_closed_at(reader, 9)
            assert reader.metadata.ensembles == ((0, ensemble),)
        await check_fenced(writer)


async def test_ensemble_change_during_recovery(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """E=3 Qw=2 Qa=2: a bookie is killed while recovery re-adds the ledger's entries, so
    the rest must go to a replacement; the close records the new ensemble."""
    count = 300
    re_adds_delivered = 20
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, bookies),
        ledger_client(cluster, seed=1) as writer_client,
    ):
        writer = await writer_client.create_ledger(3, 2, 2, password=PASSWORD)
        await append_burst(writer, count)
        ensemble = writer.metadata.current_ensemble
        [spare] = await start_bookies(cluster, [cluster.add_bookie(ledger_dirs=1)])
        victim = process_of(bookies, ensemble[1])

        def deliver_some_re_adds(request: Request) -> Verdict:
            delivered = [
                sent
                for sent in tap.requests(victim.setup.address, Verdict.SEND)
                if is_recovery_add(sent)
            ]
            if is_recovery_add(request) and len(delivered) >= re_adds_delivered:
                return Verdict.HOLD
            return Verdict.SEND

        tap = WireTap()
        tap.set_rule(victim.setup.address, deliver_some_re_adds)
        async with ledger_client(cluster, seed=2, tap=tap) as recoverer:
            readers: list[ReadHandle] = []

            async def recover() -> None:
                readers.append(await recoverer.open_ledger(writer.ledger_id, PASSWORD))

            with anyio.fail_after(WAIT_S):
                async with anyio.create_task_group() as task_group:
                    task_group.start_soon(recover)
                    # Entry 0 is re-added (on the victim and on ensemble[0], its write
                    # set), so the replacement starts a second segment after it.
                    await tap.wait_until(
                        lambda: (
                            tap.held_count(victim.setup.address) > 0
                            and re_added(tap, ensemble[0], 0)
                            and re_added(tap, ensemble[1], 0)
                        )
                    )
                    await kill(victim)

            [reader] = readers
            await check_closed_at(reader, count - 1)
        first_segment, second_segment = reader.metadata.ensembles
        assert first_segment == (0, ensemble)
        first_entry_id, new_ensemble = second_segment
        assert 0 < first_entry_id < count
        assert new_ensemble == (ensemble[0], spare.setup.bookie_id, ensemble[2])
        # The replacement holds its copy of every entry of the new segment it is in.
        on_spare = [
            (writer.ledger_id, entry_id)
            for entry_id in range(first_entry_id, count)
            if entry_id % 3 in (0, 1)
        ]
        async with BookieConnection.connect(HOST, spare.setup.port) as connection:
            outcomes = await read_all(connection, on_spare)
        for key in on_spare:
            outcome = outcomes[key]
            assert isinstance(outcome, ReadResponse)
            assert outcome.status == Status.EOK, f"entry {key} is not on the replacement"
        await check_fenced(writer)


async def test_empty_ledger_recovery(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """Ledgers without entries recover closed and empty, also with a bookie down."""
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, bookies),
        ledger_client(cluster, seed=1) as writer_client,
        ledger_client(cluster, seed=2) as reader_client,
    ):
        quorums = [(3, 3, 2), (3, 2, 2), (3, 3, 3), (2, 2, 1)]
        writers = [
            await writer_client.create_ledger(*quorum, password=PASSWORD) for quorum in quorums
        ]
        for writer in writers:
            reader = await reader_client.open_ledger(writer.ledger_id, PASSWORD)
            await check_closed_at(reader, -1)
            with pytest.raises(ReadBeyondLastAddConfirmed):
                await reader.read(0, 0)
            await check_fenced(writer)

        wide = await writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        narrow = await writer_client.create_ledger(3, 2, 2, password=PASSWORD)
        # The bookie down is outside the write set of entry 0 of the E=3 Qw=2 ledger, so
        # its writer hears EFENCED; with it inside, the writer could fail on finding no
        # replacement (`NotEnoughBookies`) first, which commits nothing either.
        await kill(process_of(bookies, narrow.metadata.current_ensemble[2]))
        for handle in (wide, narrow):
            reader = await reader_client.open_ledger(handle.ledger_id, PASSWORD)
            await check_closed_at(reader, -1)
            await check_fenced(handle)


async def test_first_writer_cannot_commit_after_the_second_writer_closes(
    zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path
) -> None:
    """LedgerRecovery2Test#testFirstWriterCannotCommitWriteAfter2ndWriterCloses, step
    by step (the TLA+ counterexample behind BookKeeper issue #2614).

    E=3 Qw=3 Qa=2 on b1, b2, b3; entries 0 and 1 are everywhere.  Writer w1 sends
    entry 2, and the tap holds it on its way to every bookie.  Then:

    1. w2 starts recovery;
    2. its fencing LAC read reaches b1 (b1 is fenced);
    3. w1's entry 2 reaches b3, which is not fenced yet and acknowledges it;
    4. w2's fencing LAC read never reaches b2 (dropped);
    5. w2's fencing LAC read reaches b3: b1 and b3 cover the ensemble, the LAC is 1;
    6. w2's recovery read of entry 2 reaches b1: no such entry;
    7. w2's recovery read of entry 2 reaches b2: no such entry, and b2 is fenced
       by that read (its read to b3 stays held);
    8. two explicit "no" answers (Qw - Qa + 1) make entry 2 absent: w2 closes at 1;
    9. w1's entry 2 reaches b2 (its copy to b1 stays held);
    10. b2 was fenced by the recovery read, so entry 2 never gets its second
        acknowledgement: w1 is fenced and confirms nothing above the close point.
        (Had recovery reads not fenced, b2 would acknowledge, w1 would confirm
        entry 2, and the ledger closed at 1 would have lost it.)
    """
    writer_tap = WireTap()
    recoverer_tap = WireTap()
    async with (
        running_bookies(zookeeper, zk_root, tmp_path, 3) as (cluster, _bookies),
        ledger_client(cluster, seed=1, config=PATIENT_WRITER, tap=writer_tap) as w1_client,
        ledger_client(
            cluster, seed=2, config=scenario_config(read_timeout_ms=120_000), tap=recoverer_tap
        ) as w2_client,
    ):
        w1 = await w1_client.create_ledger(3, 3, 2, password=PASSWORD)
        await append_entries(w1, 0, 2)
        b1, b2, b3 = w1.metadata.current_ensemble
        for bookie_id in (b1, b2, b3):
            writer_tap.hold(bookie_id)
        assert w1.append_nowait(entry_payload(2)) == 2
        await writer_tap.wait_until(
            lambda: all(writer_tap.held_count(bookie_id) == 1 for bookie_id in (b1, b2, b3))
        )

        def drop_fencing_lac_read(request: Request) -> Verdict:
            return Verdict.DROP if is_fencing_last_entry_read(request) else Verdict.SEND

        recoverer_tap.set_rule(b2, drop_fencing_lac_read)
        recoverer_tap.hold(b3)
        readers: list[ReadHandle] = []

        async def recover() -> None:
            readers.append(await w2_client.open_ledger(w1.ledger_id, PASSWORD))

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as task_group:
                # Step 1 and 2.
                task_group.start_soon(recover)
                await recoverer_tap.wait_until(lambda: answered_ok(recoverer_tap, b1, ReadResponse))
                # Step 3.
                await writer_tap.release(b3)
                await writer_tap.wait_until(lambda: answered_ok(writer_tap, b3, AddResponse))
                # Step 4.
                await recoverer_tap.wait_until(
                    lambda: any(
                        map(is_fencing_last_entry_read, recoverer_tap.requests(b2, Verdict.DROP))
                    )
                )
                # Step 5; what w2 sends to b3 from now on stays held.
                await recoverer_tap.release(b3, then=hold_all)
        # Steps 6 to 8: the recovery ended without any answer from b3 to its reads.
        [reader] = readers
        await check_closed_at(reader, 1)
        assert fencing_read_of(recoverer_tap.requests(b2, Verdict.SEND), 2)

        # Step 9 and 10 (w1's add to b1 stays held: b2 alone decides).
        await writer_tap.release(b2)
        with anyio.fail_after(WAIT_S), pytest.raises(LedgerFenced):
            await w1.wait_confirmed(2)
        assert w1.last_add_confirmed == 1
        await writer_tap.wait_until(lambda: len(writer_tap.responses(b2)) == 3)
        late = writer_tap.responses(b2)[-1]
        assert isinstance(late, AddResponse)
        assert late.status == Status.EFENCED

        metadata = await w2_client.ledger_metadata(w1.ledger_id)
        assert metadata.last_entry_id == 1
        again = await w1_client.open_ledger(w1.ledger_id, PASSWORD)
        await check_closed_at(again, 1)
        with pytest.raises(ReadBeyondLastAddConfirmed):
            await again.read(2, 2, allow_unconfirmed=True)


def re_added(tap: WireTap, address: str, entry_id: int) -> bool:
    return any(
        type(response) is AddResponse
        and response.status == Status.EOK
        and response.entry_id == entry_id
        for response in tap.responses(address)
    )


def answered_ok(tap: WireTap, address: str, response_type: type[object]) -> bool:
    return any(
        type(response) is response_type and response.status == Status.EOK
        for response in tap.responses(address)
    )


def fencing_read_of(requests: list[Request], entry_id: int) -> bool:
    return any(
        type(request) is ReadRequest
        and request.entry_id == entry_id
        and bool(request.flags & READ_FLAG_FENCE)
        for request in requests
    )
