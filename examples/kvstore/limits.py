"""Every bound and default of the key-value store, in one place.

Nothing else in `kvstore` writes a size, count or duration as a literal: it
names a constant here.  Names carry their unit and qualifier last
(`*_bytes_max`, `*_default`).  Relations between the constants, and with the
framework's bounds in `rsm.limits`, are asserted at import, so an edit that
breaks one fails at once.

`*_default` names are starting values an operator may change; `*_max`
without `_default` are hard bounds.  The key and value bounds decide what a
replica *applies* (a too-long value is an error result), so they must be
equal on every replica of a store.
"""

from __future__ import annotations

from rsm import limits as rsm_limits

KiB = 1024
MiB = 1024 * KiB

# --- keys and values (decide what replicas apply) ---------------------------------------------

key_bytes_max = 1536
"""Hard bound of `key_bytes_max_default`: SCAN cursors carry a key as a decimal integer.

A cursor is `int.from_bytes(b"\\x01" + key)` written in decimal: about 2.41
digits per byte.  Python (client and server side alike) refuses to convert
integers of more than 4300 decimal digits by default, so keys stay below
that: 1537 bytes give at most 3702 digits."""

key_bytes_max_default = 1 * KiB
"""Longest key a write may create; longer: an error result."""

value_bytes_max_default = 512 * KiB
"""Longest value a write may create (SET, APPEND, SETRANGE, ...); longer: an error result."""

# --- requests (the RESP parser, per connection) ------------------------------------------------

command_overhead_bytes_max = 256
"""What a logged command item adds to its arguments: command name, session fields, array heads.

Each argument costs fewer bytes in CBOR than in RESP (a CBOR head is at most
9 bytes, a RESP bulk header and trailer at least 6, and the CBOR head is
longer only for lengths whose RESP header is longer too), so a request of
`request_bytes_max_default` RESP bytes always encodes within the
framework's request bound."""

request_bytes_max_default = rsm_limits.request_bytes_max - command_overhead_bytes_max
"""Largest RESP request (one command, all its arguments); over it: protocol error, disconnect."""

bulk_bytes_max_default = request_bytes_max_default
"""Largest single argument the parser accepts ("invalid bulk length" over it)."""

multibulk_args_max = 1024 * 1024
"""Most arguments one multibulk request may announce ("invalid multibulk length" over it)."""

inline_bytes_max = 64 * KiB
"""Longest inline command line, and longest count line of a multibulk request (as Redis)."""

read_bytes_max = 64 * KiB
"""Largest chunk a server reads from a socket and feeds to the parser at once."""

buffered_bytes_max = request_bytes_max_default + inline_bytes_max + read_bytes_max
"""Bytes the parser holds for one connection, at most.

The incomplete request at the end of the buffer is below the request bound
(or below the count-line bound while its header is read), and a shell that
takes every complete command before reading again adds one chunk to it."""

# --- expiry, scans and patterns ----------------------------------------------------------------

active_expiry_keys_max = 8
"""Due keys every applied write command removes, besides the keys it touches itself."""

scan_count_default = 10
"""Keys one SCAN call examines when the client gives no COUNT (as Redis)."""

scan_count_max = 10_000
"""Most keys one SCAN call examines, whatever COUNT asks (COUNT is a hint)."""

glob_star_groups_max = 1000
"""Patterns reaching more `*` groups than this match nothing (Redis's nesting guard)."""

float_chars_max = 5 * KiB - 1
"""Longest text INCRBYFLOAT reads as a number (Redis's MAX_LONG_DOUBLE_CHARS - 1)."""

# --- relations ---------------------------------------------------------------------------------

assert 1 <= key_bytes_max_default <= key_bytes_max
assert (1 + key_bytes_max) * 2.41 + 1 < 4300
assert key_bytes_max + value_bytes_max_default + command_overhead_bytes_max <= (
    request_bytes_max_default
)
assert 0 < request_bytes_max_default + command_overhead_bytes_max <= rsm_limits.request_bytes_max
assert bulk_bytes_max_default <= request_bytes_max_default
assert buffered_bytes_max > request_bytes_max_default + inline_bytes_max
assert 1 <= scan_count_default <= scan_count_max
assert active_expiry_keys_max >= 1
