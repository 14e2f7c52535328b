"""Where a Redis command goes: the local replica when it leads, else the leader; and retries.

Any replica's server accepts any command.  The `Router` of a server sends:

* writes (`KVStore` commands, EXEC) with the connection's session seq, and
  linearizable reads (queries, WATCH's position read) to the leader: the
  local replica when it leads (in process, no network; it cuts its batch
  once the turn of the event loop that handed it calls is over, whether they
  came from a connection, a retry or an answer), else the leader's
  framework port over a shared `rsm.link.Link` (one per leader address);
* stale reads (READONLY connections) to the local replica, answered at once
  from its state.

A linearizable read that the local leader can answer at once, under its read
lease (`Replica.read_now`), is delivered straight away, unless an earlier
command of its connection waits for a retry.

A linearizable read at a follower is not forwarded one by one: the reads that
arrive during a turn of the event loop wait for one *position round*, the
store's `position` query sent to the leader once the turn is over (one round
in flight; reads arriving meanwhile wait for the next).  The leader answers it
linearizably with its applied index and its clock; a follower that has
applied that index answers the round's reads from its own state at the
leader's clock (`Replica.read_applied`).  That is linearizable: the leader
answered after the reads arrived, from a state holding every write
acknowledged before then, and the follower's state holds at least as much.
A follower behind that index, or a round without an answer, forwards the
round's reads to the leader as any other command.  A connection's lone GET
(`get_after_round`) waits for the round without an attempt of its own: it is
answered with `KVState.value_at` and `Receiver.deliver_value`, and becomes an
attempt only if it must be forwarded.

Who leads: the router remembers the leader's framework address from the
last `NotLeader` answer (the local replica's, which follows the `leader`
znode, or a remote one's).  When it knows none, it asks the local replica,
which answers `NotLeader` with its own idea of the leader, or takes the
command if it leads meanwhile.

Retries.  What follows each answer is decided by the framework's client
policy (`rsm/core/exactly_once.py`), with the connection's session.  An
answer that says the command was not applied (`NotLeader`, `Unavailable`,
`Overloaded`) or may have been (`OutcomeUnknown`, `Timeout`, a lost leader
connection) is retried, with the same session seq, so a write applied
before a failover is answered from the session table instead of being
applied twice.  A `NotLeader` naming another leader is followed at once
(`limits.leader_redirects_max` times); otherwise the command waits a
backoff (10 ms doubling to 500 ms, with jitter, per connection), or until a
new leader is published (`leader_changed`, which also ends the wait of the
commands in flight to its predecessor), and goes again, until its deadline
(`limits.command_deadline_ms_default`): then the
connection gets TRYAGAIN (never applied) or TIMEOUT (maybe applied), see
`kvstore.connection.dispatch`.  `SessionExpired` (the connection was idle past the
session TTL, or its session was evicted) means the replicas dropped the
session: the connection starts a new one, and each of its writes goes
again at once under a new seq, unless an attempt of it may have been
logged (`OutcomeUnknown`, `Timeout`): the old session's results are gone,
so a retry could apply it twice, and that write gets TIMEOUT instead.

Order.  A connection's commands reach the leader in the order it sent them:
once one of them waits for a retry, the connection's later ones wait behind
it (`Lane.parked`), and they go again together, in order.  And a read sees
every write its connection sent before it, as Redis answers a pipeline: a
read (linearizable or stale) that comes while writes of its connection are
unanswered waits, with the commands after it, until they are answered (a
write is answered once applied); otherwise the leader could answer it, under
its lease, from a state without them.

Invariants: every command handed to the router gets exactly one
`Receiver.deliver` (or `deliver_value`, for a GET `get_after_round` took),
unless its connection closed first; a write keeps its
seq across all its attempts, except that one of which nothing may have been
logged moves to its lane's new session after `SessionExpired`; the router
never sends a command of a lane while an earlier one of that lane is parked,
nor a read while an earlier write of its lane is unanswered, nor anything of a
lane while a read of it waits for a position round; a follower answers a read
from its own state only from a round sent after the read arrived.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, cast

import anyio
import anyio.abc

from kvstore import limits
from kvstore.state_machine import KVStore
from rsm import Consistency, StateMachine
from rsm.client import Backoff, Command, Decision, RetryPolicy, Session, new_client_id
from rsm.errors import OutcomeUnknown, RsmStatus, StatusError, Timeout, Unavailable
from rsm.host import Answerer, CallRequest, Outcome, QueryRequest
from rsm.link import Connector, Link, LinkLost, Response

_RETRY_POLICY: Final = RetryPolicy(
    deadline_ms=limits.command_deadline_ms_default,
    backoff_ms_initial=limits.retry_backoff_ms_initial,
    backoff_ms_max=limits.retry_backoff_ms_max,
    redirects_max=limits.leader_redirects_max,
)


class LocalReplica(Protocol):
    """What the router needs of the replica it runs beside (`rsm.Replica` is one)."""

    @property
    def is_leader(self) -> bool: ...

    @property
    def address(self) -> str: ...

    def handle_call(self, request: CallRequest, answerer: Answerer) -> None: ...

    def handle_query(self, request: QueryRequest, answerer: Answerer) -> int | None: ...

    def read_now(self, name: str, args: list[Any]) -> Outcome | None:
        """A linearizable read answered at once (a leader under its read lease), or None."""
        ...

    def lease_time_ms(self) -> int | None:
        """The time to read `machine` at for a linearizable read answered now (a leader
        under its read lease), or None."""
        ...

    @property
    def machine(self) -> StateMachine: ...

    def read_applied(
        self, name: str, args: list[Any], *, time_ms: int, waited_s: float = 0.0
    ) -> Outcome:
        """A query answered at once from the applied state, as of `time_ms` if later (it
        waited `waited_s` for its position round)."""
        ...

    def read_applied_time_ms(self, time_ms: int, *, reads: int, waited_s: float = 0.0) -> int:
        """The time to read `machine` at for `reads` reads answered from the applied state
        as `read_applied` would answer them (they waited `waited_s` each)."""
        ...

    @property
    def applied_index(self) -> int: ...

    def flush(self) -> None:
        """Let the leader cut a batch of the calls it took: while none is in flight, it
        cuts none on its own."""
        ...


class Receiver(Protocol):
    """Who waits for a command's final outcome (a connection)."""

    def deliver(self, ticket: int, outcome: Outcome, index: int) -> None:
        """The outcome of the command handed over with `ticket`; never raises, never blocks."""
        ...

    def deliver_value(self, ticket: int, value: bytes | None) -> None:
        """The value read for the GET handed over with `ticket` (`Router.get_after_round`);
        never raises, never blocks."""
        ...


