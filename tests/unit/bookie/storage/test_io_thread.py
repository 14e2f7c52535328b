"""IoThread: calls run in one thread, in order; outcomes reach the caller; a cancelled
caller stops waiting while its call finishes; a call outliving its event loop ends the
thread without an error."""

from __future__ import annotations

import threading

import anyio
import pytest

from bookie.storage.io_thread import IoThread

pytestmark = pytest.mark.anyio


async def test_calls_run_in_one_other_thread_in_the_order_made() -> None:
    io = IoThread("test-io")
    seen: list[tuple[int, int]] = []

    def note(value: int) -> int:
        seen.append((value, threading.get_ident()))
        return value * 10

    async with anyio.create_task_group() as tasks:
        for value in range(20):
            tasks.start_soon(io.call, note, value)
    assert [value for value, _ in seen] == list(range(20))
    threads = {ident for _, ident in seen}
    assert len(threads) == 1
    assert threading.get_ident() not in threads
    assert await io.call(note, 7) == 70
    io.stop()


async def test_an_exception_reaches_the_caller_and_the_thread_goes_on() -> None:
    io = IoThread("test-io")

    def fail() -> None:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        await io.call(fail)
    assert await io.call(len, b"abc") == 3
    io.stop()


async def test_a_cancelled_caller_stops_waiting_and_the_call_still_finishes() -> None:
    io = IoThread("test-io")
    release = threading.Event()
    finished = threading.Event()

    def slow() -> str:
        release.wait(10)
        finished.set()
        return "done"

    with anyio.move_on_after(0.05) as scope:
        await io.call(slow)
    assert scope.cancelled_caught
    assert not finished.is_set()
    release.set()
    # The next call runs after the abandoned one, which therefore finished.
    assert await io.call(finished.is_set)
    io.stop()


def test_a_call_finishing_after_its_loop_closed_ends_the_thread_quietly() -> None:
    """The outcome has nowhere to go: the thread ends, with no error in it or the caller's."""
    io = IoThread("test-io-closed-loop")
    started = threading.Event()
    release = threading.Event()

    def slow() -> str:
        started.set()
        release.wait(10)
        return "done"

    async def abandon() -> None:
        with anyio.move_on_after(10) as scope:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(io.call, slow)
                await anyio.to_thread.run_sync(started.wait, 10)
                scope.cancel()
        assert scope.cancelled_caught

    anyio.run(abandon)
    (thread,) = [thread for thread in threading.enumerate() if thread.name == "test-io-closed-loop"]
    release.set()
    thread.join(10)
    assert not thread.is_alive()
    io.stop()
