"""Every bound and default of the bookie package, in one place.

Nothing else in `bookie/` writes a size, depth, count or duration as a literal:
it names a constant here.  Names carry their unit last (`*_ms`, `*_bytes`,
`*_max`).  The relations between constants are asserted at import, so an edit
that breaks one fails at once instead of in production.

Defaults that an operator may change are the `*_default` names; the config
loader (`bookie/server/config.py`) starts from them.  Hard bounds (`*_max`)
protect memory and the protocol and are not configurable.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# --- wire -------------------------------------------------------------------------------------

protocol_version = 1
"""The version every frame carries; a bookie answers EBADVERSION to any other."""

frame_size_bytes_max = 5 * MiB
"""Largest frame (length prefix excluded) either side accepts; larger closes the connection."""

entry_payload_bytes_max = 4 * MiB
"""Largest application payload of one entry; leaves room for header, digest and framing."""

master_key_bytes_max = 64
auth_token_bytes_min = 16
auth_token_bytes_max = 256
"""Bounds of a client token (bookie.core.tokens); an AUTH request carries at most the max."""
principal_chars_max = 64
"""Longest client name in a bookie's `client_tokens_file`."""
"""Longest master key accepted in a request (SHA-256 keys are 32 bytes)."""

socket_receive_bytes = 256 * KiB
"""How much a connection reads from its socket at once; frames are split from a buffer."""

socket_send_coalesce_bytes_max = 1 * MiB
"""Responses queued for one connection are sent in one `send` up to this many bytes."""

socket_send_timeout_ms = 30_000
"""A `send` that cannot hand its bytes to the kernel within this fails the connection
(the peer stopped reading)."""

# --- bookie server ----------------------------------------------------------------------------

port_default = 3181

pending_requests_per_connection_max = 10_000
"""Requests read from one connection and not yet answered; over it: ETOOMANYREQUESTS."""

pending_requests_total_max = 100_000
"""Requests not yet answered across all connections of one bookie; over it: ETOOMANYREQUESTS."""

pending_bytes_total_max = 512 * MiB
"""Bytes of requests not yet answered across all connections; over it: ETOOMANYREQUESTS."""

connections_max = 1_000
"""Client connections one bookie accepts at once; later ones are closed at accept."""

connections_per_address_max = 500
"""Client connections one bookie accepts at once from one host, so that one client machine
cannot take every slot; later ones are closed at accept."""

long_poll_timeout_ms_max = 60_000
"""Longest a READ may park waiting for the LAC to pass `previous_lac`."""

long_poll_waiters_max = 10_000
"""Parked long-poll READs per bookie; over it: ETOOMANYREQUESTS."""

fenced_deleted_ledgers_remembered_max = 100_000
"""How many fenced-then-deleted ledgers a bookie remembers to refuse late adds for."""

shutdown_drain_ms_max = 10_000
"""On SIGTERM, how long the server waits for pending adds to be synced and answered."""

# --- journal ----------------------------------------------------------------------------------

journal_group_wait_ms_default = 2
"""Group commit: flush when the oldest waiting add has waited this long."""

journal_group_bytes_default = 512 * KiB
"""Group commit: flush when this many bytes are buffered."""

journal_flush_when_queue_empty_default = True
"""Group commit: flush as soon as nothing more is queued (lowest latency under light load)."""

journal_sync_on_loop_us_default = 1_000
"""A journal group is written and fdatasynced on the event loop, not in the journal's
thread, while the last such group (no new file, no allocation) took at most this long.
Handing a group to the thread and back costs two thread wake-ups, which under a heavy
write load cost a bookie more than a fast disk's sync blocks the loop (docs/storage-format.md,
"Group commit").  A slow or stalling disk sends the groups back to the thread, which keeps
the loop serving reads meanwhile."""

journal_sync_on_loop_us_max = 1_000_000
"""Largest on-loop sync time an operator may configure."""

journal_buffer_bytes_max = 64 * MiB
"""Bytes appended to the journal and not yet written; appends over it wait (backpressure)."""

journal_file_size_bytes_max_default = 256 * MiB
"""A journal file is closed and a new one started past this size."""

journal_preallocation_bytes = 1 * MiB
"""A journal file's space is allocated ahead of its records, by writing zeros, in steps of
this size, so a group's fdatasync writes its data only (BookKeeper's
journalPreAllocSizeMB).  A step's zeros are written in the thread by the group that needs
them, so a step is small enough not to stall that group's commit noticeably."""

journal_files_kept_default = 2
"""Journal files older than the checkpoint mark kept anyway, for inspection."""

# --- ledger storage ---------------------------------------------------------------------------

entry_log_size_bytes_max_default = 128 * MiB
"""An entry log is closed and a new one started past this size."""

