"""Every bound and default of the state-machine framework, in one place.

Nothing else in `rsm/` writes a size, depth, count or duration as a literal:
it names a constant here.  Names carry their unit and qualifier last (`*_ms`,
`*_bytes_max`, `*_default`).  The relations between constants (and with the
ledger layer's bounds in `bookie.limits`) are asserted at import, so an edit
that breaks one fails at once instead of in production.

`*_default` names are starting values an operator may change; `*_max` names
without `_default` are hard bounds that protect memory and the formats.
Settings that decide what a replica *applies* (session TTL, session bounds)
must be equal on every replica of an application, or replicas diverge.
"""

from __future__ import annotations

from bookie import limits as bookie_limits

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# --- commands, requests and identifiers -------------------------------------------------------

request_bytes_max = 1 * MiB
"""Largest encoded command one client request may carry; larger is refused before logging."""

command_name_chars_max = 128
"""Longest command or query name (including an `@version` suffix)."""

error_message_chars_max = 4096
"""Longest error message recorded for a failed command; longer ones are cut deterministically."""

client_id_bytes_max = 32
"""Longest client id of a session."""

client_id_bytes = 16
"""Random bytes a client draws for its client id."""

replica_id_chars_max = 128
address_chars_max = 256
"""Longest `host:port` a replica advertises."""

state_hash_bytes_max = 64
"""Longest state hash a log entry may carry (SHA-512 size)."""

ledger_password_file_bytes_max = 4 * KiB
"""Largest ledger password file (`RSM_LEDGER_PASSWORD_FILE`) read; larger: a config error."""

# --- leader batching (group commit) -----------------------------------------------------------

batch_commands_max = 4096
"""Commands (items) in one log entry."""

batch_bytes_max = 2 * MiB
"""Encoded items in one log entry; the batch header comes on top."""

batch_header_bytes_max = 128
"""Upper bound of a batch's fixed fields, array heads and state hash (see entry_format)."""

pipeline_batches_max_default = 1
"""Batches in flight below which the leader cuts a batch at once, however small.

So a lone command is sent without waiting for a timer; once this many are in
flight, commands queue and the next batch grows: batches adapt to the load.
One, because a log entry's cost (three bookie writes and syncs, two
followers' tail reads) hardly depends on its size: a deeper pipeline cuts
more, smaller entries and spends more CPU per command (examples/kvstore/README.md,
Benchmark).  The latency a command can wait for the batch ahead of it is one
append round trip."""

batch_linger_ms_default = 4
"""Longest the leader's next batch waits for the clients its last completion answered to
send again (rsm/core/batching.py); 0: cut at once.  A client that does not come back
costs at most this much latency (the wait usually ends as soon as the answered clients'
commands arrive).  The wait starts once the batch's answers are out, so it has to be long
enough for the clients' turnaround and for the leader to read all their commands."""

batch_linger_ms_max = 1_000
"""Largest linger a configuration may ask for."""

outstanding_batches_max = 64
"""Batches in flight, hard bound: full batches may pass the pipeline depth up to this."""

pending_commands_max = 100_000
"""Commands accepted by the leader and not yet cut into a batch; over it: Overloaded."""

pending_command_bytes_max = 64 * MiB
"""Bytes of commands accepted and not yet cut into a batch; over it: Overloaded."""

# --- the log of segments ----------------------------------------------------------------------

segment_entries_max_default = 100_000
"""Rollover: a segment is closed and the next one started after this many entries."""

segment_bytes_max_default = 1 * GiB
"""Rollover: ... or after this many payload bytes."""

segment_age_ms_max_default = 3_600_000
"""Rollover: ... or when it has been open this long."""

log_segments_max = 10_000
"""Segments the log znode may list; truncation after snapshots keeps far fewer."""

segment_encoded_bytes_max = 46
"""Upper bound of one encoded segment: an array head and five CBOR uints of at most 9 bytes."""

