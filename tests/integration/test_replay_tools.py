"""The investigation commands of `rsm` against a real cluster holding a known history.

Three bookie processes and ZooKeeper hold the log of
tests/integration/support/replay_cluster.py (29 commands in 3 segments,
state hashes every 5 commands, written through the real `Notes` class); each
command runs as a user runs it, `python -m rsm.tools.cli ...`, and its output
is compared exactly.  `verify`, `bisect` and `determinism` pass on `Notes` and
catch its deliberately wrong twins (support/replay_apps.py); an export is
replayed with no cluster; bad input gets a message and an exit status.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from bookie.address import parse_address
from bookie.client.bookie_conn import BookieConnection
from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk import ZkMetadataStore
from bookie.wire.packet import Digest, master_key
from rsm.core.layout import AppLayout
from rsm.core.log_format import encode_batch, encode_command, encode_log
from rsm.core.log_state import Log, Segment, SegmentState, truncate
from rsm.runtime.log import LogStore
from rsm.testing.logs import Call, LogWriter

from .support.replay_apps import Notes, NotesShadow
from .support.replay_cluster import (
    CONFIG,
    NOTES,
    ROOT,
    T0,
    HistoryCluster,
    history_cluster,
    rsm,
)
from .support.schemas import RECORD_OPTIONAL, RECORD_SCHEMA, check_schema

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

APPS = "tests.integration.support.replay_apps:"
HASHES = ["--state-hash-every", "5"]


@pytest.fixture(scope="module")
async def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[HistoryCluster]:
    directory = tmp_path_factory.mktemp("replay")
    async with history_cluster(zookeeper, "/replay-tools", directory) as running:
        yield running


@pytest.fixture(scope="module")
async def exported(cluster: HistoryCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "notes.rsmlog"
    code, out, err = await rsm("log", "export", *cluster.source, "--to", str(path))
    assert (code, err) == (0, ""), err
    assert (
        out
        == f"exported {cluster.app} indexes 1..29: 14 entries, 804 bytes of payload, to {path}\n"
    )
    return path


# --- rsm log dump -----------------------------------------------------------------------------

DUMP = """\
INDEX  EPOCH  LEDGER:ENTRY:SLOT  TIME                      SESSION     COMMAND         ARGS
1      1      0:0:0              2023-11-14T22:13:20.000Z  -           (leader-start)  r1
2      1      0:1:0              2023-11-14T22:13:20.010Z  -           put             a one
3      1      0:1:1              2023-11-14T22:13:20.010Z  -           put             b two
4      1      0:2:0              2023-11-14T22:13:20.020Z  c1c1c1c1:1  incr            a
5      1      0:2:1              2023-11-14T22:13:20.020Z  c1c1c1c1:2  incr            a
6      1      0:3:0              2023-11-14T22:13:20.030Z  -           tag             a x y z w
  state hash at index 5: f755309c6272a55c12fe861aed34e068432af1132f27b58fb3336b93b61874ec
7      1      0:4:0              2023-11-14T22:13:20.040Z  -           put             c low
8      1      0:4:1              2023-11-14T22:13:20.040Z  -           incr            c
9      2      1:0:0              2023-11-14T22:13:21.000Z  -           (leader-start)  r2
10     2      1:1:0              2023-11-14T22:13:21.010Z  c1c1c1c1:3  incr            b
11     2      1:1:1              2023-11-14T22:13:21.010Z  -           put             a uno
12     2      1:2:0              2023-11-14T22:13:21.020Z  -           tag             b p q r s t
  state hash at index 11: 063bf57010995b9d17efb3c86cd68e12dbbc2061db5507feccb4f4f6fad5cad7
13     2      1:3:0              2023-11-14T22:13:21.030Z  -           incr            a
14     2      1:3:1              2023-11-14T22:13:21.030Z  -           incr            a
15     2      1:3:2              2023-11-14T22:13:21.030Z  -           incr            a
16     2      1:3:3              2023-11-14T22:13:21.030Z  -           incr            a
17     3      2:0:0              2023-11-14T22:13:22.000Z  -           (leader-start)  r1
  state hash at index 16: 87f066a73deb43ef0eaa52a4e508f9a66c77594efdd62639c4a63425c0eeb63b
18     3      2:1:0              2023-11-14T22:13:22.010Z  -           put             c again
19     3      2:1:1              2023-11-14T22:13:22.010Z  c1c1c1c1:4  incr            b
20     3      2:2:0              2023-11-14T22:13:22.020Z  -           put             d 0
21     3      2:2:1              2023-11-14T22:13:22.020Z  -           put             d 1
22     3      2:2:2              2023-11-14T22:13:22.020Z  -           put             d 2
23     3      2:2:3              2023-11-14T22:13:22.020Z  -           put             d 3
24     3      2:2:4              2023-11-14T22:13:22.020Z  -           put             d 4
25     3      2:2:5              2023-11-14T22:13:22.020Z  -           put             d 5
26     3      2:3:0              2023-11-14T22:13:22.030Z  -           incr            d
  state hash at index 25: 88e2f49f9b32406f37486d5bd788c7edf053bb3280784e481ec6ae949b37dc27
