"""A replica's role and every decision about it, as a pure state machine.

A replica is a follower, a leader-elect taking over, or the leader.  Its
shell (rsm/runtime/replica.py) runs one role loop and a few watchers (the
election, the ZooKeeper session, the follower's progress); each reports
what it saw here as an event and carries out the effects it gets back, in
order.  Nothing here waits, reads a clock or touches ZooKeeper: time comes in
as arguments.

Role transitions (`TRANSITIONS`), made only by the role loop::

    FOLLOWER ──FOLLOW_ENDED──> TAKING_OVER ──TAKEOVER_WON──> LEADER
        ^                          │                          │
        └───────TAKEOVER_LOST──────┘<────────TERM_ENDED───────┘

Following ends when the replica becomes leader-elect (effect `CancelFollow`)
or is stopping; a stopping replica's loop ends instead of taking over.

What the watchers decide:

* election: the replica is *elected* while it is not stopping and its own
  candidacy is the leader-elect.  Becoming elected cancels following; not
  being elected cancels a takeover and steps a running term down (not while
  it hands over: a handover ends the term itself).
* a lost session (LOST): not elected, cancel a takeover, step a term down,
  register again, and clear the pin before standing again, so that another
  candidate leads if one can.  A SUSPENDED session (the connection dropped,
  the session may still live) changes nothing: a leader keeps leading, since
  what it acknowledges is decided by its ledger, not by ZooKeeper (a
  successor fences that ledger before it acknowledges anything), and a
  connection that comes back within the session timeout must not cost a
  failover.
* standing: only once caught up (or when not following), not while stopping,
  and not before the back-off of the last stand-aside ran out.  Whatever
  takes the candidacy away wakes the election to stand again: a handover at
  once, a stand-aside when its back-off ends, a lost session (the shell looks
  again after every session event).
* standing aside (a takeover abandoned, a term stepped down for its own
  trouble): withdraw, clear the pin, and wait before standing again: the
  retry delay, doubled after each stand-aside that follows the previous one
  within `limits.stand_aside_delay_ms_max`, never longer than that; so that
  replicas whose ledgers all fail at once do not take over and step down in a
  loop that takes no time and fills the log with empty segments.

Invariants: `elected` implies not `stopping`; the role changes only along
`TRANSITIONS`; a stand-aside's delay is within [retry delay,
`limits.stand_aside_delay_ms_max`].
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from rsm import limits


class Role(enum.Enum):
    """Where a replica is in its role loop."""

    FOLLOWER = "follower"
    TAKING_OVER = "taking_over"
    LEADER = "leader"


class Step(enum.Enum):
    """What ended the role loop's current step."""

    FOLLOW_ENDED = "follow_ended"
    TAKEOVER_WON = "takeover_won"
    TAKEOVER_LOST = "takeover_lost"
    TERM_ENDED = "term_ended"


TRANSITIONS: Final[dict[tuple[Role, Step], Role]] = {
    (Role.FOLLOWER, Step.FOLLOW_ENDED): Role.TAKING_OVER,
    (Role.TAKING_OVER, Step.TAKEOVER_WON): Role.LEADER,
    (Role.TAKING_OVER, Step.TAKEOVER_LOST): Role.FOLLOWER,
    (Role.LEADER, Step.TERM_ENDED): Role.FOLLOWER,
}
"""(role, step that ended) -> the next role; every other pair is a bug."""


@dataclass(frozen=True, slots=True)
class CancelFollow:
    """Stop following the log: this replica is leader-elect (or stopping)."""


@dataclass(frozen=True, slots=True)
class CancelTakeover:
    """Abandon a takeover in progress: this replica is no longer leader-elect."""


@dataclass(frozen=True, slots=True)
class StepDown:
    """End the running term now; the replica stays a candidate (no stand-aside)."""

    reason: str


@dataclass(frozen=True, slots=True)
class ForgetCandidacy:
    """The candidacy went with the lost session: forget its znode name."""


@dataclass(frozen=True, slots=True)
class WakeElection:
    """Have the election loop look again now."""


@dataclass(frozen=True, slots=True)
class WakeElectionAt:
    """Have the election loop look again once the clock reads `at_s` (after `delay_ms`)."""

    delay_ms: int
    at_s: float


Effect = CancelFollow | CancelTakeover | StepDown | ForgetCandidacy | WakeElection | WakeElectionAt