# --- sessions (exactly-once) ------------------------------------------------------------------

session_ttl_ms_default = 600_000
"""A session idle longer than this (by logged time) is dropped at apply."""

sessions_max_default = 100_000
"""Sessions kept; past it the least recently active one is evicted, if it has been idle for
`session_evict_idle_ms_default`, else the new session is refused (Overloaded)."""

session_evict_idle_ms_default = 60_000
"""How long (logged time) a session must have been idle before a new one may evict it.  Longer
than a client retries one command (`client_deadline_ms_default`, kvstore's command deadline):
a session evicted while its first commands are retried (ack_seq 0) would look new to a retry."""

waiting_read_ms_max = 60_000
"""A read_your_writes query waits this long at most for its index on one replica, then is
answered `Timeout` (rsm/runtime/server.py): longer than any client's deadline."""

waiting_read_check_interval_ms = 1_000
"""How often a connection looks for reads that waited `waiting_read_ms_max`."""

logged_time_rate_max = 1.5
"""Within a term, logged time advances at most this many times as fast as the leader's steady
clock, so that a forward step of its wall clock cannot expire sessions at once
(rsm/core/logged_time.py)."""

session_results_max_default = 1_024
"""Results kept per session (those of seqs above its ack_seq); past it the oldest is dropped."""

# --- reads ------------------------------------------------------------------------------------

linearizable_read_waiters_max = 10_000
"""Linearizable reads waiting for a confirmation round on one leader; over it: Overloaded."""

read_rounds_failing_ms_max = 5_000
"""How long a leader's confirmation rounds may keep failing in a row (too few bookies answer)
while linearizable reads wait for them; then the waiting reads are answered `Unavailable`
(not applied: a client sends them again).  Without a bound, reads with nothing written
meanwhile would wait for as long as the bookies do not answer.  The ledger client's add and
read timeouts by default (a round that gets no answers fails after the read timeout)."""

read_lease_ms_default = 0
"""How long after a confirmation round started a leader answers linearizable reads without
another round.  Off by default (0), so that no safety property depends on a clock; with a
lease, linearizable reads depend on `lease_clock_rate_error`.  A successor that fences waits
slightly longer than the lease (rsm/core/reads.py)."""

read_lease_ms_max = 60_000

lease_clock_rate_error = 0.1
"""How far (as a fraction) two replicas' monotonic clocks may disagree on the length of an
interval.  Running clocks disagree by well under 0.001; a machine frozen whole (a paused
virtual machine whose monotonic clock does not count the pause) breaks any such bound
(docs/guarantees.md, "Read leases")."""

index_waiters_max = 10_000
"""read_your_writes reads waiting for an index to be applied on one replica; over it: Overloaded."""

# --- election ---------------------------------------------------------------------------------

candidate_lag_entries_max = 1_000
"""A replica stands for election only when at most this many entries behind the log's end."""

replica_session_timeout_ms_default = 1_000
"""A replica's ZooKeeper session timeout: how long a dead leader keeps its candidacy, so the
failure-detection part of a failover (the `--session-timeout-ms` default of every command
that runs a replica).  Shorter detects a dead leader sooner; the price is that a leader
process stopped or cut off from ZooKeeper for longer than this is replaced (safely: fencing,
docs/guarantees.md, "Availability"), which on an overloaded machine means a needless
failover.  ZooKeeper grants 2 to 20 of its ticks: a server whose tickTime is above half of
this grants a longer session (the local clusters' ZooKeeper ticks every 100 ms)."""

# --- client -----------------------------------------------------------------------------------

client_outstanding_commands_max_default = 1_000
"""Commands one client session has sent and not yet had answered; `call` waits past it."""

client_attempt_timeout_ms_default = 5_000
"""One attempt (one request to one replica) gives up after this long."""

client_deadline_ms_default = 30_000
"""A call (all its attempts together) gives up after this long with Timeout."""

