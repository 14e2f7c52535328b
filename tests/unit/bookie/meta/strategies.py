"""Hypothesis strategies for metadata values (shared by the tests of tests/unit/meta)."""

from __future__ import annotations

from hypothesis import strategies as st

from bookie import limits
from bookie.core.metadata import LedgerMetadata, LedgerState
from bookie.wire.packet import DigestType

bookie_ids = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=20
).filter(lambda name: name not in (".", "..", "readonly"))

ledger_ids = st.integers(min_value=0, max_value=limits.ledger_id_max)
entry_ids = st.integers(min_value=0, max_value=limits.ledger_id_max)


@st.composite
def ledger_metadata(draw: st.DrawFn) -> LedgerMetadata:
    """Any metadata that satisfies `core.metadata.check_invariants`."""
    ensemble_size = draw(st.integers(min_value=1, max_value=limits.ensemble_size_max))
    write_quorum = draw(st.integers(min_value=1, max_value=ensemble_size))
    ack_quorum = draw(st.integers(min_value=1, max_value=write_quorum))
    first_entry_ids = sorted(draw(st.sets(entry_ids, max_size=4)) | {0})
    ensembles = tuple(
        (
            first_entry_id,
            tuple(
                draw(
                    st.lists(
                        bookie_ids, min_size=ensemble_size, max_size=ensemble_size, unique=True
                    )
                )
            ),
        )
        for first_entry_id in first_entry_ids
    )
    state = draw(st.sampled_from(LedgerState))
    last_entry_id, length = -1, 0
    if state is LedgerState.CLOSED:
        last_entry_id = draw(
            st.integers(min_value=first_entry_ids[-1] - 1, max_value=limits.ledger_id_max)
        )
        if last_entry_id >= 0:
            length = draw(st.integers(min_value=0, max_value=limits.ledger_id_max))
    return LedgerMetadata(
        ledger_id=draw(ledger_ids),
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        digest_type=draw(st.sampled_from(DigestType)),
        password_hash=draw(st.binary(min_size=32, max_size=32)),
        ensembles=ensembles,
        state=state,
        last_entry_id=last_entry_id,
        length=length,
        ctime_ms=draw(st.integers(min_value=0, max_value=2**62)),
        custom=draw(st.dictionaries(st.text(max_size=10), st.binary(max_size=20), max_size=4)),
    )