@dataclass(eq=False)
class Lane:
    """One connection's session and the commands of it that wait for a retry."""

    session: Session
    parked: list[_Attempt] = field(default_factory=list)
    """Sorted by `order`: the connection's order."""
    scheduled: bool = False
    backoff: Backoff = field(default_factory=lambda: Backoff(_RETRY_POLICY))
    """The waits before the lane's parked commands go again; reset by an answer."""
    closed: bool = False
    """The connection is gone: parked commands are dropped instead of retried."""
    next_order: int = 0
    unanswered_calls: deque[int] = field(default_factory=deque)
    """The `order` of each write handed over, oldest first, until it and every one before it
    is answered (`answered_calls` keeps those answered out of turn).  A read waits while
    one of them is older than it."""
    answered_calls: set[int] = field(default_factory=set)
    index_reads: int = 0
    """The lane's reads waiting for a position round (see `_IndexRound`): the lane's later
    commands wait behind them."""

    def index_read_done(self) -> bool:
        """One of the lane's reads left its position round; whether none waits any more."""
        self.index_reads -= 1
        return not self.index_reads

    def oldest_unanswered_call(self) -> int | None:
        return self.unanswered_calls[0] if self.unanswered_calls else None

    def call_answered(self, order: int) -> None:
        unanswered = self.unanswered_calls
        assert unanswered, "a write is answered once"
        if unanswered[0] != order:
            self.answered_calls.add(order)
            return
        unanswered.popleft()
        answered = self.answered_calls
        while unanswered and unanswered[0] in answered:
            answered.discard(unanswered.popleft())

    def waits_for_writes(self, attempt: _Attempt) -> bool:
        """Whether `attempt` is a read that must wait for older writes of the lane."""
        oldest = self.oldest_unanswered_call()
        return not attempt.call and oldest is not None and oldest < attempt.order


