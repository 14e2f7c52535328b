"""`MemoryLedgerStorage`: crash semantics, failure, and determinism."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.errors import StorageIOError
from bookie.storage.memory import MemoryLedgerStorage

from .helpers import KEY, make_packet

Operation = tuple[str, int]
operations = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 5)),
        st.tuples(st.just("fence"), st.integers(0, 5)),
        st.tuples(st.just("delete"), st.integers(0, 5)),
        st.tuples(st.just("sync"), st.just(0)),
    ),
    max_size=40,
)


Call = tuple[str, tuple[object, ...]]


def apply(storage: MemoryLedgerStorage, operation: Operation, calls: list[Call]) -> None:
    """Apply one operation, recording every mutation call made in `calls`."""

    def call(name: str, *args: object) -> None:
        getattr(storage, name)(*args)
        calls.append((name, args))

    name, ledger_id = operation
    if name == "sync":
        storage.sync()
    elif name == "delete":
        call("delete_ledger", ledger_id)
    else:
        if ledger_id not in storage.ledger_ids():
            call("set_master_key", ledger_id, KEY)
        if name == "add":
            entry_id = len(calls)
            call("add_entry", ledger_id, entry_id, make_packet(ledger_id, entry_id))
        else:
            call("fence", ledger_id)


def view(storage: MemoryLedgerStorage) -> object:
    return (
        list(storage.recovered_ledgers()),
        list(storage.fenced_tombstones()),
        {ledger_id: storage.entry_ranges(ledger_id) for ledger_id in storage.ledger_ids()},
    )


@given(operations, st.data())
def test_crash_keeps_the_synced_prefix_plus_survivors(
    script: list[Operation], data: st.DataObject
) -> None:
    storage = MemoryLedgerStorage()
    calls: list[Call] = []
    for operation in script:
        apply(storage, operation, calls)
    assert storage.last_ticket == len(calls)
    survivors = data.draw(st.integers(0, storage.last_ticket - storage.synced_ticket))
    restarted = storage.crash(survivors)
    # The same mutations, stopped where the crash cut them, give the same state.
    expected = MemoryLedgerStorage()
    for name, args in calls[: storage.synced_ticket + survivors]:
        getattr(expected, name)(*args)
    assert view(restarted) == view(expected)


def test_crash_leaves_the_original_untouched() -> None:
    storage = MemoryLedgerStorage()
    storage.set_master_key(1, KEY)
    storage.sync()
    storage.add_entry(1, 0, make_packet(1, 0))
    restarted = storage.crash()
    assert restarted.read_entry(1, 0) is None
    assert storage.read_entry(1, 0) == make_packet(1, 0)
    storage.sync()
    assert storage.crash().read_entry(1, 0) == make_packet(1, 0)


def test_sync_after_a_failure_syncs_nothing() -> None:
    storage = MemoryLedgerStorage()
    calls: list[int] = []
    storage.add_sync_listener(calls.append)
    storage.set_master_key(1, KEY)
    assert storage.sync() == 1
    storage.add_entry(1, 0, make_packet(1, 0))
    storage.fail(StorageIOError("injected"))
    assert calls == [1, 1]
    assert storage.sync() == 1
    assert calls == [1, 1]
    with pytest.raises(StorageIOError):
        storage.set_master_key(2, KEY)
    assert storage.crash().read_entry(1, 0) is None


def test_sync_without_mutations_calls_no_listener() -> None:
    storage = MemoryLedgerStorage()
    calls: list[int] = []
    storage.add_sync_listener(calls.append)
    assert storage.sync() == 0
    assert calls == []
