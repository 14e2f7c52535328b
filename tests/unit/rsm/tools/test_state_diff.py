"""Comparing two states: the key diff over per-key digests, and the first differing byte of
two snapshot streams, whatever their chunking."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from hypothesis import given
from hypothesis import strategies as st

from rsm.core.state_machine import StateMachine
from rsm.tools.state_diff import BY_KEYS, BY_STREAMS, diff_states, merged, stream_difference


class Plain(StateMachine):
    """A state without per-key digests."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}


class Keyed(Plain):
    def key_digests(self, keys: Iterable[bytes] | None = None) -> Iterator[tuple[bytes, bytes]]:
        chosen = sorted(k.encode() for k in self.items)
        return iter([(key, bytes([self.items[key.decode()]])) for key in chosen])

    def show_key(self, key: bytes) -> str:
        value = self.items.get(key.decode())
        return "absent" if value is None else str(value)


def machine(kind: type[Plain], **items: int) -> Plain:
    made = kind()
    made.items.update(items)
    return made


def test_keys_that_differ_or_only_one_state_holds_are_listed_in_order() -> None:
    compared = diff_states(machine(Keyed, a=1, b=2, c=3), machine(Keyed, b=2, c=4, d=5, a=1))
    assert (compared.by, compared.equal, compared.keys_compared) == (BY_KEYS, False, 4)
    assert [(d.key, d.first, d.second) for d in compared.keys] == [
        (b"c", b"\x03", b"\x04"),
        (b"d", None, b"\x05"),
    ]
    assert [(d.first_shown, d.second_shown) for d in compared.keys] == [("3", "4"), ("absent", "5")]
    assert compared.first_hash != compared.second_hash


def test_equal_states_by_keys_and_by_streams() -> None:
    assert diff_states(machine(Keyed, a=1), machine(Keyed, a=1)).equal
    plain = diff_states(machine(Plain, a=1), machine(Plain, a=1))
    assert (plain.by, plain.equal, plain.stream, plain.keys_compared) == (
        BY_STREAMS,
        True,
        None,
        None,
    )


def test_without_key_digests_the_snapshot_streams_are_compared() -> None:
    compared = diff_states(machine(Plain, a=1), machine(Plain, a=2))
    assert (compared.by, compared.equal, compared.keys) == (BY_STREAMS, False, ())
    assert compared.stream is not None
    assert compared.stream.first_bytes == compared.stream.second_bytes


def test_the_first_differing_byte_and_the_chunk_of_each_side() -> None:
    found = stream_difference([b"abc", b"def"], [b"ab", b"cdX", b"f"])
    assert found is not None
    assert (found.offset, found.first_chunk, found.second_chunk) == (4, 1, 1)
    assert (found.first_bytes, found.second_bytes) == (6, 6)
    shorter = stream_difference([b"abc"], [b"", b"abcd"])
    assert shorter is not None
    assert (shorter.offset, shorter.first_chunk, shorter.second_chunk) == (3, None, 1)
    assert (shorter.first_bytes, shorter.second_bytes) == (3, 4)
    assert stream_difference([b"ab", b"", b"c"], [b"a", b"bc"]) is None


def _cuts(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(
    st.binary(max_size=40),
    st.binary(max_size=40),
    st.lists(st.integers(0, 40)),
    st.lists(st.integers(0, 40)),
)
def test_the_difference_does_not_depend_on_chunking(
    one: bytes, other: bytes, cuts_one: list[int], cuts_other: list[int]
) -> None:
    found = stream_difference(_cuts(one, cuts_one), _cuts(other, cuts_other))
    if one == other:
        assert found is None
        return
    expected = next(i for i in range(len(one) + len(other)) if one[i : i + 1] != other[i : i + 1])
    assert found is not None
    assert (found.offset, found.first_bytes, found.second_bytes) == (expected, len(one), len(other))


def test_merged_pairs_the_digests_of_two_sorted_streams() -> None:
    left = [(b"a", b"1"), (b"c", b"3")]
    right = [(b"b", b"2"), (b"c", b"4"), (b"d", b"5")]
    assert list(merged(left, right)) == [
        (b"a", b"1", None),
        (b"b", None, b"2"),
        (b"c", b"3", b"4"),
        (b"d", None, b"5"),
    ]