class RoleMachine:
    """One replica's role and the flags its decisions depend on (see the module docstring)."""

    def __init__(self, retry_delay_ms: int) -> None:
        assert retry_delay_ms >= 0
        self.retry_delay_ms = retry_delay_ms
        self.role = Role.FOLLOWER
        self.elected = False
        self.caught_up = False
        self.stopping = False
        self.handing_over = False
        self.registration_lost = False
        """The session was lost: the membership znode must be created again."""
        self.pin_to_clear = False
        """The session was lost: clear the pin before standing again."""
        self.stand_aside_delay_ms = 0
        """How long the last stand-aside made this replica wait before standing again."""
        self.stand_not_before_s = 0.0
        """When that wait ends (it may stand again from then on)."""

    # --- the role loop ---------------------------------------------------------------------

    def step_ended(self, step: Step) -> Role:
        """The role loop's current step ended with `step`: move to the next role."""
        current = self.role
        next_role = TRANSITIONS.get((current, step))
        assert next_role is not None, f"no transition from {current} on {step}"
        self.role = next_role
        return next_role

    def should_follow(self) -> bool:
        """Whether to follow the log now: not once elected or stopping (following ends at once)."""
        return not (self.elected or self.stopping)

    def may_take_over(self) -> bool:
        """Whether a takeover may start or go on (also asked between its steps)."""
        return self.elected and not self.stopping

    def takeover_won(self) -> list[Effect]:
        """The takeover's CAS was won; the term ends at once if the replica was told to stop."""
        self.step_ended(Step.TAKEOVER_WON)
        if not self.may_take_over():
            return [StepDown("no longer leader-elect")]
        return []

    # --- the watchers ----------------------------------------------------------------------

    def caught_up_changed(self, caught_up: bool) -> list[Effect]:
        """The follower is (or no longer is) within the lag that lets it stand."""
        was, self.caught_up = self.caught_up, caught_up
        return [WakeElection()] if caught_up and not was else []

    def election_evaluated(self, candidacy_is_elect: bool, term_running: bool) -> list[Effect]:
        """The election was evaluated: whether this replica's candidacy is the leader-elect,
        and whether a term of its is running (started and not ended)."""
        self.elected = candidacy_is_elect and not self.stopping
        if self.elected:
            return [CancelFollow()]
        effects: list[Effect] = [CancelTakeover()]
        if term_running and not self.handing_over:
            effects.append(StepDown("another replica is leader-elect"))
        return effects

    def session_lost(self, term_present: bool) -> list[Effect]:
        """The ZooKeeper session expired: its candidacy and membership are gone."""
        self.registration_lost = True
        self.pin_to_clear = True
        self.elected = False
        effects: list[Effect] = [ForgetCandidacy(), CancelTakeover()]
        if term_present:
            effects.append(StepDown("ZooKeeper session lost"))
        return effects

    def registered(self) -> None:
        """The membership znode lost with the session exists again."""
        self.registration_lost = False

    def must_register(self) -> bool:
        return self.registration_lost and not self.stopping

    def pin_cleared(self) -> None:
        self.pin_to_clear = False

    def may_stand(self, now_s: float) -> bool:
        """Whether this replica may stand as a candidate now."""
        if self.stopping or now_s < self.stand_not_before_s:
            return False
        return self.role is not Role.FOLLOWER or self.caught_up

    def may_snapshot(self) -> bool:
        """Whether this replica's state is fit for taking the scheduled snapshots."""
        if self.stopping:
            return False
        return self.role is not Role.FOLLOWER or self.caught_up

    # --- standing aside --------------------------------------------------------------------

    def standing_aside(self) -> None:
        """It withdraws its candidacy and clears its pin, to let another candidate lead."""
        self.elected = False

    def stood_aside(self, now_s: float) -> WakeElectionAt:
        """It withdrew: when it may stand again (see the module docstring)."""
        if now_s - self.stand_not_before_s > limits.stand_aside_delay_ms_max / 1000:
            self.stand_aside_delay_ms = 0
        delay_ms = min(
            max(2 * self.stand_aside_delay_ms, self.retry_delay_ms),
            limits.stand_aside_delay_ms_max,
        )
        self.stand_aside_delay_ms = delay_ms
        self.stand_not_before_s = now_s + delay_ms / 1000
        return WakeElectionAt(delay_ms, self.stand_not_before_s)

    # --- handover and stopping -------------------------------------------------------------

    def may_hand_over(self, term_accepting: bool) -> bool:
        """Whether a transfer of leadership may start (one at a time, from a serving term)."""
        return term_accepting and not self.handing_over

    def handover_started(self) -> None:
        assert not self.handing_over
        self.handing_over = True

    def handover_ended(self) -> None:
        self.handing_over = False

    def handed_over(self) -> list[Effect]:
        """The handover's CAS went through: the candidacy is gone with it.

        The election loop must look again to stand anew: it may have evaluated
        while the candidacy was still named (the CAS's watch can come before
        its answer), and nothing else need wake it (`caught_up` may be true
        from before the term, so following brings no change of it).
        """
        self.elected = False
        return [WakeElection()]

    def stop(self, term_accepting: bool) -> bool:
        """A graceful stop begins; whether this replica hands its serving term over.

        Set before anything waits: a stopping replica is no longer leader-elect,
        and its term must end by the handover, not by a step-down.
        """
        self.stopping = True
        self.elected = False
        leading = term_accepting and not self.handing_over
        self.handing_over = self.handing_over or leading
        return leading