entry_log_write_buffer_bytes = 1 * MiB
"""Entry-log appends are buffered in memory and written in chunks of about this size."""

entry_log_unwritten_bytes_max = 64 * MiB
"""Entry-log bytes appended and not yet written to their file; over it mutations get StorageBusy."""

entry_log_open_files_max = 64
"""Entry-log files a bookie keeps open for reading at once (least recently used are closed)."""

checkpoint_interval_ms_default = 10_000
"""How often ledger storage is flushed and the journal mark advanced."""

checkpoint_pending_entries_max = 500_000
"""Entries added since the last checkpoint that force an early checkpoint (bounds memory)."""

gc_interval_ms_default = 60_000
"""How often the bookie compares its ledgers with the metadata store (garbage collection)."""

gc_metadata_timeout_ms = 600_000
"""Bound on reading the ledger list in one garbage-collection round; past it the round stops."""

compaction_live_fraction_threshold_default = 0.5
"""An entry log whose live bytes fall under this fraction is compacted."""

compaction_rate_bytes_per_s_default = 32 * MiB
"""Compaction reads source entry logs at most this fast, so adds keep the disk and the CPU."""

compaction_read_bytes = 1 * MiB
"""Compaction reads a source log in pieces of about this size, yielding to the loop in between."""

compaction_free_bytes_reserve_default = 64 * MiB
"""Compaction copies a log only if this much disk stays free once the copy is written."""

compaction_moved_entries_max = 1_000_000
"""Entries one compaction output log (one index transaction) moves; bounds memory (40 B each)."""

# --- disks and read-only mode -----------------------------------------------------------------

disk_usage_threshold_default = 0.95
"""Usage fraction of any data disk at which the bookie turns read-only."""

disk_usage_low_water_mark_default = 0.90
"""Usage fraction under which a read-only bookie turns writable again."""

disk_check_interval_ms_default = 1_000

# --- bookie process: bounds on operator configuration -------------------------------------------

journal_group_wait_ms_max = 1_000
"""Longest group-commit wait an operator may configure (every add may wait this long)."""

configurable_interval_ms_min = 10
"""Shortest checkpoint or disk-check interval an operator may configure."""

configurable_interval_ms_max = 3_600_000
"""Longest checkpoint or disk-check interval an operator may configure."""

configurable_file_size_bytes_min = 64 * KiB
"""Smallest journal-file or entry-log size an operator may configure."""

configurable_file_size_bytes_max = 64 * GiB
"""Largest journal-file or entry-log size an operator may configure."""

zk_session_timeout_ms_min = 200
zk_session_timeout_ms_max = 600_000

process_start_timeout_ms = 60_000
"""How long a launcher waits for a bookie process to listen (or a cluster to come up)."""

process_stop_timeout_ms = shutdown_drain_ms_max + 10_000
"""How long a launcher waits for a bookie to exit after SIGTERM before it sends SIGKILL."""

local_free_port_low = 20_000
"""A local cluster's free ports (the tests', or `kvstore up`'s when its defaults are taken)
are chosen from here up to just below the system's ephemeral range, the source ports of
outgoing connections: a process restarted on its recorded port must not find a client's
connection holding it."""

local_free_port_attempts_max = 1_000
"""Random ports tried below the ephemeral range before taking any free one."""

# --- metadata ---------------------------------------------------------------------------------

metadata_root_default = "/ledgers"

zk_session_timeout_ms_default = 10_000

zk_operation_timeout_ms_default = 10_000
"""Deadline of one metadata operation (get, create, compare-and-set, ...)."""

metadata_cas_attempts_max = 100
"""Re-read-and-retry rounds of one compare-and-set loop before giving up."""

metadata_value_bytes_max = 1 * MiB
"""ZooKeeper's default jute.maxbuffer: no znode value may be larger."""

ledger_id_max = (1 << 63) - 1
"""Largest ledger id: ids are signed 64-bit on the wire and in entry packets."""

metadata_session_events_buffered_max = 16
"""Session transitions buffered per `session_events()` reader; past it they are coalesced."""

metadata_operations_inflight_max = 1_000
"""ZooKeeper requests one store has sent and not yet seen answered; more wait for a slot."""

zk_reconnect_delay_ms_min = 50
"""First pause before kazoo tries to reconnect to ZooKeeper; doubles per failed attempt."""

zk_reconnect_delay_ms_max = 1_000
"""Longest pause between reconnect attempts, so a ZooKeeper outage ends without a long wait."""

zk_probe_connect_timeout_ms = 1_000
"""How long a failed session start waits for a TCP connection to each ZooKeeper host, to say
whether anything listens there."""

zk_reconnects_per_session_timeout = 3
"""Reconnect attempts a client makes at least within one session timeout: a restarted server
gives the sessions it restores their timeout afresh, so one that tries within it keeps its own."""

