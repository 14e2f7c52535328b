"""A recovery that runs out of ensemble changes fails retryably (found by the seeded simulation).

Seed 7006 of `python -m bookie.testing.ledger_sim --mode survivable --steps 20`:
under a long latency spike every replacement bookie timed out in turn, the
recovery gave up after `ensemble_changes_max` replacements, and
`open_ledger(recovery=True)` raised the writer's non-retryable
`TooManyEnsembleChanges`, although the ledger stayed IN_RECOVERY and a new
open, with a fresh count, recovers it once the bookies answer again.
"""

from __future__ import annotations

from bookie.core.metadata import LedgerState
from bookie.core.recovery import RecoveryPhase
from bookie.errors import RecoveryFailed
from tests.unit.bookie.core.client_fakes import Cluster, make_metadata, packet_for


def test_running_out_of_ensemble_changes_is_a_retryable_recovery_failure() -> None:
    metadata = make_metadata(("b1", "b2", "b3"), 3, 3)
    cluster = Cluster(metadata, spare_bookies=("b4", "b5"))
    cluster.bookies["b1"].seed(0, packet_for(0, -1))
    # b2 fails the re-add of entry 0, and so does whichever spare replaces it.
    for bookie_id in ("b2", "b4", "b5"):
        cluster.bookies[bookie_id].down = True
    recovery = cluster.start_recovery("r", ensemble_changes_max=1)
    cluster.deliver(entry_id=-1)
    cluster.deliver_all()
    error = cluster.logs["r"].aborted
    assert isinstance(error, RecoveryFailed)
    assert error.retryable
    assert recovery.phase is RecoveryPhase.ABORTED
    assert cluster.cell.metadata.state is LedgerState.IN_RECOVERY


def test_a_new_attempt_recovers_once_the_bookies_answer() -> None:
    metadata = make_metadata(("b1", "b2", "b3"), 3, 3)
    cluster = Cluster(metadata, spare_bookies=("b4", "b5"))
    cluster.bookies["b1"].seed(0, packet_for(0, -1))
    for bookie_id in ("b2", "b4", "b5"):
        cluster.bookies[bookie_id].down = True
    cluster.start_recovery("first", ensemble_changes_max=1)
    cluster.deliver_all()
    assert isinstance(cluster.logs["first"].aborted, RecoveryFailed)
    for bookie_id in ("b2", "b4", "b5"):
        cluster.bookies[bookie_id].down = False
    cluster.start_recovery("second", ensemble_changes_max=1)
    cluster.deliver_all()
    assert cluster.logs["second"].aborted is None
    assert cluster.cell.metadata.state is LedgerState.CLOSED
    assert cluster.cell.metadata.last_entry_id == 0
