"""Entry packets and explicit-LAC packets: framing and end-to-end digests.

Pure.  The *client* builds a packet for every entry and verifies it on every
read; the bookie stores packets verbatim and only ever reads the LAC field of
the header (`packet_lac`).  Integrity is end to end: a bookie never needs the
password and a corrupted copy is caught by the reader, which then tries
another replica.

Entry packet (all integers big-endian, signed 64-bit)::

    offset  size  field
    0       8     ledger_id
    8       8     entry_id
    16      8     lac: the writer's last add confirmed when it sent this entry (-1: none)
    24      8     length: total ledger length in bytes, this entry's payload included
    32      d     digest over bytes [0, 32) followed by the payload
    32+d    n     payload

Explicit-LAC packet::

    0       8     ledger_id
    8       8     lac
    16      d     digest over bytes [0, 16)

Digest types (`d` bytes):

* CRC32C (`d` = 4): CRC-32C (Castagnoli) of the header then the payload, as a
  big-endian u32.  Catches corruption, not forgery.  The default.
* HMAC_SHA256 (`d` = 32): HMAC-SHA256 keyed with SHA-256(b"mac" + password).
  Catches forgery by anyone without the password.

Master key: SHA-256(b"ledger" + password), sent with every add and fencing
read; the bookie stores the first one it sees per ledger and answers EUA to a
different one.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from typing import Final

import crc32c

from bookie.errors import DigestMismatch

HEADER: Final = struct.Struct(">qqqq")
HEADER_BYTES: Final = HEADER.size
LAC_HEADER: Final = struct.Struct(">qq")
LAC_HEADER_BYTES: Final = LAC_HEADER.size
_CRC: Final = struct.Struct(">I")
_LAC_FIELD: Final = struct.Struct(">q")
_LAC_OFFSET: Final = 16


class DigestType(enum.IntEnum):
    """Digest algorithms (values are stored in ledger metadata; never renumber)."""

    CRC32C = 1
    HMAC_SHA256 = 2


DIGEST_BYTES: Final[dict[DigestType, int]] = {DigestType.CRC32C: 4, DigestType.HMAC_SHA256: 32}


def master_key(password: bytes) -> bytes:
    """The key a writer proves it owns a ledger with; stored by bookies per ledger."""
    return hashlib.sha256(b"ledger" + password).digest()


class Digest:
    """Computes and checks the digest of packets of one ledger."""

    __slots__ = ("digest_type", "size_bytes", "_mac_key")

    def __init__(self, digest_type: DigestType, password: bytes) -> None:
        self.digest_type = digest_type
        self.size_bytes = DIGEST_BYTES[digest_type]
        self._mac_key = hashlib.sha256(b"mac" + password).digest()

    def _compute(self, header: bytes | memoryview, payload: bytes | memoryview) -> bytes:
        if self.digest_type is DigestType.CRC32C:
            return _CRC.pack(crc32c.crc32c(payload, crc32c.crc32c(header)))
        mac = hmac.new(self._mac_key, header, hashlib.sha256)
        mac.update(payload)
        return mac.digest()

    # --- entries ------------------------------------------------------------------------------

    def build_entry(
        self, ledger_id: int, entry_id: int, lac: int, length: int, payload: bytes
    ) -> bytes:
        """The packet for one entry."""
        assert entry_id >= 0
        assert -1 <= lac < entry_id
        header = HEADER.pack(ledger_id, entry_id, lac, length)
        return b"".join((header, self._compute(header, payload), payload))

    def verify_entry(self, packet: bytes, ledger_id: int, entry_id: int) -> tuple[int, int, bytes]:
        """Check a packet read back for (ledger_id, entry_id); return (lac, length, payload).

        Raises `DigestMismatch` when the packet is too short, belongs to another
        entry or its digest does not match: the caller tries another replica.
        """
        view = memoryview(packet)
        body_start = HEADER_BYTES + self.size_bytes
        if len(view) < body_start:
            raise DigestMismatch(
                f"packet of {len(view)} bytes is shorter than its header and digest"
            )
        got_ledger, got_entry, lac, length = HEADER.unpack_from(view)
        if got_ledger != ledger_id or got_entry != entry_id:
            raise DigestMismatch(
                f"packet is for {got_ledger}:{got_entry}, expected {ledger_id}:{entry_id}"
            )
        header = view[:HEADER_BYTES]
        payload = view[body_start:]
        expected = self._compute(header, payload)
        if not hmac.compare_digest(expected, view[HEADER_BYTES:body_start]):
            raise DigestMismatch(f"digest mismatch in entry {ledger_id}:{entry_id}")
        return lac, length, bytes(payload)

    # --- explicit LAC -------------------------------------------------------------------------

    def build_lac(self, ledger_id: int, lac: int) -> bytes:
        header = LAC_HEADER.pack(ledger_id, lac)
        return header + self._compute(header, b"")

    def verify_lac(self, packet: bytes, ledger_id: int) -> int:
        """Check an explicit-LAC packet; return its LAC or raise `DigestMismatch`."""
        if len(packet) != LAC_HEADER_BYTES + self.size_bytes:
            raise DigestMismatch(f"LAC packet of {len(packet)} bytes has the wrong size")
        got_ledger, lac = LAC_HEADER.unpack_from(packet)
        if got_ledger != ledger_id:
            raise DigestMismatch(f"LAC packet is for ledger {got_ledger}, expected {ledger_id}")
        header = packet[:LAC_HEADER_BYTES]
        if not hmac.compare_digest(self._compute(header, b""), packet[LAC_HEADER_BYTES:]):
            raise DigestMismatch(f"digest mismatch in LAC packet of ledger {ledger_id}")
        return int(lac)


def packet_lac(packet: bytes | memoryview) -> int:
    """The LAC field of an entry packet (the bookie's only look inside a packet).

    Returns -1 for a packet too short to hold a header: such an entry carries
    no LAC information, and the reader will reject it on its digest anyway.
    """
    if len(packet) < HEADER_BYTES:
        return -1
    return int(_LAC_FIELD.unpack_from(packet, _LAC_OFFSET)[0])


def packet_entry_id(packet: bytes | memoryview) -> int:
    """The entry id field of an entry packet, -1 when too short (used by inspection tools)."""
    if len(packet) < HEADER_BYTES:
        return -1
    return int(HEADER.unpack_from(packet)[1])
