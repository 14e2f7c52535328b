"""ReplicaConfig refuses values its users could not mean, at construction."""

from __future__ import annotations

import pytest

from rsm import limits
from rsm.config import ReplicaConfig
from rsm.errors import InvalidConfig


@pytest.mark.parametrize(
    "name",
    [
        "segment_entries_max",
        "segment_bytes_max",
        "segment_age_ms_max",
        "session_ttl_ms",
        "sessions_max",
        "session_evict_idle_ms",
        "session_results_max",
        "candidate_lag_entries_max",
        "retry_delay_ms",
        "transfer_wait_ms_max",
        "stop_drain_ms_max",
    ],
)
@pytest.mark.parametrize("value", [0, -1])
def test_knobs_that_count_or_time_something_must_be_positive(name: str, value: int) -> None:
    with pytest.raises(InvalidConfig, match=f"{name} must be positive"):
        ReplicaConfig(**{name: value})  # type: ignore[arg-type]
    assert getattr(ReplicaConfig(**{name: 1}), name) == 1  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, limits.snapshot_log_growth_percent_max + 1])
def test_the_snapshot_gate_is_off_or_a_bounded_percentage(value: int) -> None:
    with pytest.raises(InvalidConfig, match="snapshot_log_growth_percent must be 0"):
        ReplicaConfig(snapshot_log_growth_percent=value)
    for allowed in (0, 1, limits.snapshot_log_growth_percent_max):
        config = ReplicaConfig(snapshot_log_growth_percent=allowed)
        assert config.snapshot_log_growth_percent == allowed
