"""Who should lead: the leader-elect function and the rule for standing as a candidate.

Pure.  Candidates are the ephemeral sequential children of
`/rsm/<app>/election/`, named `n-<10-digit sequence>` by ZooKeeper, each
holding a `CandidateInfo`.  Every replica evaluates `leader_elect` on the same
children list and gets the same answer; no vote is exchanged.

The rule: the candidate named by a *fresh* handoff, if it is among the
candidates, else the candidacy with the lowest sequence number.  A handoff is
fresh when its epoch is the log's current epoch.  It is written by a graceful
handover (the leader of that epoch names its successor after closing its
segment) and by every takeover, in the same multi-operation as the log's CAS
(the new leader names itself under the new epoch, so it stays leader-elect
while it is a candidate: the "pin" of docs/architecture.md); any other
takeover makes it stale by raising the log's epoch.  No clock is involved.

Election need only be usually unique: two replicas that briefly both believe
they are leader-elect are kept apart by ledger fencing and the CAS on the log
znode, not by this function.

Standing (`may_stand`): a replica joins the election only when it has applied
the log to within `limits.candidate_lag_entries_max` of its end, so a winner
never spends long replaying before it can serve.

Invariants: the result is one of the candidates (None only for none); it
depends only on the arguments, not on their order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from rsm import limits
from rsm.core.log_format import CandidateInfo, Handoff

CANDIDATE_PREFIX: Final = "n-"
"""Prefix of a candidacy's znode name; ZooKeeper appends the sequence number."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """One candidacy: its znode name, sequence number and data."""

    name: str
    sequence: int
    replica_id: str
    address: str | None
    tls_address: str | None = None


def candidate_sequence(name: str) -> int | None:
    """The sequence number of candidacy znode `name` ("n-0000000012" -> 12), else None."""
    digits = name[len(CANDIDATE_PREFIX) :]
    if not name.startswith(CANDIDATE_PREFIX) or not digits.isascii() or not digits.isdigit():
        return None
    return int(digits)


def candidates(children: Mapping[str, CandidateInfo]) -> list[Candidate]:
    """The candidacies among `children` (znode name -> decoded data), lowest sequence first.

    Children whose name is not a candidacy name are ignored (the shell leaves
    out those whose data vanished or did not decode).
    """
    found: list[Candidate] = []
    for name, info in children.items():
        sequence = candidate_sequence(name)
        if sequence is not None:
            found.append(Candidate(name, sequence, info.replica_id, info.address, info.tls_address))
    found.sort(key=lambda candidate: (candidate.sequence, candidate.name))
    return found


def leader_elect(
    children: Mapping[str, CandidateInfo], handoff: Handoff | None, log_epoch: int
) -> Candidate | None:
    """The candidate that should lead (see the module docstring), or None without candidates."""
    ordered = candidates(children)
    if not ordered:
        return None
    if handoff is not None and handoff.epoch == log_epoch:
        for candidate in ordered:
            if candidate.replica_id == handoff.target:
                return candidate
    return ordered[0]


def may_stand(
    applied_index: int,
    log_end_index: int,
    lag_entries_max: int = limits.candidate_lag_entries_max,
) -> bool:
    """Whether a replica that applied up to `applied_index` may join the election.

    `log_end_index` is the highest index the replica knows to be in the log.
    """
    assert applied_index >= 0
    assert lag_entries_max > 0
    return log_end_index - applied_index <= lag_entries_max
