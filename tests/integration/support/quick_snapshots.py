"""`kvstore serve` with a snapshot every few hundred commands and a short log, for tests.

Run as `python -m tests.integration.support.quick_snapshots serve ...` with
`kvstore serve`'s arguments.  The replica's `ReplicaConfig` then also takes
`QUICK_SNAPSHOTS`: a snapshot every `SNAPSHOT_EVERY_COMMANDS` commands (no
growth gate), a segment rolled over every `SEGMENT_ENTRIES` entries, and no
retention, so the leader truncates the log below each durable snapshot within
seconds: a follower that stalls for a while finds the ledgers it was reading
deleted when it resumes.  `kvstore serve` has no options for these, so this
module hands them to its `ReplicaConfig` and runs its `main`.
"""

from __future__ import annotations

import functools
import sys

from kvstore.tools import cli

from rsm.config import ReplicaConfig

SNAPSHOT_EVERY_COMMANDS = 300
SEGMENT_ENTRIES = 50
QUICK_SNAPSHOTS = {
    "snapshot_every_commands": SNAPSHOT_EVERY_COMMANDS,
    "snapshot_log_growth_percent": 0,
    "snapshot_check_interval_ms": 100,
    "segment_entries_max": SEGMENT_ENTRIES,
    "retention_commands": 0,
    "retention_ms": 0,
}


def main() -> int:
    setattr(cli, "ReplicaConfig", functools.partial(ReplicaConfig, **QUICK_SNAPSHOTS))  # noqa: B010
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
