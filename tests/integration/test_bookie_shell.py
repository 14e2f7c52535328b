"""`bookie shell` against real bookies: over the network (bookieinfo, readentry,
listentries), on a bookie's files (lastmark, readjournal), and on a whole cluster
through its ZooKeeper (listbookies, listledgers, ledgermetadata, readledger,
simpletest, recover); human output and `--json`."""

from __future__ import annotations

import shlex
import signal
from pathlib import Path

import pytest

from bookie.client.bookie_conn import BookieConnection
from bookie.client.ledger_client import password_hash
from bookie.core.metadata import close, new_ledger
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.bookies import Cookie, init_cluster, write_cookie
from bookie.meta.ledgers import LedgerManager
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.packet import DigestType

from .support.entries import DIGEST, KEY, PASSWORD, packet, payload
from .support.ledgers import start_bookies
from .support.processes import HOST, BookieCluster, BookieSetup
from .support.shell import shell, shell_json

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

LEDGER = 77
ENTRIES = 5


async def written(cluster: BookieCluster) -> BookieSetup:
    setup = cluster.add_bookie(ledger_dirs=1)
    await cluster.start(setup)
    async with BookieConnection.connect(HOST, setup.port) as connection:
        for entry_id in range(ENTRIES):
            await connection.add(LEDGER, entry_id, KEY, packet(LEDGER, entry_id))
    return setup


