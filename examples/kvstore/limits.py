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

key_bytes_max_default = 64 * KiB
"""Longest key a write may create; longer: an error result."""

value_bytes_max_default = 512 * KiB
"""Longest value a write may create (SET, APPEND, SETRANGE, ...); longer: an error result."""

reply_bytes_max = 64 * MiB
"""Largest array reply of strings (MGET, KEYS, SCAN, and EXEC's replies together); past it
the reply is an error (kvstore/store/reply_bounds.py), so a request of a few bytes (MGET of
one big key named 400 times) cannot make every replica build hundreds of megabytes."""

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

# --- connections (the RESP server) --------------------------------------------------------------

connections_max = 10_000
"""Client connections one server serves at once (Redis's maxclients); later ones are refused."""

connections_per_address_max = 5_000
"""Client connections one server serves at once from one host, so that one client machine
cannot take every slot (not in Redis); later ones are refused."""

connection_replies_max = 1_000
"""Replies one connection may owe (commands read and not yet answered and sent, in order).

The server stops reading a connection at this bound, so it also bounds the
write commands a connection has in flight: fewer than the session results
the framework keeps (`rsm.limits.session_results_max_default`), so a
retried write always finds its first outcome (exactly-once)."""

send_bytes_max = 1 * MiB
"""Replies encoded into one send; a larger backlog goes in several sends."""

connection_reply_bytes_max = 16 * MiB
"""Bytes of encoded replies one connection may owe (not yet handed to the transport); at it
the server stops taking the connection's commands until replies are written, so a client
that does not read its replies costs the server about this much, not its replies' worth
(plus one reply, at most `reply_bytes_max`)."""

send_timeout_ms = 30_000
"""A client that takes no reply bytes for this long is disconnected."""

transaction_commands_max = 10_000
"""Commands one MULTI may queue; past it the transaction is refused at EXEC."""

transaction_bytes_max = request_bytes_max_default - 64 * KiB
"""Bytes one transaction may hold, queued commands and watched keys together (each item counted
with `transaction_item_overhead_bytes`): EXEC logs them all as one command."""

transaction_item_overhead_bytes = 32
"""What one queued argument or watched key adds to EXEC's logged command besides its own bytes:
CBOR heads (at most 9 bytes each) and, for a watched key, its index and time (9 bytes each)."""

watched_keys_max = 10_000
"""Keys one connection may WATCH at once."""

# --- routing to the leader ----------------------------------------------------------------------

command_deadline_ms_default = 30_000
"""How long the server keeps retrying a command (leader changes, lost connections) before it
answers TRYAGAIN (not applied) or TIMEOUT (outcome unknown)."""

read_lease_ms_default = 300
"""The leader's read lease (rsm's `read_lease_ms`, off there by default): a GET on the leader
costs no bookie round trip, at the price of trusting that replicas' clocks measure 300 ms to
within 10% of each other.  A leader renews it every 150 ms while reads come (one round
trip, nothing written); a successor that fenced waits 367 ms after its fencing, which
overlaps the rest of its takeover, so the lease adds little to a failover.  `--read-lease-ms
0` turns it off (examples/kvstore/README.md, "Consistency and durability")."""

forward_answer_timeout_ms = 5_000
"""A leader connection whose oldest request goes unanswered this long is closed and its
requests retried: the leader is gone or stuck."""

forward_connect_timeout_ms = 2_000
"""Connecting to the leader's framework port gives up after this long."""

retry_backoff_ms_initial = 10
"""First pause before a command is retried; it doubles on each retry up to the maximum."""

retry_backoff_ms_max = 500

leader_redirects_max = 3
"""`NotLeader` redirects a command follows at once before it waits a backoff."""

forward_links_max = 8
"""Framework connections one server keeps open to (former) leaders."""

# --- expiry, WATCH, scans and patterns -----------------------------------------------------------

active_expiry_keys_max = 8
"""Due keys every applied write command removes, besides the keys it touches itself."""

watch_tombstones_max = 100_000
"""Deleted keys whose deletion index the store remembers for WATCH; older ones are forgotten
(a transaction watching one of those is aborted, never wrongly executed)."""

hash_pending_keys_max = 1024
"""Keys changed since the state hash was last brought up to date, past which the next
change brings it up to date at once (it is otherwise brought up to date when the replica
is idle or asks for the hash; see `kvstore.store.state`).  Bounds the old values the
store keeps alive for it."""

scan_count_default = 10
"""Keys one SCAN call examines when the client gives no COUNT (as Redis)."""

scan_count_max = 10_000
"""Most keys one SCAN call examines, whatever COUNT asks (COUNT is a hint)."""

glob_star_groups_max = 1000
"""Patterns reaching more `*` groups than this match nothing (Redis's nesting guard)."""

float_chars_max = 5 * KiB - 1
"""Longest text INCRBYFLOAT reads as a number (Redis's MAX_LONG_DOUBLE_CHARS - 1)."""

state_hash_every_commands = 1_000
"""How often replicas record (and the leader logs) KVStore's state hash: cheap, since the
store keeps it up to date change by change, so divergence is found within 1,000 commands."""

# --- access control (the ACL file and the password file) -----------------------------------------

access_file_bytes_max = 1 * MiB
"""Largest ACL file or password file `kvstore serve` reads; larger: a configuration error."""

# --- relations ---------------------------------------------------------------------------------

assert key_bytes_max_default >= 1
assert key_bytes_max_default + value_bytes_max_default + command_overhead_bytes_max <= (
    request_bytes_max_default
)
assert 0 < request_bytes_max_default + command_overhead_bytes_max <= rsm_limits.request_bytes_max
assert bulk_bytes_max_default <= request_bytes_max_default
assert buffered_bytes_max > request_bytes_max_default + inline_bytes_max
assert 1 <= scan_count_default <= scan_count_max
assert active_expiry_keys_max >= 1
assert connection_replies_max < rsm_limits.session_results_max_default
assert 0 < send_bytes_max <= connection_reply_bytes_max <= reply_bytes_max
assert value_bytes_max_default < reply_bytes_max
assert connection_replies_max < rsm_limits.connection_pending_requests_max
assert 0 < transaction_bytes_max < request_bytes_max_default
assert transaction_item_overhead_bytes >= 3 * 9 + 1
_logged_deadline_ms = command_deadline_ms_default * rsm_limits.logged_time_rate_max
assert _logged_deadline_ms < rsm_limits.session_ttl_ms_default
assert _logged_deadline_ms < rsm_limits.session_evict_idle_ms_default
assert 0 < retry_backoff_ms_initial <= retry_backoff_ms_max
assert forward_connect_timeout_ms <= forward_answer_timeout_ms
