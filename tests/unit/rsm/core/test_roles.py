"""The role machine: its transitions, each watcher's decision, and its invariants under any
sequence of events (Hypothesis)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from rsm import limits
from rsm.core.roles import (
    TRANSITIONS,
    CancelFollow,
    CancelTakeover,
    Effect,
    ForgetCandidacy,
    Role,
    RoleMachine,
    Step,
    StepDown,
    WakeElection,
    WakeElectionAt,
)

RETRY_DELAY_MS = 100


def machine_in(role: Role) -> RoleMachine:
    roles = RoleMachine(RETRY_DELAY_MS)
    if role is not Role.FOLLOWER:
        roles.step_ended(Step.FOLLOW_ENDED)
    if role is Role.LEADER:
        roles.step_ended(Step.TAKEOVER_WON)
    assert roles.role is role
    return roles


def test_the_role_loop_goes_round_the_table() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    assert roles.role is Role.FOLLOWER
    assert roles.step_ended(Step.FOLLOW_ENDED) is Role.TAKING_OVER
    assert roles.step_ended(Step.TAKEOVER_LOST) is Role.FOLLOWER
    assert roles.step_ended(Step.FOLLOW_ENDED) is Role.TAKING_OVER
    assert roles.step_ended(Step.TAKEOVER_WON) is Role.LEADER
    assert roles.step_ended(Step.TERM_ENDED) is Role.FOLLOWER


@pytest.mark.parametrize(
    ("role", "step"),
    [pair for pair in itertools.product(Role, Step) if pair not in TRANSITIONS],
)
def test_a_step_the_table_does_not_name_is_refused(role: Role, step: Step) -> None:
    roles = machine_in(role)
    with pytest.raises(AssertionError):
        roles.step_ended(step)
    assert roles.role is role


def test_becoming_elect_cancels_following_and_a_takeover_may_go_on() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    assert roles.should_follow()
    assert roles.election_evaluated(candidacy_is_elect=True, term_running=False) == [CancelFollow()]
    assert not roles.should_follow()
    assert roles.may_take_over()


@pytest.mark.parametrize("term_running", [False, True])
@pytest.mark.parametrize("handing_over", [False, True])
def test_losing_the_election_cancels_a_takeover_and_steps_a_term_down_unless_handing_over(
    term_running: bool, handing_over: bool
) -> None:
    roles = machine_in(Role.LEADER)
    roles.election_evaluated(candidacy_is_elect=True, term_running=term_running)
    if handing_over:
        roles.handover_started()
    effects = roles.election_evaluated(candidacy_is_elect=False, term_running=term_running)
    expected: list[Effect] = [CancelTakeover()]
    if term_running and not handing_over:
        expected.append(StepDown("another replica is leader-elect"))
    assert effects == expected
    assert not roles.may_take_over()


def test_a_stopping_replica_is_never_elected() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    roles.stop(term_accepting=False)
    assert roles.election_evaluated(candidacy_is_elect=True, term_running=False) == [
        CancelTakeover()
    ]
    assert not roles.elected
    assert not roles.should_follow()
    assert not roles.may_take_over()


@pytest.mark.parametrize("term_present", [False, True])
def test_a_lost_session_steps_down_and_starts_over(term_present: bool) -> None:
    roles = machine_in(Role.LEADER)
    roles.election_evaluated(candidacy_is_elect=True, term_running=True)
    effects = roles.session_lost(term_present=term_present)
    expected: list[Effect] = [ForgetCandidacy(), CancelTakeover()]
    if term_present:
        expected.append(StepDown("ZooKeeper session lost"))
    assert effects == expected
    assert not roles.elected
    assert roles.must_register()
    assert roles.pin_to_clear
    roles.registered()
    roles.pin_cleared()
    assert not roles.must_register()
    assert not roles.pin_to_clear


def test_a_stopping_replica_does_not_register_again() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    roles.session_lost(term_present=False)
    roles.stop(term_accepting=False)
    assert not roles.must_register()


def test_a_follower_stands_once_caught_up_and_the_news_wakes_the_election_once() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    assert not roles.may_stand(now_s=10.0)
    assert not roles.may_snapshot()
    assert roles.caught_up_changed(True) == [WakeElection()]
    assert roles.caught_up_changed(True) == []
    assert roles.may_stand(now_s=10.0)
    assert roles.may_snapshot()
    assert roles.caught_up_changed(False) == []
    assert not roles.may_stand(now_s=10.0)


@pytest.mark.parametrize("role", [Role.TAKING_OVER, Role.LEADER])
def test_a_replica_that_is_not_following_may_stand_without_being_caught_up(role: Role) -> None:
    roles = machine_in(role)
    assert roles.may_stand(now_s=0.0)
    assert roles.may_snapshot()
    roles.stop(term_accepting=False)
    assert not roles.may_stand(now_s=0.0)
    assert not roles.may_snapshot()


def test_stand_asides_close_together_double_the_wait_up_to_the_bound() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    roles.caught_up_changed(True)
    now_s = 100.0
    delays = []
    for _ in range(12):
        roles.standing_aside()
        wake = roles.stood_aside(now_s)
        delays.append(wake.delay_ms)
        assert wake == WakeElectionAt(wake.delay_ms, now_s + wake.delay_ms / 1000)
        assert not roles.may_stand(now_s)
        now_s = wake.at_s
        assert roles.may_stand(now_s)
    assert delays[:3] == [RETRY_DELAY_MS, 2 * RETRY_DELAY_MS, 4 * RETRY_DELAY_MS]
    assert delays[-1] == limits.stand_aside_delay_ms_max
    assert delays == sorted(delays)


def test_after_a_quiet_spell_the_wait_starts_from_the_retry_delay_again() -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    first = roles.stood_aside(100.0)
    second = roles.stood_aside(first.at_s)
    assert second.delay_ms == 2 * RETRY_DELAY_MS
    quiet_s = second.at_s + limits.stand_aside_delay_ms_max / 1000 + 0.001
    assert roles.stood_aside(quiet_s).delay_ms == RETRY_DELAY_MS


def test_a_won_takeover_steps_down_at_once_when_no_longer_elect() -> None:
    roles = machine_in(Role.TAKING_OVER)
    roles.election_evaluated(candidacy_is_elect=True, term_running=False)
    assert roles.takeover_won() == []
    assert roles.role is Role.LEADER
    roles = machine_in(Role.TAKING_OVER)
    assert roles.takeover_won() == [StepDown("no longer leader-elect")]
    assert roles.role is Role.LEADER


def test_one_handover_at_a_time_from_a_serving_term() -> None:
    roles = machine_in(Role.LEADER)
    assert not roles.may_hand_over(term_accepting=False)
    assert roles.may_hand_over(term_accepting=True)
    roles.handover_started()
    assert not roles.may_hand_over(term_accepting=True)
    roles.election_evaluated(candidacy_is_elect=True, term_running=True)
    assert roles.handed_over() == [WakeElection()], "to stand again without its candidacy"
    assert not roles.elected
    roles.handover_ended()
    assert roles.may_hand_over(term_accepting=True)


@pytest.mark.parametrize("term_accepting", [False, True])
@pytest.mark.parametrize("handing_over", [False, True])
def test_a_graceful_stop_hands_over_a_serving_term_unless_a_handover_runs(
    term_accepting: bool, handing_over: bool
) -> None:
    roles = machine_in(Role.LEADER)
    if handing_over:
        roles.handover_started()
    leading = roles.stop(term_accepting)
    assert leading is (term_accepting and not handing_over)
    assert roles.handing_over is (handing_over or leading)
    assert roles.stopping
    assert not roles.elected


EVENTS = st.one_of(
    st.tuples(st.just("caught_up"), st.booleans()),
    st.tuples(st.just("evaluated"), st.booleans(), st.booleans()),
    st.tuples(st.just("session"), st.booleans()),
    st.tuples(st.just("stand_aside"), st.floats(0, 30)),
    st.tuples(st.just("step"), st.sampled_from(list(Step))),
    st.tuples(st.just("takeover_won")),
    st.tuples(st.just("handover"), st.booleans()),
    st.tuples(st.just("handed_over")),
    st.tuples(st.just("stop"), st.booleans()),
    st.tuples(st.just("registered")),
    st.tuples(st.just("look")),
    st.tuples(st.just("time"), st.floats(0, 30)),
)


class ElectionLoop:
    """What the shell's election loop knows: whether it holds a candidacy, and the wake-ups
    pending for it (`WakeElection` at once, `WakeElectionAt` once the clock reads `at_s`)."""

    def __init__(self) -> None:
        self.candidacy = False
        self.woken = True  # the loop looks once when it starts
        self.wake_at_s: list[float] = []

    def apply(self, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, ForgetCandidacy):
                self.candidacy = False
            elif isinstance(effect, WakeElection):
                self.woken = True
            elif isinstance(effect, WakeElectionAt):
                self.wake_at_s.append(effect.at_s)

    def look(self, roles: RoleMachine, now_s: float) -> None:
        """One round of the loop: the due wake-ups are spent, and it stands if it may."""
        self.woken = False
        self.wake_at_s = [at_s for at_s in self.wake_at_s if at_s > now_s]
        if not self.candidacy and roles.may_stand(now_s):
            self.candidacy = True

    def will_look(self, now_s: float) -> bool:
        return self.woken or any(at_s <= now_s for at_s in self.wake_at_s)


@example(
    [
        ("caught_up", True),
        ("look",),
        ("evaluated", True, False),
        ("step", Step.FOLLOW_ENDED),
        ("takeover_won",),
        ("handover", True),
        ("handed_over",),
    ]
)
@given(st.lists(EVENTS, max_size=60))
def test_invariants_hold_under_any_sequence_of_events(events: list[tuple[object, ...]]) -> None:
    roles = RoleMachine(RETRY_DELAY_MS)
    loop = ElectionLoop()
    now_s = 0.0
    for event in events:
        kind = event[0]
        if kind == "caught_up":
            loop.apply(roles.caught_up_changed(bool(event[1])))
        elif kind == "evaluated":
            effects = roles.election_evaluated(bool(event[1]) and loop.candidacy, bool(event[2]))
            assert (effects == [CancelFollow()]) is roles.elected
        elif kind == "session":
            loop.apply(roles.session_lost(term_present=bool(event[1])))
            loop.woken = True  # the shell looks again after every session event
            assert not roles.elected
        elif kind == "stand_aside":
            now_s += float(event[1])  # type: ignore[arg-type]
            roles.standing_aside()
            loop.candidacy = False
            wake = roles.stood_aside(now_s)
            loop.apply([wake])
            assert RETRY_DELAY_MS <= wake.delay_ms <= limits.stand_aside_delay_ms_max
            assert not roles.may_stand(now_s)
        elif kind == "step":
            step = event[1]
            assert isinstance(step, Step)
            before = roles.role
            # Following ends for a takeover only once elected (a stopping loop ends instead).
            leaves = step is not Step.FOLLOW_ENDED or roles.elected
            if (before, step) in TRANSITIONS and leaves:
                assert roles.step_ended(step) is TRANSITIONS[(before, step)]
        elif kind == "takeover_won":
            if roles.role is Role.TAKING_OVER:
                effects = roles.takeover_won()
                assert (effects == []) is (roles.elected and not roles.stopping)
        elif kind == "handover":
            if event[1] and not roles.handing_over:
                roles.handover_started()
            elif not event[1]:
                roles.handover_ended()
        elif kind == "handed_over":
            if roles.role is Role.LEADER and roles.handing_over:
                loop.candidacy = False  # deleted by the handover's CAS
                loop.apply(roles.handed_over())
        elif kind == "stop":
            roles.stop(bool(event[1]))
        elif kind == "look":
            loop.look(roles, now_s)
        elif kind == "time":
            now_s += float(event[1])  # type: ignore[arg-type]
        else:
            roles.registered()
        assert not (roles.elected and roles.stopping)
        assert not roles.may_take_over() or roles.elected
        assert not (roles.stopping and roles.may_stand(now_s + 1_000))
        assert roles.should_follow() is not (roles.elected or roles.stopping)
        # A replica that may stand and has no candidacy stands at the loop's next look,
        # and that look is due: a wake-up is pending, now or once its back-off ends.
        if not loop.candidacy and roles.may_stand(now_s):
            assert loop.will_look(now_s)
