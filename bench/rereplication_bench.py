"""Benchmark: how fast autorecovery copies a killed bookie's data back to full replication.

    python bench/rereplication_bench.py [--megabytes 100] [--ledgers 20] [--sizes 1024 102400]
                                        [--kv-seconds 5] [--clients 8] [--zk HOSTS]

For each entry size, starts a ZooKeeper (unless `--zk`) and four `bookie serve`
processes (`bookie.local.cluster`, fsync on, autorecovery on in each with a
one-second grace period), writes `--megabytes` of entries into `--ledgers` closed
ledgers (E=3 Qw=2 Qa=2, so each ledger is on three of the four bookies), kills
with SIGKILL the bookie that holds the most of them, and waits until no ledger's
metadata names it and no ledger is marked under-replicated.  It reports:

* `kill_to_replicated_s`: from the kill to full replication, including the
  ZooKeeper session timeout (2 s) and the grace period (1 s) before the auditor
  counts the bookie lost;
* `copy_s`: from the first under-replication mark seen to full replication, and
  over it `entries_per_s` and `mb_per_s` of the entries the killed bookie held
  (what had to be copied; 1 MB = 10^6 bytes).

Then, unless `--kv-seconds 0`, the key-value store under write load
(`kvstore up`'s layout in process, `kvstore.tools.launcher.LocalKvCluster`,
with four bookies so one can be lost and its share copied to the fourth; the
writers are `machine_loss_bench.py`'s `--clients` redis-py clients, SETs of
100-byte values): it counts the acknowledged SETs over `--kv-seconds`
(`before_ops_per_s`), kills with SIGKILL the bookie named by the most of the
store's ledgers (the open segment's among them: its writer replaces the
bookie, and what was written before is copied from the segment that closes),
marks every ledger naming it at once (as `bookie shell recover` does, so that
neither the session timeout nor the grace period is counted), and counts the
SETs acknowledged from the kill until no ledger is marked or names it in a
sealed segment (`during_ops_per_s`, `kill_to_replicated_s`).  Targets: at
least 20 MB/s re-replicated with 100 KiB entries on a 2-core machine, and the
store keeping at least half its write throughput while it happens.  The last
line of output is ONE JSON object; progress goes to stderr.  `--seconds`
bounds each wait.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

sys.path.insert(0, str(REPOSITORY / "examples"))

from kvstore.tools.launcher import KvSettings, LocalKvCluster  # noqa: E402
from machine_loss_bench import Load  # noqa: E402

from bookie.client.ledger_client import LedgerClient  # noqa: E402
from bookie.core.rereplication import position_entries, segment_ranges  # noqa: E402
from bookie.errors import NoSuchLedgerError  # noqa: E402
from bookie.local.cluster import LocalCluster  # noqa: E402
from bookie.meta.ledgers import LedgerManager  # noqa: E402
from bookie.meta.underreplication import UnderReplication  # noqa: E402
from bookie.meta.zk import ZkMetadataStore  # noqa: E402
from rsm.host import split_zk  # noqa: E402

BOOKIES = 4
ENSEMBLE, WRITE_QUORUM, ACK_QUORUM = 3, 2, 2
PASSWORD = b"rereplication-bench"
GRACE_MS = 1_000
SESSION_TIMEOUT_MS = 2_000
BOOKIE_CONFIG: dict[str, object] = {
    "zk_session_timeout_ms": SESSION_TIMEOUT_MS,
    "autorecovery_grace_ms": GRACE_MS,
    "autorecovery_poll_interval_ms": 100,
    "autorecovery_password": PASSWORD.decode(),
}
POLL_S = 0.05
TARGET_MB_PER_S = 20.0
TARGET_KV_RATIO = 0.5
"""The store keeps at least this share of its write throughput during the recovery."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def write_ledgers(client: LedgerClient, ledgers: int, entries: int, size: int) -> list[int]:
    payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
    ledger_ids = []
    for _ in range(ledgers):
        ledger = await client.create_ledger(ENSEMBLE, WRITE_QUORUM, ACK_QUORUM, password=PASSWORD)
        async with ledger:
            for _ in range(entries):
                await ledger.wait_for_capacity()
                ledger.append_nowait(payload)
        ledger_ids.append(ledger.ledger_id)
    return ledger_ids


async def held_entries(client: LedgerClient, ledger_ids: list[int]) -> dict[str, int]:
    """Bookie id -> how many entries of the ledgers it holds, by their metadata."""
    held: dict[str, int] = {}
    for ledger_id in ledger_ids:
        metadata = await client.ledger_metadata(ledger_id)
        for first, last, ensemble in segment_ranges(metadata):
            for position, bookie_id in enumerate(ensemble):
                count = sum(1 for _ in position_entries(metadata.quorum, first, last, position))
                held[bookie_id] = held.get(bookie_id, 0) + count
    return held