class _Attempt(Command):
    """One command on its way through the router: its `Answerer` on every attempt."""

    __slots__ = (
        "router",
        "lane",
        "order",
        "name",
        "args",
        "call",
        "stale",
        "receiver",
        "ticket",
        "sent_to",
        "indexed",
    )

    def __init__(
        self,
        router: Router,
        lane: Lane,
        name: str,
        args: list[Any],
        *,
        call: bool,
        stale: bool,
        receiver: Receiver,
        ticket: int,
        policy: RetryPolicy,
        now_ms: float,
        order: int | None = None,
    ) -> None:
        super().__init__(policy, now_ms, lane.session if call else None)
        self.router = router
        self.lane = lane
        if order is None:
            order = lane.next_order
            lane.next_order += 1
        self.order = order
        self.name = name
        self.args = args
        self.call = call
        self.stale = stale
        self.receiver = receiver
        self.ticket = ticket
        self.sent_to: str | None = None
        """Where the last attempt went: a leader's address, None for the local replica."""
        self.indexed = False
        """A read that went through a position round and could not be answered from it:
        from now on it is forwarded to the leader."""

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        """The local replica's answer (an `Answerer`)."""
        self.router._on_answer(self, outcome, index)

    def answered(self, response: Response) -> None:
        """The leader's answer over a link (a `rsm.link.Waiter`)."""
        outcome = Outcome(response.status, response.value, response.message or "", response.detail)
        self.router._on_answer(self, outcome, response.log_index)

    def lost(self, error: LinkLost) -> None:
        """The link to the leader ended first: a CALL may have been logged if it was sent."""
        failure = OutcomeUnknown(str(error)) if error.sent else Unavailable(str(error))
        self.router._on_answer(self, Outcome.failure(failure), 0)


def _order(attempt: _Attempt) -> int:
    return attempt.order


_IndexGet = tuple[Lane, int, bytes, Receiver, int]
"""A lone GET waiting for a position round: its lane, its order in the lane, its key, and
where its value goes (receiver, ticket)."""


class _IndexRound:
    """One position round: the leader's `position` query, asked for the linearizable reads
    that arrived at a follower before it was sent (a `rsm.link.Waiter`)."""

    __slots__ = ("router", "reads", "gets", "gets_since_ms", "started_s")

    def __init__(
        self,
        router: Router,
        reads: list[_Attempt],
        gets: list[_IndexGet],
        gets_since_ms: float,
        started_s: float,
    ) -> None:
        self.router = router
        self.reads = reads
        self.gets = gets
        self.gets_since_ms = gets_since_ms
        """When the first of `gets` arrived: their deadline counts from then."""
        self.started_s = started_s

    def answered(self, response: Response) -> None:
        position = None
        if response.status == RsmStatus.OK:
            try:
                index, time_ms = response.value
                position = (int(index), int(time_ms))
            except (TypeError, ValueError):
                position = None  # not a position: the reads are forwarded instead
        self.router._index_answered(self, position)

    def lost(self, error: LinkLost) -> None:
        self.router._index_answered(self, None)


