"""FollowerPriority: which nice a role wants, a follower with clients keeping its own,
when the priority is left alone, and the kernel's refusals (EAGAIN retried, anything else
ends the management).

The writes go to a recorder instead of /proc; the real autogroup is exercised
in tests/integration/test_cpu_priority.py.
"""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import anyio
import pytest

from bookie.logs import record_fields
from rsm import limits
from rsm.core.roles import Role
from rsm.errors import InvalidConfig
from rsm.runtime.cpu_priority import FollowerPriority, nice_for, parse_autogroup
from tests.unit.rsm.runtime.harness import wait_until


class Recording(FollowerPriority):
    """Records the nice values written; refuses the first ones with `refusals`."""

    def __init__(self, follower_nice: int, tmp_path: Path, **options: bool) -> None:
        autogroup = tmp_path / "autogroup"
        autogroup.write_text("/autogroup-7 nice 0\n")
        switch = tmp_path / "sched_autogroup_enabled"
        switch.write_text("1\n")
        super().__init__(
            follower_nice,
            autogroup_path=autogroup,
            switch_path=switch,
            session_leader=options.get("session_leader", True),
        )
        self.written: list[int] = []
        self.refusals: list[int] = []
        """errno values the next writes fail with, in order."""
        self.role_at_last_refusal: Role | None = None
        """The role the replica moves to while the last refusal is being made."""

    def _write(self, nice: int) -> None:
        if self.refusals:
            code = self.refusals.pop(0)
            if not self.refusals and self.role_at_last_refusal is not None:
                self.on_role(self.role_at_last_refusal)
            raise OSError(code, errno.errorcode[code])
        self.written.append(nice)


@pytest.mark.parametrize(
    ("role", "start", "follower", "wanted"),
    [
        (Role.FOLLOWER, 0, 10, 10),
        (Role.TAKING_OVER, 0, 10, 0),
        (Role.LEADER, 0, 10, 0),
        (Role.FOLLOWER, 15, 10, 15),
        (Role.LEADER, 15, 10, 15),
    ],
)
def test_only_a_follower_lowers_its_priority_and_never_raises_it(
    role: Role, start: int, follower: int, wanted: int
) -> None:
    assert nice_for(role, start_nice=start, follower_nice=follower) == wanted


def test_a_follower_serving_clients_keeps_its_priority() -> None:
    assert nice_for(Role.FOLLOWER, start_nice=0, follower_nice=10, serving=True) == 0
    assert nice_for(Role.FOLLOWER, start_nice=15, follower_nice=10, serving=True) == 15


class Connections:
    """Open client connections, by the time each was opened."""

    def __init__(self) -> None:
        self.opened_s: list[float] = []

    def count(self, since_s: float) -> int:
        return sum(1 for opened_s in self.opened_s if opened_s <= since_s)


def test_clients_count_once_settled_and_until_they_have_been_gone_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "follower_client_settle_ms", 1_000)
    monkeypatch.setattr(limits, "follower_clients_gone_ms", 10_000)
    priority = Recording(10, tmp_path)
    assert not priority.serving(100.0), "nothing counts clients yet"
    connections = Connections()
    priority.watch_clients(connections.count)
    assert not priority.serving(100.0), "none has come"
    connections.opened_s = [100.0]
    assert not priority.serving(100.5), "a probe's connection, open for half a second"
    assert priority.serving(101.0)
    connections.opened_s = []
    assert priority.serving(110.9), "gone for less than 10 s"
    assert not priority.serving(111.0)
    connections.opened_s = [150.0, 199.0]
    assert priority.serving(200.0)


@pytest.mark.anyio
async def test_a_follower_takes_its_priority_while_clients_come_and_lowers_it_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "follower_client_settle_ms", 10)
    monkeypatch.setattr(limits, "follower_clients_gone_ms", 50)
    monkeypatch.setattr(limits, "follower_clients_poll_ms", 10)
    priority = Recording(10, tmp_path)
    connections = Connections()
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(priority.run)
        await wait_until(lambda: priority.written == [10])
        priority.watch_clients(connections.count)
        connections.opened_s = [anyio.current_time()] * 3
        await wait_until(lambda: priority.written == [10, 0])
        connections.opened_s = []
        await wait_until(lambda: priority.written == [10, 0, 10])
        connections.opened_s = [anyio.current_time()]
        priority.on_role(Role.TAKING_OVER)
        priority.on_role(Role.LEADER)
        await wait_until(lambda: priority.written == [10, 0, 10, 0])
        task_group.cancel_scope.cancel()