client_backoff_ms_initial = 10
"""First pause between attempts; it doubles each retry up to `client_backoff_ms_max`."""

client_backoff_ms_max = 1_000

client_attempts_max_default = 100
"""Attempts of one call before it gives up, whatever the deadline."""

# --- replica runtime --------------------------------------------------------------------------

replica_retry_delay_ms_default = 200
"""Pause before a replica retries after a transient error (bookies or ZooKeeper unreachable)."""

degraded_check_interval_ms = 500
"""How often an idle leader whose open segment is degraded (fewer bookies than configured)
looks whether enough bookies are writable again to roll over to a full-size ledger."""

segment_mark_check_interval_ms = 5_000
"""How often a leader reads autorecovery's mark of its open segment's ledger: one that names
bookies of the segment's ensemble that are all writable again is settled by a rollover
(rsm/runtime/segment_ledger.py, `mark_settled_by_rollover`)."""

takeover_attempts_max = 20
"""Takeover attempts (lost CAS, failed recovery) in a row before the replica stands aside."""

stand_aside_delay_ms_max = 5_000
"""Longest wait of a replica that stood aside (its own term failed) before it stands again."""

leader_publish_attempts_max = 10
"""Tries to write the `leader` znode before a new leader gives up and steps down."""

election_snapshot_attempts_max = 10
"""Tries to read the candidates, the handoff and the log as one snapshot before an evaluation
gives up."""

transfer_wait_ms_max_default = 10_000
"""How long a leadership transfer waits to see its successor publish itself."""

stop_drain_ms_max_default = 5_000
"""How long a leader's graceful stop waits for in-flight batches before giving up on them."""

close_abandoned_ms_max = 5_000
"""How long a replica that stepped down tries to close the ledger it was writing."""

follower_nice_default = 19
"""CPU priority (a nice value) a replica that is its own session's leader takes while it
follows (rsm/runtime/cpu_priority.py); 0 leaves its priority alone.  The lowest, because
it gave the leader the most SETs a second in bench/kvstore_bench.py and the followers still
kept up under pipelined load (docs/operations.md, "Followers' CPU priority")."""

follower_nice_max = 19
"""The lowest priority Linux has (nice 19)."""

cpu_priority_retry_ms = 110
"""Pause before retrying a priority change the kernel refused as too soon (it allows one
unprivileged autogroup change per 100 ms on the whole machine)."""

follower_clients_poll_ms = 500
"""How often a follower looks at how many clients are connected to it: one with clients
keeps its own CPU priority (rsm/runtime/cpu_priority.py)."""

follower_client_settle_ms = 1_000
"""How long a connection must have been open to count as a follower's client: a probe or
a health check that connects for one command does not."""

follower_clients_gone_ms = 10_000
"""How long a follower keeps its own CPU priority after its last client left, so that
clients that come and go (a health check, a pool reconnecting) do not flip it."""

# --- status reports ---------------------------------------------------------------------------

status_answer_timeout_ms = 2_000
"""How long a status report (`rsm status`, `kvstore status`) waits for one replica's STATUS."""

# --- the admin API's cluster overview and status page ----------------------------------------

admin_events_max = 200
"""Events (leader changes, bookies lost or back, divergences) a replica's admin server keeps in
memory for its status page; older ones are dropped."""

admin_watch_interval_ms = 1_000
"""How often a replica's admin server looks at the cluster for those events, and asks each
registered bookie for its disk use."""

admin_bookie_info_timeout_ms = 1_000
"""How long the admin server waits for one bookie's disk use before calling it down."""

# --- snapshots, truncation and state hashes ---------------------------------------------------

snapshot_chunk_bytes_default = 1 * MiB
"""Data bytes of one snapshot chunk (one ledger entry of the snapshot's ledger)."""