class Router:
    """Routes one server's commands (see the module docstring); `run` in a task group."""

    def __init__(
        self,
        replica: LocalReplica,
        *,
        connector: Connector,
        rng: random.Random,
        deadline_ms: int = limits.command_deadline_ms_default,
    ) -> None:
        assert deadline_ms > 0
        self._replica = replica
        self._connector = connector
        self._rng = rng
        self._policy = dataclasses.replace(_RETRY_POLICY, deadline_ms=deadline_ms)
        self._clock_s = asyncio.get_running_loop().time
        """The event loop's clock (as `anyio.current_time` reads it), looked up once: anyio's
        lookup per call cost a few percent of a leader's CPU per GET."""
        self._leader: str | None = None
        self._links: dict[str, Link] = {}
        self._request_ids = itertools.count(1)
        self._schedule: list[tuple[float, int, Lane]] = []
        self._schedule_ids = itertools.count()
        self._wakeup = anyio.Event()
        self._task_group: anyio.abc.TaskGroup | None = None
        self._call_soon = asyncio.get_running_loop().call_soon
        self._flush_scheduled = False
        """A call went to the local replica this turn: the leader cuts its batch after it."""
        self._index_waiting: list[_Attempt] = []
        """Linearizable reads at a follower waiting for the next position round."""
        self._index_gets: list[_IndexGet] = []
        """Lone GETs at a follower waiting for the next position round."""
        self._index_gets_since_ms = 0.0
        self._index_round: _IndexRound | None = None
        self._index_scheduled = False

    # --- the server's side ----------------------------------------------------------------------

    def lane(self) -> Lane:
        """A new connection's lane, with a new session."""
        return Lane(Session(new_client_id(self._rng)))

    def call(self, lane: Lane, name: str, args: list[Any], receiver: Receiver, ticket: int) -> None:
        """Log command `name` (exactly once, with the lane's session); deliver its outcome."""
        attempt = _Attempt(
            self,
            lane,
            name,
            args,
            call=True,
            stale=False,
            receiver=receiver,
            ticket=ticket,
            policy=self._policy,
            now_ms=self._clock_s() * 1000,
        )
        lane.unanswered_calls.append(attempt.order)
        self._submit(attempt)

    def read(
        self,
        lane: Lane,
        name: str,
        args: list[Any],
        receiver: Receiver,
        ticket: int,
        *,
        stale: bool,
    ) -> None:
        """Answer query `name`, linearizably (on the leader) or `stale` (locally, at once)."""
        if not stale and not lane.parked and not lane.unanswered_calls and not lane.index_reads:
            # The local leader answers under its read lease without a round: no
            # attempt to track, nothing to retry.
            replica = self._replica
            outcome = replica.read_now(name, args)
            if outcome is not None:
                receiver.deliver(ticket, outcome, replica.applied_index)
                return
        self._submit(
            _Attempt(
                self,
                lane,
                name,
                args,
                call=False,
                stale=stale,
                receiver=receiver,
                ticket=ticket,
                policy=self._policy,
                now_ms=self._clock_s() * 1000,
            )
        )

    def get_after_round(self, lane: Lane, key: bytes, receiver: Receiver, ticket: int) -> bool:
        """A linearizable GET of `key` at a follower, answered from the local state after
        the next position round (`Receiver.deliver_value`, or `deliver` if it had to go
        to the leader); False, and nothing done, where `read` must take it (this replica
        leads or knows no other leader, or an earlier command of the lane waits).

        The lean form of `read` for a connection's lone GETs: nothing to track per GET
        but its place in the round."""
        if lane.parked or lane.unanswered_calls or lane.index_reads:
            return False
        leader = self._leader
        replica = self._replica
        if leader is None or leader == replica.address or replica.is_leader:
            return False
        gets = self._index_gets
        if not gets:
            self._index_gets_since_ms = self._clock_s() * 1000
        order = lane.next_order
        lane.next_order = order + 1
        lane.index_reads += 1
        gets.append((lane, order, key, receiver, ticket))
        if self._index_round is None and not self._index_scheduled:
            self._index_scheduled = True
            self._call_soon(self._start_index_round)
        return True

    def read_now(self, lane: Lane, name: str, args: list[Any]) -> Outcome | None:
        """A linearizable read's outcome at once, when the local leader answers it under its
        read lease and no earlier command of the lane waits; else None (use `read`)."""
        if lane.parked or lane.unanswered_calls or lane.index_reads:
            return None
        return self._replica.read_now(name, args)

    def read_time_ms(self, lane: Lane) -> int | None:
        """For a linearizable read the connection answers itself from `state`, at once: the
        time to read it at, when `read_now` would answer (the local leader under its read
        lease, no earlier command of the lane waiting); else None (use `read`)."""
        if lane.parked or lane.unanswered_calls or lane.index_reads:
            return None
        return self._replica.lease_time_ms()

    @property
    def state(self) -> KVStore:
        """The local replica's store, for the reads `read_time_ms` lets through: read at
        once, never changed."""
        return cast(KVStore, self._replica.machine)

    def _flush_now(self) -> None:
        self._flush_scheduled = False
        self._replica.flush()

    def close_lane(self, lane: Lane) -> None:
        """The lane's connection closed: drop what waits for a retry."""
        lane.closed = True
        lane.parked.clear()

    @property
    def leader_hint(self) -> str | None:
        """The leader's framework address as the router last heard it (None: unknown)."""
        return self._leader

    # --- lifetime -----------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Retry parked commands when due; own the leader links.  Runs until cancelled."""
        try:
            async with anyio.create_task_group() as task_group:
                self._task_group = task_group
                task_status.started()
                await self._retry_loop()
        finally:
            self._task_group = None

    async def _retry_loop(self) -> None:
        schedule = self._schedule
        while True:
            wakeup = self._wakeup = anyio.Event()
            delay_s = None
            if schedule:
                delay_s = max(0.0, schedule[0][0] - self._clock_s())
            with anyio.move_on_after(delay_s):
                await wakeup.wait()
            now_s = self._clock_s()
            while schedule and schedule[0][0] <= now_s:
                _, _, lane = heapq.heappop(schedule)
                lane.scheduled = False
                self._release(lane)

    def leader_changed(self, leader: str | None) -> None:
        """The local replica saw the published leader change to `leader` (its framework
        address; None while none is published).

        A new leader ends the wait of every command: the links to any other address are
        closed, so commands in flight to a predecessor that is stopped or cut off go again at
        once (with their seqs: one it had logged is answered from the session table) rather
        than after `limits.forward_answer_timeout_ms`, and the commands waiting for a retry go
        now instead of when their backoff ends.  While none is published, in-flight commands
        are left to their leader: one that hands over answers them."""
        if leader is None:
            return
        self._leader = leader
        for address in [address for address in self._links if address != leader]:
            self._links.pop(address).close()
        schedule = self._schedule
        if schedule:
            now_s = self._clock_s()
            schedule[:] = [(now_s, order, lane) for _due, order, lane in schedule]
            heapq.heapify(schedule)
            self._wakeup.set()

    # --- attempts -----------------------------------------------------------------------------

    def _submit(self, attempt: _Attempt) -> None:
        lane = attempt.lane
        if lane.parked or lane.index_reads or lane.waits_for_writes(attempt):
            bisect.insort(lane.parked, attempt, key=_order)
            return
        self._send(attempt)

    def _release(self, lane: Lane) -> None:
        """Send the lane's parked commands, in order, up to a read that must still wait for
        the writes before it (or up to one that was parked again on the way)."""
        waiting, lane.parked = lane.parked, []
        for position, attempt in enumerate(waiting):
            if lane.parked or lane.index_reads or lane.waits_for_writes(attempt):
                for rest in waiting[position:]:
                    bisect.insort(lane.parked, rest, key=_order)
                return
            self._send(attempt)

    def _send(self, attempt: _Attempt) -> None:
        replica = self._replica
        if attempt.stale:
            replica.handle_query(
                QueryRequest(0, attempt.name, attempt.args, {}, Consistency.STALE, 0), attempt
            )
            return
        leader = self._leader
        local = replica.is_leader or leader is None or leader == replica.address
        request_id = 0 if local else next(self._request_ids)
        request: CallRequest | QueryRequest
        attempt.sent_to = None if local else leader
        if attempt.call:
            session = attempt.lane.session
            if (
                attempt.client_id != session.client_id
                and attempt.follow(session) is not Decision.SEND
            ):
                error = Timeout("the session expired after an attempt whose outcome is unknown")
                self._deliver(attempt, Outcome.failure(error), 0)
                return
            request = CallRequest(
                request_id,
                attempt.name,
                attempt.args,
                {},
                attempt.client_id,
                attempt.seq,
                session.ack_seq(),
            )
            if local:
                replica.handle_call(request, attempt)
                if not self._flush_scheduled:
                    # The leader cuts its batch once this turn of the event loop is
                    # over, not at once: the connections with commands in this turn all
                    # hand them over first, and the leader looks at its queue once for
                    # all of them (with many clients, once per connection shows in its
                    # CPU per SET).  Asked here, for every call it takes, so that a call
                    # sent from an answer or a retry is cut as one from a connection is.
                    self._flush_scheduled = True
                    self._call_soon(self._flush_now)
                return
        else:
            if not local and not attempt.indexed:
                self._wait_for_position(attempt)
                return
            request = QueryRequest(
                request_id, attempt.name, attempt.args, {}, Consistency.LINEARIZABLE, 0
            )
            if local:
                replica.handle_query(request, attempt)
                return
        assert leader is not None
        try:
            self._link(leader).send(request, attempt)
        except StatusError as error:  # a value the protocol cannot carry: not sent
            self._on_answer(attempt, Outcome.failure(error), 0)

    # --- linearizable reads at a follower ----------------------------------------------------

    def _wait_for_position(self, attempt: _Attempt) -> None:
        """Hold a linearizable read for the next position round (started once this turn of
        the event loop is over, so that the turn's reads share it)."""
        attempt.lane.index_reads += 1
        self._index_waiting.append(attempt)
        if self._index_round is None and not self._index_scheduled:
            self._index_scheduled = True
            self._call_soon(self._start_index_round)

    def _start_index_round(self) -> None:
        self._index_scheduled = False
        if self._index_round is not None or not (self._index_waiting or self._index_gets):
            return
        reads, self._index_waiting = self._index_waiting, []
        gets, self._index_gets = self._index_gets, []
        round_ = self._index_round = _IndexRound(
            self, reads, gets, self._index_gets_since_ms, self._clock_s()
        )
        leader = self._leader
        replica = self._replica
        if leader is None or replica.is_leader or leader == replica.address:
            self._index_answered(round_, None)  # no other leader to ask: each read goes alone
            return
        request = QueryRequest(
            next(self._request_ids), "position", [], {}, Consistency.LINEARIZABLE, 0
        )
        self._link(leader).send(request, round_)

    def _index_answered(self, round_: _IndexRound, position: tuple[int, int] | None) -> None:
        """The leader's position (`[index, time_ms]`), or None: the round failed.

        A read of the round is answered from the local state when this replica has applied
        the leader's index: that state holds every write acknowledged before the read
        arrived (the leader answered after it arrived, from a state holding them all), and
        it is read at the leader's clock.  Otherwise (behind, or no answer) the read is
        forwarded to the leader as any other command.  Then the lanes' later commands go."""
        assert round_ is self._index_round
        self._index_round = None
        replica = self._replica
        applied_index = replica.applied_index
        answer_here = position is not None and applied_index >= position[0]
        waited_s = self._clock_s() - round_.started_s
        lanes: list[Lane] = []
        for attempt in round_.reads:
            lane = attempt.lane
            if lane.index_read_done():
                lanes.append(lane)
            if lane.closed:
                continue
            if answer_here:
                assert position is not None
                outcome = replica.read_applied(
                    attempt.name, attempt.args, time_ms=position[1], waited_s=waited_s
                )
                self._deliver(attempt, outcome, applied_index)
            else:
                attempt.indexed = True
                self._send(attempt)
        if round_.gets:
            leader_ms = position[1] if answer_here and position is not None else None
            self._index_gets_answered(round_, leader_ms, waited_s, lanes)
        for lane in lanes:
            if lane.parked and not lane.scheduled and not lane.closed:
                self._release(lane)
        if (self._index_waiting or self._index_gets) and not self._index_scheduled:
            self._index_scheduled = True
            self._call_soon(self._start_index_round)

    def _index_gets_answered(
        self,
        round_: _IndexRound,
        leader_ms: int | None,
        waited_s: float,
        lanes: list[Lane],
    ) -> None:
        """`_index_answered` for the round's lone GETs (adding their lanes to `lanes` once
        nothing of them waits for a round): read here at the leader's clock `leader_ms`,
        or (None) each forwarded as an attempt, in its lane's order."""
        gets = round_.gets
        if leader_ms is not None:
            time_ms = self._replica.read_applied_time_ms(
                leader_ms, reads=len(gets), waited_s=waited_s
            )
            value_at = self.state.value_at
            for lane, _order, key, receiver, ticket in gets:
                if lane.index_read_done():
                    lanes.append(lane)
                if not lane.closed:
                    receiver.deliver_value(ticket, value_at(key, time_ms))
            return
        for lane, order, key, receiver, ticket in gets:
            if lane.index_read_done():
                lanes.append(lane)
            if lane.closed:
                continue
            attempt = _Attempt(
                self,
                lane,
                "get",
                [key],
                call=False,
                stale=False,
                receiver=receiver,
                ticket=ticket,
                policy=self._policy,
                now_ms=round_.gets_since_ms,
                order=order,
            )
            attempt.indexed = True
            self._send(attempt)

    def _link(self, address: str) -> Link:
        link = self._links.get(address)
        if link is not None and not link.closed:
            return link
        link = self._links[address] = Link(
            address,
            self._connector,
            connect_timeout_ms=limits.forward_connect_timeout_ms,
            answer_timeout_ms=limits.forward_answer_timeout_ms,
        )
        task_group = self._task_group
        assert task_group is not None, "the router is not running"
        task_group.start_soon(link.run)
        while len(self._links) > limits.forward_links_max:
            oldest = next(iter(self._links))
            self._links.pop(oldest).close()
        return link

    def _on_answer(self, attempt: _Attempt, outcome: Outcome, index: int) -> None:
        status = outcome.status
        if status == RsmStatus.OK:
            # The policy's first rule, taken here so that the answers of every command
            # cost neither a clock reading nor the policy's call.
            self._deliver(attempt, outcome, index)
            return
        hint = None
        sent_to = attempt.sent_to
        if status == RsmStatus.NOT_LEADER:
            hint = outcome.detail
            sent_to = sent_to or self._replica.address
        decision = attempt.decide(
            status, self._clock_s() * 1000, leader_address=hint, sent_to=sent_to
        )
        if decision is Decision.DELIVER:
            self._deliver(attempt, outcome, index)
            return
        if status == RsmStatus.NOT_LEADER:
            self._leader = hint
        elif decision is not Decision.RENEW:
            # The leader we sent to is gone or stuck: ask the local replica who leads now.
            self._leader = None
        if decision is Decision.REDIRECT:
            self._send(attempt)
            return
        lane = attempt.lane
        if lane.closed:
            return
        if decision is Decision.RENEW:
            assert attempt.client_id is not None
            lane.session.renew_after(attempt.client_id, self._rng)
            self._submit(attempt)
        elif decision is Decision.WAIT:
            self._park(attempt)
        else:
            seconds = self._policy.deadline_ms / 1000
            if decision is Decision.MAYBE_APPLIED:
                error: Timeout | Unavailable = Timeout(
                    f"no answer from a leader within {seconds} s"
                )
            else:
                error = Unavailable(f"no leader took it within {seconds} s")
            self._deliver(attempt, Outcome.failure(error), 0)

    def _park(self, attempt: _Attempt) -> None:
        """Wait, in the lane's order, for the lane's next retry."""
        lane = attempt.lane
        bisect.insort(lane.parked, attempt, key=_order)
        if lane.scheduled:
            return
        lane.scheduled = True
        delay_s = lane.backoff.next_wait_ms(self._rng) / 1000
        heapq.heappush(self._schedule, (self._clock_s() + delay_s, next(self._schedule_ids), lane))
        self._wakeup.set()

    def _deliver(self, attempt: _Attempt, outcome: Outcome, index: int) -> None:
        lane = attempt.lane
        if attempt.client_id is not None:
            lane.session.end(attempt.client_id, attempt.seq)
        if outcome.ok:
            lane.backoff.reset()
        attempt.receiver.deliver(attempt.ticket, outcome, index)
        if attempt.call:
            lane.call_answered(attempt.order)
            if lane.parked and not lane.scheduled and not lane.closed:
                self._release(lane)  # reads that waited for the lane's writes
