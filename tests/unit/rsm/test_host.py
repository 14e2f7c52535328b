"""`rsm.host.run_replica_main`: a replica process's main turns the framework's and the
bookies' errors into one log line and an exit status, and passes a clean exit through."""

from __future__ import annotations

import logging

import pytest

from bookie.errors import BookieUnavailable
from rsm.errors import InvalidConfig
from rsm.host import EXIT_FAILED, EXIT_USAGE, run_replica_main

LOGGER = logging.getLogger("tests.host")


async def returns(code: int) -> int:
    return code


async def raises(error: Exception) -> int:
    raise error


def test_the_serve_function_s_exit_status_is_the_process_s() -> None:
    assert run_replica_main(returns, 7, logger=LOGGER, failed_event="x.failed") == 7


@pytest.mark.parametrize(
    ("error", "status"),
    [(InvalidConfig("no such key"), EXIT_USAGE), (BookieUnavailable("gone"), EXIT_FAILED)],
)
def test_an_error_is_one_log_line_and_an_exit_status(
    error: Exception, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger=LOGGER.name):
        assert run_replica_main(raises, error, logger=LOGGER, failed_event="x.failed") == status
    assert [record.getMessage() for record in caplog.records] == ["x.failed"]


def test_other_exceptions_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        run_replica_main(raises, ZeroDivisionError(), logger=LOGGER, failed_event="x.failed")
