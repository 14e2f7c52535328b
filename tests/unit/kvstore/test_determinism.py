"""Replicas that apply the same log end equal: values, TTLs, expiry index and every answer.

The log mixes every write command with options, errors and TTLs that
expire between batches, so lazy and active expiry are exercised too.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
from pathlib import Path
from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st
from kvstore.state_machine import KVStore

from rsm.core.commands import AppliedPosition, answer_query, apply_batch, prepare_command
from rsm.core.log_format import decode_batch, encode_batch
from rsm.core.sessions import SessionTable
from tests.unit.kvstore.replica import START_MS

ROOT = Path(__file__).resolve().parents[3]

keys = st.sampled_from([b"a", b"b", b"c", b"n", b"k:1", b"k:2"])
values = st.sampled_from([b"1", b"-7", b"2.5", b"x", b"", b"9223372036854775807", b"0x1p3"])
ttls_ms = st.integers(-5, 400).map(lambda ms: b"%d" % ms)


@st.composite
def write_commands(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    key = draw(keys)
    kind = draw(
        st.sampled_from(
            [
                "set", "set_px", "set_get_nx", "setnx", "psetex", "getset", "getdel", "getex",
                "mset", "msetnx", "append", "setrange", "incr", "incrby", "incrbyfloat", "cas",
                "del", "pexpire", "pexpire_gt", "persist", "flushdb", "rename", "renamenx",
                "copy", "copy_replace",
            ]
        )
    )  # fmt: skip
    value = draw(values)
    ttl = draw(ttls_ms)
    calls: dict[str, tuple[str, list[bytes]]] = {
        "set": ("set", [key, value]),
        "set_px": ("set", [key, value, b"PX", ttl]),
        "set_get_nx": ("set", [key, value, b"NX", b"GET"]),
        "setnx": ("setnx", [key, value]),
        "psetex": ("psetex", [key, ttl, value]),
        "getset": ("getset", [key, value]),
        "getdel": ("getdel", [key]),
        "getex": ("getex", [key, b"PX", ttl]),
        "mset": ("mset", [key, value, draw(keys), value]),
        "msetnx": ("msetnx", [key, value, draw(keys), value]),
        "append": ("append", [key, value]),
        "setrange": ("setrange", [key, b"%d" % draw(st.integers(0, 5)), value]),
        "incr": ("incr", [key]),
        "incrby": ("incrby", [key, value]),
        "incrbyfloat": ("incrbyfloat", [key, value]),
        "cas": ("cas", [key, value, draw(values)]),
        "del": ("del", [key, draw(keys)]),
        "pexpire": ("pexpire", [key, ttl]),
        "pexpire_gt": ("pexpire", [key, ttl, b"GT"]),
        "persist": ("persist", [key]),
        "flushdb": ("flushdb", []),
        "rename": ("rename", [key, draw(keys)]),
        "renamenx": ("renamenx", [key, draw(keys)]),
        "copy": ("copy", [key, draw(keys)]),
        "copy_replace": ("copy", [key, draw(keys), b"REPLACE"]),
    }
    return calls[kind]


logs = st.lists(
    st.tuples(st.integers(0, 300), st.lists(write_commands(), max_size=6)), min_size=1, max_size=25
)


Log = list[tuple[int, list[tuple[str, list[bytes]]]]]
"""Batches as (ms since the previous batch, [(command, arguments), ...])."""


def encode(log: Log) -> list[bytes]:
    """The log entries a leader would write for `log`."""
    entries: list[bytes] = []
    time_ms = START_MS
    first_index = 1
    for advance_ms, calls in log:
        time_ms += advance_ms
        items = [prepare_command(KVStore, name, args) for name, args in calls]
        entries.append(
            encode_batch(
                epoch=1, first_index=first_index, timestamp_ms=time_ms, seed=3, items=items
            )
        )
        first_index += len(items)
    return entries


def replay(entries: list[bytes], *, read_between: bool = False) -> tuple[KVStore, list[object]]:
    """A fresh replica applying `entries`; its store and every outcome.

    With `read_between`, it also answers queries after each batch, which
    must change nothing.
    """
    store = KVStore()
    sessions = SessionTable()
    answers: list[object] = []
    for entry in entries:
        batch = decode_batch(entry)
        answers += apply_batch(store, batch, sessions)
        if read_between:
            applied = AppliedPosition.after(batch)
            for name, args in QUERIES:
                answer_query(store, name, args, applied=applied)
    return store, answers


QUERIES: list[tuple[str, list[bytes]]] = [
    ("get", [b"a"]),
    ("mget", [b"a", b"b", b"n"]),
    ("keys", [b"*"]),
    ("scan", [b"0", b"COUNT", b"2"]),
    ("ttl", [b"a"]),
    ("exists", [b"a", b"k:1"]),
    ("touch", [b"b", b"n"]),
    ("getrange", [b"b", b"0", b"-1"]),
    ("dbsize", []),
]


def state(store: KVStore) -> tuple[object, ...]:
    return dict(store.values), dict(store.expire_at_ms), list(store._expiry_queue)


@settings(max_examples=150, deadline=None)
@given(log=logs)
def test_two_replicas_of_one_log_are_equal(log: Log) -> None:
    entries = encode(log)
    first, first_answers = replay(entries)
    second, second_answers = replay(entries, read_between=True)
    assert state(first) == state(second)
    assert first_answers == second_answers
    # The expiry bookkeeping stays consistent whatever the log did.
    assert set(first.expire_at_ms) <= set(first.values)
    assert sorted((at, key) for key, at in first.expire_at_ms.items()) == list(first._expiry_queue)


def test_replicas_in_processes_with_different_hash_seeds_agree() -> None:
    # Dict and set order of bytes depends on the process's hash seed; the
    # store must not let it leak into state or answers.
    random = Random(11)
    names = [b"k%d" % i for i in range(40)]
    log: Log = []
    for _ in range(60):
        calls = []
        for _ in range(5):
            key = random.choice(names)
            ttl = b"%d" % random.randint(1, 300)
            calls.append(random.choice([
                ("set", [key, b"v", b"PX", ttl]),
                ("mset", [key, b"1", random.choice(names), b"2"]),
                ("incr", [key]),
                ("del", [key, random.choice(names)]),
                ("pexpire", [key, ttl]),
            ]))  # fmt: skip
        log.append((random.randint(0, 100), calls))
    entries = encode(log)
    digests = {_digest_in_process(entries, seed) for seed in ("1", "2")}
    local, answers = replay(entries)
    assert digests == {_digest(local, answers)}


def _digest(store: KVStore, answers: list[object]) -> str:
    return hashlib.sha256(repr((state(store), answers)).encode()).hexdigest()


def _digest_in_process(entries: list[bytes], hash_seed: str) -> str:
    script = (
        "import sys, pickle\n"
        "from tests.unit.kvstore.test_determinism import replay, _digest\n"
        "entries = pickle.loads(sys.stdin.buffer.read())\n"
        "print(_digest(*replay(entries)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=pickle.dumps(entries),
        capture_output=True,
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        cwd=ROOT,
    )
    return result.stdout.decode().strip()
