"""The store's settings against the framework's: a command gives up before its session can go."""

from __future__ import annotations

import pytest
from kvstore.runtime.node import StoreSettings, check_command_deadline

from rsm.config import ReplicaConfig
from rsm.errors import InvalidConfig


def test_the_command_deadline_must_end_before_a_session_may_be_dropped() -> None:
    check_command_deadline(StoreSettings(), ReplicaConfig())
    # Logged time may run 1.5 times as fast (rsm/core/logged_time.py): 60 s of it is 40 s.
    check_command_deadline(
        StoreSettings(command_deadline_ms=39_999), ReplicaConfig(session_evict_idle_ms=60_000)
    )
    for config in (
        ReplicaConfig(session_evict_idle_ms=60_000),
        ReplicaConfig(session_ttl_ms=60_000),
    ):
        with pytest.raises(InvalidConfig, match="must be below 40000 ms"):
            check_command_deadline(StoreSettings(command_deadline_ms=40_000), config)
