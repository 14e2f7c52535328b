"""The ledger client's knobs, in one immutable record.

Every default comes from `bookie.limits`, so the client, the documentation and
the tests agree on one number for each; a test or the simulation overrides a
field with `ClientConfig(add_timeout_ms=...)`.  Validation happens once, at
construction (`InvalidLedgerConfig`), so no shell has to re-check a knob.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bookie import limits
from bookie.errors import InvalidLedgerConfig


@dataclass(frozen=True, slots=True)
class ClientConfig:
    add_timeout_ms: int = limits.add_timeout_ms_default
    """A bookie that does not answer an ADD within this is replaced (ensemble change)."""
    read_timeout_ms: int = limits.read_timeout_ms_default
    """A READ (or READ_LAC) unanswered this long counts as an error of that bookie."""
    speculative_read_timeout_ms: int = limits.speculative_read_timeout_ms_default
    """A read also asks the next replica after this long without an answer."""
    connect_timeout_ms: int = limits.connect_timeout_ms_default
    outstanding_adds_max: int = limits.outstanding_adds_max_default
    """Adds pending per write handle; `append` waits past it."""
    explicit_lac_interval_ms: int = limits.explicit_lac_interval_ms_default
    """An idle writer publishes its LAC after this long (0: never)."""
    ensemble_changes_max: int = limits.ensemble_changes_max_default
    recovery_read_batch_max: int = limits.recovery_read_batch_max
    long_poll_timeout_ms: int = limits.long_poll_timeout_ms_default
    """How long a tailing reader asks a bookie to park its long poll."""
    tail_retry_delay_ms: int = limits.tail_retry_delay_ms_default
    connection_inflight_max: int = limits.bookie_connection_inflight_max
    reconnect_delay_ms_min: int = limits.bookie_reconnect_delay_ms_min
    reconnect_delay_ms_max: int = limits.bookie_reconnect_delay_ms_max
    metadata_retry_delay_ms: int = limits.metadata_watch_retry_delay_ms
    tls: ssl.SSLContext | None = None
    """Connect to bookies' TLS listeners with this context (`bookie.net.tls.client_context`);
    None: plain TCP."""

    def __post_init__(self) -> None:
        positive = {
            "add_timeout_ms": self.add_timeout_ms,
            "read_timeout_ms": self.read_timeout_ms,
            "speculative_read_timeout_ms": self.speculative_read_timeout_ms,
            "connect_timeout_ms": self.connect_timeout_ms,
            "outstanding_adds_max": self.outstanding_adds_max,
            "ensemble_changes_max": self.ensemble_changes_max,
            "recovery_read_batch_max": self.recovery_read_batch_max,
            "long_poll_timeout_ms": self.long_poll_timeout_ms,
            "tail_retry_delay_ms": self.tail_retry_delay_ms,
            "connection_inflight_max": self.connection_inflight_max,
            "reconnect_delay_ms_min": self.reconnect_delay_ms_min,
            "metadata_retry_delay_ms": self.metadata_retry_delay_ms,
        }
        for name, value in positive.items():
            if value <= 0:
                raise InvalidLedgerConfig(f"{name} must be positive, not {value}")
        if self.explicit_lac_interval_ms < 0:
            raise InvalidLedgerConfig("explicit_lac_interval_ms must not be negative")
        if self.reconnect_delay_ms_max < self.reconnect_delay_ms_min:
            raise InvalidLedgerConfig("reconnect_delay_ms_max is below reconnect_delay_ms_min")
        if self.long_poll_timeout_ms > limits.long_poll_timeout_ms_max:
            raise InvalidLedgerConfig(
                f"long_poll_timeout_ms may be at most {limits.long_poll_timeout_ms_max}"
            )
        if self.outstanding_adds_max > self.connection_inflight_max:
            raise InvalidLedgerConfig(
                "outstanding_adds_max exceeds connection_inflight_max: one handle could "
                "fill a connection by itself"
            )