async def wait_replicated(
    client: LedgerClient, marks: UnderReplication, ledger_ids: list[int], victim_id: str
) -> float | None:
    """Return once no ledger is marked and none names `victim_id`; return when the first
    mark was seen (None: none was, the repair took less than a poll)."""
    marked_s: float | None = None
    while True:
        if await marks.list_marks():
            if marked_s is None:
                marked_s = time.perf_counter()
        else:
            named = False
            for ledger_id in ledger_ids:
                metadata = await client.ledger_metadata(ledger_id)
                named = named or any(victim_id in ensemble for _, ensemble in metadata.ensembles)
            if not named:
                return marked_s
        await anyio.sleep(POLL_S)


async def bench_size(arguments: argparse.Namespace, directory: Path, size: int) -> dict[str, Any]:
    entries = max(1, arguments.megabytes * 1_000_000 // size // arguments.ledgers)
    async with (
        LocalCluster(
            directory,
            bookies=BOOKIES,
            zk_servers=arguments.zk,
            zk_root=f"/rereplication-bench-{size}-{time.time_ns()}",
            bookie_config=BOOKIE_CONFIG,
        ) as cluster,
        ZkMetadataStore.connect(cluster.zk_servers) as store,
        LedgerClient.open(store, root=cluster.zk_root) as client,
    ):
        with anyio.fail_after(arguments.seconds):
            while len(client.writable_bookies) < BOOKIES:  # the client's view catches up
                await anyio.sleep(POLL_S)
        log(f"{size} B: writing {arguments.ledgers} ledgers of {entries} entries")
        ledger_ids = await write_ledgers(client, arguments.ledgers, entries, size)
        held = await held_entries(client, ledger_ids)
        victim_id = max(held, key=lambda bookie_id: held[bookie_id])
        (victim,) = [bookie for bookie in cluster.bookies if bookie.bookie_id == victim_id]
        assert victim.process is not None
        log(f"{size} B: killing {victim_id}, which holds {held[victim_id]} entries")
        killed_s = time.perf_counter()
        victim.process.kill()
        with anyio.fail_after(arguments.seconds):
            marked_s = await wait_replicated(
                client, UnderReplication(store, cluster.zk_root), ledger_ids, victim_id
            )
        done_s = time.perf_counter()
    # A repair quicker than one poll shows no mark: count one poll for it.
    copy_s = max(done_s - (marked_s if marked_s is not None else done_s), POLL_S)
    copied = held[victim_id]
    mb = copied * size / 1e6
    log(f"{size} B: {copied} entries ({mb:.1f} MB) copied in {copy_s:.2f} s")
    return {
        "name": f"rereplicate-{size}B",
        "entry_bytes": size,
        "ledgers": arguments.ledgers,
        "entries_copied": copied,
        "kill_to_replicated_s": round(done_s - killed_s, 3),
        "copy_s": round(copy_s, 3),
        "entries_per_s": round(copied / copy_s, 1),
        "mb_per_s": round(mb / copy_s, 2),
    }


async def mark_all(store: ZkMetadataStore, root: str, bookie_id: str) -> list[int]:
    """Mark every ledger whose metadata names `bookie_id` (what `bookie shell recover` does)."""
    client_ledgers = LedgerManager(store, root)
    marks = UnderReplication(store, root)
    marked = []
    for ledger_id in await client_ledgers.list_ledgers():
        try:
            metadata, _ = await client_ledgers.read(ledger_id)
        except NoSuchLedgerError:
            continue
        if any(bookie_id in ensemble for _, ensemble in metadata.ensembles):
            await marks.mark(ledger_id, [bookie_id])
            marked.append(ledger_id)
    return marked


async def kv_replicated(store: ZkMetadataStore, root: str, bookie_id: str) -> bool:
    """No ledger is marked, and no sealed segment of any ledger names `bookie_id`."""
    if await UnderReplication(store, root).list_marks():
        return False
    client_ledgers = LedgerManager(store, root)
    for ledger_id in await client_ledgers.list_ledgers():
        try:
            metadata, _ = await client_ledgers.read(ledger_id)
        except NoSuchLedgerError:
            continue
        if any(bookie_id in ensemble for _, _, ensemble in segment_ranges(metadata)):
            return False
    return True


async def bench_kvstore(arguments: argparse.Namespace, directory: Path) -> dict[str, Any]:
    zk = arguments.zk and f"{arguments.zk}/rereplication-bench-kv-{time.time_ns()}"
    cluster = LocalKvCluster(directory, zk=zk, settings=KvSettings(base_port=0, bookies=BOOKIES))
    log("kvstore: starting ZooKeeper, 4 bookies, 3 replicas ...")
    async with cluster:
        hosts, chroot = split_zk(cluster.zk)
        root = cluster.ledger_root
        ports = [replica.resp_port for replica in cluster.replicas]
        async with ZkMetadataStore.connect(hosts, root=chroot) as store:
            with Load(lambda: ports, arguments.clients) as load:
                seconds = arguments.kv_seconds
                start_s = time.monotonic()
                await anyio.sleep(seconds)
                before = load.writes.count_between(start_s, start_s + seconds) / seconds
                client_ledgers = LedgerManager(store, root)
                held: dict[str, int] = {}
                for ledger_id in await client_ledgers.list_ledgers():
                    metadata, _ = await client_ledgers.read(ledger_id)
                    for bookie_id in {b for _, ensemble in metadata.ensembles for b in ensemble}:
                        held[bookie_id] = held.get(bookie_id, 0) + 1
                victim = max(held, key=lambda bookie_id: held[bookie_id])
                (bookie,) = [b for b in cluster.bookies.bookies if b.bookie_id == victim]
                log(f"kvstore: {before:.0f} SET/s; killing {victim} ({bookie.name})")
                killed_s = time.monotonic()
                cluster.bookies.kill(bookie.name)
                marked = await mark_all(store, root, victim)
                with anyio.fail_after(arguments.seconds):
                    while not await kv_replicated(store, root, victim):
                        await anyio.sleep(POLL_S)
                done_s = time.monotonic()
                during = load.writes.count_between(killed_s, done_s) / (done_s - killed_s)
    log(f"kvstore: {during:.0f} SET/s during {done_s - killed_s:.2f} s of recovery")
    return {
        "name": "kvstore-writes-during-rereplication",
        "clients": arguments.clients,
        "seconds": arguments.kv_seconds,
        "ledgers_marked": len(marked),
        "kill_to_replicated_s": round(done_s - killed_s, 3),
        "before_ops_per_s": round(before, 1),
        "during_ops_per_s": round(during, 1),
        "during_vs_before": round(during / before, 3) if before else None,
    }


async def bench(arguments: argparse.Namespace, directory: Path) -> dict[str, Any]:
    results = []
    for size in arguments.sizes:
        results.append(await bench_size(arguments, directory / f"size-{size}", size))
    largest = max(results, key=lambda item: item["entry_bytes"])
    kvstore = None
    if arguments.kv_seconds:
        kvstore = await bench_kvstore(arguments, directory / "kvstore")
        results.append(kvstore)
    ratio = None if kvstore is None else kvstore["during_vs_before"]
    return {
        "benchmark": "rereplication",
        "config": {
            "megabytes": arguments.megabytes,
            "ledgers": arguments.ledgers,
            "sizes": arguments.sizes,
            "bookies": BOOKIES,
            "quorum": [ENSEMBLE, WRITE_QUORUM, ACK_QUORUM],
            "grace_ms": GRACE_MS,
            "session_timeout_ms": SESSION_TIMEOUT_MS,
        },
        "results": results,
        "target": {
            "name": f"mb_per_s at {largest['entry_bytes']} B",
            "value": TARGET_MB_PER_S,
            "met": largest["mb_per_s"] >= TARGET_MB_PER_S,
        },
        "kvstore_target": {
            "name": "kvstore during_vs_before",
            "value": TARGET_KV_RATIO,
            "met": None if ratio is None else ratio >= TARGET_KV_RATIO,
        },
    }


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=100, help="data written per size")
    parser.add_argument("--ledgers", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 102400])
    parser.add_argument("--zk", help="an existing ZooKeeper (host:port) instead of a new one")
    parser.add_argument("--seconds", type=float, default=300.0, help="bound of each wait")
    parser.add_argument(
        "--kv-seconds",
        type=float,
        default=5.0,
        help="the key-value store's writes are counted this long before the kill (0: skip)",
    )
    parser.add_argument("--clients", type=int, default=8, help="the store's concurrent writers")
    arguments = parser.parse_args(argv)
    if arguments.megabytes < 1 or arguments.ledgers < 1 or min(arguments.sizes) < 1:
        parser.error("--megabytes, --ledgers and --sizes must be positive")
    if arguments.kv_seconds < 0 or arguments.clients < 1:
        parser.error("--kv-seconds must be at least 0 and --clients positive")
    return arguments


def main(argv: list[str]) -> None:
    arguments = parse(argv)
    with tempfile.TemporaryDirectory(prefix="rereplication-bench-") as directory:
        report = anyio.run(bench, arguments, Path(directory))
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
