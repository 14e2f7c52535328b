"""`rsm diff`, `rsm blame`, `kvstore history` and `kvstore get --at` against a real cluster.

Three bookie processes and ZooKeeper hold the known history of
tests/integration/support/replay_cluster.py (29 commands of `Notes`), a
log of the key-value store written through the real `KVStore` (with a
snapshot), and a log whose two replicas' snapshots differ.  Each command
runs as a user runs it and its output is compared exactly; `--json` is
checked against its schema; bad input gets a message and an exit status.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from kvstore.state_machine import KVStore

from bookie.local.zookeeper import LocalZooKeeper
from rsm.config import ReplicaConfig
from rsm.testing.logs import Call, LogWriter

from .support.replay_apps import NotesByKey
from .support.replay_cluster import CONFIG, NOTES, ROOT, T0, HistoryCluster, history_cluster, rsm
from .support.schemas import RECORD_SCHEMA, Schema, check_schema

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

BY_KEY = "tests.integration.support.replay_apps:NotesByKey"
KV_APP = "kv-keys"
KV_CONFIG = ReplicaConfig(state_hash_every_commands=1_000)

CHANGE_SCHEMA: Schema = {
    **RECORD_SCHEMA,
    "key": (str, dict),
    "before": (str, type(None)),
    "after": (str, type(None)),
    "value": (str, type(None)),
    "outcome": (dict,),
}
"""`rsm blame --json` and `kvstore history --json`, one object per change (docs/tools.md)."""

SIDE_SCHEMA: Schema = {
    "label": (str,),
    "index": (int,),
    "replica_id": (str, type(None)),
    "snapshot": (int, type(None)),
    "state_hash": (str,),
}
DIFF_SCHEMA: Schema = {
    "schema": (int,),
    "app": (str,),
    "first": (dict,),
    "second": (dict,),
    "by": (str,),
    "equal": (bool,),
    "keys_compared": (int, type(None)),
    "keys": (list,),
    "stream": (dict, type(None)),
    "unknown_commands": (dict,),
}
"""`rsm diff --json`; `DIFF_OPTIONAL` when the states differ or a command is unknown."""
DIFF_OPTIONAL: Schema = {"reproduce": (str,)}


async def kvstore(*words: str) -> tuple[int, str, str]:
    """Run `kvstore WORDS` as a user would; (exit status, stdout, stderr)."""
    environment = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'examples'}"}
    result = await anyio.run_process(
        [sys.executable, "-m", "kvstore.tools.cli", *words], cwd=ROOT, env=environment, check=False
    )
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.fixture(scope="module")
async def cluster(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[HistoryCluster]:
    directory = tmp_path_factory.mktemp("keys")
    async with history_cluster(zookeeper, "/key-tools", directory) as running:
        yield running


@dataclass(frozen=True)
class KvLog:
    words: list[str]
    """The `kvstore` options naming the log."""
    ledgers: list[int]


@pytest.fixture(scope="module")
async def kv_log(cluster: HistoryCluster) -> KvLog:
    """A store's log with a known history: key "k" set, appended to, given an expiry (then a
    snapshot at index 5), set again, deleted and set again."""
    async with cluster.clients() as (store, ledgers):
        writer = LogWriter(store, ledgers, KV_APP, KVStore, KV_CONFIG)
        client = bytes.fromhex("c2c2c2c2")
        await writer.segment(1, leader="r1", time_ms=T0)  # index 1
        await writer.batch([Call("set", (b"k", b"v1")), Call("set", (b"o", b"x"))], time_ms=T0 + 10)
        append = Call("append", (b"k", b"-2"), client_id=client, seq=1, ack_seq=0)
        await writer.batch([append], time_ms=T0 + 20)  # index 4
        await writer.batch([Call("pexpire", (b"k", b"5000"))], time_ms=T0 + 30)  # index 5
        assert (await writer.snapshot("r1")).index == 5
        await writer.segment(2, leader="r2", time_ms=T0 + 1_000)  # index 6
        await writer.batch([Call("set", (b"k", b"line\nbreak"))], time_ms=T0 + 1_010)  # 7
        await writer.batch([Call("del", (b"k",)), Call("set", (b"o", b"y"))], time_ms=T0 + 1_020)
        await writer.batch([Call("set", (b"k", b"\xffback"))], time_ms=T0 + 1_030)  # index 10
        log = await writer.finish()
    words = ["--zk", cluster.zookeeper.connect_string, "--app", KV_APP]
    return KvLog([*words, "--ledger-root", cluster.zk_root], [s.ledger_id for s in log.segments])


@pytest.fixture(scope="module")
async def replicas_app(cluster: HistoryCluster) -> str:
    """An application whose replica r1 took a snapshot at index 5, r3 one at index 7, and r2
    one at index 9 of a state that differs from the log's at key "b" (as if r2's memory had
    been damaged)."""
    app = "replicas-" + cluster.app
    async with cluster.clients() as (store, ledgers):
        writer = LogWriter(store, ledgers, app, NotesByKey, CONFIG)
        await writer.segment(1, leader="r1", time_ms=T0)
        await writer.batch([Call("put", ("a", "one")), Call("put", ("b", "two"))], time_ms=T0 + 1)
        await writer.batch([Call("incr", ("a",)), Call("put", ("c", "x"))], time_ms=T0 + 2)
        assert (await writer.snapshot("r1")).index == 5
        await writer.batch([Call("incr", ("a",)), Call("put", ("c", "y"))], time_ms=T0 + 3)
        assert (await writer.snapshot("r3")).index == 7
        await writer.batch([Call("incr", ("c",)), Call("put", ("d", "z"))], time_ms=T0 + 4)
        machine = writer.applier.machine
        assert isinstance(machine, NotesByKey)
        machine.values["b"] = "tw0"
        assert (await writer.snapshot("r2")).index == 9
        await writer.finish()
    return app


# --- rsm blame --------------------------------------------------------------------------------

BLAME_A = """\
{app}: key 'a' in indexes 1..29: 10 commands changed it (absent before index 1)
INDEX  EPOCH  LEDGER:ENTRY:SLOT  TIME                      SESSION     COMMAND  ARGS       DIGEST            VALUE
2      1      0:1:0              2023-11-14T22:13:20.010Z  -           put      a one      596c9c01a0c84f8b  'one'
4      1      0:2:0              2023-11-14T22:13:20.020Z  c1c1c1c1:1  incr     a          e217aa1b9b23e66c  'one' count 1
5      1      0:2:1              2023-11-14T22:13:20.020Z  c1c1c1c1:2  incr     a          6bc275df24428ae0  'one' count 2
6      1      0:3:0              2023-11-14T22:13:20.030Z  -           tag      a x y z w  5bc718c3770c59a9  'one' count 2 tags w,x,y,z
11     2      1:1:1              2023-11-14T22:13:21.010Z  -           put      a uno      5fbadebb828acf85  'uno' count 2 tags w,x,y,z
13     2      1:3:0              2023-11-14T22:13:21.030Z  -           incr     a          4238d9a7fb21060c  'uno' count 3 tags w,x,y,z
14     2      1:3:1              2023-11-14T22:13:21.030Z  -           incr     a          cd51300fd9115792  'uno' count 4 tags w,x,y,z
15     2      1:3:2              2023-11-14T22:13:21.030Z  -           incr     a          655c4a1645aa7d7b  'uno' count 5 tags w,x,y,z
16     2      1:3:3              2023-11-14T22:13:21.030Z  -           incr     a          f714b9f172120a5d  'uno' count 6 tags w,x,y,z
28     3      2:4:0              2023-11-14T22:13:22.040Z  -           incr     a          ed55142afd30b261  'uno' count 7 tags w,x,y,z
"""  # noqa: E501


async def test_blame_lists_every_command_that_changed_the_key(
    cluster: HistoryCluster, tmp_path: Path
) -> None:
    blame = ["blame", *cluster.source, "--class", BY_KEY]
    assert await rsm(*blame, "a") == (0, BLAME_A.format(app=cluster.app), "")
    exported = tmp_path / "notes.rsmlog"
    assert (await rsm("log", "export", *cluster.source, "--to", str(exported)))[0] == 0
    offline = ["blame", "--log", str(exported), "--class", BY_KEY, "a"]
    assert await rsm(*offline) == (0, BLAME_A.format(app=cluster.app), "")
    code, out, _ = await rsm(*blame, "a", "--from", "12", "--to", "2:1")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == (
        f"{cluster.app}: key 'a' in indexes 12..18: 4 commands changed it (digest "
        "5fbadebb828acf85 before index 12)"
    )
    assert [int(line.split()[0]) for line in lines[2:]] == [13, 14, 15, 16]
    assert await rsm(*blame, "c", "--from", "20") == (
        0,
        f"{cluster.app}: key 'c' in indexes 20..29: 0 commands changed it (digest "
        "b38819325f466c72 before index 20)\n",
        "",
    )


async def test_blame_json_is_one_change_per_line_in_its_schema(cluster: HistoryCluster) -> None:
    code, out, _ = await rsm(
        "blame", *cluster.source, "--class", BY_KEY, "d", "--to", "21", "--json"
    )
    assert code == 0
    changes = [json.loads(line) for line in out.splitlines()]
    for change in changes:
        check_schema(change, CHANGE_SCHEMA)
    first_digest = "59a984d6e30211daccf6e26a37b9072d26fe6a602047a6bbda948ed227f67a8b"
    assert changes[0] == {
        "schema": 1,
        "index": 20,
        "epoch": 3,
        "ledger_id": 2,
        "entry_id": 2,
        "slot": 0,
        "time_ms": 1_700_000_002_020,
        "seed": 0,
        "command": "put",
        "args": ["d", "0"],
        "kwargs": {},
        "client_id": None,
        "seq": None,
        "ack_seq": None,
        "state_hash": None,
        "key": "d",
        "before": None,
        "after": first_digest,
        "value": "'0'",
        "outcome": {"result": None},
    }
    assert (changes[1]["index"], changes[1]["slot"], changes[1]["before"]) == (21, 1, first_digest)
    assert changes[1]["outcome"] == {"result": "0"}
    assert len(changes) == 2


async def test_blame_of_bad_input_says_what_is_wrong(
    cluster: HistoryCluster, tmp_path: Path
) -> None:
    blame = ["blame", *cluster.source, "--class", BY_KEY]
    assert await rsm(*blame, "zz") == (
        2,
        "",
        f"error: InvalidConfig: {cluster.app} holds no key 'zz' at any index of 1..29\n",
    )
    assert await rsm(*blame, "a", "--to", "99") == (
        2,
        "",
        "error: InvalidConfig: index 99 is past the log's readable end, index 29\n",
    )
    assert await rsm(*blame, "a", "--from", "20", "--to", "12") == (
        2,
        "",
        "error: InvalidConfig: --from 20 is past --to 12\n",
    )
    assert await rsm("blame", *cluster.source, "--class", NOTES, "a") == (
        2,
        "",
        "error: InvalidConfig: Notes offers no per-key digests (StateMachine.key_digests): its "
        "history cannot be followed key by key\n",
    )
    part = tmp_path / "part.rsmlog"
    code, _, _ = await rsm("log", "export", *cluster.source, "--to", str(part), "--from", "10")
    assert code == 0
    assert await rsm("blame", "--log", str(part), "--class", BY_KEY, "a") == (
        2,
        "",
        f"error: Truncated: the state at index 9 cannot be rebuilt from --log {part}: the log "
        "starts at index 10 and no snapshot at or below index 9 covers what lies before\n",
    )


# --- rsm diff ---------------------------------------------------------------------------------

DIFF_12_20 = """\
{app}: index 12 and index 20 differ at 4 of 4 keys
  1: index 12
  2: index 20
