"""Replicated state machines on ledgers: subclass `StateMachine`, run replicas,
and every command is logged to bookies before it is applied.

Assertions in this package check invariants that protect acknowledged data;
running with `python -O` would silently drop them, so it is refused.
"""

if not __debug__:  # pragma: no cover - only reachable under python -O
    raise RuntimeError("rsm does not run under `python -O`: its assertions guard data safety")
