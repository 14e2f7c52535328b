"""The default snapshot codec: a state machine's public attributes as CBOR records, streamed.

Pure.  `StateMachine.snapshot()` / `restore()` use it unless an application
overrides them.  State is the instance's public attributes (names not starting
with `_`), as `rsm/core/state_machine.py` says; they are written in name order.

Records (each `length u32 | CBOR array`, as in rsm/core/snapshot_format.py)::

    [0, 1]                        first: the default codec, version 1
    [1, name, value]              attribute `name` holds `value`, encoded whole
    [2, name, kind, count]        attribute `name` holds a container of `kind` with
                                  `count` elements; runs of them follow until all came
    [3, [element, ...]]           the next run of the open container; for the dict
                                  kinds keys and values alternate: k1, v1, k2, v2, ...
    [4]                           last: the end of the state

    kind  0 dict, 1 list, 2 set, 3 frozenset, 4 tuple, 5 SortedDict, 6 SortedList, 7 SortedSet

A container with more than `limits.snapshot_container_items_min` elements is
streamed in runs of about `limits.snapshot_run_bytes_target` encoded bytes,
so a state far larger than one message (or one chunk) streams with bounded
memory on both sides; smaller values go whole.

Values are cbor2 with tags for the Python types CBOR lacks, at any depth::

    258          set (the IANA-registered tag), elements sorted
    1381190913   tuple: array of its elements
    1381190914   frozenset: array, elements sorted
    1381190915   SortedDict (without a key function): array k1, v1, k2, v2, ... in key order
    1381190916   SortedList (without a key function): array in order
    1381190917   SortedSet (without a key function): array in order

(1381190912 is "RSM\\0" read as a big-endian u32; the tags are in CBOR's
first-come-first-served range.)  Everything else is what cbor2 encodes natively
and decodes back to (a dict subclass nested in a value comes back as a dict).
A public attribute the codec cannot represent faithfully (a lock, a deque,
an OrderedDict, a bytearray, a SortedDict with a key function, any other
mapping, sequence or set type at top level) raises `BadSnapshotState` naming
it.

Determinism: two replicas with equal state produce equal bytes, because the
default state hash (`digest`) is the SHA-256 of this stream.  Attributes go in
name order, dicts in insertion order (which a restore reproduces, so a
restored replica iterates them as the original does), sets sorted (their
iteration order depends on the process's hash seed), sortedcontainers in
their order, and runs are cut by a rule that depends on the data alone.

Invariants: `restore(snapshot(m))` sets every public attribute of a fresh
instance equal (and of the same type, at top level) to `m`'s; the decoder
refuses a stream that is not exactly one well-formed state (`SnapshotCorrupt`).
"""

from __future__ import annotations

import collections
import hashlib
import itertools
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Final

import cbor2
from sortedcontainers import (  # type: ignore[import-untyped]
    SortedDict,
    SortedKeyList,
    SortedList,
    SortedSet,
)

from bookie.errors import preview
from rsm import limits
from rsm.core.snapshot_format import RecordReader, encode_record, record_of
from rsm.errors import BadSnapshotState, SnapshotCorrupt

CODEC_VERSION: Final = 1

RECORD_HEAD: Final = 0
RECORD_ATTRIBUTE: Final = 1
RECORD_CONTAINER: Final = 2
RECORD_RUN: Final = 3
RECORD_END: Final = 4

KIND_DICT: Final = 0
KIND_LIST: Final = 1
KIND_SET: Final = 2
KIND_FROZENSET: Final = 3
KIND_TUPLE: Final = 4
KIND_SORTED_DICT: Final = 5
KIND_SORTED_LIST: Final = 6
KIND_SORTED_SET: Final = 7

_KINDS: Final[dict[type, int]] = {
    dict: KIND_DICT,
    list: KIND_LIST,
    set: KIND_SET,
    frozenset: KIND_FROZENSET,
    tuple: KIND_TUPLE,
    SortedDict: KIND_SORTED_DICT,
    SortedList: KIND_SORTED_LIST,
    SortedSet: KIND_SORTED_SET,
}
_PAIRED_KINDS: Final = frozenset({KIND_DICT, KIND_SORTED_DICT})

TAG_SET: Final = 258
_TAG_BASE: Final = 0x52534D00
TAG_TUPLE: Final = _TAG_BASE + 1
TAG_FROZENSET: Final = _TAG_BASE + 2
TAG_SORTED_DICT: Final = _TAG_BASE + 3
TAG_SORTED_LIST: Final = _TAG_BASE + 4
TAG_SORTED_SET: Final = _TAG_BASE + 5

