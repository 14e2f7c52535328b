"""A replica's knobs, in one immutable record, validated once at construction.

Every default comes from `rsm.limits` (or `bookie.limits` for the ledgers), so
the runtime, the documentation and the tests agree on one number each; a test
or the simulation overrides a field with `ReplicaConfig(segment_entries_max=...)`.

The ledger password is every replica's, every tool's and every Spark job's
that reads the application's ledgers: unless given one, a `ReplicaConfig`
takes the bytes of the file the environment variable
`RSM_LEDGER_PASSWORD_FILE` names (without one final line ending), else
`b"rsm"`, so one variable set for every process changes it, and it never
appears on a command line; `repr` does not show it.  `ledger_digest` is
what the ledgers a replica creates are checked with: CRC32C, or
HMAC-SHA256 keyed by the password (readers take the digest type from each
ledger's metadata).

Settings that decide what a replica *applies* (`session_ttl_ms`,
`sessions_max`, `session_evict_idle_ms`, `session_results_max`) must be
equal on every replica of an application, or replicas diverge; so must
`read_lease_ms`, since a successor waits out its predecessor's lease with its
own setting.  The others may differ per replica.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from bookie import limits as bookie_limits
from bookie.secret_file import secret_from_environment
from bookie.wire.packet import DigestType
from rsm import limits
from rsm.errors import InvalidConfig

SNAPSHOT_CAPTURES = ("auto", "fork", "inline")
LEDGER_PASSWORD_FILE_ENV: Final = "RSM_LEDGER_PASSWORD_FILE"
LEDGER_PASSWORD_DEFAULT: Final = b"rsm"


def ledger_password_default() -> bytes:
    """The password of `RSM_LEDGER_PASSWORD_FILE`'s file, or `b"rsm"` when the variable is
    unset or empty; `InvalidConfig` naming the variable and file (never the password)."""
    try:
        password = secret_from_environment(
            LEDGER_PASSWORD_FILE_ENV, limits.ledger_password_file_bytes_max
        )
    except ValueError as error:
        raise InvalidConfig(str(error)) from None
    return LEDGER_PASSWORD_DEFAULT if password is None else password


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    # --- the ledgers of the log ---
    ensemble_size: int = 3
    write_quorum: int = 3
    ack_quorum: int = 2
    ledger_password: bytes = field(default_factory=ledger_password_default, repr=False)
    """Every ledger of the application's log is created with it; every replica needs the same."""
    ledger_digest: DigestType = DigestType.CRC32C
    """What the ledgers this replica creates are checked with (CRC32C, or HMAC-SHA256)."""

    # --- group commit ---
    pipeline_batches_max: int = limits.pipeline_batches_max_default
    batch_commands_max: int = limits.batch_commands_max
    batch_bytes_max: int = limits.batch_bytes_max
    batch_linger_ms: int = limits.batch_linger_ms_default
    """Longest the next batch waits for the clients the last one answered (0: no wait)."""

    # --- rollover ---
    segment_entries_max: int = limits.segment_entries_max_default
    segment_bytes_max: int = limits.segment_bytes_max_default
    segment_age_ms_max: int = limits.segment_age_ms_max_default

    # --- sessions (equal on every replica) ---
    session_ttl_ms: int = limits.session_ttl_ms_default
    sessions_max: int = limits.sessions_max_default
    session_evict_idle_ms: int = limits.session_evict_idle_ms_default
    """A new session past `sessions_max` evicts the least recently active one only if it has
    been idle this long, else it is refused; longer than any client's deadline."""
    session_results_max: int = limits.session_results_max_default
    """At least every client's `outstanding_commands_max` (docs/guarantees.md): fewer can
    answer a retry of an applied command `StaleRequest`."""

    # --- reads (equal on every replica: a successor waits for its predecessor's lease) ---
    read_lease_ms: int = limits.read_lease_ms_default
    """How long after a confirmation round started the leader answers linearizable reads
    without another round; 0: every linearizable read waits for a round of its own."""

    # --- snapshots, truncation and state hashes (0 turns a criterion off) ---
    snapshot_every_commands: int = limits.snapshot_every_commands_default
    snapshot_every_log_bytes: int = limits.snapshot_every_log_bytes_default
    snapshot_every_ms: int = limits.snapshot_every_ms_default
    snapshot_log_growth_percent: int = limits.snapshot_log_growth_percent_default
    snapshots_kept: int = limits.snapshots_kept_default
    snapshot_capture: str = "auto"
    """How a snapshot captures the state: "fork" (a child process serializes a copy-on-write
    image while the replica goes on applying), "inline" (serialized between two commands, on
    the event loop; the simulation's choice), or "auto" (fork where the platform has it)."""
    snapshot_chunk_bytes: int = limits.snapshot_chunk_bytes_default
    snapshot_check_interval_ms: int = limits.snapshot_check_interval_ms_default
    snapshot_orphan_grace_ms: int = limits.snapshot_orphan_grace_ms_default
    orphan_safe_age_ms: int = limits.orphan_safe_age_ms_default
    """The leader deletes the application's ledgers that nothing names once this old."""
    orphan_check_interval_ms: int = limits.orphan_check_interval_ms_default
    retention_commands: int = limits.retention_commands_default
    retention_ms: int = limits.retention_ms_default
    truncation: bool = True
    """Whether the leader truncates the log below durable snapshots at all."""
    state_hash_every_commands: int = limits.state_hash_every_commands_default
    """Equal on every replica of an application, or their hashes are never compared."""

    # --- election and transitions ---
    candidate_lag_entries_max: int = limits.candidate_lag_entries_max
    retry_delay_ms: int = limits.replica_retry_delay_ms_default
    transfer_wait_ms_max: int = limits.transfer_wait_ms_max_default
    stop_drain_ms_max: int = limits.stop_drain_ms_max_default

    def __post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble_size:
            raise InvalidConfig(
                f"ensemble {self.ensemble_size}, write quorum {self.write_quorum}, ack quorum "
                f"{self.ack_quorum}: need ensemble >= write quorum >= ack quorum >= 1"
            )
        if self.ensemble_size > bookie_limits.ensemble_size_max:
            raise InvalidConfig(f"ensemble size may be at most {bookie_limits.ensemble_size_max}")
        bounded = {
            "pipeline_batches_max": (self.pipeline_batches_max, limits.outstanding_batches_max),
            "batch_commands_max": (self.batch_commands_max, limits.batch_commands_max),
            "batch_bytes_max": (self.batch_bytes_max, limits.batch_bytes_max),
        }
        for name, (value, value_max) in bounded.items():
            if not 1 <= value <= value_max:
                raise InvalidConfig(f"{name} must be 1..{value_max}, not {value}")
        if not 0 <= self.batch_linger_ms <= limits.batch_linger_ms_max:
            raise InvalidConfig(
                f"batch_linger_ms must be 0..{limits.batch_linger_ms_max},"
                f" not {self.batch_linger_ms}"
            )
        if not 0 <= self.read_lease_ms <= limits.read_lease_ms_max:
            raise InvalidConfig(
                f"read_lease_ms must be 0..{limits.read_lease_ms_max}, not {self.read_lease_ms}"
            )
        positive = {
            "segment_entries_max": self.segment_entries_max,
            "segment_bytes_max": self.segment_bytes_max,
            "segment_age_ms_max": self.segment_age_ms_max,
            "session_ttl_ms": self.session_ttl_ms,
            "sessions_max": self.sessions_max,
            "session_evict_idle_ms": self.session_evict_idle_ms,
            "session_results_max": self.session_results_max,
            "candidate_lag_entries_max": self.candidate_lag_entries_max,
            "retry_delay_ms": self.retry_delay_ms,
            "transfer_wait_ms_max": self.transfer_wait_ms_max,
            "stop_drain_ms_max": self.stop_drain_ms_max,
        }
        for name, value in positive.items():
            if value <= 0:
                raise InvalidConfig(f"{name} must be positive, not {value}")
        self._check_snapshots()

    def _check_snapshots(self) -> None:
        if self.snapshot_capture not in SNAPSHOT_CAPTURES:
            raise InvalidConfig(
                f"snapshot_capture must be one of {', '.join(SNAPSHOT_CAPTURES)}, "
                f"not {self.snapshot_capture!r}"
            )
        if not 1 <= self.snapshots_kept <= limits.snapshots_kept_max:
            raise InvalidConfig(f"snapshots_kept must be 1..{limits.snapshots_kept_max}")
        if not 1 <= self.snapshot_chunk_bytes <= limits.snapshot_chunk_bytes_max:
            raise InvalidConfig(
                f"snapshot_chunk_bytes must be 1..{limits.snapshot_chunk_bytes_max}"
            )
        for name in (
            "snapshot_check_interval_ms",
            "snapshot_orphan_grace_ms",
            "orphan_safe_age_ms",
            "orphan_check_interval_ms",
        ):
            if getattr(self, name) <= 0:
                raise InvalidConfig(f"{name} must be positive, not {getattr(self, name)}")
        for name in (
            "snapshot_every_commands",
            "snapshot_every_log_bytes",
            "snapshot_every_ms",
            "retention_commands",
            "retention_ms",
            "state_hash_every_commands",
        ):
            if getattr(self, name) < 0:
                raise InvalidConfig(
                    f"{name} must be 0 (off) or positive, not {getattr(self, name)}"
                )
        if not 0 <= self.snapshot_log_growth_percent <= limits.snapshot_log_growth_percent_max:
            raise InvalidConfig(
                "snapshot_log_growth_percent must be 0 (off) to "
                f"{limits.snapshot_log_growth_percent_max}, not {self.snapshot_log_growth_percent}"
            )
