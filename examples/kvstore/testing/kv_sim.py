"""The key-value store in the seeded whole-cluster simulation, called by Redis clients.

A run is a run of `rsm.testing.rsm_sim` (its scenario, nemesis, liveness and
checks) with the store as the application (`APPLICATION`):

* each replica incarnation is a real `Replica` of an `ObservedKVStore` (the
  real `KVStore`, observed) on the simulated network (`RsmCluster`);
* beside it runs the store's real server side, `kvstore.runtime.node.redis_server`:
  a `Router` with one exactly-once session per Redis connection, its
  `rsm.link.Link`s to the leader's framework port through the simulated
  network's connector, and the `RespServer` on the simulated listener
  `replica-N:6379` (its connections on `StreamTransport`s, since the
  simulated network has no sockets);
* the clients are `RedisWorkload`'s: Redis connections to random replicas
  (followers forward), SET, GET, INCR and DEL on a few keys.

The checks are rsm_sim's: no replica fails; every incarnation's applied
sequence is a prefix of the final log's replay and the replicas' states hash
alike; no SET is applied twice, and every acknowledged SET is in the log
exactly once (a retry across a failover, with the connection's session, is
answered from the session table); one leader per epoch; the history is
linearizable per key (`KvModel`: Redis's own answers); liveness after the
faults: each process gets one more SET acknowledged.

What the store changes in a seed's scenario: the router's command deadline is
the drawn client deadline (below the sessions' TTL and eviction idle time, as
`kvstore.runtime.node.check_command_deadline` requires, or a write retried after its
session was dropped could apply twice); a session table bounded to one
session per client is bounded to two per process: each Redis connection
has a session, and a process that reconnects leaves its old one behind
until it is idle long enough to be evicted (a table full of recent
sessions refuses a new connection's commands, Overloaded, until then, and
the router's deadline runs out first: TRYAGAIN).

`python -m kvstore.testing.kv_sim --seeds N [--first S]` runs seeds in a row,
as rsm_sim's command line does, with the same `--faults` (`--faults
stall,replica-crash` stops bookies and leaders with SIGSTOP and resumes them,
as tests/integration/test_stalled_bookies.py does with real processes; the
workload counts a final write that got no answer at all,
`final-write-no-answer`).
"""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from kvstore.runtime.node import StoreSettings, check_command_deadline, redis_server
from kvstore.testing.workload import RESP_PORT, RedisWorkload, observed_kvstore
from rsm import Replica
from rsm.testing import rsm_sim
from rsm.testing.cluster import Beside, RsmCluster, SimReplica
from rsm.testing.rsm_sim import Application, Scenario, SimOptions, Workload

__all__ = ["APPLICATION", "OPTIONS", "main"]

CLIENT_TIMEOUT_MARGIN_MS = 5_000
"""A client gives up on a command this long after the server's deadline for it (the
server answers TRYAGAIN or TIMEOUT by then, unless the connection is cut)."""


def _settings(scenario: Scenario) -> StoreSettings:
    return StoreSettings(command_deadline_ms=scenario.client_config.deadline_ms)


def _for_redis(scenario: Scenario) -> Scenario:
    plan = scenario.workload
    config = scenario.replica_config
    if config.sessions_max == plan.clients:
        config = dataclasses.replace(config, sessions_max=2 * plan.clients * plan.slots)
    check_command_deadline(_settings(scenario), config)
    return dataclasses.replace(scenario, replica_config=config)


def _server_side(scenario: Scenario) -> Beside:
    settings = _settings(scenario)

    def beside(
        cluster: RsmCluster, sim: SimReplica, replica: Replica
    ) -> AbstractAsyncContextManager[object]:
        network = cluster.world.network
        return redis_server(
            replica,
            network.listen(f"{sim.name}:{RESP_PORT}"),
            port=RESP_PORT,
            settings=settings,
            connector=network.connector(sim.name),
            rng=cluster.world.derive_rng(),
        )

    return beside


def _redis_clients(scenario: Scenario, cluster: RsmCluster, rng: random.Random) -> Workload:
    timeout_ms = scenario.client_config.deadline_ms + CLIENT_TIMEOUT_MARGIN_MS
    return RedisWorkload(scenario.workload, rng, cluster, command_timeout_ms=timeout_ms)


APPLICATION = Application(
    command="python -m kvstore.testing.kv_sim",
    machine=observed_kvstore,
    workload=_redis_clients,
    beside=_server_side,
    scenario=_for_redis,
)

OPTIONS = SimOptions(application=APPLICATION)
"""The default options of a run of the store."""


def main(argv: Sequence[str] | None = None) -> int:
    return rsm_sim.main(argv, APPLICATION)


if __name__ == "__main__":
    sys.exit(main())
