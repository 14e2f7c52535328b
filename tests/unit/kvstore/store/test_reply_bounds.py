"""The bound on one reply of strings (kvstore/store/reply_bounds.py): MGET, KEYS and SCAN
past it are errors; EXEC runs every command and drops the replies past it."""

from __future__ import annotations

import pytest
from kvstore import limits
from kvstore.store.reply_bounds import REPLY_DROPPED, REPLY_TOO_LARGE

from tests.unit.kvstore.replica import Replica

VALUE = b"v" * 1000


@pytest.fixture
def kv(monkeypatch: pytest.MonkeyPatch) -> Replica:
    monkeypatch.setattr(limits, "reply_bytes_max", 10_000)
    replica = Replica()
    replica.run("SET", "big", VALUE)
    return replica


def test_mget_keys_and_scan_that_could_pass_the_bound_are_errors(kv: Replica) -> None:
    assert kv.run("MGET", *["big"] * 9) == [VALUE] * 9
    assert kv.error("MGET", *["big"] * 10) == REPLY_TOO_LARGE
    for number in range(20):
        kv.run("SET", b"%0500d" % number, "x")  # 20 keys of 500 bytes: 10,000 in all
    assert kv.error("KEYS", "*") == REPLY_TOO_LARGE
    assert kv.error("SCAN", "0", "COUNT", "100") == REPLY_TOO_LARGE
    assert kv.run("KEYS", "big") == [b"big"]
    assert len(kv.run("SCAN", "0", "COUNT", "5")[1]) <= 5


def test_exec_runs_every_command_and_drops_the_replies_past_the_bound(kv: Replica) -> None:
    calls = [[b"get", b"big"]] * 12 + [[b"set", b"after", b"1"], [b"get", b"big"]]
    results = kv.command("exec", [], calls).value
    kept = 10_000 // (len(VALUE) + 29)  # each GET's reply counts its bytes and 29 more
    assert results[:kept] == [[0, VALUE]] * kept
    assert results[kept:12] == [[1, REPLY_DROPPED]] * (12 - kept)
    assert results[12:] == [[0, "OK"], [1, REPLY_DROPPED]], "a small reply still fits"
    assert kv.run("GET", "after") == b"1"
