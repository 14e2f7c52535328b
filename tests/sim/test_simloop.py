"""The virtual-time loop orders cancellations by creation, never by memory address.

anyio delivers a cancellation to the tasks and nested cancel scopes of a
scope in the order of `set`s of them; with identity hashes that order changes
from run to run (it follows addresses), and so did the seeded simulation.
"""

from __future__ import annotations

import asyncio

import anyio
import anyio._backends._asyncio as anyio_asyncio

from bookie.testing.simloop import run_simulation

TASKS = 40


async def cancellation_order() -> list[int]:
    """Start tasks that each wait in a nested scope, cancel them all; return who woke first."""
    woken: list[int] = []

    async def wait_forever(number: int) -> None:
        try:
            with anyio.move_on_after(3600):
                await anyio.sleep_forever()
        finally:
            woken.append(number)

    async with anyio.create_task_group() as group:
        for number in range(TASKS):
            group.start_soon(wait_forever, number)
        await anyio.sleep(0.001)
        group.cancel_scope.cancel()
    return woken


def test_tasks_and_cancel_scopes_hash_as_their_creation_number() -> None:
    async def main() -> tuple[int, list[int], str]:
        task = asyncio.current_task()
        assert task is not None
        scopes = [anyio.CancelScope() for _ in range(3)]
        return hash(task), [hash(scope) for scope in scopes], type(scopes[0]).__name__

    task_hash, scope_hashes, scope_class = run_simulation(main)
    assert task_hash == 1
    assert scope_hashes == sorted(scope_hashes)
    assert len(set(scope_hashes)) == 3
    assert scope_class == "NumberedCancelScope"


def test_anyio_is_left_as_it_was_after_a_simulation() -> None:
    before = anyio_asyncio.CancelScope

    async def main() -> None:
        await anyio.sleep(0)

    run_simulation(main)
    assert anyio_asyncio.CancelScope is before


def test_cancelled_tasks_resume_in_the_same_order_whatever_the_memory_layout() -> None:
    first = run_simulation(cancellation_order)
    # Objects allocated in between move later tasks and scopes to other addresses.
    ballast = [object() for _ in range(10_007)]
    second = run_simulation(cancellation_order)
    assert ballast
    assert sorted(first) == list(range(TASKS))
    assert first == second
