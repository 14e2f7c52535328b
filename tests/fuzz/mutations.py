"""Hypothesis strategies that break valid encodings: at the byte level and at the value level.

Byte level: flip, overwrite, insert, delete, truncate, extend, repeat a piece
thousands of times (deep nesting), and write the values length fields fear most
(0, all ones, 2^31, one past the data) into any 4 or 8 bytes.

Value level, for CBOR inputs: decode a valid input, replace one node of its
tree with a hostile value (a huge integer or bignum, a float, a semantic tag, a
value of another type, a deep or wide container) or drop or add an element,
then encode it again in the input's envelope.
"""

from __future__ import annotations

import contextlib
import struct
from typing import Any

import cbor2
from hypothesis import strategies as st

_LENGTH = struct.Struct(">I")
_FEARED_U32 = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF)
_FEARED_BYTES = (0x00, 0x01, 0x7F, 0x80, 0xFF, 0x18, 0x1B, 0x5B, 0x7B, 0x9B, 0xBB, 0xC2, 0xD8, 0xF6)
"""Zero, sign edges, and CBOR initial bytes with 8-byte lengths, bignum and tag heads."""


@st.composite
def mutated(draw: st.DrawFn, seed: bytes) -> bytes:
    """`seed` with one to four byte-level mutations."""
    data = bytearray(seed)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ("flip", "byte", "u32", "u64", "cut", "extend", "insert", "del", "repeat")
            )
        )
        at = draw(st.integers(0, len(data))) if data else 0
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte" and at < len(data):
            data[at] = draw(st.sampled_from(_FEARED_BYTES) | st.integers(0, 255))
        elif kind == "u32":
            value = draw(st.sampled_from((*_FEARED_U32, len(data) + 1)))
            data[at : at + 4] = _LENGTH.pack(value)
        elif kind == "u64":
            data[at : at + 8] = draw(st.sampled_from((b"\xff" * 8, b"\x7f" + b"\xff" * 7)))
        elif kind == "cut":
            del data[at:]
        elif kind == "extend":
            data += draw(st.binary(min_size=1, max_size=64))
        elif kind == "repeat":
            # Nesting: a container's opening bytes a few thousand times over.
            piece = bytes(data[at : at + draw(st.integers(1, 4))]) or b"["
            data[at:at] = piece * draw(st.integers(2, 5_000))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[at : at + draw(st.integers(1, 16))]
    return bytes(data)


_HUGE_BITS = (63, 64, 65, 20_000)
"""Integers of these many bits are past every field's range; 20,000 bits have more digits than
Python turns into text.  (Drawn as bit counts: Hypothesis itself cannot print such numbers.)"""

huge_integers: st.SearchStrategy[int] = st.builds(
    lambda bits, sign: sign * (1 << bits), st.sampled_from(_HUGE_BITS), st.sampled_from((1, -1))
)

hostile_scalars: st.SearchStrategy[Any] = st.one_of(
    huge_integers,
    st.integers(-(1 << 70), 1 << 70),
    st.integers(-2, 30),
    st.floats(),
    st.booleans(),
    st.none(),
    st.binary(max_size=40),
    st.text(max_size=40),
    st.builds(
        cbor2.CBORTag,
        st.sampled_from((0, 1, 2, 3, 4, 5, 28, 29, 30, 35, 36, 37, 258, 260, 1381190913)),
        st.one_of(st.integers(-(1 << 70), 1 << 70), st.text(max_size=8), st.binary(max_size=8)),
    ),
)

hostile_values: st.SearchStrategy[Any] = st.recursive(
    hostile_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-5, 5)), inner, max_size=4),
    ),
    max_leaves=10,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (list indexes, dict keys) to a node of `value`, the root first."""
    paths = [prefix]
    if type(value) is list:
        for index, item in enumerate(value):
            paths += _paths(item, (*prefix, index))
    elif type(value) is dict:
        for key, item in value.items():
            paths += _paths(item, (*prefix, key))
    return paths


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, *rest = path
    copy: Any = list(value) if type(value) is list else dict(value)
    copy[head] = _replace(value[head], tuple(rest), new)
    return copy


@st.composite
def mutated_value(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one node replaced, or one element dropped or added, at any depth."""
    path = draw(st.sampled_from(_paths(value)))
    node: Any = value
    for key in path:
        node = node[key]
    kind = draw(st.sampled_from(("replace", "drop", "add")))
    if kind == "drop" and type(node) is list and node:
        index = draw(st.integers(0, len(node) - 1))
        return _replace(value, path, node[:index] + node[index + 1 :])
    if kind == "drop" and type(node) is dict and node:
        key = draw(st.sampled_from(sorted(node, key=repr)))
        return _replace(value, path, {k: v for k, v in node.items() if k != key})
    if kind == "add" and type(node) is list:
        return _replace(value, path, [*node, draw(hostile_values)])
    if kind == "add" and type(node) is dict:
        key = draw(st.one_of(st.text(max_size=6), st.integers(-5, 5)))
        return _replace(value, path, {**node, key: draw(hostile_values)})
    return _replace(value, path, draw(hostile_values))


def split_items(envelope: str, data: bytes) -> tuple[bytes, list[Any]]:
    """The prefix and the CBOR items of a valid input in `envelope` (see `Target`)."""
    if envelope == "cbor":
        return b"", [cbor2.loads(data)]
    if envelope == "tagged":
        return data[:1], [cbor2.loads(data[1:])]
    assert envelope == "frames"
    items = []
    offset = 0
    while offset < len(data):
        (length,) = _LENGTH.unpack_from(data, offset)
        items.append(cbor2.loads(data[offset + 4 : offset + 4 + length]))
        offset += 4 + length
    return b"", items


def join_items(envelope: str, prefix: bytes, items: list[bytes]) -> bytes:
    """The input in `envelope` made of encoded items (the inverse of `split_items`)."""
    if envelope == "frames":
        return b"".join(_LENGTH.pack(len(item)) + item for item in items)
    assert len(items) == 1
    return prefix + items[0]


@st.composite
def mutated_items(draw: st.DrawFn, envelope: str, seed: bytes) -> bytes:
    """A valid input with one of its CBOR items changed at the value level."""
    prefix, items = split_items(envelope, seed)
    encoded = [cbor2.dumps(item) for item in items]
    index = draw(st.integers(0, len(items) - 1))
    value = draw(mutated_value(items[index]))
    # A tag whose content its encoder refuses keeps the item: the bytes still fuzz.
    with contextlib.suppress(ValueError, TypeError, cbor2.CBOREncodeError):
        encoded[index] = cbor2.dumps(value)
    return join_items(envelope, prefix, encoded)