_RUN_ITEMS_INITIAL: Final = 64
_PLAIN_SORTABLE: Final = frozenset({int, str, bytes})


# --- values -----------------------------------------------------------------------------------


def _sorted_elements(values: Iterable[Any]) -> list[Any]:
    """The elements of a set in an order that depends on the elements alone."""
    elements = list(values)
    kinds = {type(element) for element in elements}
    if len(kinds) <= 1 and kinds <= _PLAIN_SORTABLE:
        elements.sort()
        return elements
    # Mixed or partially ordered elements (frozensets compare by inclusion):
    # their encodings give a total order.
    return sorted(elements, key=_dumps)


def _check_no_key(value: Any) -> None:
    if getattr(value, "key", None) is not None:
        raise BadSnapshotState(
            f"a {type(value).__name__} with a key function cannot be snapshotted by the default "
            "codec (the function is code, not data): override snapshot() and restore()"
        )


def _encode_tuple(encoder: cbor2.CBOREncoder, value: tuple[Any, ...]) -> None:
    encoder.encode_semantic(TAG_TUPLE, list(value))


def _encode_set(encoder: cbor2.CBOREncoder, value: set[Any]) -> None:
    encoder.encode_semantic(TAG_SET, _sorted_elements(value))


def _encode_frozenset(encoder: cbor2.CBOREncoder, value: frozenset[Any]) -> None:
    encoder.encode_semantic(TAG_FROZENSET, _sorted_elements(value))


def _encode_sorted_dict(encoder: cbor2.CBOREncoder, value: Any) -> None:
    _check_no_key(value)
    encoder.encode_semantic(TAG_SORTED_DICT, list(itertools.chain.from_iterable(value.items())))


def _encode_sorted_list(encoder: cbor2.CBOREncoder, value: Any) -> None:
    _check_no_key(value)
    encoder.encode_semantic(TAG_SORTED_LIST, list(value))


def _encode_sorted_set(encoder: cbor2.CBOREncoder, value: Any) -> None:
    _check_no_key(value)
    encoder.encode_semantic(TAG_SORTED_SET, list(value))


def _refuse(_encoder: cbor2.CBOREncoder, value: Any) -> None:
    raise BadSnapshotState(
        f"a {type(value).__qualname__} would come back as a plain "
        f"{'dict' if isinstance(value, Mapping) else 'list or bytes'}"
    )


ENCODERS: Final[dict[type, Callable[[cbor2.CBOREncoder, Any], None]]] = {
    tuple: _encode_tuple,
    set: _encode_set,
    frozenset: _encode_frozenset,
    SortedDict: _encode_sorted_dict,
    SortedList: _encode_sorted_list,
    SortedSet: _encode_sorted_set,
    # cbor2 encodes any mapping as a map and any sequence as an array: these
    # common types would silently come back as something else.
    **dict.fromkeys(
        (
            collections.deque,
            collections.OrderedDict,
            collections.defaultdict,
            collections.Counter,
            collections.ChainMap,
            collections.UserDict,
            collections.UserList,
            SortedKeyList,
            range,
            memoryview,
            bytearray,
        ),
        _refuse,
    ),
}
_FAITHFUL: Final = frozenset({*_KINDS, str, bytes})
"""Container-like types an attribute may hold at top level (others would change type)."""


def _array(value: Any) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise SnapshotCorrupt(f"a tagged value holds {type(value).__name__}, not an array")
    return list(value)


def _pairs(value: Any) -> Iterator[tuple[Any, Any]]:
    elements = _array(value)
    if len(elements) % 2:
        raise SnapshotCorrupt("a SortedDict value has an odd number of elements")
    keys = iter(elements)
    return zip(keys, keys, strict=True)


DECODERS: Final[dict[int, Callable[[Any, bool], Any]]] = {
    TAG_TUPLE: lambda value, _immutable: tuple(_array(value)),
    TAG_FROZENSET: lambda value, _immutable: frozenset(_array(value)),
    TAG_SORTED_DICT: lambda value, _immutable: SortedDict(_pairs(value)),
    TAG_SORTED_LIST: lambda value, _immutable: SortedList(_array(value)),
    TAG_SORTED_SET: lambda value, _immutable: SortedSet(_array(value)),
}


_SCALARS: Final = frozenset({bytes, str, int, float, bool, type(None)})
"""Element types a run may hold for cbor2 to encode it without the tag encoders."""


