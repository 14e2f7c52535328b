"""A follower replica stalled (SIGSTOP) while the leader snapshots and truncates the log
past what the follower had applied, then resumed, under writes of a redis client.

The replicas run `kvstore serve` with a snapshot every few hundred commands, short
segments and no retention (its log flags), so the ledgers the follower was reading
are deleted while it is stopped.  Once resumed it must not answer a
(default, linearizable) read with data older than a write acknowledged before the
read was sent, it must load a snapshot (the log no longer holds what it lacks),
catch up with the leader, and then hold every acknowledged write.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator

import pytest
from kvstore.tools import launcher

from bookie.local.zookeeper import LocalZooKeeper
from tests.integration.support.stalls import stopped
from tests.unit.kvstore.local_store import WAIT_S, Store, command, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

WRITES_PER_LOOK = 50


SNAPSHOT_EVERY_COMMANDS = 300
QUICK_SNAPSHOTS = (
    f"--snapshot-every-commands={SNAPSHOT_EVERY_COMMANDS}",
    "--snapshot-log-growth-percent=0",
    "--segment-entries-max=50",
    "--retention-commands=0",
    "--retention-seconds=0",
)


@pytest.fixture
def store(
    zookeeper: LocalZooKeeper,
    zk_root: str,
    tmp_path: os.PathLike[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Store]:
    serve_command = launcher.serve_command

    def quick_snapshots_command(*args: object, **kwargs: object) -> list[str]:
        return [*serve_command(*args, **kwargs), *QUICK_SNAPSHOTS]  # type: ignore[arg-type]

    monkeypatch.setattr(launcher, "serve_command", quick_snapshots_command)
    with running_store(zookeeper, zk_root, tmp_path) as running:  # type: ignore[arg-type]
        yield running


def first_index(store: Store, name: str) -> int:
    """The first index the log still holds, as replica `name`'s admin API lists it."""
    url = store.cluster.replica(name).admin_url + "/api/v1/segments"
    with urllib.request.urlopen(url, timeout=WAIT_S) as answer:
        segments = json.load(answer)["segments"]
    return min(int(segment["first_index"]) for segment in segments)


def test_a_follower_stalled_past_truncation_catches_up_and_reads_no_stale_data(
    store: Store,
) -> None:
    leader = store.leader()
    [follower, _other] = [name for name in store.running() if name != leader]
    process = store.cluster.replica(follower).process
    assert process is not None
    written = 0
    with store.client(leader) as client:

        def write_some() -> None:
            nonlocal written
            for _ in range(WRITES_PER_LOOK):
                written += 1
                assert client.set(f"key:{written}", written)
                assert client.set("counter", written)

        write_some()
        wait_for(lambda: store.applied(follower) >= store.applied(leader))
        applied_at_stop = store.applied(follower)
        with stopped([process.pid]):
            # Truncated past the follower by more than a snapshot's worth of commands.
            def truncated_past_the_follower() -> bool:
                write_some()
                return first_index(store, leader) > applied_at_stop + SNAPSHOT_EVERY_COMMANDS

            wait_for(truncated_past_the_follower)
        acknowledged = written
    with store.client(follower) as reader:
        assert int(reader.get("counter") or 0) >= acknowledged, "a read after the resume"
        wait_for(lambda: store.applied(follower) >= store.applied(leader))
        command(reader, "READONLY")
        keys = [f"key:{number}" for number in range(1, written + 1)]
        assert reader.mget(keys) == [str(number).encode() for number in range(1, written + 1)]
    log_file = store.cluster.replica(follower).log_file
    assert '"event": "rsm.snapshot_loaded"' in log_file.read_text(), "caught up from a snapshot"
