"""The router: local leader, forwarding to a remote leader, retries with the same session seq,
deadlines, order within a connection, expired sessions.

Replicas are fakes answering from a script; a remote one is served by the
framework's real `ReplicaServer` on a loopback port, so forwarding goes
through the real client protocol and `rsm.link.Link`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.abc import SocketAttribute
from kvstore import limits as kvstore_limits
from kvstore.runtime.router import Router

from rsm.client import tcp_connector
from rsm.core.protocol import CallRequest, Consistency, Op, QueryRequest
from rsm.core.sessions import Outcome
from rsm.errors import (
    NotLeader,
    OutcomeUnknown,
    Overloaded,
    RsmStatus,
    SessionExpired,
    StatusError,
)
from rsm.runtime.applier import Answerer
from rsm.runtime.server import ReplicaServer

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


class Values:
    """The state a follower's lone GETs read (`KVState.value_at`'s part): `values`, and each
    read's (key, time_ms)."""

    def __init__(self) -> None:
        self.values: dict[bytes, bytes] = {}
        self.reads: list[tuple[bytes, int]] = []

    def value_at(self, key: bytes, now_ms: int) -> bytes | None:
        self.reads.append((key, now_ms))
        return self.values.get(key)


class FakeReplica:
    """Leads or not; answers calls from `script` (default: OK with the seq), queries OK.

    As a leader it holds the calls it takes until `flush`, as a real leader cuts its batch
    only when asked (`LocalReplica.flush`): a call the router hands over without asking
    for the cut is never answered."""

    def __init__(self, address: str = "127.0.0.1:1", *, leader: bool = False) -> None:
        self.address = address
        self.leader = leader
        self.hint: str | None = None
        self.script: deque[StatusError] = deque()
        self.calls: list[CallRequest] = []
        self.queries: list[QueryRequest] = []
        self.lease = False
        """Whether `read_now` answers (a leader under its read lease)."""
        self.applied_index = 7
        self.clock_ms = 1_000
        """The time a leader's `position` query gives."""
        self.applied_reads: list[tuple[str, int]] = []
        """(query, time_ms) answered by `read_applied`."""
        self.machine = Values()
        self.applied_read_count = 0
        """Reads counted by `read_applied_time_ms`."""
        self.flushes = 0
        self.stalled = False
        """Whether calls go unanswered (a leader stopped with its connections open)."""
        self.rounds_to_cut = 0
        """How many of the next `position` queries end their connection instead of answering
        (served by `ReplicaServer`: the link is lost under the round)."""
        self.held: list[tuple[CallRequest, Answerer]] = []
        """Calls taken as a leader, answered at the next `flush`."""
        self.on_call: Callable[[CallRequest], None] | None = None
        """Called with each call before it is answered or held."""

    @property
    def is_leader(self) -> bool:
        return self.leader

    def handle_call(self, request: CallRequest, answerer: Answerer) -> None:
        self.calls.append(request)
        if self.on_call is not None:
            self.on_call(request)
        if self.stalled:
            return
        if not self.leader:
            outcome = Outcome.failure(NotLeader("not me", self.hint))
            answerer.answer(Op.CALL, request.request_id, outcome, 7)
            return
        self.held.append((request, answerer))

    def handle_query(self, request: QueryRequest, answerer: Answerer) -> int | None:
        self.queries.append(request)
        stale = request.consistency is Consistency.STALE
        if request.name == "position" and self.rounds_to_cut:
            self.rounds_to_cut -= 1
            raise ConnectionResetError("the test cuts the link under the round")
        if self.leader and request.name == "position":
            outcome = Outcome(RsmStatus.OK, [self.applied_index, self.clock_ms])
        elif self.leader or stale:
            outcome = Outcome(RsmStatus.OK, ["read", request.name])
        else:
            outcome = Outcome.failure(NotLeader("not me", self.hint))
        answerer.answer(Op.QUERY, request.request_id, outcome, 7)
        return None

    def read_now(self, name: str, args: list[Any]) -> Outcome | None:
        if self.leader and self.lease:
            return Outcome(RsmStatus.OK, ["now", name])
        return None

    def read_applied(
        self, name: str, args: list[Any], *, time_ms: int, waited_s: float = 0.0
    ) -> Outcome:
        assert waited_s >= 0
        self.applied_reads.append((name, time_ms))
        return Outcome(RsmStatus.OK, ["applied", name, time_ms])

    def read_applied_time_ms(self, time_ms: int, *, reads: int, waited_s: float = 0.0) -> int:
        assert waited_s >= 0
        self.applied_read_count += reads
        return time_ms

    def cancel_read(self, ticket: int) -> None:
        raise AssertionError("no read waits here")

    def flush(self) -> None:
        self.flushes += 1
        held, self.held = self.held, []
        for request, answerer in held:
            if self.script:
                outcome = Outcome.failure(self.script.popleft())
            else:
                outcome = Outcome(RsmStatus.OK, [request.name, request.seq])
            answerer.answer(Op.CALL, request.request_id, outcome, 7)

    def status(self) -> dict[str, Any]:
        return {}

    async def transfer_leadership(self, to: str | None) -> dict[str, Any]:
        raise AssertionError("not used")

    async def take_snapshot(self) -> dict[str, Any]:
        raise AssertionError("not used")