def _dumps_run(record: list[Any], elements: list[Any]) -> bytes:
    """A run record: without the (slower) tag encoders when every element is a scalar."""
    if set(map(type, elements)) <= _SCALARS:
        return cbor2.dumps(record)
    return _dumps(record)


def _dumps(value: Any) -> bytes:
    try:
        return cbor2.dumps(value, encoders=ENCODERS)
    except BadSnapshotState:
        raise
    except Exception as error:  # cbor2 raises several types for values it cannot encode
        cause = error.__cause__
        if isinstance(cause, BadSnapshotState):
            raise cause from None
        raise BadSnapshotState(f"cannot encode a {type(value).__name__}: {error}") from None


def _record(value: list[Any], name: str, elements: list[Any] | None = None) -> bytes:
    try:
        body = _dumps(value) if elements is None else _dumps_run(value, elements)
    except BadSnapshotState as error:
        raise BadSnapshotState(
            f"attribute {name!r}: {error}; make it private (a name starting with '_') "
            "or override snapshot() and restore()"
        ) from None
    return record_of(body)


# --- encoding ---------------------------------------------------------------------------------


def public_attributes(machine: object) -> list[tuple[str, Any]]:
    """The state: `(name, value)` of every public attribute of `machine`, by name."""
    attributes = vars(machine)
    return [(name, attributes[name]) for name in sorted(attributes) if not name.startswith("_")]


def encode_state(machine: object) -> Iterator[bytes]:
    """The default snapshot of `machine`: its records, one `bytes` each, lazily."""
    yield encode_record([RECORD_HEAD, CODEC_VERSION])
    for name, value in public_attributes(machine):
        kind = _KINDS.get(type(value))
        if type(value) not in _FAITHFUL and isinstance(value, Mapping | Sequence | AbstractSet):
            raise BadSnapshotState(
                f"attribute {name!r} is a {type(value).__qualname__}, which the default codec "
                "would not restore as one: make it private (a name starting with '_') "
                "or override snapshot() and restore()"
            )
        if kind is not None and len(value) > limits.snapshot_container_items_min:
            yield from _container_records(name, kind, value)
        else:
            yield _record([RECORD_ATTRIBUTE, name, value], name)
    yield encode_record([RECORD_END])


def _container_records(name: str, kind: int, value: Any) -> Iterator[bytes]:
    if kind in (KIND_SORTED_DICT, KIND_SORTED_LIST, KIND_SORTED_SET):
        try:
            _check_no_key(value)
        except BadSnapshotState as error:
            raise BadSnapshotState(f"attribute {name!r}: {error}") from None
    count = len(value)
    yield encode_record([RECORD_CONTAINER, name, kind, count])
    paired = kind in _PAIRED_KINDS
    # Keys (or elements) come from the container's own C-level iterator; a
    # dict's values are then fetched by one itemgetter call per run, which is
    # several times faster than a SortedDict's Python-level items view.
    elements: Iterator[Any] = iter(
        _sorted_elements(value) if kind in (KIND_SET, KIND_FROZENSET) else value
    )
    run_items = _RUN_ITEMS_INITIAL
    sent = 0
    while sent < count:
        run = list(itertools.islice(elements, run_items))
        assert run, "the container shrank while being snapshotted"
        if paired:
            flat: list[Any] = [None] * (2 * len(run))
            flat[::2] = run
            flat[1::2] = operator.itemgetter(*run)(value) if len(run) > 1 else [value[run[0]]]
        else:
            flat = run
        record = _record([RECORD_RUN, flat], name, flat)
        yield record
        sent += len(run)
        # Aim the next run at the target size; the rule depends only on the
        # data, so every replica cuts the same runs (the state hash needs it).
        run_items = max(
            1,
            min(
                limits.snapshot_run_items_max,
                run_items * limits.snapshot_run_bytes_target // len(record),
            ),
        )
    assert sent == count


def digest(chunks: Iterable[bytes | bytearray | memoryview]) -> bytes:
    """SHA-256 of a snapshot stream: the default `StateMachine.state_hash`."""
    hasher = hashlib.sha256()
    for chunk in chunks:
        hasher.update(chunk)
    return hasher.digest()


# --- decoding ---------------------------------------------------------------------------------