def test_autogroup_lines_are_parsed_strictly() -> None:
    assert parse_autogroup("/autogroup-4424 nice 0\n") == 0
    assert parse_autogroup("/autogroup-1 nice -5") == -5
    assert parse_autogroup("") is None, "the root autogroup shows nothing"
    for bad in ("/autogroup-1 nice", "/autogroup-1 weight 3", "/autogroup-1 nice x"):
        with pytest.raises(ValueError):  # noqa: PT011 - the message is the line itself
            parse_autogroup(bad)


@pytest.mark.parametrize("nice", [-1, limits.follower_nice_max + 1])
def test_a_nice_outside_linux_range_is_refused(nice: int) -> None:
    with pytest.raises(InvalidConfig, match=r"outside 0\.\.19"):
        FollowerPriority(nice)


def test_the_priority_is_left_alone_where_it_would_not_work(tmp_path: Path) -> None:
    assert Recording(10, tmp_path).unavailable_reason() is None
    assert Recording(0, tmp_path).unavailable_reason() == "follower nice is 0"
    shared = Recording(10, tmp_path, session_leader=False).unavailable_reason()
    assert shared is not None
    assert "session" in shared
    off = Recording(10, tmp_path)
    (tmp_path / "sched_autogroup_enabled").write_text("0\n")
    assert "off" in (off.unavailable_reason() or "")
    (tmp_path / "sched_autogroup_enabled").unlink()
    assert "no scheduler autogroups" in (off.unavailable_reason() or "")


@pytest.mark.anyio
async def test_a_follower_is_lowered_and_raised_back_when_it_takes_over(tmp_path: Path) -> None:
    priority = Recording(10, tmp_path)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(priority.run)
        await wait_until(lambda: priority.written == [10])
        priority.on_role(Role.TAKING_OVER)
        await wait_until(lambda: priority.written == [10, 0])
        priority.on_role(Role.LEADER)
        priority.on_role(Role.FOLLOWER)
        await wait_until(lambda: priority.written == [10, 0, 10])
        assert priority.applied_nice == 10
        task_group.cancel_scope.cancel()


@pytest.mark.anyio
async def test_a_change_refused_as_too_soon_is_retried_with_the_latest_role(
    tmp_path: Path,
) -> None:
    priority = Recording(10, tmp_path)
    priority.refusals = [errno.EAGAIN, errno.EAGAIN]
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(priority.run)
        await wait_until(lambda: priority.written == [10])
        priority.refusals = [errno.EAGAIN]
        # The replica goes on from taking over to leading while the change is refused.
        priority.role_at_last_refusal = Role.LEADER
        priority.on_role(Role.TAKING_OVER)
        await wait_until(lambda: priority.written == [10, 0])
        assert priority.applied_nice == 0
        task_group.cancel_scope.cancel()


@pytest.mark.anyio
async def test_any_other_refusal_ends_the_management_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    priority = Recording(10, tmp_path)
    priority.refusals = [errno.EPERM]
    with anyio.fail_after(5), caplog.at_level(logging.WARNING, logger="rsm.runtime.cpu_priority"):
        await priority.run()
    assert priority.written == []
    assert priority.applied_nice == 0
    assert [record.getMessage() for record in caplog.records] == ["rsm.cpu_priority_failed"]


@pytest.mark.anyio
async def test_where_it_cannot_work_run_says_why_once_and_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    priority = Recording(10, tmp_path, session_leader=False)
    with anyio.fail_after(5), caplog.at_level(logging.INFO, logger="rsm.runtime.cpu_priority"):
        await priority.run()
    priority.on_role(Role.LEADER)
    assert priority.written == []
    assert priority.applied_nice is None
    assert [record.getMessage() for record in caplog.records] == ["rsm.cpu_priority_off"]


@pytest.mark.anyio
async def test_a_session_leader_in_the_root_autogroup_leaves_it_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A session without an autogroup of its own (the kernel could not make one) is
    in the root autogroup, which /proc shows as nothing and whose priority is fixed."""
    priority = Recording(10, tmp_path)
    (tmp_path / "autogroup").write_text("")
    with anyio.fail_after(5), caplog.at_level(logging.INFO, logger="rsm.runtime.cpu_priority"):
        await priority.run()
    assert priority.written == []
    assert priority.applied_nice is None
    [record] = caplog.records
    event, fields = record_fields(record)
    assert event == "rsm.cpu_priority_off"
    assert "root autogroup" in str(fields["reason"])
