"""Every decoder against any bytes: a value or its package's own error, never anything else.

Per target (`targets.TARGETS`): random bytes; valid encodings mutated byte by
byte; valid encodings changed at the value level (CBOR targets); every file of
the corpus (`corpus/<target>/`); and length fields set to their largest values
under `tracemalloc`, which must not allocate what they claim.  A hang fails
the example's deadline (`profiles.FUZZ`).
"""

from __future__ import annotations

import contextlib
import struct
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from .mutations import mutated, mutated_items
from .profiles import FUZZ
from .targets import TARGETS, Target

CORPUS = Path(__file__).parent / "corpus"
_CBOR_TARGETS = [name for name, target in TARGETS.items() if target.envelope is not None]
_PEAK_BYTES_MAX = 64 * 1024 * 1024
"""Far below what any length field of the inputs claims (4 GiB, 2^63 bytes)."""


def decode(target: Target, data: bytes) -> None:
    """Run `target` on `data`: its own errors are an answer; anything else fails the test."""
    with contextlib.suppress(target.errors):
        target.run(data)


def test_every_target_has_a_corpus() -> None:
    assert sorted(path.name for path in CORPUS.iterdir()) == sorted(TARGETS)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seeds_are_valid(name: str) -> None:
    target = TARGETS[name]
    assert target.seeds
    for seed in target.seeds:
        target.run(seed)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_any_bytes(name: str) -> None:
    target = TARGETS[name]

    @FUZZ
    @given(st.binary(max_size=4096))
    def check(data: bytes) -> None:
        decode(target, data)

    check()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_mutated_encodings(name: str) -> None:
    target = TARGETS[name]

    @FUZZ
    @given(st.sampled_from(target.seeds).flatmap(mutated))
    def check(data: bytes) -> None:
        decode(target, data)

    check()


@pytest.mark.parametrize("name", _CBOR_TARGETS)
def test_mutated_values(name: str) -> None:
    target = TARGETS[name]
    envelope = target.envelope
    assert envelope is not None

    @FUZZ
    @given(st.sampled_from(target.seeds).flatmap(lambda seed: mutated_items(envelope, seed)))
    def check(data: bytes) -> None:
        decode(target, data)

    check()


def _corpus_files() -> list[Path]:
    return sorted(path for path in CORPUS.glob("*/*") if path.is_file())


@pytest.mark.parametrize(
    "path", _corpus_files(), ids=lambda path: f"{path.parent.name}/{path.name}"
)
def test_corpus(path: Path) -> None:
    decode(TARGETS[path.parent.name], path.read_bytes())


def _huge_lengths(seed: bytes) -> list[bytes]:
    """`seed` with, at each offset, 4 bytes set to a u32 length of 4 GiB - 1 or 2 GiB, and a
    CBOR byte string, text or array head claiming 2^63 - 1 bytes or items."""
    variants = []
    for offset in range(len(seed)):
        for value in (0xFFFF_FFFF, 0x8000_0000):
            variants.append(seed[:offset] + struct.pack(">I", value) + seed[offset + 4 :])
        for head in (b"\x5b", b"\x7b", b"\x9b"):
            variants.append(seed[:offset] + head + b"\x7f" + b"\xff" * 7 + seed[offset + 9 :])
    return variants


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_length_fields_do_not_allocate_what_they_claim(name: str) -> None:
    target = TARGETS[name]
    tracemalloc.start()
    try:
        for seed in target.seeds:
            for data in _huge_lengths(seed[:256]):
                tracemalloc.reset_peak()
                decode(target, data)
                _, peak = tracemalloc.get_traced_memory()
                assert peak < _PEAK_BYTES_MAX, (data[:64], peak)
    finally:
        tracemalloc.stop()