async def next_turn() -> None:
    """Return once the callbacks the event loop holds now have run."""
    turned = anyio.Event()
    asyncio.get_running_loop().call_soon(turned.set)
    await turned.wait()


class Inbox:
    """The receiver of a test's commands: outcomes by ticket, in delivery order."""

    def __init__(self) -> None:
        self.delivered: list[tuple[int, Outcome]] = []
        self._changed = anyio.Event()

    def deliver(self, ticket: int, outcome: Outcome, index: int) -> None:
        self.delivered.append((ticket, outcome))
        self._changed.set()
        self._changed = anyio.Event()

    def deliver_value(self, ticket: int, value: bytes | None) -> None:
        self.deliver(ticket, Outcome(RsmStatus.OK, ["value", value]), 0)

    async def wait(self, count: int) -> list[tuple[int, Outcome]]:
        with anyio.fail_after(WAIT_S):
            while len(self.delivered) < count:
                await self._changed.wait()
        return self.delivered


@asynccontextmanager
async def running(router: Router) -> AsyncIterator[Router]:
    async with anyio.create_task_group() as task_group:
        await task_group.start(router.run)
        yield router
        task_group.cancel_scope.cancel()


@asynccontextmanager
async def remote_leader() -> AsyncIterator[FakeReplica]:
    """A fake leader behind the framework's real server on a loopback port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = listener.extra(SocketAttribute.local_port)
    remote = FakeReplica(f"127.0.0.1:{port}", leader=True)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(ReplicaServer(remote, listener).serve)
        yield remote
        task_group.cancel_scope.cancel()


@asynccontextmanager
async def forwarding() -> AsyncIterator[tuple[Router, FakeReplica, FakeReplica]]:
    """A running router beside a follower (`local`) whose hint names a remote fake leader."""
    async with remote_leader() as remote:
        local = FakeReplica()
        local.hint = remote.address
        async with running(router_of(local)) as router:
            yield router, local, remote


async def learn_the_leader(router: Router, inbox: Inbox) -> None:
    """Let a follower's router learn who leads, through one write answered to `inbox` with
    ticket 9 (so the GETs under test see a known leader)."""
    router.call(router.lane(), "set", [b"x", b"1"], inbox, 9)
    await inbox.wait(1)


def router_of(replica: FakeReplica, *, deadline_ms: int = 5_000, seed: int = 1) -> Router:
    import random

    return Router(
        replica, connector=tcp_connector, rng=random.Random(seed), deadline_ms=deadline_ms
    )


async def test_the_local_leader_takes_writes_with_the_connections_session() -> None:
    local = FakeReplica(leader=True)
    inbox = Inbox()
    async with running(router_of(local)) as router:
        lane = router.lane()
        router.call(lane, "set", [b"k", b"v"], inbox, 0)
        await inbox.wait(1)
        router.call(lane, "incr", [b"n"], inbox, 1)
        await inbox.wait(2)
    first, second = local.calls
    assert first.client_id == second.client_id == lane.session.client_id
    assert len(first.client_id or b"") == 16
    assert (first.seq, first.ack_seq) == (1, 0)
    assert (second.seq, second.ack_seq) == (2, 1), "seq 1 was answered before seq 2 was sent"
    assert [outcome.value for _, outcome in inbox.delivered] == [["set", 1], ["incr", 2]]


async def test_the_local_leader_is_asked_to_cut_a_batch_only_after_calls_it_took() -> None:
    local = FakeReplica(leader=True)
    local.lease = True
    inbox = Inbox()
    async with running(router_of(local)) as router:
        lane = router.lane()
        router.read(lane, "get", [b"k"], inbox, 0, stale=False)
        router.read(lane, "get", [b"k"], inbox, 1, stale=True)
        await next_turn()
        assert local.flushes == 0, "reads leave the leader nothing to cut"
        router.call(lane, "set", [b"k", b"v"], inbox, 2)
        router.call(router.lane(), "set", [b"k", b"w"], inbox, 3)
        assert local.flushes == 0, "the leader cuts once the turn's connections are through"
        await next_turn()
        assert local.flushes == 1, "once for the turn's calls"
        await inbox.wait(4)


async def test_a_write_sent_back_to_the_local_replica_by_an_answer_is_cut_all_the_same() -> None:
    """The router hands a write to the local replica from an answer, with no connection
    handing over anything then: here the leader it forwarded to has just handed over to
    the local replica and answers NotLeader naming it.  The cut is asked for all the same,
    or the write would wait until some other command came (for ever, on an idle store)."""
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        await learn_the_leader(router, inbox)

        def hand_over(request: CallRequest) -> None:
            remote.leader, remote.hint, local.leader = False, local.address, True

        remote.on_call = hand_over
        router.call(router.lane(), "set", [b"k", b"v"], inbox, 1)
        [_, (ticket, outcome)] = await inbox.wait(2)
    assert (ticket, outcome.value) == (1, ["set", 1])
    assert [call.name for call in remote.calls] == ["set", "set"]
    assert [call.name for call in local.calls] == ["set", "set"], "asked who leads, then led"


async def test_a_follower_forwards_to_the_leader_it_is_told_of() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        lane = router.lane()
        router.call(lane, "set", [b"k", b"v"], inbox, 0)
        router.read(lane, "get", [b"k"], inbox, 1, stale=False)
        router.call(lane, "del", [b"k"], inbox, 2)
        await inbox.wait(3)
        assert router.leader_hint == remote.address
    assert [call.name for call in local.calls] == ["set"], "asked once who leads, then forwarded"
    assert [(call.name, call.seq) for call in remote.calls] == [("set", 1), ("del", 2)]
    assert remote.calls[0].client_id == lane.session.client_id
    assert [(query.name, query.consistency) for query in remote.queries] == [
        ("position", Consistency.LINEARIZABLE)
    ]
    assert [outcome.value for _, outcome in inbox.delivered] == [
        ["set", 1],
        ["applied", "get", remote.clock_ms],
        ["del", 2],
    ]


async def test_a_followers_reads_share_a_position_round_and_are_answered_from_its_state() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        local.applied_index = remote.applied_index
        lanes = [router.lane() for _ in range(5)]
        for ticket, lane in enumerate(lanes):
            router.read(lane, "get", [b"k"], inbox, ticket, stale=False)
        delivered = await inbox.wait(5)
        assert [query.name for query in remote.queries] == ["position"], "one round for all"
        assert local.applied_reads == [("get", remote.clock_ms)] * 5, "at the leader's clock"
        assert {ticket for ticket, _ in delivered} == set(range(5))
        router.read(lanes[0], "get", [b"k"], inbox, 5, stale=False)
        await inbox.wait(6)
        assert [query.name for query in remote.queries] == ["position"] * 2, "a read, a round"


async def test_a_followers_lone_gets_share_a_round_and_read_its_state_at_the_leaders_clock() -> (
    None
):
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        local.applied_index = remote.applied_index
        local.machine.values[b"k"] = b"v"
        await learn_the_leader(router, inbox)
        lanes = [router.lane() for _ in range(3)]
        for ticket, lane in enumerate(lanes):
            assert router.get_after_round(lane, b"k" if ticket else b"none", inbox, ticket)
        assert inbox.delivered[1:] == [], "none is answered before its round"
        delivered = await inbox.wait(4)
        assert [query.name for query in remote.queries] == ["position"], "one round for all"
    assert local.machine.reads == [(b"none", remote.clock_ms)] + [(b"k", remote.clock_ms)] * 2
    assert [(ticket, outcome.value) for ticket, outcome in delivered[1:]] == [
        (0, ["value", None]),
        (1, ["value", b"v"]),
        (2, ["value", b"v"]),
    ]
    assert local.applied_read_count == 3, "counted as the replica's reads"
    assert local.applied_reads == [], "no query's dispatch"


async def test_a_lone_get_is_left_to_read_where_a_round_cannot_take_it() -> None:
    inbox = Inbox()
    leading = FakeReplica(leader=True)
    async with running(router_of(leading)) as router:
        assert not router.get_after_round(router.lane(), b"k", inbox, 0), "the leader reads"
    async with forwarding() as (router, _, remote):
        lane = router.lane()
        assert not router.get_after_round(lane, b"k", inbox, 0), "no leader known yet"
        router.call(lane, "set", [b"k", b"v"], inbox, 0)
        assert not router.get_after_round(lane, b"k", inbox, 1), "behind its lane's write"
        await inbox.wait(1)
        assert router.get_after_round(lane, b"k", inbox, 1)
        assert not router.get_after_round(lane, b"k", inbox, 2), "behind its lane's read"
        await inbox.wait(2)
    assert inbox.delivered[1][0] == 1
    assert not remote.calls[1:], "nothing else was sent"


async def test_a_lone_get_at_a_follower_behind_goes_to_the_leader_before_what_follows_it() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        local.applied_index = remote.applied_index - 1
        await learn_the_leader(router, inbox)
        lane = router.lane()
        assert router.get_after_round(lane, b"k", inbox, 0)
        router.call(lane, "set", [b"k", b"v"], inbox, 1)
        router.read(lane, "get", [b"k"], inbox, 2, stale=False)
        delivered = await inbox.wait(4)
    assert [(ticket, outcome.value) for ticket, outcome in delivered[1:]] == [
        (0, ["read", "get"]),
        (1, ["set", 1]),
        (2, ["read", "get"]),
    ], "answered by the leader, in the lane's order"
    assert [query.name for query in remote.queries] == ["position", "get", "position", "get"]
    assert [call.name for call in remote.calls] == ["set", "set"]
    assert local.machine.reads == []


async def test_a_lone_get_whose_round_loses_its_link_is_the_leaders_read_in_its_order() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        local.applied_index = remote.applied_index
        await learn_the_leader(router, inbox)
        remote.rounds_to_cut = 1
        lane = router.lane()
        assert router.get_after_round(lane, b"k", inbox, 0)
        router.call(lane, "set", [b"k", b"v"], inbox, 1)
        delivered = await inbox.wait(3)
    assert [(ticket, outcome.value) for ticket, outcome in delivered[1:]] == [
        (0, ["read", "get"]),
        (1, ["set", 1]),
    ], "answered by the leader over a new link, before the lane's write"
    assert remote.rounds_to_cut == 0, "the round's link was cut"
    assert [(query.name, query.consistency) for query in remote.queries] == [
        ("position", Consistency.LINEARIZABLE),
        ("get", Consistency.LINEARIZABLE),
    ]
    assert local.machine.reads == [], "not read here: the round said nothing"


async def test_a_lone_get_of_a_connection_that_closed_is_not_delivered() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        local.applied_index = remote.applied_index
        await learn_the_leader(router, inbox)
        gone, staying = router.lane(), router.lane()
        assert router.get_after_round(gone, b"k", inbox, 0)
        assert router.get_after_round(staying, b"k", inbox, 1)
        router.close_lane(gone)
        delivered = await inbox.wait(2)
        await next_turn()
    assert [ticket for ticket, _ in delivered] == [9, 1]


async def test_a_follower_behind_the_leaders_position_forwards_the_reads() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        local.applied_index = remote.applied_index - 1
        router.read(router.lane(), "get", [b"k"], inbox, 0, stale=False)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.value == ["read", "get"], "answered by the leader"
    assert [query.name for query in remote.queries] == ["position", "get"]
    assert local.applied_reads == []


async def test_a_position_answer_that_is_not_one_sends_the_reads_to_the_leader() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        remote.clock_ms = "soon"  # type: ignore[assignment]
        router.read(router.lane(), "get", [b"k"], inbox, 0, stale=False)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.value == ["read", "get"], "answered by the leader"
    assert local.applied_reads == []


async def test_commands_after_a_read_waiting_for_its_position_round_wait_behind_it() -> None:
    inbox = Inbox()
    async with forwarding() as (router, local, remote):
        seen_calls: list[int] = []
        read_applied = local.read_applied

        def read_noting_calls(
            name: str, args: list[Any], *, time_ms: int, waited_s: float = 0.0
        ) -> Outcome:
            seen_calls.append(len(remote.calls))
            return read_applied(name, args, time_ms=time_ms, waited_s=waited_s)

        local.read_applied = read_noting_calls  # type: ignore[method-assign]
        router.call(router.lane(), "set", [b"x", b"1"], inbox, 0)  # learns the leader
        await inbox.wait(1)
        lane = router.lane()
        router.read(lane, "get", [b"k"], inbox, 1, stale=False)
        router.call(lane, "set", [b"k", b"v"], inbox, 2)
        delivered = await inbox.wait(3)
    assert seen_calls == [1], "the lane's set was not sent before its read was answered"
    assert [ticket for ticket, _ in delivered] == [0, 1, 2]


async def test_a_retry_after_an_unknown_outcome_keeps_the_seq() -> None:
    inbox = Inbox()
    async with forwarding() as (router, _, remote):
        remote.script.extend([OutcomeUnknown("leader stepped down"), Overloaded("busy")])
        router.call(router.lane(), "incr", [b"n"], inbox, 0)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.value == ["incr", 1]
    assert [(call.client_id, call.seq) for call in remote.calls] == [
        (remote.calls[0].client_id, 1)
    ] * 3


async def test_without_a_leader_a_command_gives_up_at_its_deadline() -> None:
    inbox = Inbox()
    local = FakeReplica()
    async with running(router_of(local, deadline_ms=150)) as router:
        router.call(router.lane(), "set", [b"k", b"v"], inbox, 0)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.status is RsmStatus.UNAVAILABLE, "never logged: TRYAGAIN for the client"
    assert len(local.calls) > 1, "it asked again after each backoff"


async def test_an_unknown_outcome_at_the_deadline_is_a_timeout() -> None:
    inbox = Inbox()
    local = FakeReplica(leader=True)
    local.script.extend(OutcomeUnknown("in flight when the leader stepped down") for _ in range(99))
    async with running(router_of(local, deadline_ms=150)) as router:
        router.call(router.lane(), "set", [b"k", b"v"], inbox, 0)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.status is RsmStatus.TIMEOUT
    assert {call.seq for call in local.calls} == {1}


async def test_commands_after_a_parked_one_wait_behind_it() -> None:
    inbox = Inbox()
    local = FakeReplica(leader=True)
    local.lease = True  # even a read the leader could answer at once waits its turn
    local.script.append(Overloaded("busy"))
    async with running(router_of(local)) as router:
        lane = router.lane()
        router.call(lane, "set", [b"a", b"1"], inbox, 0)
        await next_turn()  # the leader's cut, which answers it Overloaded
        assert len(lane.parked) == 1
        router.call(lane, "set", [b"b", b"2"], inbox, 1)
        router.read(lane, "get", [b"a"], inbox, 2, stale=False)
        assert [call.seq for call in local.calls] == [1], "the later ones were not sent"
        other = router.lane()
        router.call(other, "set", [b"c", b"3"], inbox, 9)
        await inbox.wait(1)
        assert [ticket for ticket, _ in inbox.delivered] == [9], "other connections go on"
        await inbox.wait(4)
    assert [call.seq for call in local.calls] == [1, 1, 1, 2], "a, c (another lane), a again, b"
    assert [ticket for ticket, _ in inbox.delivered] == [9, 0, 1, 2]


class HoldingLeader(FakeReplica):
    """A leader under its read lease that answers calls only when the test says so."""

    def __init__(self) -> None:
        super().__init__(leader=True)
        self.lease = True

    def flush(self) -> None:
        self.flushes += 1

    def answer_call(self, position: int = 0) -> None:
        request, answerer = self.held.pop(position)
        outcome = Outcome(RsmStatus.OK, [request.name, request.seq])
        answerer.answer(Op.CALL, request.request_id, outcome, 7)


async def test_a_read_waits_for_the_writes_its_connection_sent_before_it() -> None:
    local = HoldingLeader()
    inbox, other_inbox = Inbox(), Inbox()
    async with running(router_of(local)) as router:
        lane, other = router.lane(), router.lane()
        router.call(lane, "set", [b"k", b"v"], inbox, 0)
        router.call(lane, "incr", [b"n"], inbox, 1)
        router.read(lane, "get", [b"k"], inbox, 2, stale=False)
        router.read(lane, "get", [b"k"], inbox, 3, stale=True)
        router.call(lane, "del", [b"k"], inbox, 4)
        router.read(other, "get", [b"k"], other_inbox, 0, stale=False)
        assert router.read_now(lane, "get", [b"k"]) is None, "not past the lane's writes"
        assert router.read_now(other, "get", [b"k"]) is not None, "other lanes do not wait"
        await other_inbox.wait(1)
        assert [call.name for call in local.calls] == ["set", "incr"], "del waits behind reads"
        local.answer_call(1)  # incr, answered out of turn
        await next_turn()
        assert inbox.delivered == [(1, Outcome(RsmStatus.OK, ["incr", 2]))]
        assert local.queries == [], "the set before the reads is still unanswered"
        local.answer_call(0)  # set
        delivered = await inbox.wait(4)
        assert [ticket for ticket, _ in delivered] == [1, 0, 2, 3]
        assert [query.name for query in local.queries] == ["get", "get"]
        assert [call.name for call in local.calls] == ["set", "incr", "del"]
        local.answer_call()
        assert [ticket for ticket, _ in await inbox.wait(5)] == [1, 0, 2, 3, 4]


async def test_a_leader_under_its_read_lease_answers_reads_at_once() -> None:
    inbox = Inbox()
    local = FakeReplica(leader=True)
    async with running(router_of(local)) as router:
        lane = router.lane()
        router.read(lane, "get", [b"k"], inbox, 0, stale=False)
        local.lease = True
        router.read(lane, "get", [b"k"], inbox, 1, stale=False)
        assert inbox.delivered[-1] == (1, Outcome(RsmStatus.OK, ["now", "get"])), "synchronously"
        await inbox.wait(2)
    assert [query.name for query in local.queries] == ["get"], "only the first took a query"
    assert inbox.delivered[0] == (0, Outcome(RsmStatus.OK, ["read", "get"]))


async def test_an_expired_session_is_renewed_and_the_command_goes_again() -> None:
    inbox = Inbox()
    local = FakeReplica(leader=True)
    local.script.append(SessionExpired("idle for too long"))
    async with running(router_of(local)) as router:
        lane = router.lane()
        old = lane.session.client_id
        router.call(lane, "set", [b"k", b"v"], inbox, 0)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.ok
    assert [(call.client_id, call.seq) for call in local.calls] == [
        (old, 1),
        (lane.session.client_id, 1),
    ]
    assert lane.session.client_id != old


async def test_a_write_that_may_be_logged_gets_timeout_when_its_session_expired() -> None:
    inbox = Inbox()
    local = FakeReplica(leader=True)
    local.script.extend([OutcomeUnknown("leader lost"), SessionExpired("evicted")])
    async with running(router_of(local)) as router:
        lane = router.lane()
        old = lane.session.client_id
        router.call(lane, "incr", [b"n"], inbox, 0)
        [(_, outcome)] = await inbox.wait(1)
        router.call(lane, "incr", [b"n"], inbox, 1)
        await inbox.wait(2)
    assert outcome.status == RsmStatus.TIMEOUT, "a third attempt could apply it twice"
    assert [(call.client_id, call.seq) for call in local.calls] == [
        (old, 1),
        (old, 1),
        (lane.session.client_id, 1),
    ]
    assert lane.session.client_id != old


async def test_writes_in_flight_when_their_session_expired_move_unless_maybe_logged() -> None:
    inbox = Inbox()
    async with forwarding() as (router, _, remote):
        remote.script.extend([SessionExpired("idle for too long"), OutcomeUnknown("leader lost")])
        lane = router.lane()
        old = lane.session.client_id
        router.call(lane, "set", [b"k", b"v"], inbox, 0)  # answered SessionExpired
        router.call(lane, "incr", [b"n"], inbox, 1)  # sent before that answer came
        delivered = dict(await inbox.wait(2))
    assert delivered[0].value == ["set", 1]
    assert delivered[1].status == RsmStatus.TIMEOUT
    assert [(call.name, call.client_id, call.seq) for call in remote.calls] == [
        ("set", old, 1),
        ("incr", old, 2),
        ("set", lane.session.client_id, 1),
    ]
    assert remote.calls[2].ack_seq == 0


async def test_stale_reads_are_answered_locally() -> None:
    inbox = Inbox()
    local = FakeReplica()
    local.hint = "127.0.0.1:2"
    async with running(router_of(local)) as router:
        router.read(router.lane(), "get", [b"k"], inbox, 0, stale=True)
        [(_, outcome)] = await inbox.wait(1)
    assert outcome.value == ["read", "get"]
    assert [query.consistency for query in local.queries] == [Consistency.STALE]


async def test_a_leader_that_cannot_be_reached_is_forgotten_and_asked_for_again() -> None:
    inbox = Inbox()
    async with remote_leader() as remote:
        local = FakeReplica()
        local.hint = "127.0.0.1:9"  # nothing listens there
        async with running(router_of(local)) as router:
            router.call(router.lane(), "set", [b"k", b"v"], inbox, 0)
            with anyio.fail_after(WAIT_S):
                while len(local.calls) < 2:
                    await anyio.sleep(0.001)
            local.hint = remote.address  # the leader znode changed
            [(_, outcome)] = await inbox.wait(1)
    assert outcome.value == ["set", 1]
    assert len(remote.calls) == 1


async def test_a_new_leader_ends_the_backoff_of_waiting_commands() -> None:
    inbox = Inbox()
    local = FakeReplica()  # no leader known: every attempt waits a backoff
    async with running(router_of(local)) as router:
        router.call(router.lane(), "set", [b"k", b"v"], inbox, 0)
        router.call(router.lane(), "set", [b"k2", b"v"], inbox, 0)
        with anyio.fail_after(WAIT_S):
            while len(local.calls) < 2 * 4:  # waits of 10, 20 and 40 ms so far, then 80
                await anyio.sleep(0.001)
        local.leader = True
        router.leader_changed(local.address)
        for _ in range(3):  # the retry loop wakes, sends, and the leader answers at once
            await next_turn()
        assert len(inbox.delivered) == 2, "sent again at once, not after the backoff"
    assert [outcome.value for _, outcome in inbox.delivered] == [["set", 1], ["set", 1]]


async def test_a_new_leader_ends_the_wait_for_a_stalled_predecessor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A predecessor stopped (SIGSTOP) keeps its connections open and answers nothing: the
    commands in flight to it go to the new leader when it is published, with their seqs,
    not when the link's answer timeout (made longer than the test's wait here) runs out."""
    monkeypatch.setattr(kvstore_limits, "forward_answer_timeout_ms", 600_000)
    inbox = Inbox()
    async with remote_leader() as remote:
        remote.stalled = True
        local = FakeReplica()
        local.hint = remote.address
        async with running(router_of(local)) as router:
            router.call(router.lane(), "set", [b"k", b"v"], inbox, 0)
            with anyio.fail_after(WAIT_S):
                while not remote.calls:
                    await anyio.sleep(0.001)
            local.leader = True
            router.leader_changed(local.address)
            [(_, outcome)] = await inbox.wait(1)
    assert outcome.value == ["set", 1], "answered by the new leader"
    assert {call.seq for call in local.calls + remote.calls} == {1}, "one seq for every attempt"
