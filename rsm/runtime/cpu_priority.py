"""A replica's CPU priority: lower while it follows, its own again while it leads or
serves clients.

Why.  Nobody waits for a follower that no client is connected to: it reads
each log entry after the bookies made it durable and applies it.  Every
acknowledgement waits for the leader, the bookies and the clients.  Where
they share CPUs with the followers (the local cluster of `kvstore up`, small
deployments), the followers' work sits in the same run queues, and the
processes an acknowledgement waits for wait to run (docs/operations.md,
"Followers' CPU priority", has the measurements).  The cost: on a saturated
machine followers fall further behind, and a follower elected leader replays
more before it serves (it takes its priority back the moment it starts
taking over).  No correctness rests on any of this.

Clients do wait for a follower they are connected to (the key-value store's
followers answer reads and pass writes on; the framework's answer stale
reads).  So, told how to count its client connections (`watch_clients`), a
follower keeps its own priority while it has one that has been open for
`limits.follower_client_settle_ms` (a probe or health check connecting for
one command does not count), and lowers it again once it has had none for
`limits.follower_clients_gone_ms` (clients that come and go do not flip
it); it looks every `limits.follower_clients_poll_ms`.

How.  Linux with scheduler autogroups (`kernel.sched_autogroup_enabled`, on
in most distributions) shares CPU time first between autogroups, one per
session, and only then between the processes of one: a process's own nice
value does nothing against other sessions' processes.  So the priority set
here is the autogroup's, written to `/proc/self/autogroup`, and only when the
replica leads its own session (the launchers start it so); otherwise the
autogroup is its terminal's or service manager's, whose other processes must
not be slowed.  Elsewhere (not Linux, autogroups off, not a session leader,
in the kernel's root autogroup, whose priority is fixed) the priority is left
alone and one INFO line says why.  The kernel lets an unprivileged process
lower its autogroup's priority and raise it back to 0, but only one such
change per 100 ms on the whole machine: a refused change (EAGAIN) is retried.
Any other refusal is logged once and ends the management, leaving the
priority as it is.  A process in a CPU cgroup of its own (a service unit with
the cpu controller on, a container) is outside the autogroups: the write
succeeds and changes nothing, its cgroup's weight decides.

Crash and restart: the autogroup dies with the session; a restarted replica
starts at its session's priority and lowers it again while it follows.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Final

import anyio

from bookie.logs import emit
from rsm import limits
from rsm.core.roles import Role
from rsm.errors import InvalidConfig

logger = logging.getLogger(__name__)

AUTOGROUP_PATH: Final = Path("/proc/self/autogroup")
"""One line, `/autogroup-<id> nice <n>`; writing a number sets the nice."""

AUTOGROUP_SWITCH_PATH: Final = Path("/proc/sys/kernel/sched_autogroup_enabled")
"""`1` while the scheduler shares CPU time between autogroups."""


def nice_for(role: Role, *, start_nice: int, follower_nice: int, serving: bool = False) -> int:
    """The nice a replica in `role` wants: its starting one unless it follows without
    `serving` clients."""
    if role is Role.FOLLOWER and not serving:
        return max(start_nice, follower_nice)
    return start_nice


def parse_autogroup(text: str) -> int | None:
    """The nice in an autogroup line (`/autogroup-<id> nice <n>`); ValueError if malformed.

    None for the empty text the kernel gives a process in its root autogroup, the one
    of processes whose sessions never had one (the first session's, in a machine or
    container whose init never started a session): its priority cannot be changed.
    """
    if not text.strip():
        return None
    fields = text.split()
    if len(fields) != 3 or fields[1] != "nice":
        raise ValueError(f"unexpected autogroup line {text.strip()!r}")
    return int(fields[2])


class FollowerPriority:
    """Keeps this process's autogroup at `follower_nice` while its replica follows.

    Give `on_role` to the replica (it calls it on every role change), tell it
    how to count the replica's clients (`watch_clients`), and run `run` (or
    enter `running`) for as long as the replica lives.  The paths and
    `session_leader` (whether this process leads its session; None: ask the
    OS) are for tests.
    """

    def __init__(
        self,
        follower_nice: int,
        *,
        autogroup_path: Path = AUTOGROUP_PATH,
        switch_path: Path = AUTOGROUP_SWITCH_PATH,
        session_leader: bool | None = None,
    ) -> None:
        if not 0 <= follower_nice <= limits.follower_nice_max:
            raise InvalidConfig(
                f"follower nice {follower_nice} is outside 0..{limits.follower_nice_max}"
            )
        self.follower_nice = follower_nice
        self._autogroup_path = autogroup_path
        self._switch_path = switch_path
        self._session_leader = session_leader
        self._role = Role.FOLLOWER
        self._changed: anyio.Event | None = None
        self._clients: Callable[[float], int] | None = None
        self._clients_seen_s: float | None = None
        """When clients were last seen connected (anyio's clock)."""
        self.applied_nice: int | None = None
        """The nice last written (or found at the start); None while not managing."""

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[FollowerPriority]:
        """`run` for the block's lifetime."""
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(self.run)
            yield self
            task_group.cancel_scope.cancel()

    def on_role(self, role: Role) -> None:
        """Note the replica's new role; `run` applies the priority it wants."""
        self._role = role
        if self._changed is not None:
            self._changed.set()

    def watch_clients(self, count: Callable[[float], int]) -> None:
        """From now on, the replica's client connections decide whether a follower keeps its
        own priority (see the module docstring): `count(since_s)` is how many are open that
        were opened at or before `since_s` (anyio's clock)."""
        self._clients = count
        if self._changed is not None:
            self._changed.set()

    def serving(self, now_s: float) -> bool:
        """Whether the replica has clients at `now_s` (open for at least
        `limits.follower_client_settle_ms`), or had some within
        `limits.follower_clients_gone_ms`."""
        count = self._clients
        if count is not None and count(now_s - limits.follower_client_settle_ms / 1000) > 0:
            self._clients_seen_s = now_s
            return True
        seen_s = self._clients_seen_s
        return seen_s is not None and now_s - seen_s < limits.follower_clients_gone_ms / 1000

    def unavailable_reason(self) -> str | None:
        """Why the priority cannot be managed here, or None if it can."""
        if self.follower_nice == 0:
            return "follower nice is 0"
        if not sys.platform.startswith("linux"):
            return "scheduler autogroups are Linux's"
        try:
            switch = self._switch_path.read_text().strip()
        except OSError:
            return "this kernel has no scheduler autogroups"
        if switch != "1":
            return "scheduler autogroups are off (kernel.sched_autogroup_enabled)"
        leads_session = self._session_leader
        if leads_session is None:
            leads_session = os.getsid(0) == os.getpid()
        if not leads_session:
            return "the replica does not lead its own session (its autogroup is shared)"
        return None

    async def run(self) -> None:
        """Apply the wanted priority on every role change and as clients come and go, until
        cancelled."""
        start_nice = self._start_nice()
        if isinstance(start_nice, str):
            emit(logger, logging.INFO, "rsm.cpu_priority_off", reason=start_nice)
            return
        self.applied_nice = start_nice
        self._changed = anyio.Event()
        while True:
            serving = self.serving(anyio.current_time())
            wanted = nice_for(
                self._role,
                start_nice=start_nice,
                follower_nice=self.follower_nice,
                serving=serving,
            )
            if wanted == self.applied_nice:
                poll_ms = math.inf if self._clients is None else limits.follower_clients_poll_ms
                with anyio.move_on_after(poll_ms / 1000):
                    await self._changed.wait()
                if self._changed.is_set():
                    self._changed = anyio.Event()
                continue
            try:
                self._write(wanted)
            except OSError as error:
                if error.errno != errno.EAGAIN:
                    emit(
                        logger,
                        logging.WARNING,
                        "rsm.cpu_priority_failed",
                        nice=wanted,
                        error=repr(error),
                    )
                    return
                await anyio.sleep(limits.cpu_priority_retry_ms / 1000)
                continue
            self.applied_nice = wanted
            emit(
                logger,
                logging.INFO,
                "rsm.cpu_priority",
                role=self._role.value,
                serving_clients=serving,
                nice=wanted,
            )

    def _start_nice(self) -> int | str:
        """The autogroup's nice now, or why the priority cannot be managed."""
        reason = self.unavailable_reason()
        if reason is not None:
            return reason
        try:
            nice = parse_autogroup(self._autogroup_path.read_text())
        except (OSError, ValueError) as error:
            return f"cannot read {self._autogroup_path}: {error}"
        if nice is None:
            return "the replica is in the kernel's root autogroup, whose priority is fixed"
        return nice

    def _write(self, nice: int) -> None:
        descriptor = os.open(self._autogroup_path, os.O_WRONLY)
        try:
            os.write(descriptor, str(nice).encode())
        finally:
            os.close(descriptor)
