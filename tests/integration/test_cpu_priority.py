"""FollowerPriority on the real kernel: a process that leads its session lowers its
autogroup's priority while it follows and takes it back when it leads; one that shares its
session's autogroup leaves it alone.  Skipped where the kernel has no autogroups."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rsm.runtime.cpu_priority import AUTOGROUP_PATH, FollowerPriority, parse_autogroup

pytestmark = pytest.mark.integration

WAIT_S = 30.0

SCRIPT = textwrap.dedent(
    """
    import anyio
    from rsm.runtime.cpu_priority import AUTOGROUP_PATH, FollowerPriority, parse_autogroup
    from rsm.core.roles import Role
    from tests.unit.rsm.runtime.harness import wait_until

    def nice() -> int | None:
        return parse_autogroup(AUTOGROUP_PATH.read_text())

    async def main() -> None:
        priority = FollowerPriority(10)
        if priority.unavailable_reason() is not None:
            await priority.run()
            print("unmanaged", nice(), flush=True)
            return
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(priority.run)
            await wait_until(lambda: priority.applied_nice == 10)
            print("following", nice(), flush=True)
            priority.on_role(Role.TAKING_OVER)
            await wait_until(lambda: priority.applied_nice == 0)
            print("taking_over", nice(), flush=True)
            task_group.cancel_scope.cancel()

    anyio.run(main)
    """
)


if FollowerPriority(10, session_leader=True).unavailable_reason() is not None:
    pytest.skip("this kernel does not share CPU time by autogroup", allow_module_level=True)


def run_script(*, new_session: bool) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        start_new_session=new_session,
        check=False,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def own_nice() -> int | None:
    """This process's autogroup's nice; None in the root autogroup (where CI may run us)."""
    return parse_autogroup(AUTOGROUP_PATH.read_text())


def test_a_session_leader_lowers_its_autogroup_while_following() -> None:
    before = own_nice()
    # A new session's autogroup starts at nice 0, whatever the parent's.
    assert run_script(new_session=True) == ["following 10", "taking_over 0"]
    assert own_nice() == before, "the child's autogroup was its own"


def test_a_process_sharing_its_sessions_autogroup_leaves_it_alone() -> None:
    before = own_nice()
    assert run_script(new_session=False) == [f"unmanaged {before}"]
    assert own_nice() == before
