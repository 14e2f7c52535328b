"""Test tooling that ships with the framework: recording client histories and
checking them for linearizability.

`history` records what concurrent clients saw (`HistoryRecorder`) and saves
it as JSON lines; `models` holds the sequential specifications a history is
checked against; `linearizability` decides whether some sequential order of
the operations, consistent with real time, explains every output.  Nothing
here does I/O or reads a clock of its own: the recorder is given its clock,
so the same code serves real-time integration tests and the virtual-time
simulation.
"""

from __future__ import annotations

from rsm.testing.history import (
    Call,
    History,
    HistoryRecorder,
    Operation,
    Outcome,
    Value,
    history_from_jsonl,
    history_to_jsonl,
    validate_history,
)
from rsm.testing.linearizability import (
    Candidate,
    Result,
    Verdict,
    Violation,
    check,
    check_per_key,
)
from rsm.testing.models import (
    UNKNOWN,
    Counter,
    DeterministicModel,
    Keyed,
    KvModel,
    Model,
    Register,
    kv_key,
)

__all__ = [
    "UNKNOWN",
    "Call",
    "Candidate",
    "Counter",
    "DeterministicModel",
    "History",
    "HistoryRecorder",
    "Keyed",
    "KvModel",
    "Model",
    "Operation",
    "Outcome",
    "Register",
    "Result",
    "Value",
    "Verdict",
    "Violation",
    "check",
    "check_per_key",
    "history_from_jsonl",
    "history_to_jsonl",
    "kv_key",
    "validate_history",
]
