"""Round trips of the encoders that have no property test elsewhere: entry and LAC packets.

(The bookie and replica protocols, log entries, znode values, metadata records,
snapshots and the bookie's files have theirs beside their unit tests; the RESP
parser is held to commands cut anywhere in tests/unit/kvstore/protocol.)
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import DigestMismatch
from bookie.wire.packet import Digest, DigestType

from .profiles import FUZZ

U63 = (1 << 63) - 1
ids = st.integers(0, U63)


@FUZZ
@given(st.sampled_from(DigestType), st.binary(max_size=16), ids, st.data())
def test_an_entry_packet_verifies_and_any_flipped_bit_is_caught(
    digest_type: DigestType, password: bytes, ledger_id: int, data: st.DataObject
) -> None:
    digest = Digest(digest_type, password)
    entry_id = data.draw(st.integers(0, U63 - 1))
    lac = data.draw(st.integers(-1, entry_id - 1))
    length = data.draw(st.integers(0, U63))
    payload = data.draw(st.binary(max_size=300))
    packet = digest.build_entry(ledger_id, entry_id, lac, length, payload)
    assert digest.verify_entry(packet, ledger_id, entry_id) == (lac, length, payload)
    bit = data.draw(st.integers(0, len(packet) * 8 - 1))
    damaged = bytearray(packet)
    damaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DigestMismatch):
        digest.verify_entry(bytes(damaged), ledger_id, entry_id)


@FUZZ
@given(st.sampled_from(DigestType), st.binary(max_size=16), ids, st.integers(-1, U63), st.data())
def test_a_lac_packet_verifies_and_any_flipped_bit_is_caught(
    digest_type: DigestType, password: bytes, ledger_id: int, lac: int, data: st.DataObject
) -> None:
    digest = Digest(digest_type, password)
    packet = digest.build_lac(ledger_id, lac)
    assert digest.verify_lac(packet, ledger_id) == lac
    bit = data.draw(st.integers(0, len(packet) * 8 - 1))
    damaged = bytearray(packet)
    damaged[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(DigestMismatch):
        digest.verify_lac(bytes(damaged), ledger_id)