KEY  DIGEST 1          DIGEST 2          VALUE 1                       VALUE 2
a    5fbadebb828acf85  f714b9f172120a5d  'uno' count 2 tags w,x,y,z    'uno' count 6 tags w,x,y,z
b    c4485401c17cc07d  183ae89f1203392c  'two' count 1 tags p,q,r,s,t  'two' count 2 tags p,q,r,s,t
c    3b12f149ef1360bc  b38819325f466c72  'low' count 1                 'again' count 1
d    -                 59a984d6e30211da  (none)                        '0'
  state hash 1 b2d74677afafeac629b4191de12cf1dd6399aecf2abd47a83cc38e376a46ffc4
  state hash 2 166fdec26736d01dba2774521ced69257748939adcb2be3a2a63b0e753a096a4
reproduce: rsm {words}
"""


async def test_diff_of_two_indexes_key_by_key(cluster: HistoryCluster, tmp_path: Path) -> None:
    words = ["diff", *cluster.source, "--class", BY_KEY, "--at", "12", "--at", "20"]
    expected = DIFF_12_20.format(app=cluster.app, words=" ".join(words))
    assert await rsm(*words) == (1, expected, "")
    exported = tmp_path / "notes.rsmlog"
    assert (await rsm("log", "export", *cluster.source, "--to", str(exported)))[0] == 0
    offline = ["diff", "--log", str(exported), "--class", BY_KEY, "--at", "12", "--at", "20"]
    assert await rsm(*offline) == (
        1,
        DIFF_12_20.format(app=cluster.app, words=" ".join(offline)),
        "",
    )
    code, out, _ = await rsm(*words, "--json")
    report = json.loads(out)
    assert code == 1
    check_schema(report, DIFF_SCHEMA, DIFF_OPTIONAL)
    check_schema(report["first"], SIDE_SCHEMA)
    check_schema(report["second"], SIDE_SCHEMA)
    assert (report["by"], report["equal"], report["keys_compared"]) == ("keys", False, 4)
    assert report["first"] == {
        "label": "index 12",
        "index": 12,
        "replica_id": None,
        "snapshot": None,
        "state_hash": "b2d74677afafeac629b4191de12cf1dd6399aecf2abd47a83cc38e376a46ffc4",
    }
    assert report["keys"][3] == {
        "key": "d",
        "first": None,
        "second": "59a984d6e30211daccf6e26a37b9072d26fe6a602047a6bbda948ed227f67a8b",
        "first_value": "(none)",
        "second_value": "'0'",
    }
    assert [key["key"] for key in report["keys"]] == ["a", "b", "c", "d"]
    assert report["stream"] is None
    assert report["reproduce"] == "reproduce: rsm " + " ".join(words) + " --json"
    # A leader-start marker changes no state; either coordinate names a point.
    assert await rsm("diff", *cluster.source, "--class", BY_KEY, "--at", "8", "--at", "1:0") == (
        0,
        f"{cluster.app}: index 8 and index 9 are equal (3 keys; state hash "
        "828a7c8708a69bcabf73ca72f2b7571ecc6d9fab9318ffd3d17ecb42b13043d5)\n",
        "",
    )


async def test_diff_through_a_class_that_lacks_a_logged_command_says_so(
    cluster: HistoryCluster,
) -> None:
    """Not "equal" alone: the states were built with a command applied as an error."""
    without = "tests.integration.support.replay_apps:NotesWithoutTags"
    words = ["diff", *cluster.source, "--class", without, "--at", "6", "--at", "6"]
    code, out, _ = await rsm(*words)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith(f"{cluster.app}: index 6 and index 6 are equal (")
    assert lines[1:] == [
        f"PROBLEM: {without} has no command 'tag' (first logged at index 6): an older log or "
        "a renamed command; applied as an UnknownCommand error",
        "reproduce: rsm " + " ".join(words),
    ]
    _, out, _ = await rsm(*words[:-4], "--at", "2", "--at", "3", "--json")
    assert json.loads(out)["unknown_commands"] == {}


async def test_diff_without_key_digests_compares_the_snapshot_streams(
    cluster: HistoryCluster,
) -> None:
    words = ["diff", *cluster.source, "--class", NOTES, "--at", "12", "--at", "20"]
    assert await rsm(*words) == (
        1,
        f"{cluster.app}: index 12 and index 20 differ (the class offers no per-key digests: "
        "snapshot streams compared)\n"
        "  1: index 12\n"
        "  2: index 20\n"
        "  first difference at byte 25: chunk 1 of 1 (106 bytes), chunk 1 of 2 (112 bytes)\n"
        "  state hash 1 b2d74677afafeac629b4191de12cf1dd6399aecf2abd47a83cc38e376a46ffc4\n"
        "  state hash 2 166fdec26736d01dba2774521ced69257748939adcb2be3a2a63b0e753a096a4\n"
        f"reproduce: rsm {' '.join(words)}\n",
        "",
    )
    code, out, _ = await rsm(*words, "--json")
    report = json.loads(out)
    check_schema(report, DIFF_SCHEMA, DIFF_OPTIONAL)
    assert (code, report["by"], report["keys"], report["keys_compared"]) == (1, "streams", [], None)
    assert report["stream"] == {
        "offset": 25,
        "first_chunk": 1,
        "second_chunk": 1,
        "first_bytes": 106,
        "second_bytes": 112,
    }
    code, out, _ = await rsm("diff", *cluster.source, "--class", NOTES, "--at", "8", "--at", "9")
    assert (code, json.loads(out)["equal"]) == (0, True) if "--json" in out else code == 0
    assert "are equal (snapshot streams byte for byte; state hash" in out


async def test_diff_of_two_replicas_compares_their_own_snapshots(
    cluster: HistoryCluster, replicas_app: str
) -> None:
    source = cluster.source_of(replicas_app)
    words = ["diff", *source, "--class", BY_KEY, "--replica", "r1", "--replica", "r2"]
    assert await rsm(*words) == (
        1,
        f"{replicas_app}: r1 (snapshot at index 5, replayed to 9) and r2 (snapshot at index 9) "
        "differ at 1 of 4 keys\n"
        "  1: r1 (snapshot at index 5, replayed to 9)\n"
        "  2: r2 (snapshot at index 9)\n"
        "KEY  DIGEST 1          DIGEST 2          VALUE 1  VALUE 2\n"
        "b    5538d1fc07188016  9d608fc946452054  'two'    'tw0'\n"
        "  state hash 1 5d654f6e9a6960ec276a743d4a971327da1bae2193435264baea18eedcc1ea20\n"
        "  state hash 2 0cf901dea1603d36456589123fddfc828bbdd15fbfa563efd72274eb4f4b3683\n"
        f"reproduce: rsm {' '.join(words)}\n",
        "",
    )
    healthy = ["diff", *source, "--class", BY_KEY, "--replica", "r1", "--replica", "r3"]
    assert await rsm(*healthy) == (
        0,
        f"{replicas_app}: r1 (snapshot at index 5, replayed to 7) and r3 (snapshot at index 7) "
        "are equal (3 keys; state hash "
        "0e4abc4cc29ea1bc1ad098b5740ab97b2c2a31cd453df67d691ff5beded18c8d)\n",
        "",
    )
    code, out, _ = await rsm(*healthy[:-4], "--replica", "r2", "--replica", "r3", "--json")
    report = json.loads(out)
    assert code == 1
    check_schema(report, DIFF_SCHEMA, DIFF_OPTIONAL)
    assert report["first"]["replica_id"] == "r2"
    assert (report["second"]["replica_id"], report["second"]["snapshot"]) == ("r3", 7)
    assert report["second"]["index"] == report["first"]["index"] == 9
    assert [(key["key"], key["first_value"], key["second_value"]) for key in report["keys"]] == [
        ("b", "'tw0'", "'two'")
    ]


async def test_diff_of_bad_input_says_what_is_wrong(
    cluster: HistoryCluster, replicas_app: str
) -> None:
    diff = ["diff", *cluster.source, "--class", BY_KEY]
    usage = (
        "error: InvalidConfig: give two points of the log (--at I --at J) or two replicas "
        "(--replica A --replica B)\n"
    )
    assert await rsm(*diff, "--at", "8") == (2, "", usage)
    assert await rsm(*diff, "--at", "8", "--replica", "r1") == (2, "", usage)
    assert await rsm(*diff, "--at", "8", "--at", "30") == (
        2,
        "",
        "error: InvalidConfig: index 30 is past the log's readable end, index 29\n",
    )
    words = ["diff", *cluster.source_of(replicas_app), "--class", BY_KEY]
    assert await rsm(*words, "--replica", "r1", "--replica", "r9") == (
        2,
        "",
        f"error: InvalidConfig: replica 'r9' has no registered snapshot of {replicas_app!r} "
        "(snapshots: r2 at 9, r3 at 7, r1 at 5); if it is a replica of the application (`rsm "
        "status` lists them), `rsm snapshot create --replica r9` takes one (it writes a "
        "snapshot ledger) once it has applied a command after the newest snapshot\n",
    )


# --- kvstore history, kvstore get --at --------------------------------------------------------

HISTORY = """\
kv-keys: key 'k' in indexes 1..10: 6 commands changed it (absent before index 1)
INDEX  EPOCH  LEDGER:ENTRY:SLOT  TIME                      SESSION     COMMAND  ARGS                     DIGEST            VALUE
2      1      {0}:1:0              2023-11-14T22:13:20.010Z  -           set      k v1                     bf6324e80ac1c88d  "v1"
4      1      {0}:2:0              2023-11-14T22:13:20.020Z  c2c2c2c2:1  append   k -2                     19317698f2682a5b  "v1-2"
5      1      {0}:3:0              2023-11-14T22:13:20.030Z  -           pexpire  k 5000                   9ec1b500931da085  "v1-2" (expires at 1700000005030)
7      2      {1}:1:0              2023-11-14T22:13:21.010Z  -           set      k line\\nbreak            abb65bac077f4560  "line\\nbreak"
8      2      {1}:2:0              2023-11-14T22:13:21.020Z  -           del      k                        -                 (nil)
10     2      {1}:3:0              2023-11-14T22:13:21.030Z  -           set      k {{'hex': 'ff6261636b'}}  3492c139d4e09ead  "\\xffback"
"""  # noqa: E501


async def test_kvstore_history_shows_each_value_as_redis_prints_it(kv_log: KvLog) -> None:
    code, out, err = await kvstore("history", "k", *kv_log.words)
    assert (code, err) == (0, "")
    assert all(ledger < 10 for ledger in kv_log.ledgers)  # the table's widths
    assert out == HISTORY.format(*kv_log.ledgers)
    code, out, _ = await kvstore("history", "k", *kv_log.words, "--from", "6", "--json")
    changes = [json.loads(line) for line in out.splitlines()]
    assert code == 0
    for change in changes:
        check_schema(change, CHANGE_SCHEMA)
    assert [(c["index"], c["command"], c["value"]) for c in changes] == [
        (7, "set", '"line\\nbreak"'),
        (8, "del", "(nil)"),
        (10, "set", '"\\xffback"'),
    ]
    assert (
        changes[0]["before"] == "9ec1b500931da08551988931e3e5114b3f17acf8e0e4c97dbcd22f20cd5a8130"
    )
    assert (changes[1]["after"], changes[2]["before"]) == (None, None)
    assert changes[2]["args"] == ["k", {"hex": "ff6261636b"}]
    assert changes[1]["outcome"] == {"result": 1}
    assert await kvstore("history", "nokey", *kv_log.words) == (
        2,
        "",
        "error: InvalidConfig: kv-keys holds no key 'nokey' at any index of 1..10\n",
    )


async def test_history_of_a_truncated_log_starts_from_its_oldest_covering_snapshot(
    kv_log: KvLog, tmp_path: Path
) -> None:
    """An export from index 4 carries the snapshot at 5 (none covers 3): by default the
    history starts after it, where one can be rebuilt; a key given as hex bytes."""
    part = tmp_path / "from4.rsmlog"
    export = ["log", "export", *kv_log.words, "--to", str(part), "--from", "4"]
    assert (await rsm(*export))[0] == 0
    code, out, err = await kvstore("history", '{"hex": "6b"}', "--log", str(part), "--json")
    assert (code, err) == (0, "")
    assert [json.loads(line)["index"] for line in out.splitlines()] == [7, 8, 10]


async def test_a_snapshot_restored_by_another_class_names_both(kv_log: KvLog) -> None:
    code, out, err = await rsm("replay", *kv_log.words, "--class", NOTES, "--to", "6")
    assert (code, out) == (1, "")
    assert err.startswith("error: SnapshotCorrupt: the restored state's hash ")
    assert err.endswith(
        f": it was taken by kvstore.state_machine:KVStore, and {NOTES} restored it\n"
    )


async def test_kvstore_get_at_an_index(kv_log: KvLog, tmp_path: Path) -> None:
    async def get(*words: str) -> tuple[int, str, str]:
        return await kvstore("get", "k", *kv_log.words, *words)

    assert await get("--at", "1") == (0, "(nil)\n", "")
    assert await get("--at", "4") == (0, '"v1-2"\n', "")
    assert await get("--at", "7") == (0, '"line\\nbreak"\n', "")
    assert await get("--at", f"{kv_log.ledgers[1]}:2") == (0, "(nil)\n", "")
    code, out, _ = await get("--at", "10", "--json")
    assert (code, json.loads(out)) == (
        0,
        {
            "schema": 1,
            "index": 10,
            "from_snapshot": 5,
            "key": "k",
            "value": {"hex": "ff6261636b"},
        },
    )
    assert await get("--at", "11") == (
        2,
        "",
        "error: InvalidConfig: index 11 is past the log's readable end, index 10\n",
    )
    exported = tmp_path / "kv.rsmlog"
    code, _, _ = await rsm("log", "export", *kv_log.words, "--to", str(exported), "--from", "6")
    assert code == 0
    assert await kvstore("get", "k", "--log", str(exported), "--at", "7") == (
        0,
        '"line\\nbreak"\n',
        "",
    )
    assert await kvstore("get", "k", "--log", str(exported), "--at", "3") == (
        2,
        "",
        f"error: Truncated: the state at index 3 cannot be rebuilt from --log {exported}: the "
        "log starts at index 6 and no snapshot at or below index 3 covers what lies before\n",
    )
