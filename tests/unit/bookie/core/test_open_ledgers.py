"""When autorecovery fences an open ledger: the writer's state from its declared znode, and
the grace period of no progress before a ledger whose writer is not alive is fenced."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from bookie.core.metadata import LedgerMetadata, LedgerState, new_ledger
from bookie.core.open_ledgers import (
    WRITER_KEY,
    Progress,
    StalledLedgers,
    Writer,
    declared_writer,
    writer_state,
)
from bookie.wire.packet import DigestType

GRACE_MS = 1_000


def ledger(custom: dict[str, bytes] | None = None) -> LedgerMetadata:
    return new_ledger(
        7,
        ("b1", "b2", "b3"),
        write_quorum=2,
        ack_quorum=2,
        digest_type=DigestType.CRC32C,
        password_hash=bytes(32),
        ctime_ms=0,
        custom=custom,
    )


def test_the_declared_writer_is_read_from_the_custom_metadata() -> None:
    assert declared_writer(ledger()) is None
    assert declared_writer(ledger({WRITER_KEY: b"/rsm/kv/replicas/r1"})) == "/rsm/kv/replicas/r1"
    assert declared_writer(ledger({WRITER_KEY: b"\xff"})) is None, "not UTF-8"


def test_the_writers_state_follows_its_znode_and_the_ledgers_state() -> None:
    declared = ledger({WRITER_KEY: b"/w/r1"})
    assert writer_state(declared, znode_exists=True, parent_exists=True) is Writer.ALIVE
    assert writer_state(declared, znode_exists=False, parent_exists=True) is Writer.GONE
    assert writer_state(declared, znode_exists=False, parent_exists=False) is Writer.UNKNOWN
    assert writer_state(ledger(), znode_exists=None, parent_exists=None) is Writer.UNKNOWN
    recovering = replace(declared, state=LedgerState.IN_RECOVERY)
    assert writer_state(recovering, znode_exists=True, parent_exists=True) is Writer.GONE
    assert (
        writer_state(
            replace(ledger(), state=LedgerState.IN_RECOVERY), znode_exists=None, parent_exists=None
        )
        is Writer.GONE
    )


def test_a_stalled_ledger_is_fenced_after_the_grace_and_progress_restarts_it() -> None:
    stalled = StalledLedgers(grace_ms=GRACE_MS)
    still = Progress(metadata_version=3, last_entry_held=9)
    assert stalled.observe(7, Writer.GONE, still, now_ms=0) == GRACE_MS
    assert stalled.observe(7, Writer.GONE, still, now_ms=600) == 400
    moved = Progress(metadata_version=3, last_entry_held=10)
    assert stalled.observe(7, Writer.GONE, moved, now_ms=900) == GRACE_MS, "an entry was added"
    assert stalled.observe(7, Writer.UNKNOWN, moved, now_ms=1_900) == 0
    changed = Progress(metadata_version=4, last_entry_held=10)
    assert stalled.observe(7, Writer.UNKNOWN, changed, now_ms=2_000) == GRACE_MS


def test_an_alive_writer_is_never_fenced_and_restarts_the_grace() -> None:
    stalled = StalledLedgers(grace_ms=GRACE_MS)
    still = Progress(metadata_version=1, last_entry_held=0)
    assert stalled.observe(7, Writer.GONE, still, now_ms=0) == GRACE_MS
    assert stalled.observe(7, Writer.ALIVE, still, now_ms=5_000) is None
    assert stalled.observe(7, Writer.GONE, still, now_ms=6_000) == GRACE_MS


def test_forgotten_and_unmarked_ledgers_start_again() -> None:
    stalled = StalledLedgers(grace_ms=GRACE_MS)
    still = Progress(metadata_version=1, last_entry_held=0)
    stalled.observe(7, Writer.GONE, still, now_ms=0)
    stalled.observe(8, Writer.GONE, still, now_ms=0)
    stalled.retain([8])
    stalled.forget(8)
    assert stalled.observe(7, Writer.GONE, still, now_ms=5_000) == GRACE_MS
    assert stalled.observe(8, Writer.GONE, still, now_ms=5_000) == GRACE_MS


observations = st.lists(
    st.tuples(
        st.sampled_from(list(Writer)),
        st.integers(0, 2),
        st.integers(-1, 2),
        st.integers(0, 700),
    ),
    max_size=30,
)


@given(observations)
def test_fenced_only_after_a_whole_grace_without_progress_and_never_alive(
    steps: list[tuple[Writer, int, int, int]],
) -> None:
    """Against a model: the answer is 0 exactly when the writer is not alive and the
    progress has been the same, in observations with no alive writer between, for at
    least the grace period."""
    stalled = StalledLedgers(grace_ms=GRACE_MS)
    now_ms = 0
    since: tuple[Progress, int] | None = None
    for writer, version, last, advance_ms in steps:
        now_ms += advance_ms
        progress = Progress(version, last)
        answer = stalled.observe(1, writer, progress, now_ms)
        if writer is Writer.ALIVE:
            since = None
            assert answer is None
            continue
        if since is None or since[0] != progress:
            since = (progress, now_ms)
        assert answer is not None
        assert (answer == 0) == (now_ms - since[1] >= GRACE_MS)
