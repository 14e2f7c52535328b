"""One probe of the framework by PySyncObj's own method: load made inside the leader's process.

    python bench/rsm_inprocess.py --zk HOSTS --ledger-root ROOT --app APP --listen HOST:PORT \
        --session-timeout-ms MS --pad-chars N --rate R --seconds S --result FILE

One replica of `rsm.testing.workload:AuditCounter`, wired as `rsm run` wires
it (its ZooKeeper session, its ledger client, E=3 Qw=3 Qa=2, fsync on the
bookies).  bench/rsm_bench.py starts three, of a new application, for every
probe of its search (as PySyncObj's benchmark starts its nodes afresh for
every probe); the one that leads makes the probe's load the way that
benchmark does: at the start of every second it submits `--rate` 100-byte
`add` commands to its replica without waiting for them
(`Replica.handle_call`, the in-process API: no network hop, no session),
and the share of them acknowledged within the drain time is the probe's
result, written to `--result` as `{"rate": R, "share_ok": x}`.  Then it
serves until it is killed.  PySyncObj's nodes forward what followers submit
to their leader; ours do not take calls in process, so the leader submits
all of it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import anyio
import anyio.lowlevel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rsm import Replica
from rsm.config import ReplicaConfig
from rsm.host import CallRequest, Outcome, replica_metadata, run_replica_main
from rsm.testing.workload import AuditCounter

WARMUP_S = 1.0
DRAIN_S = 4.0
LEAD_POLL_S = 0.01
SLICE_COMMANDS = 1_000


def leading(replica: Replica) -> bool:
    term = replica.term
    return replica.is_leader and term is not None and term.accepting


class Tally:
    """The answerer of every command of one probe: counts outcomes as they come."""

    __slots__ = ("ok", "failed")

    def __init__(self) -> None:
        self.ok = 0
        self.failed = 0

    def answer(self, op: int, request_id: int, outcome: Outcome, index: int) -> None:
        if outcome.ok:
            self.ok += 1
        else:
            self.failed += 1


async def probe(replica: Replica, rate: int, *, probe_s: int, pad: str) -> float:
    """The share of `rate` commands per second for `probe_s` s acknowledged within the drain.

    A second's commands are handed over in slices with the event loop let run in between,
    as PySyncObj's submitting thread lets its node's thread run: one slice of a whole
    second's load would hold the loop, and the replica's ZooKeeper session with it."""
    tally = Tally()
    sent = 0
    started = time.monotonic()
    for second in range(probe_s):
        for _ in range(rate):
            sent += 1
            replica.handle_call(CallRequest(0, "add", ["inprocess", sent, pad], {}), tally)
            if sent % SLICE_COMMANDS == 0:
                replica.flush()
                await anyio.lowlevel.checkpoint()
        replica.flush()
        await anyio.sleep(max(0.0, started + second + 1 - time.monotonic()))
    with anyio.move_on_after(DRAIN_S):
        while tally.ok + tally.failed < sent:
            await anyio.sleep(0.05)
    return tally.ok / sent


async def node(arguments: argparse.Namespace) -> int:
    async with (
        replica_metadata(
            arguments.zk,
            ledger_root=arguments.ledger_root,
            session_timeout_ms=arguments.session_timeout_ms,
        ) as (store, ledgers),
        Replica(
            AuditCounter,
            app=arguments.app,
            store=store,
            ledgers=ledgers,
            listen=arguments.listen,
            config=ReplicaConfig(),
        ) as replica,
    ):
        while not leading(replica):
            await anyio.sleep(LEAD_POLL_S)
        await anyio.sleep(WARMUP_S)
        pad = "x" * arguments.pad_chars
        share = await probe(replica, arguments.rate, probe_s=arguments.seconds, pad=pad)
        partial = arguments.result.with_suffix(".partial")
        partial.write_text(json.dumps({"rate": arguments.rate, "share_ok": share}))
        partial.rename(arguments.result)
        await anyio.sleep_forever()
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zk", required=True)
    parser.add_argument("--ledger-root", required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--result", type=Path, required=True)
    parser.add_argument("--session-timeout-ms", type=int, required=True)
    parser.add_argument("--pad-chars", type=int, required=True)
    parser.add_argument("--rate", type=int, required=True, help="commands per second")
    parser.add_argument("--seconds", type=int, required=True, help="of load")
    arguments = parser.parse_args()
    sys.exit(
        run_replica_main(
            node, arguments, logger=logging.getLogger("rsm_inprocess"), failed_event="bench.failed"
        )
    )


if __name__ == "__main__":
    main()
