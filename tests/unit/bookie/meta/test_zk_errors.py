"""The one table from kazoo exceptions to bookie.errors classes (no server needed)."""

from __future__ import annotations

import pytest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    SessionExpiredError,
    SessionMovedError,
)
from kazoo.handlers.threading import KazooTimeoutError

from bookie.errors import (
    MetadataError,
    MetadataUnavailable,
    MetadataVersionConflict,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
)
from bookie.meta.zk import translate_error


@pytest.mark.parametrize(
    ("kazoo_error", "expected"),
    [
        (NoNodeError(), NoNode),
        (NodeExistsError(), NodeExists),
        (BadVersionError(), MetadataVersionConflict),
        (NotEmptyError(), NotEmpty),
        (SessionExpiredError(), SessionExpired),
        (ConnectionClosedError("closing"), MetadataUnavailable),
        (ConnectionLoss(), MetadataUnavailable),
        (SessionMovedError(), MetadataUnavailable),
        (OperationTimeoutError(), MetadataUnavailable),
        (KazooTimeoutError(), MetadataUnavailable),
        (NoChildrenForEphemeralsError(), MetadataError),
        (KazooException("anything else"), MetadataError),
    ],
)
def test_translation(kazoo_error: Exception, expected: type[MetadataError]) -> None:
    translated = translate_error(kazoo_error, "get /a")
    assert type(translated) is expected
    assert str(translated).startswith("get /a: ")


def test_retryable_classes_are_the_transient_ones() -> None:
    assert translate_error(ConnectionLoss(), "x").retryable
    assert translate_error(BadVersionError(), "x").retryable
    assert not translate_error(NoNodeError(), "x").retryable
