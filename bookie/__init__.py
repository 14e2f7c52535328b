"""A BookKeeper-style replicated ledger layer: bookie servers, a ledger client and
ZooKeeper metadata.  See docs/ledgers.md for the guarantees and docs/protocol.md
for the wire format.

Assertions in this package check invariants that protect acknowledged data;
running with `python -O` would silently drop them, so it is refused.
"""

if not __debug__:  # pragma: no cover - only reachable under python -O
    raise RuntimeError("bookie does not run under `python -O`: its assertions guard data safety")