snapshot_chunk_bytes_max = 4 * MiB - 64 * KiB
"""Largest chunk a snapshot may be cut into: one chunk plus its header fits in a ledger entry."""

snapshot_chunk_head_bytes = 20
"""The fixed header of a snapshot chunk (rsm/core/snapshot_format.py)."""

snapshot_record_bytes_max = 1 * GiB
"""Largest record of a snapshot stream: one attribute value encoded whole, or one run."""

snapshot_run_bytes_target = 256 * KiB
"""Encoded size the default state codec aims at for one run of container elements.

Fixed, not a setting: run boundaries are part of the encoded bytes, and the
default state hash is computed over them, so every replica must cut the same."""

snapshot_run_items_max = 65_536
"""Most container elements in one run of the default state codec."""

snapshot_container_items_min = 1_024
"""Containers with more elements than this are streamed in runs; smaller ones go whole."""

snapshot_session_run_sessions = 1_024
"""Sessions of the session table per snapshot record."""

snapshot_write_inflight_bytes_max = 16 * MiB
"""Bytes of snapshot chunks appended to the ledger and not yet confirmed."""

snapshot_read_ahead_entries = 16
"""Snapshot chunks read per request while loading (with 1 MiB chunks: 16 MiB in memory)."""

snapshot_every_commands_default = 100_000
"""Policy: take a snapshot once this many commands were logged since the newest one (0: never)."""

snapshot_every_log_bytes_default = 256 * MiB
"""Policy: ... or once this many bytes of log entries were applied since (0: never)."""

snapshot_every_ms_default = 3_600_000
"""Policy: ... or once the newest one is this old and commands came since (0: never)."""

snapshot_log_growth_percent_default = 100
"""Policy gate: whatever the criteria above say, not before the log applied since the newest
snapshot reaches this percentage of that snapshot's size (0: no gate).  Like Redis's
auto-aof-rewrite-percentage: snapshots then write at most about 100/percent times the bytes
the log does, however large the state (a 1 GiB state is not snapshotted every 100,000
commands of 100 bytes), while a small state keeps the cadence the criteria give it."""

snapshot_log_growth_percent_max = 100_000
"""Largest gate an operator may configure (a thousand times the snapshot's size)."""

snapshot_check_interval_ms_default = 1_000
"""How often a replica looks at its snapshot policy (and a leader at truncation)."""

snapshots_kept_default = 3
"""Registered snapshots kept; older ones are unregistered and their ledgers deleted."""

snapshots_kept_max = 32

snapshot_pending_max = 16
"""Snapshots being written at once (registered as pending in the snapshots znode)."""

snapshot_garbage_max = 1_024
"""Ledgers awaiting deletion listed in the snapshots znode; truncation waits past it."""

snapshot_orphan_grace_ms_default = 3_600_000
"""A pending snapshot older than this is taken for abandoned and its ledger deleted."""

orphan_safe_age_ms_default = 3_600_000
"""A ledger of the application that neither the log nor the snapshots name is deleted once
it is this old (rsm/core/orphans.py): far longer than any create-to-record window."""

orphan_check_interval_ms_default = 600_000
"""How often the leader looks for orphan ledgers (each look reads every ledger's metadata)."""

snapshot_orphan_sweep_ledgers_max = 1_000
"""Garbage ledgers deleted per round; the rest wait for the next round."""

retention_commands_default = 0
"""Truncation keeps at least this many commands below the log's end, snapshot or not."""

retention_ms_default = 600_000
"""Truncation keeps the commands logged within this long (logged time) before the newest."""

state_hash_every_commands_default = 100_000
"""Replicas record a state hash after the batch holding every N-th index (0: never).

Large by default because the default hash serializes the whole state; an
application with an incremental `state_hash` can afford a small N."""

state_hashes_kept_max = 64
"""Recorded state hashes a replica keeps to compare with those the leader logs."""

snapshot_load_attempts_max = 32
"""Snapshots a replica tries (newest first) before it gives up on snapshots."""

