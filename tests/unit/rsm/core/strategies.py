"""Hypothesis strategies shared by the rsm unit tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rsm.core import log_state
from rsm.core.log_format import Batch, CommandItem, Item, LeaderStart, StateHash
from rsm.core.log_state import Log

U63 = 2**63 - 1
U64 = 2**64 - 1

cbor_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**64), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
cbor_values = st.recursive(
    cbor_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.text(min_size=1, max_size=30)
replica_ids = st.text(min_size=1, max_size=30)


@st.composite
def sessions(draw: st.DrawFn) -> tuple[bytes | None, int | None, int | None]:
    if draw(st.booleans()):
        return None, None, None
    seq = draw(st.integers(1, U63))
    return draw(st.binary(min_size=1, max_size=32)), seq, draw(st.integers(0, seq - 1))


@st.composite
def command_items(draw: st.DrawFn) -> CommandItem:
    client_id, seq, ack_seq = draw(sessions())
    return CommandItem(
        draw(names),
        draw(st.lists(cbor_values, max_size=4)),
        draw(st.dictionaries(st.text(max_size=8), cbor_values, max_size=3)),
        client_id,
        seq,
        ack_seq,
    )


items: st.SearchStrategy[Item] = command_items() | st.builds(LeaderStart, replica_ids)


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    drawn = tuple(draw(st.lists(items, max_size=6)))
    state_hash = draw(
        st.none() | st.builds(StateHash, st.integers(0, U63), st.binary(min_size=1, max_size=64))
    )
    return Batch(
        draw(st.integers(1, U63)),
        draw(st.integers(1, 2**62)),
        draw(st.integers(0, U63)),
        draw(st.integers(0, U64)),
        drawn,
        state_hash,
    )


@st.composite
def logs(draw: st.DrawFn) -> Log:
    """A log reached from the empty one by legal transitions."""
    log = Log()
    ledger_ids = iter(range(draw(st.integers(0, 1000)), 10**6))
    for _ in range(draw(st.integers(0, 8))):
        current = log.open_segment
        action = draw(st.sampled_from(["takeover", "rollover", "close"]))
        if current is None or action == "takeover":
            recovered: int | None = None
            if current is not None:
                recovered = current.first_index - 1 + draw(st.integers(0, 50))
            log = log_state.takeover(
                log, new_ledger_id=next(ledger_ids), recovered_last_index=recovered
            )
            continue
        last_index = current.first_index - 1 + draw(st.integers(0, 50))
        if action == "rollover":
            log = log_state.rollover(
                log,
                epoch=current.epoch,
                ledger_id=current.ledger_id,
                last_index=last_index,
                new_ledger_id=next(ledger_ids),
            )
        else:
            log = log_state.close(
                log, epoch=current.epoch, ledger_id=current.ledger_id, last_index=last_index
            )
    return log


def raw_item(item: Item) -> list[Any]:
    """The CBOR structure of an item, as cbor2 would write it directly."""
    if isinstance(item, LeaderStart):
        return [1, item.replica_id]
    return [0, item.name, item.args, item.kwargs, item.client_id, item.seq, item.ack_seq]
