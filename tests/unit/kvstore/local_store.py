"""A whole key-value store as real processes, for the kvstore integration tests.

`running_store` runs `kvstore.tools.launcher.LocalKvCluster` (what `kvstore up`
runs: three `bookie serve` and N `kvstore serve` processes) against the test
session's ZooKeeper under the test's own chroot, on free ports, from a
blocking portal, so tests use plain synchronous redis-py clients.  Replicas
run with the commands' default ZooKeeper session timeout, as users run them.

`Store.leader()` asks the replicas themselves (INFO's `rsm_role`);
`Store.kill` is `kill -9`; `Store.start` restarts a replica and waits until
the store is ready again; `Store.applied(name)` is a replica's applied
index, for waiting until replicas agree.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import redis
from kvstore.tools.launcher import KvSettings, LocalKvCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from bookie.local.zookeeper import LocalZooKeeper

WAIT_S = 60.0
"""Bound on any wait for the store (start-up, failover): far above what a passing run needs."""
POLL_S = 0.02

T = TypeVar("T")


@dataclass
class Store:
    portal: anyio.from_thread.BlockingPortal
    cluster: LocalKvCluster

    @property
    def names(self) -> list[str]:
        return [replica.name for replica in self.cluster.replicas]

    def port(self, name: str) -> int:
        return self.cluster.replica(name).resp_port

    def client(self, name: str, **options: Any) -> redis.Redis:
        """A redis-py client of replica `name` (close it, or use it in `with`).

        Without redis-py's own retries: after a lost connection it would send
        the command again on a new connection (a new session), and a test must
        see the connection error instead (see the README on retries).
        """
        options.setdefault("socket_timeout", WAIT_S)
        options.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.Redis(host="127.0.0.1", port=self.port(name), **options)

    def info(self, name: str) -> dict[str, Any]:
        with self.client(name, protocol=2) as client:
            info: dict[str, Any] = client.info("replication")
            return info

    def leader(self) -> str:
        """The replica serving as leader now (waits until one does)."""

        def serving() -> str | None:
            for name in self.running():
                try:
                    if self.info(name)["rsm_role"] == "leader":
                        return name
                except redis.ConnectionError:
                    continue
            return None

        return wait_for(serving)

    def applied(self, name: str) -> int:
        return int(self.info(name)["rsm_applied_index"])

    def running(self) -> list[str]:
        return [r.name for r in self.cluster.replicas if r.process is not None]

    def kill(self, name: str) -> None:
        """kill -9: no graceful stop."""
        self.cluster.kill(name)
        self.portal.call(self._reap, name)

    async def _reap(self, name: str) -> None:
        replica = self.cluster.replica(name)
        assert replica.process is not None
        with anyio.fail_after(WAIT_S):
            await replica.process.wait()
        await replica.process.aclose()
        replica.process = None

    def stop(self, name: str) -> int:
        return self.portal.call(self.cluster.stop, name)

    def start(self, name: str) -> None:
        self.portal.call(self.cluster.start, name)

    def wait_ready(self) -> None:
        self.portal.call(self.cluster.wait_ready)


def command(client: redis.Redis, *words: str) -> Any:
    """A raw command through redis-py (its `execute_command` is untyped)."""
    return client.execute_command(*words)  # type: ignore[no-untyped-call]


def wait_for(probe: Callable[[], T | None], timeout_s: float = WAIT_S) -> T:
    """Poll `probe` until it returns something; fail after `timeout_s` (a condition, not a
    delay that hopes something happened)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{probe} did not hold within {timeout_s} s")
        time.sleep(POLL_S)


@contextmanager
def running_store(
    zookeeper: LocalZooKeeper,
    zk_root: str,
    data_dir: Path,
    *,
    replicas: int = 3,
    bookies: int = 3,
    bookie_config: Mapping[str, object] | None = None,
    acl_file: Path | None = None,
    ledger_digest: str = "crc32c",
    tls: bool = False,
    command_timeout_ms: int | None = None,
    replica_zk: Mapping[str, str] | None = None,
) -> Iterator[Store]:
    """A store of `replicas` replica processes and `bookies` bookies (with `bookie_config`
    added to their configuration) under `data_dir`, for the block (its Redis clients
    logging in as `acl_file`'s users, if given; its ledgers checked with `ledger_digest`;
    with `tls`, on TLS as `kvstore up --tls` runs it; its replicas answering a command
    they cannot carry out TRYAGAIN or TIMEOUT after `command_timeout_ms`, if given, not
    their default 30 s; the replicas named in `replica_zk` reaching ZooKeeper at the
    address given there, a proxy's say, with `zk_root`)."""
    settings = KvSettings(
        replicas=replicas,
        bookies=bookies,
        base_port=0,
        acl_file=acl_file,
        ledger_digest=ledger_digest,
        tls=tls,
    )
    cluster = LocalKvCluster(
        data_dir,
        zk=zookeeper.connect_string + zk_root,
        settings=settings,
        bookie_config=bookie_config,
        replica_options=(
            [] if command_timeout_ms is None else [f"--command-timeout-ms={command_timeout_ms}"]
        ),
        replica_zk=replica_zk,
    )
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(cluster),
    ):
        yield Store(portal, cluster)