snapshot_load_data_errors_max = 5
"""Loads of one snapshot in a row that may fail with the same data error (no bookie could serve
a chunk: `DigestMismatch`, only corrupt copies; `EntryNotAvailable`, every copy failed) before
the replica loads the next older usable snapshot instead.  Those errors are retryable because
a bookie may come back with a good copy, so a few attempts (each `retry_delay_ms` apart) are
worth it; after that waiting could last forever (rot on every copy), whereas an older snapshot
plus the log after it rebuilds the same state.  Small, because a skip costs only replay time.
When no older snapshot is usable (the log was truncated past it), the replica keeps retrying."""

snapshot_load_rounds_max = 10
"""Times one load of the newest snapshot starts over because the snapshots znode changed under
it (a newer snapshot registered, the one being read unregistered and deleted, the log
truncated past it); each round reads the znode again and loads a strictly newer snapshot."""

# --- replay and debug tools (rsm/tools) ------------------------------------------------------

tool_read_ahead_reads_max = 8
"""Ranged reads of log entries a tool keeps in flight ahead of the command it applies."""

tool_read_entries_max = 256
"""Entries asked for in one ranged read by a tool (bookie.limits.read_batch_entries_max caps
it again)."""

tool_read_bytes_target = 1 * MiB
"""Bytes one ranged read of a tool aims at, where the ledger's size is known (a closed
ledger): large entries are read fewer at a time, so reads in flight stay near
`tool_read_ahead_reads_max` times this and the bookies answer them within their timeouts."""

export_header_bytes_max = 4 * MiB
"""Largest header of an exported log file (its CBOR map; the segment list dominates)."""

tool_window_commands_max = 1_000_000
"""Commands a divergence search replays one at a time, hashing after each."""

# --- client <-> replica protocol --------------------------------------------------------------

protocol_version = 1
"""Version of the client<->replica protocol carried by every message (rsm/core/protocol.py)."""

frame_bytes_max = 4 * MiB
"""Largest client<->replica frame body, both ways; a larger request closes the connection."""

result_bytes_max = frame_bytes_max - 64 * KiB
"""Largest result of a command (its CBOR, or its text's bytes) an answer carries; a command
applied with a larger one is answered `CommandFailed` ("ResultTooLarge"), recorded so on
every replica."""

server_connections_max = 1_000
"""Client connections one replica serves at once; later ones are closed at once."""

server_connections_per_address_max = 500
"""Client connections one replica serves at once from one host, so that one client machine
cannot take every slot; later ones are closed at once."""

connection_pending_requests_max = 10_000
"""Requests of one connection being worked on; past it: Overloaded."""

socket_receive_bytes = 256 * KiB
"""Bytes asked of the socket per receive: many small frames per system call."""

socket_send_coalesce_bytes_max = 1 * MiB
"""Queued answers sent in one system call; past it a connection's reader waits."""

socket_send_timeout_ms = 30_000
"""A peer that takes no bytes for this long has its connection closed."""

client_connect_timeout_ms_default = 2_000
"""A client gives up connecting to one replica after this long."""

client_replica_connections_max = 64
"""Replica connections one client keeps open (several apps' replicas, old leaders)."""

cli_zk_connect_timeout_ms = 3_000
"""How long a command a person waits for waits for a ZooKeeper session before it says the
ZooKeeper cannot be reached (`rsm.host.command_zk_store`): the `rsm` commands that call,
report on or investigate an application (`call`, `query`, `status`, `transfer-leadership`,
`snapshot`, `log`, `replay`, `verify`, ...) and the key-value store's `kvstore status`,
`history` and `get --at`.  A reachable ZooKeeper answers in milliseconds.  It is also the
session timeout they ask for (the server raises it to its minimum, two ticks), which bounds
the wait for a server that accepts connections and never answers.  `rsm run` and `kvstore
serve` wait the ledger layer's operation timeout."""

