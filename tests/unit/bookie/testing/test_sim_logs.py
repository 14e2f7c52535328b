"""Log records of a simulated run land in its trace and stats, and nowhere else."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from bookie.logs import emit
from bookie.testing.sim_logs import TraceLogHandler, logs_traced
from bookie.testing.simcluster import Trace

pytestmark = pytest.mark.anyio


async def test_records_at_the_level_go_to_the_trace_and_stats_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    trace = Trace()
    stats: Counter[str] = Counter()
    logger = logging.getLogger("bookie.client.example")
    caplog.set_level(logging.DEBUG)
    with logs_traced(TraceLogHandler(trace, stats, lambda: "host-1"), {"bookie": logging.WARNING}):
        emit(logger, logging.WARNING, "ledger.example_warning", ledger_id=7, failed=["b1"])
        emit(logger, logging.INFO, "ledger.example_info", ledger_id=7)
        logger.error("plain %s", "message")
    [first, second] = [line.split(maxsplit=1)[1] for line in trace.lines]
    assert first == "host-1 ledger.example_warning ledger_id=7 failed=['b1']"
    assert second == "host-1 plain message"
    assert stats == Counter({"ledger.example_warning": 1, "plain message": 1})
    assert not caplog.records, "nothing reached the root logger"


async def test_the_loggers_are_put_back_afterwards(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("bookie")
    before = (logger.level, logger.propagate, list(logger.handlers))
    trace = Trace()
    with logs_traced(TraceLogHandler(trace, Counter(), lambda: "x"), {"bookie": logging.INFO}):
        assert logger.level == logging.INFO
    assert (logger.level, logger.propagate, list(logger.handlers)) == before
    caplog.set_level(logging.WARNING)
    emit(logging.getLogger("bookie.client.example"), logging.WARNING, "ledger.after")
    assert [record.getMessage() for record in caplog.records] == ["ledger.after"]
    assert not trace.lines
