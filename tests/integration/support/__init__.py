"""Helpers for tests that run real bookie processes (and, later, other real processes).

* `processes`: `BookieCluster` starts `bookie serve` subprocesses on free
  loopback ports, each with its own directories and config file, against the
  test session's ZooKeeper; `BookieProcess` follows a process's JSON log line
  by line, so tests wait on events (`bookie.listening`, `bookie.ready`, ...)
  instead of sleeping, and can SIGKILL, SIGTERM, SIGHUP and restart it.
* `entries`: deterministic entry packets, a pipelined add stream that records
  which adds were acknowledged, and read-back checks.
* `ledgers`: ledger clients of such a cluster, and a wire tap that holds or
  drops chosen request frames, so scenarios run in one exact order.
"""