# --- history checking (rsm.testing) ----------------------------------------------------------

history_operations_max = 1_000_000
"""Operations one `HistoryRecorder` keeps; a test that records more is refused, not slowed."""

check_nodes_max_default = 2_000_000
"""Model steps one linearizability check may try before it answers "unknown" instead of hanging."""

explanation_operations_max = 12
"""Operations of the linearizable prefix a failure explanation shows (the most recent ones)."""

# --- reading logs in Spark (rsm.spark) --------------------------------------------------------

spark_entries_per_partition_max_default = 1_000
"""Most ledger entries one Spark partition of a read covers (`maxEntriesPerPartition`): many
partitions spread a long ledger over the executors."""

spark_min_partitions_default = 1
"""Fewest partitions a read is cut into (`minPartitions`), entries permitting."""

spark_export_block_commands_default = 100_000
"""Consecutive indexes per partition (`index_from=N/` directory) of a Parquet export."""

spark_read_chunk_entries = 256
"""Entries an executor reads from the bookies per request and turns into one Arrow record batch."""

# --- relations --------------------------------------------------------------------------------

assert 0 < client_id_bytes <= client_id_bytes_max
assert request_bytes_max <= batch_bytes_max
assert batch_bytes_max + batch_header_bytes_max <= bookie_limits.entry_payload_bytes_max
assert batch_commands_max <= pending_commands_max
assert batch_bytes_max <= pending_command_bytes_max
assert 1 <= pipeline_batches_max_default <= outstanding_batches_max
assert outstanding_batches_max <= bookie_limits.outstanding_adds_max_default
assert log_segments_max * segment_encoded_bytes_max + 64 <= bookie_limits.metadata_value_bytes_max
# Exactly-once holds only while the table keeps the result of every seq a
# client may still retry, and while a client gives up on a call before its
# session can expire.
assert client_outstanding_commands_max_default <= session_results_max_default
assert client_deadline_ms_default * logged_time_rate_max < session_ttl_ms_default
assert client_deadline_ms_default * logged_time_rate_max < session_evict_idle_ms_default
assert client_attempt_timeout_ms_default <= client_deadline_ms_default
assert 0 < client_backoff_ms_initial <= client_backoff_ms_max
assert candidate_lag_entries_max > 0
assert 0 <= follower_nice_default <= follower_nice_max
# A request carries one command (at most request_bytes_max encoded) plus its
# framing fields; it must fit in a frame.
assert request_bytes_max + 64 * KiB <= frame_bytes_max
assert client_connect_timeout_ms_default <= client_attempt_timeout_ms_default
assert 0 < cli_zk_connect_timeout_ms <= bookie_limits.zk_operation_timeout_ms_default
assert 0 < socket_receive_bytes <= socket_send_coalesce_bytes_max
assert 0 < server_connections_per_address_max <= server_connections_max
# A snapshot chunk and its header are one ledger entry.
assert snapshot_chunk_head_bytes + snapshot_chunk_bytes_max <= bookie_limits.entry_payload_bytes_max
assert 0 < snapshot_chunk_bytes_default <= snapshot_chunk_bytes_max
assert snapshot_run_bytes_target <= snapshot_record_bytes_max < 1 << 32
assert snapshot_chunk_bytes_max <= snapshot_write_inflight_bytes_max
assert 1 <= snapshots_kept_default <= snapshots_kept_max
assert snapshot_load_attempts_max >= snapshots_kept_max
assert 1 <= spark_read_chunk_entries <= bookie_limits.read_batch_entries_max
assert spark_min_partitions_default >= 1
assert spark_entries_per_partition_max_default >= spark_read_chunk_entries
assert admin_events_max > 0
assert 0 < admin_bookie_info_timeout_ms <= admin_watch_interval_ms
assert client_deadline_ms_default < waiting_read_ms_max
