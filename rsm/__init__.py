"""Replicated state machines on ledgers: subclass `StateMachine`, run replicas,
and every command is logged to bookies before it is applied.

    from rsm import StateMachine, command, query

    class Counter(StateMachine):
        def __init__(self) -> None:
            self.value = 0

        @command
        def add(self, amount: int = 1) -> int:
            self.value += amount
            return self.value

        @query
        def get(self) -> int:
            return self.value

Run replicas with `rsm run module:Counter --app counter --zk ... --listen ...`
(or `async with Replica(Counter, app=..., store=..., ledgers=...)` in code) and
call them with `async with rsm.connect("counter", zk=...) as client` (or
`rsm.connect_sync`).  docs/tutorial.md walks through it; docs/guarantees.md
says what is promised.

Assertions in this package check invariants that protect acknowledged data;
running with `python -O` would silently drop them, so it is refused.
"""

if not __debug__:  # pragma: no cover - only reachable under python -O
    raise RuntimeError("rsm does not run under `python -O`: its assertions guard data safety")

from rsm.client import Client, ClientConfig, SyncClient, connect, connect_sync
from rsm.config import ReplicaConfig
from rsm.core.protocol import Consistency
from rsm.core.roles import Role
from rsm.core.state_machine import (
    Context,
    StateMachine,
    command,
    query,
    resolve_command,
    resolve_query,
)
from rsm.errors import (
    BadArguments,
    CommandFailed,
    NoSuchApplication,
    NotLeader,
    OutcomeUnknown,
    RsmError,
    SessionExpired,
    StatusError,
    Timeout,
    Unavailable,
    UnknownCommand,
)
from rsm.runtime.replica import Replica

__all__ = [
    "BadArguments",
    "Client",
    "ClientConfig",
    "CommandFailed",
    "Consistency",
    "Context",
    "NoSuchApplication",
    "NotLeader",
    "OutcomeUnknown",
    "Replica",
    "ReplicaConfig",
    "Role",
    "RsmError",
    "SessionExpired",
    "StateMachine",
    "StatusError",
    "SyncClient",
    "Timeout",
    "Unavailable",
    "UnknownCommand",
    "command",
    "connect",
    "connect_sync",
    "query",
    "resolve_command",
    "resolve_query",
]