27     3      2:3:1              2023-11-14T22:13:22.030Z  -           put             e end
28     3      2:4:0              2023-11-14T22:13:22.040Z  -           incr            a
29     3      2:4:1              2023-11-14T22:13:22.040Z  -           incr            e
"""


async def test_dump_shows_every_command_with_both_coordinates(cluster: HistoryCluster) -> None:
    assert await rsm("log", "dump", *cluster.source) == (0, DUMP, "")


async def test_dump_of_an_exported_file_is_the_same(exported: Path) -> None:
    assert await rsm("log", "dump", "--log", str(exported)) == (0, DUMP, "")


async def test_the_follow_along_script_writes_the_same_history(cluster: HistoryCluster) -> None:
    """scripts/notes_history.py, which docs/tools.md gives readers to follow by hand."""
    zk = ["--zk", cluster.zookeeper.connect_string, "--ledger-root", cluster.zk_root]
    script = [sys.executable, str(ROOT / "scripts" / "notes_history.py"), *zk]
    done = await anyio.run_process([*script, "--app", "followed"], cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode().startswith("wrote followed: 29 commands in ledgers ")
    replays = [
        await rsm("replay", *source, "--class", NOTES, "--json")
        for source in (cluster.source, cluster.source_of("followed"))
    ]
    assert [code for code, _, _ in replays] == [0, 0]
    known, followed = (json.loads(out) for _, out, _ in replays)
    assert followed["state_hash"] == known["state_hash"]
    assert followed["commands"] == known["commands"] == 29
    again = await anyio.run_process([*script, "--app", "followed"], cwd=ROOT, check=False)
    assert again.returncode == 2
    assert again.stderr == b"error: application 'followed' exists already\n"


async def test_export_of_a_range_reports_in_json(cluster: HistoryCluster, tmp_path: Path) -> None:
    path = tmp_path / "part.rsmlog"
    words = ["log", "export", *cluster.source, "--to", str(path), "--from", "10"]
    code, out, _ = await rsm(*words, "--through", "2:1:1", "--json")
    assert code == 0
    report = json.loads(out)
    assert 0 < report.pop("payload_bytes") < path.stat().st_size
    assert report == {
        "schema": 1,
        "app": cluster.app,
        "from": 10,
        "to": 19,
        "entries": 5,
        "snapshot": None,
        "replayable": False,
        "file": str(path),
    }
    _, dumped, _ = await rsm("log", "dump", "--log", str(path), "--json")
    assert [json.loads(line)["index"] for line in dumped.splitlines()] == list(range(10, 20))
    code, _, err = await rsm("log", "dump", "--log", str(path), "--from", "9")
    assert code == 2
    assert err == f"error: Truncated: index 9 is not in {path}: it holds indexes 10..19\n"
    # A part of the log, whole: its segments are checked as far as it holds them.
    code, out, _ = await rsm("log", "check", "--log", str(path))
    assert (code, out.splitlines()[-1]) == (0, "ok up to index 19")


async def test_a_range_asked_empty_is_refused(cluster: HistoryCluster, tmp_path: Path) -> None:
    """Never an empty answer that looks like one: a range that is empty only because of how
    it was asked is a usage error."""
    path = tmp_path / "empty.rsmlog"
    assert await rsm("log", "dump", *cluster.source, "--from", "5", "--to", "4") == (
        2,
        "",
        "error: InvalidConfig: --from 5 is past --to 4\n",
    )
    words = ["log", "export", *cluster.source, "--to", str(path), "--from", "10"]
    assert await rsm(*words, "--through", "5") == (
        2,
        "",
        "error: InvalidConfig: --from 10 is past --through 5\n",
    )
    assert not path.exists()


async def test_dump_json_is_one_record_per_line_in_its_schema(cluster: HistoryCluster) -> None:
    code, out, _err = await rsm("log", "dump", *cluster.source, "--json")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["index"] for line in lines] == list(range(1, 30))
    for line in lines:
        check_schema(line, RECORD_SCHEMA, RECORD_OPTIONAL)
    assert lines[3] == {
        "schema": 1,
        "index": 4,
        "epoch": 1,
        "ledger_id": 0,
        "entry_id": 2,
        "slot": 0,
        "time_ms": 1_700_000_000_020,
        "seed": 7,
        "command": "incr",
        "args": ["a"],
        "kwargs": {},
        "client_id": "c1c1c1c1",
        "seq": 1,
        "ack_seq": 0,
        "state_hash": None,
    }
    assert lines[0]["replica_id"] == "r1"
    assert lines[5]["state_hash"] == {
        "index": 5,
        "digest": "f755309c6272a55c12fe861aed34e068432af1132f27b58fb3336b93b61874ec",
    }


async def test_dump_ranges_are_inclusive_and_take_either_coordinate(
    cluster: HistoryCluster,
) -> None:
    async def indexes(*words: str) -> list[int]:
        code, out, _ = await rsm("log", "dump", *cluster.source, *words)
        assert code == 0
        assert out.startswith("INDEX  EPOCH  LEDGER:ENTRY:SLOT  TIME  ")
        return [int(line.split()[0]) for line in out.splitlines()[1:] if line[0] != " "]

    assert await indexes("--from", "1:1:1", "--to", "2:1") == list(range(11, 19))
    assert await indexes("--from", "11", "--to", "18") == list(range(11, 19))
    assert await indexes("--last", "2") == [28, 29]
    assert await indexes("--command", "tag", "--limit", "1") == [6]
    assert await indexes("--session", "C1C1C1C1") == [4, 5, 10, 19]
    assert await indexes("--session", "c1c1") == [4, 5, 10, 19]
    assert await indexes("--command", "incr", "--from", "20") == [26, 28, 29]


async def test_dump_stats_json(cluster: HistoryCluster) -> None:
    code, out, _ = await rsm("log", "dump", *cluster.source, "--stats", "--from", "9", "--json")
    assert code == 0
    assert json.loads(out) == {
        "schema": 1,
        "app": cluster.app,
        "from": 9,
        "to": 29,
        "commands": 21,
        "state_hashes": 3,
        "by_command": {
            "(leader-start)": {"count": 2, "bytes": 10},
            "incr": {"count": 9, "bytes": 134},
            "put": {"count": 9, "bytes": 143},
            "tag": {"count": 1, "bytes": 23},
        },
        "by_epoch": {
            "2": {"entries": 4, "commands": 8, "bytes": 218},
            "3": {"entries": 5, "commands": 13, "bytes": 344},
        },
    }


async def test_dump_stats_count_commands_and_bytes(cluster: HistoryCluster) -> None:
    code, out, _ = await rsm("log", "dump", *cluster.source, "--stats")
    assert code == 0
    assert out == (
        f"{cluster.app}: indexes 1..29, 29 commands, 4 state hashes\n"
        "\n"
        "COMMAND         COUNT  BYTES\n"
        "(leader-start)  3      15\n"
        "incr            12     184\n"
        "put             12     194\n"
        "tag             2      44\n"
        "\n"
        "EPOCH  ENTRIES  COMMANDS  BYTES\n"
        "1      5        8         242\n"
        "2      4        8         218\n"
        "3      5        13        344\n"
    )


# --- rsm log check ----------------------------------------------------------------------------


async def test_check_of_a_whole_log(cluster: HistoryCluster, exported: Path) -> None:
    expected = (
        f"{cluster.app}: 3 segments (0 open), 14 entries, 29 commands, 804 bytes\n"
        "ok up to index 29\n"
    )
    assert await rsm("log", "check", *cluster.source) == (0, expected, "")
    assert await rsm("log", "check", "--log", str(exported)) == (0, expected, "")
    code, out, _ = await rsm("log", "check", *cluster.source, "--json")
    assert code == 0
    assert json.loads(out) == {
        "schema": 1,
        "app": cluster.app,
        "segments": 3,
        "open_segments": 0,
        "entries": 14,
        "commands": 29,
        "payload_bytes": 804,
        "end_index": 29,
        "ok_up_to": 29,
        "problems": [],
    }


async def test_check_finds_a_gap_and_a_corrupt_entry_and_says_how_far_the_log_is_good(
    cluster: HistoryCluster,
) -> None:
    app = "damaged-" + cluster.app
    items = [encode_command("put", ["k", "v"])]

    def batch(epoch: int, first_index: int) -> bytes:
        return encode_batch(
            epoch=epoch, first_index=first_index, timestamp_ms=1, seed=0, items=items
        )

    async with cluster.clients() as (store, ledgers):
        written: list[int] = []
        for payloads in ([batch(1, 1), batch(1, 2)], [batch(2, 3), b"junk", batch(2, 5)]):
            handle = await ledgers.create_ledger(3, 3, 2, password=b"rsm")
            for payload in payloads:
                await handle.append(payload)
            await handle.close()
            written.append(handle.ledger_id)
        logs = LogStore(store, AppLayout.of(app))
        await logs.ensure_layout()
        log = Log(
            2,
            (
                Segment(written[0], 1, 1, SegmentState.CLOSED, 2),
                Segment(written[1], 2, 3, SegmentState.CLOSED, 5),
            ),
        )
        _old, version = await logs.read()
        await store.set(AppLayout.of(app).log, encode_log(log), version)
    source = cluster.source_of(app)
    code, out, _ = await rsm("log", "check", *source)
    junk = f"ledger {written[1]} entry 1"
    assert code == 1
    assert out.splitlines() == [
        f"{app}: 2 segments (0 open), 4 entries, 3 commands, {3 * len(batch(1, 1)) + 4} bytes",
        f"PROBLEM undecodable: {junk} does not decode: log entry is not CBOR: "
        + out.split("not CBOR: ")[1].splitlines()[0],
        "ok up to index 3",
        f"reproduce: rsm log check {' '.join(source)}",
    ]
    code, out, _ = await rsm("log", "check", *source, "--keep-going", "--json")
    report = json.loads(out)
    assert code == 1
    assert [problem["kind"] for problem in report["problems"]] == ["undecodable", "gap"]
    assert report["problems"][1] == {
        "kind": "gap",
        "message": f"ledger {written[1]} entry 2 starts at index 5; the previous entry ended at 3",
        "ledger_id": written[1],
        "entry_id": 2,
        "index": 4,
    }
    assert report["ok_up_to"] == 3
    # A range the log no longer holds: truncated away.
    async with ZkMetadataStore.connect(cluster.zookeeper.connect_string) as store:
        logs = LogStore(store, AppLayout.of(app))
        log, version = await logs.read()
        await store.set(AppLayout.of(app).log, encode_log(truncate(log, below_index=3)), version)
    code, out, err = await rsm("log", "dump", *source, "--from", "1")
    assert (code, out) == (2, "")
    assert err == (
        f"error: Truncated: index 1 was truncated away: the log of {app!r} starts at index 3; "
        "no snapshot covers what is left\n"
    )
    for words in (
        ["log", "dump", *source, "--to", "2"],
        ["log", "dump", *source, "--to", "2", "--stats"],
    ):
        assert await rsm(*words) == (
            2,
            "",
            f"error: Truncated: index 2 was truncated away: the log of {app!r} starts at index 3\n",
        )
    # No snapshot covers it: the replays determinism runs in children cannot start, and the
    # children's error is the command's own, once.
    code, out, err = await rsm("determinism", *source, "--class", NOTES)
    assert (code, out) == (2, "")
    assert err.startswith("error: Truncated: ")
    assert "error:" not in err.removeprefix("error: ")


async def test_check_all_bookies_names_the_bookie_whose_copy_is_corrupt(
    cluster: HistoryCluster,
) -> None:
    app = "copies-" + cluster.app
    async with cluster.clients() as (store, ledgers):
        writer = LogWriter(store, ledgers, app, Notes, CONFIG)
        await writer.segment(1, leader="r1", time_ms=T0)
        await writer.batch([Call("put", ("a", "one")), Call("incr", ("a",))], time_ms=T0 + 1)
        await writer.batch([Call("put", ("b", "two"))], time_ms=T0 + 2)
        log = await writer.finish()
        ledger_id = log.segments[0].ledger_id
        metadata = await ledgers.ledger_metadata(ledger_id)
        victim = metadata.ensemble_at(1)[1]  # the second bookie of entry 1's write set
        # The bookie stores what it is sent: the same entry with one payload byte flipped.
        good = await ledgers.open_ledger(ledger_id, b"rsm", recovery=False)
        [entry] = await good.read_entries(1, 1)
        packet = bytearray(
            Digest(metadata.digest_type, b"rsm").build_entry(
                ledger_id, 1, 0, metadata.length, entry.payload
            )
        )
        packet[-1] ^= 0x01
        address = parse_address(ledgers.bookie_address(victim) or victim)
        async with BookieConnection.connect(address.host, address.port) as connection:
            await connection.add(ledger_id, 1, master_key(b"rsm"), bytes(packet), recovery=True)
    source = cluster.source_of(app)
    assert (await rsm("log", "check", *source))[0] == 0, "one good copy is enough to read"
    code, out, _ = await rsm("log", "check", *source, "--all-bookies")
    assert code == 1
    assert out.splitlines()[1:] == [
        f"PROBLEM copy: ledger {ledger_id} entry 1: bookie {victim} holds a corrupt copy "
        f"(digest mismatch in entry {ledger_id}:1)",
        "ok up to index 4",
        f"reproduce: rsm log check {' '.join(source)} --all-bookies",
    ]


# --- rsm replay -------------------------------------------------------------------------------


async def test_replay_to_an_index_then_query_the_real_class(cluster: HistoryCluster) -> None:
    replay = ["replay", *cluster.source, "--class", NOTES]
    assert await rsm(*replay, "--to", "16", "--query", "count", "a") == (0, "6\n", "")
    assert await rsm(*replay, "--to", "1:3:1", "--query", "count", "a") == (0, "4\n", "")
    assert await rsm(*replay, "--to", "10", "--query", "get", "a") == (0, '"one"\n', "")
    code, out, _ = await rsm(*replay, "--to", "12")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith(
        f"replayed {cluster.app} to index 12 (epoch 2, 2023-11-14T22:13:21.020Z) from the start: "
        "12 commands in "
    )
    assert lines[1:] == [
        f"class {NOTES}, state hash "
        "b2d74677afafeac629b4191de12cf1dd6399aecf2abd47a83cc38e376a46ffc4",
        "sessions 1",
    ]


async def test_replay_json_of_a_cluster_and_of_its_export_agree(
    cluster: HistoryCluster, exported: Path
) -> None:
    _, out, _ = await rsm("replay", *cluster.source, "--class", NOTES, "--json")
    from_cluster = json.loads(out)
    code, out, _ = await rsm("replay", "--log", str(exported), "--class", NOTES, "--json")
    from_file = json.loads(out)
    assert code == 0
    for report in (from_cluster, from_file):
        del report["seconds"]
    assert (
        from_cluster
        == from_file
        == {
            "schema": 1,
            "app": cluster.app,
            "index": 29,
            "epoch": 3,
            "time_ms": 1_700_000_002_040,
            "from_snapshot": None,
            "commands": 29,
            "state_hash": "fd68b3e4d76772bdc9b9a47ee832e1e7c030172d347753a6f779dbac658ea8ee",
            "sessions": 1,
            "unknown_commands": {},
        }
    )


async def test_break_at_stops_in_pdb_just_before_the_command(cluster: HistoryCluster) -> None:
    words = ["replay", *cluster.source, "--class", NOTES, "--to", "12", "--break-at", "10"]
    script = b"p record.index, replay.index, machine.counters\nc\n"
    code, out, err = await rsm(*words, stdin=script)
    assert code == 0, err
    assert "stopped before index 10 (ledger 1, entry 1, slot 0): incr ['b']" in out
    assert "(10, 9, {'a': 2, 'c': 1})" in out
    assert f"replayed {cluster.app} to index 12" in out
    words = ["replay", *cluster.source, "--class", NOTES, "--to", "20", "--break-on", "tag"]
    code, out, err = await rsm(*words, stdin=b"p replay.index\nc\np replay.index\nc\n")
    assert code == 0, err
    # pdb's prompt has no newline: a stop's line may start with "(Pdb) ".
    lines = out.splitlines()
    stops = [line[line.index("stopped") :] for line in lines if "stopped before" in line]
    assert stops == [
        "stopped before index 6 (ledger 0, entry 3, slot 0): tag ['a', 'x', 'y', 'z', 'w']",
        "stopped before index 12 (ledger 1, entry 2, slot 0): tag ['b', 'p', 'q', 'r', 's', 't']",
    ]
    assert "(Pdb) 5" in out
    assert "(Pdb) 11" in out


async def test_shell_has_the_state_and_the_class_s_queries(cluster: HistoryCluster) -> None:
    words = ["replay", *cluster.source, "--class", NOTES, "--to", "5", "--shell"]
    script = b"print(query('count', 'a'), machine.values, replay.index)\n"
    code, out, err = await rsm(*words, stdin=script)
    assert code == 0, err
    # The prompt goes to stdout without a newline, before what the line printed.
    assert ">>> 2 {'a': 'one', 'b': 'two'} 5" in out.splitlines()
    assert "state of Notes at index 5" in err


async def test_bisect_of_two_classes_that_both_lack_a_command_says_so(
    cluster: HistoryCluster,
) -> None:
    """Both apply it as the same UnknownCommand error and agree: not a clean bill."""
    without = APPS + "NotesWithoutTags"
    words = ["bisect", *cluster.source, "--old", without, "--new", without]
    code, out, _ = await rsm(*words)
    assert code == 1
    assert out.splitlines() == [
        f"{cluster.app} ({' '.join(cluster.source)}): {without} and {without} agree on all 29 "
        "commands up to index 29",
        *2
        * [
            f"PROBLEM: {without} has no command 'tag' (first logged at index 6): an older log "
            "or a renamed command; applied as an UnknownCommand error"
        ],
        f"reproduce: rsm bisect {' '.join(cluster.source)} --old {without} --new {without} --to 6",
    ]


async def test_bisect_of_many_logs_reports_on_each_even_when_one_cannot_be_read(
    cluster: HistoryCluster, exported: Path, tmp_path: Path
) -> None:
    part = tmp_path / "part.rsmlog"
    words = ["log", "export", *cluster.source, "--to", str(part), "--from", "10"]
    assert (await rsm(*words))[0] == 0
    new = APPS + "NotesBumped"
    code, out, _ = await rsm(
        "bisect", "--log", str(part), "--log", str(exported), "--old", NOTES, "--new", new
    )
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"--log {part}: error: Truncated: ")
    assert lines[1] == f"{cluster.app} (--log {exported}): {NOTES} and {new} differ"


async def test_a_command_unknown_to_the_class_is_a_problem_named_by_index(
    cluster: HistoryCluster,
) -> None:
    code, out, _ = await rsm("replay", *cluster.source, "--class", APPS + "NotesWithoutTags")
    assert code == 1
    assert out.splitlines()[-2:] == [
        f"PROBLEM: {APPS}NotesWithoutTags has no command 'tag' (first logged at index 6): an "
        "older log or a renamed command; applied as an UnknownCommand error",
        f"reproduce: rsm replay {' '.join(cluster.source)} --class {APPS}NotesWithoutTags",
    ]


async def write_with_snapshot(cluster: HistoryCluster, app: str, machine: type[Notes]) -> int:
    """A short log of `app` written through `machine`, with a snapshot at index 5; its ledger."""
    async with cluster.clients() as (store, ledgers):
        writer = LogWriter(store, ledgers, app, machine, CONFIG)
        await writer.segment(1, leader="r1", time_ms=T0)
        await writer.batch([Call("put", ("c", "low")), Call("incr", ("a",))], time_ms=T0 + 1)
        await writer.batch([Call("put", ("b", "x")), Call("incr", ("a",))], time_ms=T0 + 2)
        manifest = await writer.snapshot()
        assert manifest.index == 5
        await writer.batch([Call("incr", ("a",)), Call("put", ("c", "up"))], time_ms=T0 + 3)
        await writer.finish()
        return manifest.ledger_id


async def test_snapshot_verify_and_replay_from_a_snapshot(cluster: HistoryCluster) -> None:
    app = "snap-" + cluster.app
    ledger_id = await write_with_snapshot(cluster, app, Notes)
    source = cluster.source_of(app)
    code, out, err = await rsm("snapshot", "verify", *source, "--class", NOTES)
    assert (code, err) == (0, "")
    assert out.startswith(
        f"{app}: the snapshot at index 5 (ledger {ledger_id}) equals replay from the start "
        "(5 commands): state hash "
    )
    code, out, _ = await rsm("replay", *source, "--class", NOTES, "--to", "6", "--json")
    report = json.loads(out)
    assert (code, report["from_snapshot"], report["commands"], report["index"]) == (0, 5, 1, 6)
    code, out, _ = await rsm("replay", *source, "--class", NOTES, "--to", "6", "--from-start")
    assert "from the start: 6 commands" in out


async def test_snapshot_verify_catches_a_snapshot_of_another_state(
    cluster: HistoryCluster,
) -> None:
    app = "badsnap-" + cluster.app
    ledger_id = await write_with_snapshot(cluster, app, NotesShadow)
    source = cluster.source_of(app)
    words = ["snapshot", "verify", *source, "--class", NOTES]
    code, out, _ = await rsm(*words)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == (
        f"{app}: the snapshot at index 5 (ledger {ledger_id}) DIFFERS from replay from the "
        "start (5 commands)"
    )
    assert lines[-1] == "reproduce: rsm " + " ".join(words) + " --index 5"
    code, out, _ = await rsm(*words, "--json")
    report = json.loads(out)
    assert (code, report["equal"], report["sessions_equal"]) == (1, False, True)
    assert report["snapshot_hash"] != report["replayed_hash"]


# --- rsm verify -------------------------------------------------------------------------------


async def test_verify_passes_on_the_class_that_wrote_the_log(cluster: HistoryCluster) -> None:
    expected = f"{cluster.app}: 4 state hashes match up to index 29\n"
    assert await rsm("verify", *cluster.source, "--class", NOTES, *HASHES) == (0, expected, "")


async def test_verify_catches_a_divergent_class_and_names_the_window(
    cluster: HistoryCluster,
) -> None:
    words = ["verify", *cluster.source, "--class", APPS + "NotesBumped", *HASHES]
    code, out, _ = await rsm(*words)
    assert code == 1
    assert out.splitlines() == [
        f"{cluster.app}: the state hash logged at index 11 does not match",
        "  logged    063bf57010995b9d17efb3c86cd68e12dbbc2061db5507feccb4f4f6fad5cad7",
        "  replayed  dd2de12e8ec232b0c89648542ea0b835dfe59a311a1da57fabdf12f25d791823",
        "last good: index 5",
        "the states part within indexes 6..11",
        "replayed twice over the window (PYTHONHASHSEED 1 and 2) the class gives the same "
        "states: the log was written by other code; to name the command: --reference "
        "MODULE:CLASS (the code that wrote it)",
        "reproduce: rsm " + " ".join(words[:-2]) + " --state-hash-every 5 --to 11",
    ]


async def test_verify_with_a_reference_names_the_command_where_states_part(
    cluster: HistoryCluster,
) -> None:
    words = ["verify", *cluster.source, "--class", APPS + "NotesShadow", *HASHES]
    code, out, _ = await rsm(*words, "--reference", NOTES, "--json")
    assert code == 1
    report = json.loads(out)
    assert report["first_bad"]["index"] == 11
    assert report["last_good"]["index"] == 5
    assert report["window"] == [6, 11]
    divergence = report["divergence"]
    assert divergence["kind"] == "state"
    assert divergence["record"]["index"] == 7
    assert (divergence["record"]["command"], divergence["record"]["args"]) == ("put", ["c", "low"])
    assert divergence["old"] == divergence["new"] == {"result": None}
    assert report["reproduce"].endswith("--to 11")


async def test_verify_of_a_non_deterministic_class_names_where_two_replays_part(
    cluster: HistoryCluster,
) -> None:
    words = ["verify", *cluster.source, "--class", APPS + "NotesUnordered"]
    # Set order follows the hash seed; the log holds sorted tags, so with at least one of two
    # seeds that give different orders the replay's state differs from the log's at index 11.
    runs = [await rsm(*words, hash_seed=seed) for seed in (1, 2)]
    failed = [out for code, out, _ in runs if code == 1]
    assert failed
    for out in failed:
        assert (
            "the class is not deterministic: over the window, replays with PYTHONHASHSEED 1 and "
            "2 first differ at index 6 (ledger 0, entry 3, slot 0)" in out.splitlines()
        )


async def test_verify_hashes_where_the_log_has_hashes_unless_told_a_schedule(
    cluster: HistoryCluster,
) -> None:
    expected = f"{cluster.app}: 4 state hashes match up to index 29\n"
    assert await rsm("verify", *cluster.source, "--class", NOTES) == (0, expected, "")
    code, out, _ = await rsm("verify", *cluster.source, "--class", NOTES, "--state-hash-every", "9")
    assert code == 2
    assert out == (
        f"{cluster.app}: no logged state hash could be checked up to index 29 (4 logged at "
        "indexes this replay did not hash: is --state-hash-every 9 the replicas' setting?)\n"
    )


# --- rsm bisect -------------------------------------------------------------------------------


async def test_bisect_passes_on_the_same_code_and_names_a_changed_result(
    cluster: HistoryCluster,
) -> None:
    same = ["bisect", *cluster.source, "--old", NOTES, "--new", NOTES]
    assert await rsm(*same) == (
        0,
        f"{cluster.app} ({' '.join(cluster.source)}): {NOTES} and {NOTES} agree on all 29 "
        "commands up to index 29\n",
        "",
    )
    new = APPS + "NotesBumped"
    code, out, _ = await rsm("bisect", *cluster.source, "--old", NOTES, "--new", new)
    assert code == 1
    assert out.splitlines() == [
        f"{cluster.app} ({' '.join(cluster.source)}): {NOTES} and {new} differ",
        'first divergence (result) at index 10 (ledger 1, entry 1, slot 0): incr "b"',
        f'  old {NOTES}: {{"result": 1}}',
        f'  new {new}: {{"result": 2}}',
        f"reproduce: rsm bisect {' '.join(cluster.source)} --old {NOTES} --new {new} --to 10",
    ]


async def test_bisect_over_many_exported_logs_names_a_state_only_change(exported: Path) -> None:
    new = APPS + "NotesShadow"
    words = ["bisect", "--log", str(exported), "--log", str(exported), "--old", NOTES]
    code, out, _ = await rsm(*words, "--new", new, "--json")
    assert code == 1
    reports = [json.loads(line) for line in out.splitlines()]
    assert len(reports) == 2
    for report in reports:
        divergence = report["divergence"]
        assert (report["schema"], report["source"]) == (1, f"--log {exported}")
        assert (divergence["kind"], divergence["record"]["index"]) == ("state", 7)
        assert divergence["old_hash"] != divergence["new_hash"]
        assert report["reproduce"] == (
            f"reproduce: rsm bisect --log {exported} --old {NOTES} --new {new} --to 7"
        )


# --- rsm determinism --------------------------------------------------------------------------


async def test_determinism_passes_on_the_real_class_and_catches_set_order(
    cluster: HistoryCluster, exported: Path
) -> None:
    assert await rsm("determinism", "--log", str(exported), "--class", NOTES) == (
        0,
        f"{cluster.app}: {NOTES} replayed the same with PYTHONHASHSEED 1 and 2 (14 entries up "
        "to index 29)\n",
        "",
    )
    unordered = APPS + "NotesUnordered"
    words = ["determinism", *cluster.source, "--class", unordered, "--hash-seeds", "1,2"]
    code, out, _ = await rsm(*words)
    assert code == 1
    lines = out.splitlines()
    assert lines[:2] == [
        f"{cluster.app}: {unordered} is not deterministic: the states differ with "
        "PYTHONHASHSEED 1 and 2",
        "first at index 6 (ledger 0, entry 3, slot 0), within the entry holding 6..6",
    ]
    assert lines[-1] == "reproduce: rsm " + " ".join(words) + " --to 6"
    code, out, _ = await rsm(*words, "--json")
    report = json.loads(out)
    assert (code, report["schema"], report["hash_seeds"], report["to"]) == (1, 1, [1, 2], 29)
    divergence = report["divergence"]
    assert (divergence["what"], divergence["window"]) == ("state", [6, 6])
    assert (divergence["index"], divergence["ledger_id"], divergence["entry_id"]) == (6, 0, 3)
    assert divergence["first"]["state"] != divergence["second"]["state"]


async def test_determinism_on_a_truncated_log_starts_from_its_snapshot(
    cluster: HistoryCluster,
) -> None:
    app = "detsnap-" + cluster.app
    async with cluster.clients() as (store, ledgers):
        writer = LogWriter(store, ledgers, app, Notes, CONFIG)
        await writer.segment(1, leader="r1", time_ms=T0)
        await writer.batch([Call("put", ("c", "low")), Call("incr", ("a",))], time_ms=T0 + 1)
        assert (await writer.snapshot()).index == 3
        await writer.segment(2, leader="r2", time_ms=T0 + 2)
        await writer.batch([Call("incr", ("a",)), Call("put", ("c", "up"))], time_ms=T0 + 3)
        log = await writer.finish()
        _old, version = await LogStore(store, AppLayout.of(app)).read()
        await store.set(AppLayout.of(app).log, encode_log(truncate(log, below_index=4)), version)
    source = cluster.source_of(app)
    # From the snapshot at 3: the second segment's marker (4) and its batch (5..6).
    assert await rsm("determinism", *source, "--class", NOTES) == (
        0,
        f"{app}: {NOTES} replayed the same with PYTHONHASHSEED 1 and 2 (2 entries up to index 6)\n",
        "",
    )


@pytest.mark.parametrize("seeds", ["01,1", "\u00b2,1", "4294967296,1", "1", "1,2,3"])
async def test_determinism_refuses_hash_seeds_that_are_not_two_different_ones(
    exported: Path, seeds: str
) -> None:
    """01 and 1 are one seed to the interpreter; it refuses the others."""
    assert await rsm(
        "determinism", "--log", str(exported), "--class", NOTES, "--hash-seeds", seeds
    ) == (
        2,
        "",
        f"error: InvalidConfig: --hash-seeds {seeds!r} is not two different numbers from 0 "
        "to 4294967295\n",
    )


# --- bad input --------------------------------------------------------------------------------


async def test_bad_input_gets_a_message_and_an_exit_status(
    cluster: HistoryCluster, exported: Path, tmp_path: Path
) -> None:
    zk = cluster.zookeeper.connect_string
    assert await rsm("log", "dump", "--app", "nope", "--zk", zk) == (
        2,
        "",
        "error: NoSuchApplication: there is no application 'nope' in this ZooKeeper\n",
    )
    assert await rsm("replay", *cluster.source, "--class", NOTES, "--to", "99") == (
        2,
        "",
        "error: InvalidConfig: index 99 is past the log's readable end, index 29\n",
    )
    code, out, err = await rsm("replay", *cluster.source, "--class", "no.such:Thing")
    assert (code, out) == (2, "")
    assert err.startswith("error: InvalidConfig: cannot import no.such: No module named 'no' (")
    assert err.endswith("or name it with --app-dir)\n")
    assert await rsm("log", "dump", "--log", str(exported), "--app", "x") == (
        2,
        "",
        "error: InvalidConfig: give either --log FILE or --app and --zk, not both\n",
    )
    code, out, err = await rsm("replay", *cluster.source, "--class", NOTES, "--break-on", "TAG")
    assert (code, out) == (2, "")
    assert err.startswith(
        f"error: InvalidConfig: --break-on 'TAG': {NOTES} has no such command (its commands, "
        "as logged: "
    )
    # Refused before a record is printed: a file does not grow.
    assert await rsm("log", "dump", "--log", str(exported), "--follow", "--last", "2") == (
        2,
        "",
        "error: InvalidConfig: --follow needs a cluster (--app, --zk), not a file\n",
    )
    damaged = tmp_path / "damaged.rsmlog"
    data = exported.read_bytes()
    damaged.write_bytes(data[: len(data) // 2])
    code, out, err = await rsm("replay", "--log", str(damaged), "--class", NOTES)
    assert (code, out) == (1, "")
    assert err.startswith(f"error: ExportCorrupt: {damaged} is truncated: it ends at byte ")
