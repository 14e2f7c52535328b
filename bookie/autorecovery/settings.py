"""What an autorecovery process runs with.

Invariants: `owner` is non-empty (it names the process in locks and in the
election); every interval is positive; `passwords` are tried against each
ledger's password hash, so a ledger written with none of them is never copied.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bookie import limits


@dataclass(frozen=True, slots=True)
class AutoRecoverySettings:
    owner: str
    """This process's autorecovery id: its bookie id, or a standalone process's id."""
    root: str = limits.metadata_root_default
    grace_ms: int = limits.autorecovery_grace_ms_default
    poll_interval_ms: int = limits.autorecovery_poll_interval_ms_default
    audit_interval_ms: int = limits.autorecovery_audit_interval_ms_default
    presence_interval_ms: int = limits.autorecovery_presence_interval_ms_default
    presence_sample_entries: int = limits.autorecovery_presence_sample_entries_default
    """At most this many entries of a ledger compared per bookie by a presence check, drawn
    at random (0: every entry)."""
    open_ledger_grace_ms: int = limits.autorecovery_open_ledger_grace_ms_default
    """How long an open ledger whose writer is not known alive makes no progress before
    a worker fences it (bookie/core/open_ledgers.py)."""
    retry_delay_ms_min: int = limits.autorecovery_retry_delay_ms_min
    retry_delay_ms_max: int = limits.autorecovery_retry_delay_ms_max
    passwords: tuple[bytes, ...] = (b"",)
    """The ledger passwords the workers may use (reading HMAC digests, writing copies)."""
    rate_entries_per_s: int = 0
    """At most this many entries copied per second by one worker (0: no bound)."""
    rate_bytes_per_s: int = 0
    """At most this many bytes copied per second by one worker (0: no bound)."""
    timeout_ms: int = limits.read_timeout_ms_default
    """Bound on each read, write and connection attempt to a bookie."""
    tls: ssl.SSLContext | None = None
    """Reach the bookies' TLS listeners with this client context (`bookie.net.tls`)."""

    def __post_init__(self) -> None:
        assert self.owner, "an autorecovery process is named"
        assert self.grace_ms >= 0
        assert self.open_ledger_grace_ms >= 0
        assert self.presence_sample_entries >= 0
        assert self.poll_interval_ms > 0
        assert self.audit_interval_ms > 0
        assert self.presence_interval_ms > 0
        assert self.timeout_ms > 0
        assert self.rate_entries_per_s >= 0
        assert self.rate_bytes_per_s >= 0
        assert 0 < self.retry_delay_ms_min <= self.retry_delay_ms_max