class _OpenContainer:
    """A container whose runs are arriving."""

    __slots__ = ("name", "kind", "count", "received", "parts")

    def __init__(self, name: str, kind: int, count: int) -> None:
        self.name = name
        self.kind = kind
        self.count = count
        self.received = 0
        self.parts: Any = {} if kind in _PAIRED_KINDS else set() if kind == KIND_SET else []

    def add(self, elements: list[Any]) -> None:
        paired = self.kind in _PAIRED_KINDS
        if paired and len(elements) % 2:
            raise SnapshotCorrupt(f"a run of {self.name!r} has an odd number of elements")
        added = len(elements) // 2 if paired else len(elements)
        if not added or self.received + added > self.count:
            raise SnapshotCorrupt(f"the runs of {self.name!r} do not add up to {self.count}")
        self.received += added
        try:
            if paired:
                keys = iter(elements)
                self.parts.update(zip(keys, keys, strict=True))
            elif self.kind == KIND_SET:
                self.parts.update(elements)
            else:
                self.parts.extend(elements)
        except TypeError as error:  # a key or set element that is not hashable
            raise SnapshotCorrupt(f"a run of {self.name!r} holds {error}") from None

    @property
    def complete(self) -> bool:
        return self.received == self.count

    def build(self) -> Any:
        parts = self.parts
        kind = self.kind
        value: Any
        try:
            if kind in (KIND_DICT, KIND_LIST, KIND_SET):
                value = parts
            elif kind == KIND_SORTED_DICT:
                value = SortedDict(parts)
            elif kind == KIND_FROZENSET:
                value = frozenset(parts)
            elif kind == KIND_TUPLE:
                value = tuple(parts)
            elif kind == KIND_SORTED_LIST:
                value = SortedList(parts)
            else:
                value = SortedSet(parts)
        except TypeError as error:  # elements that are not hashable, or not comparable
            raise SnapshotCorrupt(f"{self.name!r} cannot be built: {error}") from None
        if len(value) != self.count:
            raise SnapshotCorrupt(f"{self.name!r} repeats elements: {len(value)} of {self.count}")
        return value


def _check_name(name: Any) -> str:
    if type(name) is not str or not name.isidentifier() or name.startswith("_"):
        raise SnapshotCorrupt(f"attribute name {preview(name)} is not a public identifier")
    return name


class StateDecoder:
    """Restores the default codec's stream into `machine`, fed in pieces of any size.

    Memory: one incomplete record, the piece being fed, and the state itself
    (a container's elements go straight into it, or into the list a sorted
    container is built from at its end).
    """

    __slots__ = ("_machine", "_records", "_started", "_ended", "_open")

    def __init__(self, machine: object) -> None:
        self._machine = machine
        self._records = RecordReader(semantic_decoders=DECODERS)
        self._started = False
        self._ended = False
        self._open: _OpenContainer | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes held for a record not complete yet."""
        return self._records.buffered_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        for value in self._records.feed(data):
            self._record(value)

    def finish(self) -> None:
        """Raise `SnapshotCorrupt` unless the whole state arrived."""
        self._records.finish()
        if not self._ended:
            raise SnapshotCorrupt("the state stream ends before its end record")

    def _record(self, value: Any) -> None:
        if type(value) is not list or not value or type(value[0]) is not int:
            raise SnapshotCorrupt(f"state record {preview(value)} is not a tagged array")
        tag = value[0]
        if not self._started:
            if value != [RECORD_HEAD, CODEC_VERSION]:
                raise SnapshotCorrupt(f"the state stream starts with {preview(value)}")
            self._started = True
            return
        if self._ended:
            raise SnapshotCorrupt("the state stream goes on after its end record")
        container = self._open
        if container is not None:
            if tag != RECORD_RUN or len(value) != 2 or type(value[1]) is not list:
                raise SnapshotCorrupt(f"{container.name!r} is incomplete at {preview(value)}")
            container.add(value[1])
            if container.complete:
                setattr(self._machine, container.name, container.build())
                self._open = None
            return
        if tag == RECORD_ATTRIBUTE and len(value) == 3:
            setattr(self._machine, _check_name(value[1]), value[2])
        elif tag == RECORD_CONTAINER and len(value) == 4:
            _, name, kind, count = value
            if kind not in _KINDS.values() or type(count) is not int or count < 1:
                raise SnapshotCorrupt(f"container record {preview(value)} is not valid")
            self._open = _OpenContainer(_check_name(name), kind, count)
        elif tag == RECORD_END and len(value) == 1:
            self._ended = True
        else:
            raise SnapshotCorrupt(f"state record {preview(value)} is not valid here")


def restore_state(machine: object, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Feed every chunk to a `StateDecoder` of `machine` and check the stream ended."""
    decoder = StateDecoder(machine)
    for chunk in chunks:
        decoder.feed(chunk)
    decoder.finish()