async def test_network_commands(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await written(cluster)
        info = await shell_json("bookieinfo", setup.address)
        assert info["read_only"] is False
        assert 0 < info["free_bytes"] <= info["total_bytes"]

        entry = await shell_json("readentry", setup.address, str(LEDGER), "2")
        assert entry["entry_id"] == 2
        assert entry["entry_lac"] == 1
        assert entry["digest"] == "ok"
        assert entry["payload_bytes"] == 100
        assert bytes.fromhex(entry["payload_preview"]) == payload(LEDGER, 2)[:64]
        wrong = await shell_json(
            "readentry",
            setup.address,
            str(LEDGER),
            "2",
            "--digest",
            "hmac_sha256",
            "--password",
            PASSWORD.decode(),
        )
        assert wrong["digest"].startswith("MISMATCH"), "the ledger's digest is CRC32C"

        _, last, _ = await shell("readentry", setup.address, str(LEDGER), "-1")
        assert "entry_id       4" in last
        assert "digest         ok" in last

        _, human, _ = await shell("listentries", setup.address, str(LEDGER))
        assert f"ranges     0-{ENTRIES - 1}" in human

        code, _, error = await shell("readentry", setup.address, "999", "0", check=False)
        assert code == 1
        assert "answered ENOLEDGER" in error
        code, _, error = await shell("bookieinfo", "127.0.0.1:1", check=False)
        assert code == 2
        assert "Is it running" in error


async def test_offline_commands(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        setup = await written(cluster)
        config = str(setup.config_file)
        marks = await shell_json("lastmark", "--config", config)
        assert set(marks["ledger_dirs"]) == {str(path) for path in setup.ledger_dirs}
        journal = await shell_json("readjournal", "--config", config, "--ledger", str(LEDGER))
        kinds = [record["kind"] for record in journal["records"]]
        assert kinds == ["MASTER_KEY"] + ["ENTRY"] * ENTRIES
        assert [record["argument"] for record in journal["records"][1:]] == list(range(ENTRIES))
        # The running bookie's newest journal file has space allocated ahead, nothing else.
        newest = str(max(setup.journal_dir.glob("*.journal")))
        assert [(tail["file"], tail["verdict"].split(":")[0]) for tail in journal["tails"]] == [
            (newest, "zeros")
        ]
        _, human, _ = await shell("readjournal", "--journal-dir", str(setup.journal_dir))
        assert f"{ENTRIES + 1} records" in human
        _, human, _ = await shell("lastmark", "--ledger-dirs", *map(str, setup.ledger_dirs))
        assert "replay starts at" in human


# --- cluster commands -------------------------------------------------------------------------

CLOSED_LEDGER = 1_000
OPEN_LEDGER = 1_001
DOWN_LEDGER = 1_002
OTHER_PAYLOAD = b"not what the writer wrote".ljust(100, b".")


def squeezed(text: str) -> list[str]:
    """The lines of `text` with runs of spaces as one (the human tables align columns)."""
    return [" ".join(line.split()) for line in text.splitlines()]


async def hand_made_ledger(
    cluster: BookieCluster, ledger_id: int, ensemble: list[str], *, closed_at: int | None
) -> None:
    """Ledger metadata written directly (so its ctime and ensemble are known)."""
    metadata = new_ledger(
        ledger_id,
        ensemble,
        write_quorum=3,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=password_hash(PASSWORD),
        ctime_ms=0,
    )
    if closed_at is not None:
        metadata = close(metadata, closed_at, 100 * (closed_at + 1))
    async with ZkMetadataStore.connect(cluster.zk_servers) as store:
        await LedgerManager(store, cluster.zk_root).create(metadata)


async def add_entries(
    setup: BookieSetup, entries: dict[int, bytes], ledger_id: int = CLOSED_LEDGER
) -> None:
    async with BookieConnection.connect(HOST, setup.port) as connection:
        for entry_id, entry_packet in entries.items():
            await connection.add(ledger_id, entry_id, KEY, entry_packet)


async def add_open_entries(setup: BookieSetup, entry_ids: range) -> None:
    async with BookieConnection.connect(HOST, setup.port) as connection:
        for entry_id in entry_ids:
            await connection.add(OPEN_LEDGER, entry_id, KEY, packet(OPEN_LEDGER, entry_id))


async def test_cluster_commands(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        zk = ("--zk", cluster.zk_servers, "--zk-root", zk_root)
        writable = [cluster.add_bookie(ledger_dirs=1) for _ in range(3)]
        read_only, down = cluster.add_bookie(ledger_dirs=1), cluster.add_bookie(ledger_dirs=1)
        stopped = (await start_bookies(cluster, [*writable, down]))[-1]
        await cluster.start(read_only, "--read-only", wait_for="bookie.ready")
        stopped.send(signal.SIGTERM)
        assert await stopped.wait_exit() == 0

        listed = await shell_json("listbookies", *zk)
        assert listed == {
            "writable": [
                {"bookie_id": setup.bookie_id, "address": setup.address, "rack": None}
                for setup in sorted(writable, key=lambda setup: setup.bookie_id)
            ],
            "read_only": [
                {"bookie_id": read_only.bookie_id, "address": read_only.address, "rack": None}
            ],
            "down": [{"bookie_id": down.bookie_id, "address": down.address}],
        }
        _, human, _ = await shell("listbookies", *zk)
        assert squeezed(human) == [
            "state bookie address rack",
            *(f"writable {item['bookie_id']} {item['address']} -" for item in listed["writable"]),
            f"read-only {read_only.bookie_id} {read_only.address} -",
            f"down {down.bookie_id} {down.address} -",
            "3 writable, 1 read-only, 1 down",
        ]

        # A closed ledger whose first bookie holds another entry 2 and whose third
        # lacks entry 1.  (A plain read asks the bookies of entry N's write set from
        # position N mod 3 on, so it reads neither of those copies.)
        ensemble = [setup.bookie_id for setup in writable]
        await hand_made_ledger(cluster, CLOSED_LEDGER, ensemble, closed_at=2)
        whole = {entry_id: packet(CLOSED_LEDGER, entry_id) for entry_id in range(3)}
        other = DIGEST.build_entry(CLOSED_LEDGER, 2, 1, 300, OTHER_PAYLOAD)
        await add_entries(writable[0], {**whole, 2: other})
        await add_entries(writable[1], whole)
        await add_entries(writable[2], {0: whole[0], 2: whole[2]})
        # An open ledger: four entries written, the last one carries LAC 2.
        await hand_made_ledger(cluster, OPEN_LEDGER, ensemble, closed_at=None)
        for setup in writable:
            await add_open_entries(setup, range(4))

        assert await shell_json("listledgers", *zk) == {"ledgers": [CLOSED_LEDGER, OPEN_LEDGER]}
        _, human, _ = await shell("listledgers", *zk)
        assert human.splitlines() == [str(CLOSED_LEDGER), str(OPEN_LEDGER), "2 ledgers"]

        _, human, _ = await shell("ledgermetadata", str(CLOSED_LEDGER), *zk)
        assert squeezed(human) == [
            f"ledger_id {CLOSED_LEDGER}",
            "state closed",
            "ensemble_size 3",
            "write_quorum 3",
            "ack_quorum 2",
            "digest_type crc32c",
            "last_entry_id 2",
            "length 300",
            "ctime_ms 0",
            f"ensemble from entry 0: {', '.join(ensemble)}",
        ]
        code, _, error = await shell("ledgermetadata", "5", *zk, check=False)
        assert (code, error) == (
            2,
            "bookie shell ledgermetadata: there is no ledger 5 (see listledgers)\n",
        )
        metadata = await shell_json("ledgermetadata", str(OPEN_LEDGER), *zk)
        assert (metadata["state"], metadata["last_entry_id"]) == ("open", -1)
        assert metadata["ensembles"] == [[0, ensemble]]

        password = ("--password", PASSWORD.decode())
        _, human, _ = await shell("readledger", str(CLOSED_LEDGER), *password, *zk)
        assert squeezed(human) == [
            f"ledger {CLOSED_LEDGER} (closed, readable to entry 2): entries 0-2",
            "entry bytes payload",
            *(f"{n} 100 {payload(CLOSED_LEDGER, n)[:16]!r}" for n in range(3)),
            "no problems",
        ]

        code, human, _ = await shell(
            "readledger", str(CLOSED_LEDGER), "--all-bookies", *password, *zk, check=False
        )
        assert code == 1
        first, second, third = ensemble
        assert squeezed(human)[-4:] == [
            f"PROBLEM entry 1 bookie {third}: lacks it",
            f"PROBLEM entry 2 bookie {first}: differs from the majority (100 bytes, "
            "majority 100 bytes)",
            "2 problems",
            "reproduce: bookie "
            + shlex.join(
                ["shell", "readledger", str(CLOSED_LEDGER), "--all-bookies", *password, *zk]
            ),
        ]
        compared = await shell_json(
            "readledger", str(CLOSED_LEDGER), "--all-bookies", "--from", "1", *password, *zk, code=1
        )
        assert [entry["copies"] for entry in compared["entries"]] == [
            {second: "ok", third: "missing", first: "ok"},
            {third: "ok", first: "differs", second: "ok"},
        ]
        assert [problem["bookie_id"] for problem in compared["problems"]] == [third, first]

        code, _, error = await shell("readledger", str(CLOSED_LEDGER), *zk, check=False)
        assert (code, error) == (
            2,
            f"bookie shell readledger: ledger {CLOSED_LEDGER} has a password: pass it with "
            "--password-file\n",
        )

        opened = await shell_json("readledger", str(OPEN_LEDGER), *password, *zk)
        assert (opened["state"], opened["readable_to"]) == ("open", 2)
        assert [entry["entry_id"] for entry in opened["entries"]] == [0, 1, 2]
        code, _, error = await shell(
            "readledger", str(OPEN_LEDGER), "--to", "3", *password, *zk, check=False
        )
        assert (code, error) == (
            2,
            f"bookie shell readledger: ledger {OPEN_LEDGER} is readable up to entry 2 "
            "(its last add confirmed): --to 3 is past it\n",
        )
        # Reading fenced nothing: the writer goes on.
        for setup in writable:
            await add_open_entries(setup, range(4, 5))

        tested = await shell_json("simpletest", "--entries", "10", *zk)
        assert [step["step"] for step in tested["steps"]] == ["create", "write", "read", "delete"]
        assert tested["problems"] == []
        assert sorted(tested["ensemble"]) == sorted(ensemble)
        assert await shell_json("listledgers", *zk) == {"ledgers": [CLOSED_LEDGER, OPEN_LEDGER]}
        _, human, _ = await shell("simpletest", "--entries", "5", *zk)
        ledger_id = int(human.split()[2])
        assert squeezed(human)[:4] == [
            f"create ledger {ledger_id}",
            "write 5 entries",
            "read 5 entries, all as written",
            f"delete ledger {ledger_id}",
        ]
        code, human, _ = await shell("simpletest", "--ensemble", "4", *zk, check=False)
        assert code == 1
        assert squeezed(human)[-3:] == [
            "PROBLEM create: NotEnoughBookies: need 4 writable bookies, have 3 (3 available, 0 "
            "excluded)",
            "1 problems",
            "reproduce: bookie " + shlex.join(["shell", "simpletest", "--ensemble", "4", *zk]),
        ]

        # A ledger one of whose bookies is down and whose last entry no bookie holds:
        # plain reads get the first two from the others, --all-bookies names the
        # down bookie for every entry.
        on_down = [ensemble[0], ensemble[1], down.bookie_id]
        await hand_made_ledger(cluster, DOWN_LEDGER, on_down, closed_at=2)
        for setup in writable[:2]:
            await add_entries(
                setup, {n: packet(DOWN_LEDGER, n) for n in range(2)}, ledger_id=DOWN_LEDGER
            )
        code, human, _ = await shell("readledger", str(DOWN_LEDGER), *password, *zk, check=False)
        write_set_2 = [down.bookie_id, ensemble[0], ensemble[1]]
        assert (code, squeezed(human)) == (
            1,
            [
                f"ledger {DOWN_LEDGER} (closed, readable to entry 2): entries 0-2",
                "entry bytes payload",
                *(f"{n} 100 {payload(DOWN_LEDGER, n)[:16]!r}" for n in range(2)),
                "2 - -",
                f"PROBLEM entry 2: no valid copy of entry 2 of ledger {DOWN_LEDGER} on "
                f"{write_set_2}: 2 absent, 0 corrupt, the rest failed",
                "1 problems",
                "reproduce: bookie "
                + shlex.join(["shell", "readledger", str(DOWN_LEDGER), *password, *zk]),
            ],
        )
        compared = await shell_json(
            "readledger", str(DOWN_LEDGER), "--all-bookies", *password, *zk, code=1
        )
        assert [
            (problem["entry_id"], problem["bookie_id"]) for problem in compared["problems"]
        ] == [
            (0, down.bookie_id),
            (1, down.bookie_id),
            (2, down.bookie_id),
            (2, ensemble[0]),
            (2, ensemble[1]),
        ]
        assert {problem["problem"] for problem in compared["problems"][:3]} == {
            "unreachable: not registered (down?)"
        }
        assert compared["entries"][2]["copies"] == {
            down.bookie_id: "unreachable",
            ensemble[0]: "missing",
            ensemble[1]: "missing",
        }


async def test_cluster_commands_bad_input(zookeeper: LocalZooKeeper, zk_root: str) -> None:
    zk = ("--zk", zookeeper.connect_string, "--zk-root", zk_root)
    code, _, error = await shell("ledgermetadata", "5", *zk, check=False)
    assert (code, error) == (
        2,
        f"bookie shell ledgermetadata: there is no cluster under {zk_root} in ZooKeeper "
        f"{zookeeper.connect_string} (no INSTANCEID): is --zk-root the bookies' zk_root?\n",
    )
    code, _, error = await shell("listledgers", "--zk", "127.0.0.1:1", check=False)
    assert code == 2
    assert error.startswith("bookie shell listledgers: cannot reach ZooKeeper at 127.0.0.1:1")
    code, _, error = await shell("listbookies", "--zk-root", "ledgers", check=False)
    assert (code, error) == (
        2,
        "bookie shell listbookies: --zk-root 'ledgers': expected an absolute znode path "
        "below '/', e.g. /ledgers\n",
    )
    code, _, error = await shell("readledger", "x", *zk, check=False)
    assert code == 2
    assert "invalid int value: 'x'" in error


async def test_recover_refuses_a_bookie_that_is_not_a_member(
    zookeeper: LocalZooKeeper, zk_root: str
) -> None:
    member = "10.0.0.1:3181"
    async with ZkMetadataStore.connect(zookeeper.connect_string) as store:
        instance_id = await init_cluster(store, zk_root)
        cookie = Cookie(instance_id, member, member, "/data/journal", ("/data/ledgers",))
        await write_cookie(store, cookie, None, zk_root)
    zk = ("--zk", zookeeper.connect_string, "--zk-root", zk_root)
    code, _, error = await shell("recover", "garbage", *zk, check=False)
    assert (code, error) == (
        2,
        "bookie shell recover: bookie garbage is not a member of the cluster (no cookie; see "
        "listbookies)\n",
    )
    assert await shell_json("recover", member, *zk) == {"bookie_id": member, "ledgers_marked": []}
