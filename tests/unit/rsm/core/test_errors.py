"""The rsm error tree: one class per wire status, round trips, retryability."""

from __future__ import annotations

import pytest

from rsm import errors
from rsm.errors import (
    STATUS_ERRORS,
    BadRequest,
    CommandFailed,
    NotLeader,
    RsmStatus,
    StatusError,
    error_for_status,
    wire_fields,
)

RETRYABLE = {
    errors.NotLeader,
    errors.OutcomeUnknown,
    errors.Unavailable,
    errors.Timeout,
    errors.Overloaded,
}

CLASSES: list[type[StatusError]] = [STATUS_ERRORS[status] for status in sorted(STATUS_ERRORS)]


def test_every_status_error_class_has_its_own_status_in_the_table() -> None:
    classes = set(StatusError.__subclasses__())
    assert set(STATUS_ERRORS.values()) == classes
    assert len({cls.status for cls in classes}) == len(classes)
    assert RsmStatus.OK not in STATUS_ERRORS


@pytest.mark.parametrize("cls", CLASSES)
def test_wire_round_trip_keeps_class_message_and_detail(cls: type[StatusError]) -> None:
    error = cls("what happened", "the detail")
    status, message, detail = wire_fields(error)
    back = error_for_status(status, message, detail)
    assert type(back) is cls
    assert (back.message, back.detail) == ("what happened", "the detail")
    assert str(back) == "what happened"


@pytest.mark.parametrize("cls", CLASSES)
def test_retryable_flags(cls: type[StatusError]) -> None:
    assert cls.retryable is (cls in RETRYABLE)


def test_unknown_status_becomes_bad_request_naming_the_code() -> None:
    error = error_for_status(999, "boom")
    assert isinstance(error, BadRequest)
    assert "999" in error.message


def test_empty_message_falls_back_to_the_status_name() -> None:
    assert str(errors.StaleRequest()) == "stale request"


def test_details_have_names() -> None:
    assert NotLeader("not me", "10.0.0.1:7000").leader_address == "10.0.0.1:7000"
    assert NotLeader("not me").leader_address is None
    assert CommandFailed("no", "KeyError").type_name == "KeyError"
