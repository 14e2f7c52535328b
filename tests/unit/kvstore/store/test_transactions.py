"""MULTI / EXEC / DISCARD / WATCH / UNWATCH: the connection's side and the store's `exec`.

The transcripts are what redis-server 7.0 answers the same requests (captured
from a real server, byte for byte); WATCH's "changed since" is checked
against a model that remembers every change, under random histories.
"""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kvstore import limits
from kvstore.connection.dispatch import EXEC_ABORT
from kvstore.state_machine import KVStore

from tests.unit.kvstore.replica import Conversation, Replica

ABORT = b"-" + EXEC_ABORT.encode() + b"\r\n"


@pytest.fixture
def kv() -> Replica:
    return Replica()


def test_queuing_errors_abort_and_misplaced_commands_are_refused(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(
        ["MULTI"],
        ["SET", "a", "1"],
        ["WATCH", "a"],
        ["NOSUCH"],
        ["EXEC"],
        ["EXEC"],
        ["DISCARD"],
        ["MULTI"],
        ["MULTI"],
        ["INCR", "a"],
        ["SET", "x"],
        ["EXEC"],
    ) == (
        b"+OK\r\n+QUEUED\r\n-ERR WATCH inside MULTI is not allowed\r\n"
        b"-ERR unknown command 'NOSUCH', with args beginning with: \r\n" + ABORT + b""
        b"-ERR EXEC without MULTI\r\n-ERR DISCARD without MULTI\r\n+OK\r\n"
        b"-ERR MULTI calls can not be nested\r\n+QUEUED\r\n"
        b"-ERR wrong number of arguments for 'set' command\r\n" + ABORT
    )
    assert kv.run("GET", "a") is None, "nothing of an aborted transaction is applied"


def test_an_exec_of_the_wrong_arity_ends_the_transaction_at_once(kv: Replica) -> None:
    client = Conversation(kv)
    because = b"-EXECABORT Transaction discarded because of: wrong number of arguments for "
    assert client.send(
        ["WATCH", "w"],
        ["MULTI"],
        ["SET", "a", "1"],
        ["EXEC", "x"],
        ["SET", "b", "2"],
        ["EXEC"],
        ["EXEC", "x"],
    ) == (
        b"+OK\r\n+OK\r\n+QUEUED\r\n" + because + b"'exec' command\r\n"
        b"+OK\r\n-ERR EXEC without MULTI\r\n" + because + b"'exec' command\r\n"
    )
    assert kv.run("GET", "a") is None
    assert kv.run("GET", "b") == b"2"
    assert not client.client.watches, "the transaction's end forgot the watched keys"


def test_unwatch_inside_multi_is_queued_and_answers_at_exec(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(["WATCH", "a"], ["MULTI"], ["UNWATCH"], ["SET", "a", "1"], ["EXEC"]) == (
        b"+OK\r\n+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n+OK\r\n+OK\r\n"
    )
    assert client.send(["MULTI"], ["UNWATCH"], ["EXEC"], ["PING"]) == (
        b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n+PONG\r\n"
    )


def test_refused_watch_and_nested_multi_do_not_abort(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(["MULTI"], ["SET", "a", "1"], ["WATCH", "a"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n-ERR WATCH inside MULTI is not allowed\r\n*1\r\n+OK\r\n"
    )
    assert client.send(["MULTI"], ["MULTI"], ["SET", "a", "2"], ["EXEC"]) == (
        b"+OK\r\n-ERR MULTI calls can not be nested\r\n+QUEUED\r\n*1\r\n+OK\r\n"
    )


def test_exec_runs_everything_and_an_error_is_one_reply_among_others(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(
        ["MULTI"], ["SET", "a", "x"], ["INCR", "a"], ["GET", "a"], ["PING"], ["EXEC"]
    ) == (
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"
        b"*4\r\n+OK\r\n-ERR value is not an integer or out of range\r\n$1\r\nx\r\n+PONG\r\n"
    )


def test_a_queued_command_that_raises_by_a_bug_fails_alone(
    kv: Replica, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: KVStore, key: bytes) -> int:
        raise OverflowError("a bug")

    monkeypatch.setitem(KVStore._transaction_operations, "incr", broken)
    client = Conversation(kv)
    assert client.send(
        ["MULTI"], ["SET", "a", "1"], ["INCR", "n"], ["SET", "b", "2"], ["EXEC"]
    ) == (
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n-ERR OverflowError: a bug\r\n+OK\r\n"
    )
    assert [kv.run("GET", "a"), kv.run("GET", "b")] == [b"1", b"2"]


def test_exec_in_resp3(kv: Replica) -> None:
    client = Conversation(kv)
    client.send(["HELLO", "3"])
    assert client.send(["MULTI"], ["SET", "a", "x"], ["INCR", "a"], ["GET", "nokey"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n"
        b"*3\r\n+OK\r\n-ERR value is not an integer or out of range\r\n_\r\n"
    )


def test_watch_aborts_exec_when_the_key_changed(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(
        ["WATCH", "w"],
        ["SET", "w", "1"],
        ["MULTI"],
        ["GET", "w"],
        ["EXEC"],
        ["WATCH", "w"],
        ["MULTI"],
        ["EXEC"],
        ["UNWATCH"],
        ["MULTI"],
        ["DISCARD"],
    ) == (b"+OK\r\n+OK\r\n+OK\r\n+QUEUED\r\n*-1\r\n+OK\r\n+OK\r\n*0\r\n+OK\r\n+OK\r\n+OK\r\n")


def test_another_clients_write_aborts_and_exec_forgets_the_watch(kv: Replica) -> None:
    alice, bob = Conversation(kv, 1), Conversation(kv, 2)
    alice.send(["SET", "balance", "10"])
    alice.send(["WATCH", "balance"])
    bob.send(["INCRBY", "balance", "5"])
    assert alice.send(["MULTI"], ["SET", "balance", "0"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n*-1\r\n"
    )
    assert kv.run("GET", "balance") == b"15"
    # EXEC forgot the watch: the same transaction now goes through.
    assert alice.send(["MULTI"], ["SET", "balance", "0"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"
    )


def test_rename_and_copy_abort_the_watches_of_the_names_they_change(kv: Replica) -> None:
    alice, bob = Conversation(kv, 1), Conversation(kv, 2)
    aborted = b"+OK\r\n+QUEUED\r\n*-1\r\n"
    alice.send(["SET", "a", "1"])
    for watched in ("a", "b"):  # the old name goes, the new one comes
        alice.send(["WATCH", watched])
        bob.send(["RENAME", "a", "b"])
        assert alice.send(["MULTI"], ["GET", "b"], ["EXEC"]) == aborted
        bob.send(["RENAME", "b", "a"])
    alice.send(["WATCH", "a", "c"])
    bob.send(["COPY", "a", "b"])  # neither watched name changed
    assert alice.send(["MULTI"], ["GET", "b"], ["EXEC"]) == b"+OK\r\n+QUEUED\r\n*1\r\n$1\r\n1\r\n"
    alice.send(["WATCH", "b"])
    bob.send(["COPY", "a", "b", "REPLACE"])  # the same value, but written again
    assert alice.send(["MULTI"], ["GET", "b"], ["EXEC"]) == aborted


def test_a_write_that_changes_nothing_does_not_abort(kv: Replica) -> None:
    client = Conversation(kv)
    kv.run("SET", "k", "v")
    client.send(["WATCH", "k", "absent"])
    kv.run("SET", "k", "v", "NX")
    kv.run("DEL", "absent")
    kv.run("PERSIST", "k")
    assert client.send(["MULTI"], ["GET", "k"], ["EXEC"]) == b"+OK\r\n+QUEUED\r\n*1\r\n$1\r\nv\r\n"


def test_expiring_after_the_watch_aborts_but_an_already_expired_key_does_not(
    kv: Replica,
) -> None:
    client = Conversation(kv)
    kv.run("SET", "soon", "v", "PX", "100")
    kv.run("SET", "gone", "v", "PX", "10")
    kv.advance_ms(50)
    kv.barrier()
    client.send(["WATCH", "soon", "gone"])  # "gone" is expired already
    kv.advance_ms(60)
    assert client.send(["MULTI"], ["EXEC"]) == b"+OK\r\n*-1\r\n", "soon expired after WATCH"
    client.send(["WATCH", "gone"])
    kv.run("SET", "other", "x")  # active expiry deletes "gone" and "soon" now
    assert client.send(["MULTI"], ["EXEC"]) == b"+OK\r\n*0\r\n"


def test_flush_aborts_watches_of_the_keys_it_deletes(kv: Replica) -> None:
    client = Conversation(kv)
    kv.run("SET", "k", "v")
    client.send(["WATCH", "k"])
    kv.run("FLUSHALL")
    assert client.send(["MULTI"], ["EXEC"]) == b"+OK\r\n*-1\r\n"


def test_reset_and_quit_act_at_once_inside_multi(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(["MULTI"], ["SET", "a", "1"], ["RESET"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n+RESET\r\n-ERR EXEC without MULTI\r\n"
    )
    assert client.send(["MULTI"], ["QUIT"]) == b"+OK\r\n+OK\r\n"
    assert client.client.close_after_reply


def test_queued_server_commands_answer_at_exec(kv: Replica) -> None:
    client = Conversation(kv)
    assert client.send(["MULTI"], ["ECHO", "hi"], ["SELECT", "1"], ["EXEC"]) == (
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n$2\r\nhi\r\n-ERR DB index is out of range\r\n"
    )


def test_transactions_are_bounded(kv: Replica, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "transaction_commands_max", 2)
    client = Conversation(kv)
    assert client.send(
        ["MULTI"], ["SET", "a", "1"], ["SET", "b", "1"], ["SET", "c", "1"], ["EXEC"]
    ) == (
        b"+OK\r\n+QUEUED\r\n+QUEUED\r\n"
        b"-ERR the transaction is too large to queue this command\r\n" + ABORT
    )
    monkeypatch.setattr(limits, "watched_keys_max", 1)
    assert client.send(["WATCH", "a", "b"]) == (b"-ERR a connection may watch at most 1 keys\r\n")


def test_watched_keys_and_queued_commands_share_the_transaction_bytes(
    kv: Replica, monkeypatch: pytest.MonkeyPatch
) -> None:
    overhead = limits.transaction_item_overhead_bytes
    monkeypatch.setattr(limits, "transaction_bytes_max", 2 * overhead + 10)
    client = Conversation(kv)
    assert client.send(["WATCH", "k" * (overhead + 11)]) == (
        b"-ERR the watched keys are too large for one transaction\r\n"
    )
    assert client.send(["WATCH", "key"]) == b"+OK\r\n"
    assert client.send(["MULTI"], ["GET", "k"], ["EXEC"]) == (
        b"+OK\r\n-ERR the transaction is too large to queue this command\r\n" + ABORT
    )
    assert client.client.watched_bytes == 0, "EXEC forgot the watches"


# --- WATCH against a model ------------------------------------------------------------------------

KEYS = [b"a", b"b"]
writes = st.sampled_from(
    [
        [b"SET", b"a", b"1"],
        [b"SET", b"a", b"1", b"NX"],
        [b"SET", b"b", b"2", b"XX"],
        [b"DEL", b"a"],
        [b"INCR", b"b"],
        [b"APPEND", b"a", b""],
        [b"PEXPIRE", b"a", b"20"],
        [b"PEXPIRE", b"b", b"5"],
        [b"PERSIST", b"a"],
        [b"GETDEL", b"b"],
        [b"SET", b"c", b"x"],
        [b"FLUSHDB"],
    ]
)


def raw(kv: Replica, key: bytes) -> tuple[bytes | None, int | None]:
    """The key's stored value and expiry time (not how commands see them)."""
    return kv.store.values.get(key), kv.store.expire_at_ms.get(key)


def live(kv: Replica, key: bytes) -> bool:
    return bool(kv.run("EXISTS", key) == 1)


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(writes, max_size=4),
    between=st.lists(st.tuples(writes, st.integers(0, 15)), max_size=4),
    watched=st.sampled_from(KEYS),
)
# The key expires at exactly the time EXEC is logged (found by CI).
@example(
    before=[[b"INCR", b"b"], [b"PEXPIRE", b"b", b"5"]],
    between=[([b"SET", b"a", b"1"], 4)],
    watched=b"b",
)
def test_exec_runs_only_if_the_key_did_not_change_and_always_if_nothing_touched_it(
    before: list[list[bytes]], between: list[tuple[list[bytes], int]], watched: bytes
) -> None:
    kv = Replica()
    for write in before:
        kv.apply([write])
    client = Conversation(kv)
    client.send(["WATCH", watched])
    live_at_watch = live(kv, watched)
    changed = False
    for write, delay_ms in between:
        kv.advance_ms(delay_ms)
        seen = raw(kv, watched)
        kv.apply([write])
        changed = changed or raw(kv, watched) != seen
    kv.advance_ms(1)
    # Queries see the time of the last applied entry: an empty batch brings that to the
    # time EXEC will be logged at, so `live` judges expiry as EXEC will.
    kv.barrier()
    expired = live_at_watch and not live(kv, watched) and not changed
    named = any(write[1:2] == [watched] or write == [b"FLUSHDB"] for write, _ in between)
    answer = client.send(["MULTI"], ["EXEC"])
    if answer == b"+OK\r\n*0\r\n":
        assert not changed, "EXEC ran although the watched key changed"
        assert not expired, "EXEC ran although the watched key expired after WATCH"
    else:
        assert answer == b"+OK\r\n*-1\r\n"
        # An abort needs a reason: a write that named the key, or an expiry after WATCH
        # (whose active deletion by any write is a change too).
        assert named or expired or changed, "EXEC was aborted for nothing"


def test_deletions_past_the_remembered_bound_abort_conservatively(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "watch_tombstones_max", 2)
    kv = Replica()
    kv.run("SET", "k", "v")
    client = Conversation(kv)
    client.send(["WATCH", "k", "never"])
    kv.run("DEL", "k")
    for key in (b"x", b"y", b"z"):
        kv.run("SET", key, "1")
        kv.run("DEL", key)
    store: KVStore = kv.store
    assert b"k" not in store.tombstones, "forgotten"
    assert store.tombstones_forgotten_index > 0
    assert client.send(["MULTI"], ["EXEC"]) == b"+OK\r\n*-1\r\n"
