"""DEBUG DIGEST and DEBUG DIGEST-VALUE through redis-py against a running store (three
replica processes): every replica answers the same digests from its own state once it
applied the same commands, a changed key shows in its own digest only, and the replies
have the shapes a real redis-server's have."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from bookie.local.zookeeper import LocalZooKeeper
from tests.integration.support.tools import redis_server
from tests.unit.kvstore.local_store import Store, command, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

ZEROS = "0" * 40
KEYS = ("a", "b", "c", "nokey")


@pytest.fixture
def real_redis(tmp_path: Path) -> Iterator[redis.Redis]:
    """A client of a real redis-server with DEBUG enabled (Redis 7 refuses it by default)."""
    with (
        redis_server(tmp_path, "--enable-debug-command", "yes") as port,
        redis.Redis(port=port, decode_responses=True) as client,
    ):
        yield client


def local_digests(store: Store, name: str) -> tuple[str, tuple[str, ...]]:
    """DEBUG DIGEST and DIGEST-VALUE of KEYS as replica `name` answers from its own state."""
    with store.client(name, decode_responses=True) as client:
        pipeline = client.pipeline(transaction=False)
        pipeline.execute_command("READONLY")  # type: ignore[no-untyped-call]
        pipeline.execute_command("DEBUG", "DIGEST")  # type: ignore[no-untyped-call]
        pipeline.execute_command("DEBUG", "DIGEST-VALUE", *KEYS)  # type: ignore[no-untyped-call]
        _, whole, per_key = pipeline.execute()
    return whole, tuple(per_key)


def settle(store: Store) -> None:
    """Wait until every replica applied what the leader applied."""
    target = store.applied(store.leader())
    for name in store.running():
        wait_for(lambda name=name: store.applied(name) >= target)  # type: ignore[misc]


def test_every_replica_answers_the_same_digests(
    zookeeper: LocalZooKeeper, tmp_path: Path, real_redis: redis.Redis
) -> None:
    with (
        running_store(zookeeper, f"/kvdigest-{os.getpid()}", tmp_path) as store,
        store.client(store.leader(), decode_responses=True) as client,
    ):
        for server in (client, real_redis):
            assert command(server, "DEBUG", "DIGEST") == ZEROS
            assert command(server, "DEBUG", "DIGEST-VALUE", "nokey") == [ZEROS]
            assert command(server, "DEBUG", "DIGEST-VALUE") == []
        for args in (("DEBUG", "NOSUCH"), ("DEBUG", "DIGEST", "x"), ("DEBUG",)):
            assert error(client, *args) == error(real_redis, *args)
        for server in (client, real_redis):
            server.set("a", "1")
            server.set("b", "2", px=600_000)
            server.set("c", "3")
        settle(store)
        answers = {name: local_digests(store, name) for name in store.running()}
        whole, per_key = answers[store.leader()]
        assert set(answers.values()) == {(whole, per_key)}, answers
        assert whole != ZEROS
        assert per_key[3] == ZEROS
        assert len(set(per_key)) == len(KEYS)
        real = command(real_redis, "DEBUG", "DIGEST-VALUE", *KEYS)
        assert [len(value) for value in real] == [len(value) for value in per_key]
        assert real[3] == ZEROS

        client.append("b", "x")
        settle(store)
        changed = {name: local_digests(store, name) for name in store.running()}
        assert len(set(changed.values())) == 1, changed
        new_whole, new_per_key = changed[store.leader()]
        assert new_whole != whole
        assert [old == new for old, new in zip(per_key, new_per_key, strict=True)] == [
            True,
            False,
            True,
            True,
        ]


def error(client: redis.Redis, *args: str) -> str:
    try:
        value: Any = command(client, *args)
    except redis.ResponseError as failure:
        return str(failure)
    raise AssertionError(f"{args} answered {value!r}")
