"""What a client that asked for a snapshot is answered when it failed: the protocol's error
answer for its cause (the replica goes on; tests/unit/rsm/snapshots/test_snapshot_failures.py
runs it through a replica)."""

from __future__ import annotations

from bookie.errors import NotEnoughBookies
from rsm.errors import BadSnapshotState, CommandFailed, Unavailable
from rsm.runtime.server import _snapshot_error


def test_a_failed_snapshot_is_answered_as_the_protocol_error_of_its_cause() -> None:
    transient = _snapshot_error(NotEnoughBookies("2 writable bookies, 3 needed"))
    assert isinstance(transient, Unavailable)
    assert "NotEnoughBookies: 2 writable bookies" in transient.message
    refused = _snapshot_error(BadSnapshotState("attribute 'guard' is a lock"))
    assert isinstance(refused, CommandFailed)
    assert refused.type_name == "BadSnapshotState"
    assert "guard" in refused.message
    as_is = Unavailable("nothing was applied yet")
    assert _snapshot_error(as_is) is as_is
