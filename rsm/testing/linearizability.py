"""Is a history linearizable?  Wing & Gong's search with Lowe's memoization, per key.

A history is linearizable for a model when its operations can be put in one
sequential order such that (1) the model, stepping through that order,
allows every output, and (2) the order respects real time: an operation
that completed before another was invoked comes first.  FAIL operations are
removed first (they did not happen).  An INFO operation may take effect at
any instant after its invocation or never: it may be placed anywhere after
every operation that completed before it was invoked, or left out; its output
is `UNKNOWN`.  An INFO operation of a read-only kind is left out at once, as
it can never explain or spoil an output.

The search (Wing & Gong 1993, as refined by Lowe 2017).  The OK operations'
invocations and completions form one list in real-time order; INFO
invocations form a second list.  The candidates to take effect next are the
operations invoked before the earliest completion still pending: the OK calls
in front of the first completion in the list, then the INFO calls invoked
before it.  The search tries them depth-first: OK read-only operations first,
then the other OK ones, then INFO ones, so that indeterminate operations are
only tried when nothing else explains the outputs.  A candidate the model
allows is *lifted*: removed from the lists and pushed on a stack with the
state before it.  When no candidate fits, the last choice is undone (re-linked
in place, dancing-links style) and the next candidate is tried.  The history
is linearizable as soon as every OK operation is lifted; it is not when the
stack is empty and nothing fits.

Lowe's memoization: what is left to search depends only on which operations
are lifted and on the model state, so a (lifted set, state) configuration
that failed is never searched again.  The lifted set is kept as a small
canonical key: the index of the first OK operation (in invocation order) not
yet lifted, a bitset of the lifted OK operations after it, and a bitset of the
lifted INFO ones.  Five reductions keep the search small, each sound on its
own (the comments where they are applied say why): a read-only OK operation
that fits is a forced choice (no alternative to it needs trying); a failed
configuration also rules out every configuration with the same OK operations
and state that used more INFO operations; of identical INFO operations only
the earliest unused one is tried; an INFO operation that would not change the
state is not tried; and an INFO operation is only kept if the step right
after it needs it (ends elsewhere without it), since a linearization with
the fewest INFO operations has no useless one.

Complexity: linearizability checking is NP-complete, and the search is
exponential in the worst case.  It visits each configuration at most once;
the lifted sets are closed under real-time order, so with at most c
operations concurrent at any instant there are O(n * 2^c) of them for each
state and set of used INFO operations.  A linearizable history of n operations
typically needs a few times n * c model steps.  Showing that a history is
*not* linearizable means exhausting every alternative before the point where
it breaks, and INFO operations that could take effect in many places (a
counter's increments, writes of values that many reads return) multiply that
work.  Every check is capped at `nodes_max` model steps and answers UNKNOWN,
never a guess, when the cap is hit.

P-compositionality (Herlihy & Wing): a history of operations on independent
keys is linearizable if and only if each key's sub-history is.
`check_per_key` splits the history with `key_of` and checks the keys one by
one, smallest first, under one shared step budget; small searches are much
cheaper than one search over the product of the keys' states.

On failure, `Violation` reports the longest linearizable prefix found (the
order in which the search lifted the most OK operations), the model
state after it, the OK operation whose completion the search could not get
past, and the candidates it tried there, with the model's answers.  For an
UNKNOWN key the same report, marked undecided, says where the search was
stuck furthest along: usually the place to look.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

from rsm import limits
from rsm.testing.history import History, Operation, Outcome, validate_history
from rsm.testing.models import UNKNOWN, DeterministicModel, Model, Output


class Verdict(enum.Enum):
    LINEARIZABLE = "linearizable"
    NOT_LINEARIZABLE = "not linearizable"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Candidate:
    """An operation that could have taken effect next where the search got stuck.

    `legal` says the model allowed it there (and so every order continuing
    with it failed later); `expected` is the model's answer in that state,
    or `UNKNOWN` when the model is not deterministic.
    """

    operation: Operation
    legal: bool
    expected: Output

    def describe(self) -> str:
        if not self.legal:
            return f"{self.operation.describe()}: the model answers {self.expected!r} here"
        if self.operation.outcome is Outcome.INFO:
            return f"{self.operation.describe()}: may take effect here, but no order after it works"
        return f"{self.operation.describe()}: fits here, but no order after it works"


@dataclass(frozen=True, slots=True)
class Violation:
    """Where the search got stuck furthest along in one history (or one key's sub-history).

    `proven` says the history is not linearizable; otherwise the search ran
    out of budget, and this is only where it got furthest.
    """

    key: Hashable | None
    proven: bool
    prefix: tuple[Operation, ...]
    state: Hashable
    stuck: Operation
    candidates: tuple[Candidate, ...]
    operations: int

    def explain(self) -> str:
        """A report for the developer whose test failed."""
        where = "" if self.key is None else f" for key {self.key!r}"
        if self.proven:
            header = (
                f"Not linearizable{where}: no order of its {self.operations} operations that"
                " respects real time explains every output."
            )
        else:
            header = (
                f"Undecided{where} ({self.operations} operations): the step budget ran out;"
                " this is where the search got furthest."
            )
        shown_max = limits.explanation_operations_max
        lines = [
            header,
            f"Longest linearizable prefix found: {len(self.prefix)} operations;"
            f" the model state after it is {self.state!r}.",
        ]
        shown = self.prefix[-shown_max:]
        if shown:
            lines.append(f"Its last {len(shown)} operations, in the order they took effect:")
            lines.extend(f"  {operation.describe()}" for operation in shown)
        lines.append(
            f"Then {self.stuck.describe()} had to take effect before it completed,"
            " but none of the operations that could come next fits:"
        )
        lines.extend(f"  {candidate.describe()}" for candidate in self.candidates[:shown_max])
        if len(self.candidates) > shown_max:
            lines.append(f"  ... and {len(self.candidates) - shown_max} more")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Result:
    """The answer of a check: a verdict, the work done, and the evidence.

    `violations` holds one proven `Violation` per key that is not
    linearizable; `unknown_keys` the keys left undecided (for `check`, the
    key None), and `undecided` where the search got furthest on them.
    """

    verdict: Verdict
    nodes: int
    operations: int
    violations: tuple[Violation, ...] = ()
    unknown_keys: tuple[Hashable, ...] = ()
    undecided: tuple[Violation, ...] = ()

    @property
    def linearizable(self) -> bool:
        """True only when the history was shown linearizable (not when unknown)."""
        return self.verdict is Verdict.LINEARIZABLE

    def explain(self) -> str:
        """The verdict in words, with every violation's explanation."""
        parts = [f"{self.verdict.value}: {self.operations} operations, {self.nodes} model steps"]
        parts.extend(violation.explain() for violation in self.violations)
        if self.unknown_keys:
            if self.unknown_keys == (None,):
                undecided = "the history"
            else:
                undecided = "keys " + ", ".join(repr(key) for key in self.unknown_keys)
            parts.append(
                f"The step budget ran out before {undecided} could be decided;"
                " raise nodes_max or check a shorter history."
            )
            parts.extend(violation.explain() for violation in self.undecided)
        return "\n".join(parts)


def check(
    history: Iterable[Operation],
    model: Model[Any],
    *,
    nodes_max: int = limits.check_nodes_max_default,
) -> Result:
    """Decide whether `history` is linearizable for `model` within `nodes_max` model steps."""
    assert nodes_max >= 1
    operations = tuple(history)
    validate_history(operations)
    return _check_one(operations, model, nodes_max, None)


def check_per_key(
    history: Iterable[Operation],
    model: Model[Any],
    key_of: Callable[[Operation], Hashable],
    *,
    nodes_max: int = limits.check_nodes_max_default,
) -> Result:
    """Check each key's sub-history against `model`; `nodes_max` bounds all keys together."""
    assert nodes_max >= 1
    operations = tuple(history)
    validate_history(operations)
    groups: dict[Hashable, list[Operation]] = {}
    for operation in operations:
        groups.setdefault(key_of(operation), []).append(operation)
    nodes = 0
    checked = 0
    violations: list[Violation] = []
    unknown_keys: list[Hashable] = []
    undecided: list[Violation] = []
    # Smallest keys first: while the budget lasts, as many keys as possible get a verdict.
    for key, group in sorted(groups.items(), key=lambda item: len(item[1])):
        if nodes >= nodes_max:
            unknown_keys.append(key)
            continue
        result = _check_one(tuple(group), model, nodes_max - nodes, key)
        nodes += result.nodes
        checked += result.operations
        violations.extend(result.violations)
        unknown_keys.extend(result.unknown_keys)
        undecided.extend(result.undecided)
    if violations:
        verdict = Verdict.NOT_LINEARIZABLE
    elif unknown_keys:
        verdict = Verdict.UNKNOWN
    else:
        verdict = Verdict.LINEARIZABLE
    return Result(verdict, nodes, checked, tuple(violations), tuple(unknown_keys), tuple(undecided))


def _check_one(
    operations: History, model: Model[Any], nodes_max: int, key: Hashable | None
) -> Result:
    search = _Search(operations, model)
    verdict = search.run(nodes_max)
    if verdict is Verdict.LINEARIZABLE:
        return Result(verdict, search.nodes, search.considered)
    violation = search.violation(key, proven=verdict is Verdict.NOT_LINEARIZABLE)
    if verdict is Verdict.NOT_LINEARIZABLE:
        assert violation is not None
        return Result(verdict, search.nodes, search.considered, (violation,))
    undecided = () if violation is None else (violation,)
    return Result(verdict, search.nodes, search.considered, (), (key,), undecided)


# --- the search -----------------------------------------------------------------------------------


class _Node:
    """An event in one of the search's doubly linked lists.

    For an OK operation, the call node and its return node (`match` links
    them) sit in the main list; for an INFO operation, only a call node sits
    in the INFO list.  `slot` is the operation's index among the OK (or the
    INFO) operations in invocation order: its bit in the lifted set.
    `same_before` is the INFO call invoked last before this one with the same
    kind and input, if any.
    """

    __slots__ = (
        "previous",
        "next",
        "operation",
        "output",
        "is_call",
        "is_ok",
        "read_only",
        "lifted",
        "match",
        "same_before",
        "rank",
        "slot",
    )

    def __init__(self, operation: Operation | None, is_call: bool, rank: int) -> None:
        self.previous: _Node | None = None
        self.next: _Node | None = None
        self.operation = operation
        self.output: Output = UNKNOWN
        self.is_call = is_call
        self.is_ok = False
        self.read_only = False
        self.lifted = False
        self.match: _Node | None = None
        self.same_before: _Node | None = None
        self.rank = rank
        self.slot = 0


_HEAD_RANK: Final = -1

# The passes over the candidates at one configuration, in order: OK read-only
# operations (a fitting one is a forced choice, so they go first), the other
# OK operations, then INFO operations.
_READS: Final = 0
_CHANGES: Final = 1
_INFO: Final = 2


def _link(head: _Node, nodes: list[_Node]) -> None:
    previous = head
    for node in nodes:
        previous.next = node
        node.previous = previous
        previous = node


def _unlink(node: _Node) -> None:
    assert node.previous is not None
    node.previous.next = node.next
    if node.next is not None:
        node.next.previous = node.previous


def _relink(node: _Node) -> None:
    # Undoing the most recent unlinks in reverse order finds the neighbours as they were.
    assert node.previous is not None
    node.previous.next = node
    if node.next is not None:
        node.next.previous = node


def _shadowed(node: _Node) -> bool:
    """An INFO call with an identical, earlier one not lifted yet: try that one instead.

    Identical INFO operations are interchangeable, except that the earlier one
    may take effect earlier; so any linearization using the later one works
    with the earlier one in its place.  Lifting only the earliest unlifted one
    of each kind keeps the lifted ones a prefix of their kind's invocations,
    so looking one back suffices.
    """
    same_before = node.same_before
    return same_before is not None and not same_before.lifted


# One lifted operation on the search stack, with what undoing it restores:
# (node, state before, ok_low, ok_bits, info_bits, deadline, forced).  A
# tuple, because the search makes one per step and a tuple is the cheapest.
_Frame: TypeAlias = tuple[_Node, Hashable, int, int, int, _Node, bool]


class _Search:
    """One depth-first search over one (sub-)history; `run` may be called once."""

    def __init__(self, operations: History, model: Model[Any]) -> None:
        self._model = model
        self._considered = [
            operation
            for operation in operations
            if operation.outcome is Outcome.OK
            or (operation.outcome is Outcome.INFO and not model.is_read_only(operation.kind))
        ]
        self._head = _Node(None, False, _HEAD_RANK)
        self._info_head = _Node(None, False, _HEAD_RANK)
        self._ok_count = self._build()
        self._best_ok = -1
        self.nodes = 0
        self.best: tuple[list[_Node], Hashable, _Node, list[_Node]] | None = None

    @property
    def considered(self) -> int:
        """Operations taking part: the OK ones and the INFO ones not read-only."""
        return len(self._considered)

    def _build(self) -> int:
        events: list[tuple[tuple[float, int], Operation, bool]] = []
        for operation in self._considered:
            events.append((operation.invoke_key, operation, True))
            complete_key = operation.complete_key
            if operation.outcome is Outcome.OK:
                assert complete_key is not None
                events.append((complete_key, operation, False))
        events.sort(key=lambda event: event[0])
        main: list[_Node] = []
        info: list[_Node] = []
        calls: dict[int, _Node] = {}
        last_info: dict[tuple[str, Hashable], _Node] = {}
        for rank, (_, operation, is_call) in enumerate(events):
            node = _Node(operation, is_call, rank)
            if operation.outcome is Outcome.INFO:
                node.slot = len(info)
                node.same_before = last_info.get((operation.kind, operation.input))
                last_info[(operation.kind, operation.input)] = node
                info.append(node)
            elif is_call:
                node.is_ok = True
                node.read_only = self._model.is_read_only(operation.kind)
                node.output = operation.output
                node.slot = len(calls)
                calls[operation.id] = node
                main.append(node)
            else:
                call = calls[operation.id]
                call.match = node
                node.match = call
                main.append(node)
        _link(self._head, main)
        _link(self._info_head, info)
        return len(calls)

    def run(self, nodes_max: int) -> Verdict:
        """The search loop (see the module docstring); one iteration tries at most one step.

        The configuration is (ok_low, ok_bits, info_bits, state).  `failed`
        maps (ok_low, ok_bits, state) to the INFO sets of configurations known
        to have no completion, kept minimal: a configuration whose INFO set
        contains one of them has no completion either, since it has the same
        work left and fewer INFO operations to do it with.
        """
        assert nodes_max >= 1
        step = self._model.step
        head = self._head
        info_head = self._info_head
        state: Hashable = self._model.init()
        ok_left = self._ok_count
        ok_low = 0
        ok_bits = 0
        info_bits = 0
        failed: dict[tuple[int, int, Hashable], list[int]] = {}
        stack: list[_Frame] = []
        nodes = 0
        cursor = head.next
        phase = _READS
        info_cursor: _Node | None = None
        deadline = head
        dead_end = False
        while ok_left:
            assert cursor is not None
            if dead_end:
                dead_end = False
                if self._ok_count - ok_left > self._best_ok:
                    self._remember(stack, state, ok_left)
                if not stack:
                    self.nodes = nodes
                    return Verdict.NOT_LINEARIZABLE
                known = failed.setdefault((ok_low, ok_bits, state), [])
                if known:
                    # Drop the sets this one is contained in: it rules out all they do.
                    known[:] = [other for other in known if info_bits & ~other]
                known.append(info_bits)
                undone, state, ok_low, ok_bits, info_bits, deadline, forced = stack.pop()
                if undone.is_ok:
                    assert undone.match is not None
                    _relink(undone.match)
                    _relink(undone)
                    ok_left += 1
                    phase = _CHANGES
                    cursor = undone.next
                else:
                    _relink(undone)
                    undone.lifted = False
                    phase = _INFO
                    cursor = deadline
                    info_cursor = undone.next
                # Nothing after a forced choice worked, so nothing here can (see `forced`).
                dead_end = forced
                continue
            if phase == _READS:
                if not cursor.is_call:
                    cursor = head.next
                    phase = _CHANGES
                    continue
                candidate = cursor
                cursor = cursor.next
                if not candidate.read_only:
                    continue
            elif phase == _CHANGES:
                if not cursor.is_call:
                    # Every OK call before the first pending completion was tried:
                    # now the INFO calls invoked before that completion.
                    deadline = cursor
                    phase = _INFO
                    info_cursor = info_head.next
                    continue
                candidate = cursor
                cursor = cursor.next
                if candidate.read_only:
                    # Tried in the first pass, in this very state, and it did not fit.
                    continue
            elif info_cursor is not None and info_cursor.rank < deadline.rank:
                candidate = info_cursor
                info_cursor = info_cursor.next
                if _shadowed(candidate):
                    continue
            else:
                dead_end = True
                continue
            nodes += 1
            if nodes > nodes_max:
                self.nodes = nodes_max
                return Verdict.UNKNOWN
            operation = candidate.operation
            assert operation is not None
            legal, after = step(state, operation.kind, operation.input, candidate.output)
            if not legal:
                continue
            if not candidate.is_ok and after == state:
                # An INFO operation that changes nothing here is better left for later:
                # this configuration, with it still unused, is already being searched.
                continue
            if stack and not stack[-1][0].is_ok:
                # Right after an INFO operation: if this step would leave the same
                # state without it, that INFO operation was useless here, and the
                # same order without it (so with it still available) is searched
                # on another branch.  Some linearization, if there is any, uses no
                # useless INFO operation: one with the fewest of them.
                nodes += 1
                legal_without, after_without = step(
                    stack[-1][1], operation.kind, operation.input, candidate.output
                )
                if legal_without and after_without == after:
                    continue
            # A read-only operation that fits here can be moved to the front of
            # any linearization of what is left: it changes no state, so no
            # later output, and having been invoked before every pending
            # completion, no real-time order forbids it.  So no other choice
            # here needs trying if taking it fails: the choice is *forced*.
            forced = candidate.read_only
            if candidate.is_ok:
                next_low = ok_low
                next_bits = ok_bits | (1 << (candidate.slot - ok_low))
                if next_bits & 1:
                    # Keep the key small: drop the run of lifted operations at the bottom.
                    run = (~next_bits & (next_bits + 1)).bit_length() - 1
                    next_bits >>= run
                    next_low += run
                next_info = info_bits
            else:
                next_low, next_bits = ok_low, ok_bits
                next_info = info_bits | (1 << candidate.slot)
            failed_sets = failed.get((next_low, next_bits, after))
            if failed_sets is not None:
                outside = ~next_info
                if any(not other & outside for other in failed_sets):
                    # That configuration has no completion; after a forced choice, nor has this.
                    dead_end = forced
                    continue
            stack.append((candidate, state, ok_low, ok_bits, info_bits, deadline, forced))
            state = after
            ok_low, ok_bits, info_bits = next_low, next_bits, next_info
            if candidate.is_ok:
                assert candidate.match is not None
                _unlink(candidate)
                _unlink(candidate.match)
                ok_left -= 1
            else:
                _unlink(candidate)
                candidate.lifted = True
            cursor = head.next
            phase = _READS
        self.nodes = nodes
        return Verdict.LINEARIZABLE

    def _remember(self, stack: list[_Frame], state: Hashable, ok_left: int) -> None:
        """Keep the deepest dead end so far: prefix, state, stuck completion, candidates."""
        candidates: list[_Node] = []
        node = self._head.next
        while node is not None and node.is_call:
            candidates.append(node)
            node = node.next
        assert node is not None
        deadline = node
        node = self._info_head.next
        while node is not None and node.rank < deadline.rank:
            if not _shadowed(node):
                candidates.append(node)
            node = node.next
        self._best_ok = self._ok_count - ok_left
        self.best = ([frame[0] for frame in stack], state, deadline, candidates)

    def violation(self, key: Hashable | None, *, proven: bool) -> Violation | None:
        """The deepest dead end as a report, or None when the search never reached one."""
        if self.best is None:
            return None
        lifted, state, deadline, candidate_nodes = self.best
        assert deadline.operation is not None
        candidates = []
        for node in candidate_nodes:
            operation = node.operation
            assert operation is not None
            legal, _ = self._model.step(state, operation.kind, operation.input, node.output)
            expected: Output = UNKNOWN
            if isinstance(self._model, DeterministicModel):
                expected, _ = self._model.apply(state, operation.kind, operation.input)
            candidates.append(Candidate(operation, legal, expected))
        prefix = []
        for node in lifted:
            assert node.operation is not None
            prefix.append(node.operation)
        return Violation(
            key=key,
            proven=proven,
            prefix=tuple(prefix),
            state=state,
            stuck=deadline.operation,
            candidates=tuple(candidates),
            operations=len(self._considered),
        )
