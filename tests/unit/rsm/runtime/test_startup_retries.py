"""A replica's start-up through ZooKeeper trouble: each step that reads or writes its
metadata tries again after a transient error instead of ending the replica."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from bookie.errors import MetadataUnavailable
from bookie.meta.api import MetadataStore
from tests.unit.rsm.runtime.harness import replica_cluster, wait_until

pytestmark = pytest.mark.anyio

REPLICA_ID = "r1"


class LosingFirstCalls:
    """`store`, except that the first call of each operation named in `rules` whose path
    the rule accepts fails as a connection lost for a moment would (`MetadataUnavailable`,
    nothing done); `failed` lists those calls."""

    def __init__(self, store: MetadataStore, rules: dict[str, Callable[[str], bool]]) -> None:
        self._store = store
        self._rules = dict(rules)
        self.failed: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        operation = getattr(self._store, name)
        accepts = self._rules.get(name)
        if accepts is None:
            return operation

        async def call(path: str, *args: Any, **kwargs: Any) -> Any:
            if name in self._rules and accepts(path):
                del self._rules[name]
                self.failed.append((name, path))
                raise MetadataUnavailable(f"{name} {path}: connection lost (test)")
            return await operation(path, *args, **kwargs)

        return call


async def test_a_replica_starts_through_lost_connections_at_each_metadata_step() -> None:
    views: list[LosingFirstCalls] = []

    def losing_first_calls(store: MetadataStore) -> MetadataStore:
        view = LosingFirstCalls(
            store,
            {
                "exists": lambda _path: True,  # the application's znodes
                "children": lambda _path: True,  # the snapshots
                "get": lambda path: path.endswith("/log"),
                "create": lambda path: path.endswith(f"/replicas/{REPLICA_ID}"),
            },
        )
        views.append(view)
        return view  # type: ignore[return-value]

    async with replica_cluster() as replicas:
        replica = await replicas.start(REPLICA_ID, store_view=losing_first_calls)
        await wait_until(lambda: replica.is_leader)
        assert await replica.call("add", 2) == 2
    [view] = views
    assert sorted(name for name, _path in view.failed) == ["children", "create", "exists", "get"]
