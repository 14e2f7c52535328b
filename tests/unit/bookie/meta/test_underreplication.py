"""Under-replication marks, worker locks, the pause switch and the auditor election, over
the in-memory store; and the marks' path scheme."""

from __future__ import annotations

from collections.abc import AsyncIterator

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie import limits
from bookie.errors import BadMetadata
from bookie.meta.layout import (
    LedgerNodeKind,
    MetadataLayout,
    underreplicated_child_kind,
    underreplicated_ledger_id_of_parts,
    underreplicated_parts,
)
from bookie.meta.memory import MemoryMetadataServer, MemoryMetadataStore
from bookie.meta.underreplication import (
    UnderReplication,
    candidate_sequence,
    decode_mark,
    encode_mark,
)

pytestmark = pytest.mark.anyio

ROOT = "/cluster"


@pytest.fixture
def server() -> MemoryMetadataServer:
    return MemoryMetadataServer()


@pytest.fixture
async def store(server: MemoryMetadataServer) -> AsyncIterator[MemoryMetadataStore]:
    async with server.client() as opened:
        yield opened


# --- paths ------------------------------------------------------------------------------------


@given(st.integers(0, limits.ledger_id_max))
def test_mark_path_round_trip(ledger_id: int) -> None:
    parts = underreplicated_parts(ledger_id)
    assert underreplicated_ledger_id_of_parts(parts) == ledger_id
    assert MetadataLayout(ROOT).underreplicated_ledger(ledger_id).endswith("/".join(parts))
    for depth in range(4):
        assert underreplicated_child_kind(parts[:depth], parts[depth]) is LedgerNodeKind.DIRECTORY
    assert underreplicated_child_kind(parts[:4], parts[4]) is LedgerNodeKind.LEDGER


@pytest.mark.parametrize(
    "parts",
    [
        ("0000", "0000", "0000", "0002", "urL0000000001"),  # directories disagree with the id
        ("0000", "0000", "0000", "0001", "urL1"),  # not 10 digits
        ("0000", "0000", "0000", "0001", "L0000000001"),
        ("0000", "0000", "0000", "000A", "urL0000000010"),  # upper-case hex
        ("0000", "0000", "0001", "urL0000000001"),  # too shallow
    ],
)
def test_non_canonical_mark_paths_are_not_marks(parts: tuple[str, ...]) -> None:
    assert underreplicated_ledger_id_of_parts(parts) is None
    assert underreplicated_child_kind(parts[:-1], parts[-1]) is None


def test_switch_path() -> None:
    assert MetadataLayout(ROOT).underreplication_disable == "/cluster/underreplication/disable"


# --- values -----------------------------------------------------------------------------------


def test_mark_value_bytes() -> None:
    # {"m": ["b1", "b2"], "v": 1}, canonical: keys sorted by their encoding.
    assert encode_mark(["b2", "b1", "b2"]) == bytes.fromhex("a2616d82626231626232617601")
    assert decode_mark(encode_mark(["b2", "b1"]), "mark") == {"b1", "b2"}


@pytest.mark.parametrize(
    "value",
    [
        cbor2.dumps({"v": 1, "m": []}),
        cbor2.dumps({"v": 1, "m": ["b2", "b1"]}),
        cbor2.dumps({"v": 1, "m": ["b1", "b1"]}),
        cbor2.dumps({"v": 2, "m": ["b1"]}),
        cbor2.dumps({"v": 1, "m": [1]}),
        b"junk",
    ],
)
def test_bad_mark_values_are_refused(value: bytes) -> None:
    with pytest.raises(BadMetadata):
        decode_mark(value, "mark")


def test_candidate_sequence() -> None:
    assert candidate_sequence("auditor_0000000000") == 0
    assert candidate_sequence("auditor_0000000042") == 42
    assert candidate_sequence("auditor_42") is None
    assert candidate_sequence("other_0000000042") is None


# --- marks ------------------------------------------------------------------------------------


async def test_marks_are_created_widened_listed_and_removed(store: MemoryMetadataStore) -> None:
    marks = UnderReplication(store, ROOT)
    assert await marks.list_marks() == []
    assert await marks.read_mark(7) is None
    assert await marks.mark(7, ["b1"])
    assert await marks.mark(1 << 40, ["b2"])
    assert not await marks.mark(7, ["b1"]), "nothing new"
    assert await marks.list_marks() == [7, 1 << 40]
    read = await marks.read_mark(7)
    assert read is not None
    assert read.missing == {"b1"}
    assert await marks.mark(7, ["b3"])
    widened = await marks.read_mark(7)
    assert widened is not None
    assert widened.missing == {"b1", "b3"}
    assert not await marks.remove_mark(read), "widened since it was read: it stays"
    assert await marks.remove_mark(widened)
    assert await marks.list_marks() == [1 << 40]
    assert not await marks.remove_mark(widened), "gone already"


async def test_a_lock_is_held_until_released_or_its_session_ends(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    marks = UnderReplication(store, ROOT)
    async with server.client() as other_store:
        other = UnderReplication(other_store, ROOT)
        assert await other.try_lock(7, "worker-2")
        assert not await marks.try_lock(7, "worker-1")
        assert await marks.lock_owner(7) == "worker-2"
    assert await marks.lock_owner(7) is None, "the session that held it closed"
    assert await marks.try_lock(7, "worker-1")
    assert await marks.try_lock(7, "worker-1"), "its own lock (an answer lost)"
    await marks.unlock(7)
    await marks.unlock(7)
    assert await marks.lock_owner(7) is None


async def test_the_switch(store: MemoryMetadataStore) -> None:
    marks = UnderReplication(store, ROOT)
    assert await marks.is_enabled()
    await marks.set_enabled(False)
    await marks.set_enabled(False)
    assert not await marks.is_enabled()
    await marks.set_enabled(True)
    await marks.set_enabled(True)
    assert await marks.is_enabled()


async def test_the_first_candidate_is_the_auditor_until_it_leaves(
    server: MemoryMetadataServer, store: MemoryMetadataStore
) -> None:
    marks = UnderReplication(store, ROOT)
    assert await marks.auditor() is None
    async with server.client() as first_store:
        first = UnderReplication(first_store, ROOT)
        mine = await first.stand("b1")
        theirs = await marks.stand("b2")
        assert (await marks.candidates()).ordered == (mine, theirs)
        assert await marks.auditor() == "b1"
    assert await marks.auditor() == "b2"
    assert (await marks.candidates()).ordered == (theirs,)


async def test_withdrawing_removes_only_the_owners_candidacies(store: MemoryMetadataStore) -> None:
    marks = UnderReplication(store, ROOT)
    await marks.stand("b1")
    other = await marks.stand("b2")
    await marks.stand("b1")
    await marks.withdraw("b1")
    assert (await marks.candidates()).ordered == (other,)
    assert await marks.auditor() == "b2"


async def test_the_audit_trigger(store: MemoryMetadataStore) -> None:
    marks = UnderReplication(store, ROOT)
    assert await marks.audit_trigger() is None
    await marks.trigger_audit()
    await marks.trigger_audit()
    version = await marks.audit_trigger()
    assert version is not None
    await marks.clear_audit_trigger(version)
    assert await marks.audit_trigger() is None
    await marks.clear_audit_trigger(version)
    assert MetadataLayout(ROOT).audit_trigger == "/cluster/underreplication/triggeraudit"