zk_reconnect_jitter = 0.4
"""kazoo's pause between reconnect attempts is its delay times a random factor within 1 +- this."""

zk_digest_file_bytes_max = 4 * KiB
"""Largest ZooKeeper credentials file (`user:password`) a process reads; larger: a config error."""

bookie_registration_stale_wait_ms_default = 2 * zk_session_timeout_ms_default
"""How long a starting bookie waits for the registration znode of its previous, dead
session to expire before giving up."""

# --- ledger client ----------------------------------------------------------------------------

ensemble_size_max = 32

outstanding_adds_max_default = 5_000
"""Adds sent and not yet acknowledged per write handle; `append` waits past it."""

add_timeout_ms_default = 5_000
"""A bookie that does not acknowledge an add within this is replaced (ensemble change)."""

read_timeout_ms_default = 5_000
"""A read that gets no answer within this counts as an error for that replica."""

speculative_read_timeout_ms_default = 500
"""A read tries the next replica as well after this long without an answer."""

connect_timeout_ms_default = 2_000

explicit_lac_interval_ms_default = 200
"""An idle writer sends its LAC explicitly after this long, so tailers see the last entry."""

ensemble_changes_max_default = 1_000
"""Ensemble changes one write handle may make before it gives up."""

ensemble_change_retry_interval_ms_default = 1_000
"""A writer whose ensemble change found no replacement (and goes on with the bookies left)
asks for it again this often."""

recovery_read_batch_max = 64
"""Entries a recovery reads (with fencing) ahead of its recovery adds."""

long_poll_timeout_ms_default = 10_000
"""How long a tailing reader asks a bookie to park its long-poll READ for the next entry."""

tail_retry_delay_ms_default = 200
"""A tailing reader that got no usable answer from a whole write set waits this long
before it polls again, so a ledger no bookie knows yet is not polled in a busy loop."""

read_batch_entries_max = 1_000
"""Entries one `read(first, last)` requests at once from bookies."""

bookie_connection_inflight_max = 20_000
"""Requests in flight on one client-to-bookie connection."""

request_timeout_sweep_interval_ms = 50
"""How often a client connection looks for requests past their deadline."""

bookie_reconnect_delay_ms_min = 50
"""After a connection to a bookie failed, requests to it fail at once for this long before
the client connects again; the pause doubles per failure in a row."""

bookie_reconnect_delay_ms_max = 2_000
"""Longest pause before reconnecting to a bookie that keeps failing."""

metadata_watch_retry_delay_ms = 500
"""A client's watch on the bookie list or a ledger's metadata that failed (metadata service
unavailable) is re-armed after this long."""

# --- autorecovery -----------------------------------------------------------------------------

autorecovery_grace_ms_default = 30_000
"""How long a bookie must stay unregistered before the auditor counts it lost and marks its
ledgers under-replicated (a restart within this time is not a loss)."""

autorecovery_poll_interval_ms_default = 1_000
"""How often a replication worker looks for under-replicated ledgers, and the auditor for
changes it has no watch on."""

autorecovery_audit_interval_ms_default = 300_000
"""How often the auditor marks again every ledger naming a lost bookie, even when no new
bookie was lost (a mark removed by hand, or one its predecessor did not finish)."""

autorecovery_presence_interval_ms_default = 3_600_000
"""How often the auditor asks every bookie that is up which entries it holds of every
ledger, to find entries lost on a bookie that did not go down."""

autorecovery_presence_sample_entries_default = 10_000
"""The auditor's presence check compares at most about this many entries of one ledger
with one bookie's listing, drawn at random (bookie/core/auditor.py, "Sampling"); 0: all."""

autorecovery_open_ledger_grace_ms_default = 120_000
"""How long an open ledger whose last segment names a lost bookie, and whose writer is not
known to be alive, must make no progress before a replication worker fences and recovers
it (bookie/core/open_ledgers.py)."""

autorecovery_retry_delay_ms_min = 1_000
"""A ledger whose re-replication failed (no spare bookie, no readable copy) is tried again by
the same worker after this long; the pause doubles per failure in a row."""

autorecovery_retry_delay_ms_max = 60_000
"""Longest pause before a worker tries a failing ledger again."""

rereplication_entries_in_flight_max = 64
"""Entries a replication worker reads and writes at once while copying one segment."""

# --- bookie shell -----------------------------------------------------------------------------

shell_metadata_timeout_ms = 3_000
"""How long a `bookie shell` cluster command waits for ZooKeeper (the session, then each
operation) before it reports the cluster unreachable."""

shell_decommission_poll_interval_ms = 500
"""How often `bookie shell decommission` looks whether a ledger still names the bookie."""

shell_decommission_timeout_s_default = 600
"""How long `bookie shell decommission` waits for the bookie's ledgers to be repaired."""

