"""`bookie shell decommission` that runs out of time says why, once, and lists the ledgers
still naming the bookie in one problem.

What the operations review saw: three bookies, one stopped and decommissioned with
`--timeout-s 30`, exit 1 with only `PROBLEM recover: ledger N still names the bookie` 34
times; the reason (no spare bookie to move to) was only in the workers' logs.  Here the
cluster is the in-memory metadata store (no ZooKeeper, no bookie process), with no worker
either: nothing repairs the ledgers, and the time allowed is 0."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

from bookie.core.metadata import LedgerMetadata
from bookie.meta.api import MetadataStore
from bookie.meta.bookies import (
    BookieInfo,
    Cookie,
    init_cluster,
    register,
    write_cookie,
)
from bookie.meta.ledgers import LedgerManager
from bookie.meta.memory import MemoryMetadataServer
from bookie.meta.underreplication import UnderReplication
from bookie.tools import cli, cluster
from bookie.wire.packet import DigestType

ROOT = "/ledgers"
BOOKIES = ("bk1:3181", "bk2:3181", "bk3:3181")
LEAVING = "bk3:3181"
LEDGERS = 34


def ledger(ledger_id: int, ensemble: tuple[str, ...]) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=len(ensemble),
        write_quorum=2,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ensembles=((0, ensemble),),
    )


def fake_cluster(
    monkeypatch: pytest.MonkeyPatch,
    *,
    running: tuple[str, ...],
    ensembles: list[tuple[str, ...]],
    autorecovery_enabled: bool = True,
) -> None:
    """`cluster._metadata` opens an in-memory cluster: cookies of every bookie in
    BOOKIES (and any in `running`), `running` registered, a ledger per ensemble (ids
    from 1)."""

    @contextlib.asynccontextmanager
    async def metadata(_: cluster.Cluster) -> AsyncIterator[MetadataStore]:
        store = MemoryMetadataServer().client()
        instance_id = await init_cluster(store, ROOT)
        for bookie_id in sorted({*BOOKIES, *running}):
            cookie = Cookie(instance_id, bookie_id, bookie_id, "/j", ("/l",))
            await write_cookie(store, cookie, None, ROOT)
        ledgers = LedgerManager(store, ROOT)
        for ledger_id, ensemble in enumerate(ensembles, start=1):
            await ledgers.create(ledger(ledger_id, ensemble))
        await UnderReplication(store, ROOT).set_enabled(autorecovery_enabled)
        async with contextlib.AsyncExitStack() as registrations:
            for bookie_id in running:
                await registrations.enter_async_context(
                    register(store, bookie_id, BookieInfo(bookie_id), root=ROOT)
                )
            yield store

    monkeypatch.setattr(cluster, "_metadata", metadata)


def decommission(*more: str) -> list[str]:
    return ["shell", "decommission", LEAVING, "--zk", "zk:2181", "--timeout-s", "0", *more]


def test_no_spare_bookie_is_the_reason_given_once_before_one_problem(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_cluster(monkeypatch, running=BOOKIES[:2], ensembles=[BOOKIES] * LEDGERS)
    assert cli.main(decommission()) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{LEDGERS} ledgers naming {LEAVING} marked"
    assert lines[1].startswith("not decommissioned, cookie kept: why: no spare bookie to move to")
    assert "2 writable: bk1:3181, bk2:3181" in lines[1]
    problems = [line for line in lines if line.startswith("PROBLEM")]
    assert problems == [
        f"PROBLEM recover: {LEDGERS} ledgers still name the bookie after 0 s: "
        "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ... (24 more)"
    ]
    assert lines[-2:] == ["1 problems", f"reproduce: bookie {' '.join(decommission())}"]


def test_the_json_problem_has_every_ledger_and_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_cluster(monkeypatch, running=BOOKIES[:2], ensembles=[BOOKIES] * 3)
    result = cluster.decommission(cluster.Cluster("zk:2181"), LEAVING, 0)
    assert result["cookie_removed"] is False
    [problem] = result["problems"]
    assert problem["ledger_ids"] == [1, 2, 3]
    assert problem["reason"].startswith("no spare bookie to move to: 3 of the 3 ledgers")


def test_a_spare_bookie_leaves_the_reason_to_the_workers(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fourth bookie is up: the metadata does not say why nothing moved yet."""
    fake_cluster(monkeypatch, running=(*BOOKIES[:2], "bk4:3181"), ensembles=[BOOKIES])
    assert cli.main(decommission()) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "autorecovery.repair_failed" in lines[1]
    assert "no spare" not in lines[1]
    assert lines[2] == "PROBLEM recover: 1 ledger still names the bookie after 0 s: 1"


def test_autorecovery_disabled_is_a_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_cluster(
        monkeypatch,
        running=(*BOOKIES[:2], "bk4:3181"),
        ensembles=[BOOKIES],
        autorecovery_enabled=False,
    )
    assert cli.main(decommission()) == 1
    assert "why: autorecovery is disabled" in capsys.readouterr().out
