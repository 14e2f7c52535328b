"""Expiry is decided by logged time: identical on every replica, and again after a restart and
a replay of the log from the start.

Keys get TTLs that run out during the test, far in the future, or at an
absolute time; some are read or written after their time (lazy expiry),
some only removed by later writes (active expiry), some never touched.
Then every replica's view (values, expiry times, key count) is compared,
once all replicas applied the same log; then every replica is restarted
(replaying the whole log) and the views compared again, with each other and
with the first ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from bookie.local.zookeeper import LocalZooKeeper
from tests.unit.kvstore.local_store import Store, command, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

FAR_UNIX_MS = 4_102_444_800_000
KEYS = [f"short:{i}" for i in range(20)] + [f"long:{i}" for i in range(10)] + ["at", "plain"]


@pytest.fixture
def store(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: os.PathLike[str]) -> Iterator[Store]:
    with running_store(zookeeper, zk_root, tmp_path) as running:  # type: ignore[arg-type]
        yield running


def views(store: Store) -> dict[str, Any]:
    """Each running replica's view, once they all applied the same log."""
    names = store.running()
    wait_for(lambda: len({store.applied(name) for name in names}) == 1)
    seen: dict[str, Any] = {}
    for name in names:
        with store.client(name) as client:
            command(client, "READONLY")
            seen[name] = {
                "values": client.mget(KEYS),
                "expire_at": [client.pexpiretime(key) for key in KEYS],
                "dbsize": client.dbsize(),
                "keyspace": client.info("keyspace"),
                "keys": sorted(client.keys("*")),
            }
    return seen


def test_expiry_is_identical_on_every_replica_and_after_replay(store: Store) -> None:
    with store.client(store.leader()) as client:
        for key in KEYS:
            if key.startswith("short"):
                client.set(key, "v", px=300)
            elif key.startswith("long"):
                client.set(key, "v", ex=3600)
            elif key == "at":
                client.set(key, "v", pxat=FAR_UNIX_MS)
            else:
                client.set(key, "v")
        # Logged time passes the short TTLs once the leader logs something later:
        # a linearizable read waits for a barrier entry, stamped with the leader's clock.
        shorts = [key for key in KEYS if key.startswith("short")]
        wait_for(lambda: client.mget(shorts) == [None] * len(shorts))
        client.get("short:1")  # lazy: a read sees it gone, and changes nothing
        client.set("short:2", "again")  # a write to an expired key: a new key
        client.incr("other")  # active expiry: each write removes due keys
    first = views(store)
    reference = next(iter(first.values()))
    assert all(view == reference for view in first.values()), first
    assert reference["values"][KEYS.index("short:2")] == b"again"
    assert reference["values"][KEYS.index("short:3")] is None
    assert reference["expire_at"][KEYS.index("at")] == FAR_UNIX_MS
    assert reference["expire_at"][KEYS.index("plain")] == -1

    for name in store.running():
        store.stop(name)
    for name in store.names:
        store.start(name)
    second = views(store)
    for name, view in second.items():
        for field, value in view.items():
            assert value == reference[field], (name, field, value, reference[field])