simpletest_payload_bytes = 100
"""Size of each entry `bookie shell simpletest` writes."""

# --- accepting connections --------------------------------------------------------------------

accept_retry_delay_ms_min = 10
"""After accept failed for want of file descriptors or memory, the first pause before it is
tried again (bookie/net/accepting.py); each failure in a row doubles it."""

accept_retry_delay_ms_max = 1_000
"""The longest pause between accepts that fail for want of resources."""

# --- admin HTTP server ------------------------------------------------------------------------

admin_head_bytes_max = 16 * KiB
"""Largest request line and headers the admin HTTP server reads; larger is answered 431."""

admin_body_bytes_max = 64 * KiB
"""Largest request body the admin HTTP server reads; larger is answered 413."""

admin_request_timeout_ms = 10_000
"""A client of the admin HTTP server has this long to send its request."""

admin_connections_max = 64
"""Admin HTTP connections served at once; later ones are answered 503 and closed."""

admin_connections_per_address_max = 16
"""Admin HTTP connections served at once from one peer host, so that one client (or one
that holds connections open without sending) leaves room for the others and for
`/health`."""

admin_refusal_drain_ms = 500
"""How long a refused admin connection is read, after its 503, for the client to finish
its request and close: closing with the request unread would reset the connection, and
the reset can reach the client before the 503 does."""

admin_token_file_bytes_max = 4 * KiB
"""Largest admin token file (`BOOKIE_ADMIN_TOKEN_FILE`) read; larger: a configuration error."""

# --- TLS --------------------------------------------------------------------------------------

tls_handshake_timeout_ms = 10_000
"""A TLS handshake not finished within this is refused (server) or fails the connect (client)."""

tls_handshakes_max = 1_000
"""TLS handshakes one listener runs at once; connections past it are closed at accept."""

tls_refusal_reasons_max = 16
"""A TLS server keeps a count per refusal reason for this many distinct reasons; later
reasons are counted under "other"."""

# --- process tuning ---------------------------------------------------------------------------

gc_young_collection_allocations = 50_000
"""Net container allocations between two young-generation collections (CPython: 700)."""

gc_older_collection_ratio = 20
"""Collections of a generation between two of the next older one (CPython: 10)."""

gil_switch_interval_us = 500
"""Longest a thread waits for the GIL while another runs Python (CPython: 5,000 us)."""

# --- relations --------------------------------------------------------------------------------

assert entry_payload_bytes_max + 64 * KiB <= frame_size_bytes_max
assert socket_send_coalesce_bytes_max >= frame_size_bytes_max // 8
assert pending_requests_per_connection_max <= pending_requests_total_max
assert connections_per_address_max <= connections_max
assert journal_group_bytes_default <= journal_buffer_bytes_max
assert frame_size_bytes_max <= journal_buffer_bytes_max
assert frame_size_bytes_max <= entry_log_size_bytes_max_default
assert entry_log_write_buffer_bytes + frame_size_bytes_max <= entry_log_unwritten_bytes_max
assert 0.0 < disk_usage_low_water_mark_default < disk_usage_threshold_default < 1.0
assert speculative_read_timeout_ms_default < read_timeout_ms_default
assert 0 < zk_reconnect_delay_ms_min <= zk_reconnect_delay_ms_max < zk_session_timeout_ms_default
assert zk_reconnects_per_session_timeout >= 1
assert 0.0 <= zk_reconnect_jitter < 1.0
assert outstanding_adds_max_default <= bookie_connection_inflight_max
assert long_poll_waiters_max <= pending_requests_total_max
assert long_poll_timeout_ms_default <= long_poll_timeout_ms_max
assert journal_group_wait_ms_default <= journal_group_wait_ms_max
assert journal_sync_on_loop_us_default <= journal_sync_on_loop_us_max
assert (
    configurable_interval_ms_min <= checkpoint_interval_ms_default <= configurable_interval_ms_max
)
assert configurable_interval_ms_min <= disk_check_interval_ms_default
assert configurable_file_size_bytes_min <= journal_file_size_bytes_max_default
assert configurable_file_size_bytes_min <= entry_log_size_bytes_max_default
assert 0.0 < compaction_live_fraction_threshold_default < 1.0
assert compaction_rate_bytes_per_s_default >= compaction_read_bytes
assert zk_session_timeout_ms_min <= zk_session_timeout_ms_default <= zk_session_timeout_ms_max
assert 0 < bookie_reconnect_delay_ms_min <= bookie_reconnect_delay_ms_max
assert 0 < autorecovery_retry_delay_ms_min <= autorecovery_retry_delay_ms_max
assert autorecovery_poll_interval_ms_default <= autorecovery_grace_ms_default
assert 0 < accept_retry_delay_ms_min <= accept_retry_delay_ms_max
assert 0 < admin_connections_per_address_max <= admin_connections_max
