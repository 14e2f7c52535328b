"""Determinism: one log replayed in two processes with different hash seeds, compared.

A state machine that depends on set or dict iteration order of str/bytes
keys, on `hash()`, on `id()`, on the wall clock or on an unseeded random
generator gives different states or results in two processes even with the
same log.  `rsm determinism` runs the replay twice, as two child processes
of the `rsm` command (`rsm determinism --child`) with `PYTHONHASHSEED` set to
two different values, each printing one digest line per entry (or per
command over a window), and compares the two streams.  On the first entry
that differs it runs both again over that entry alone, a digest after every
command, which names the command.

A child's line (NDJSON)::

    {"index": I, "ledger_id": L, "entry_id": E, "state": hex, "results": hex}

`state` is the machine's `state_hash()` after the entry (or command),
`results` the SHA-256 of the outcomes' CBOR (a result's order matters to
the client that receives it).  `digest_lines` produces them; `first_mismatch`
compares two children's outputs.

Invariants: the children read the same source with the same class and
range; nothing but PYTHONHASHSEED differs between them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import cbor2

from rsm.config import ReplicaConfig
from rsm.core.sessions import Outcome
from rsm.core.state_machine import StateMachine
from rsm.tools.replay import start
from rsm.tools.source import LogSource, entries


def results_digest(outcomes: Sequence[Outcome]) -> str:
    encoded = cbor2.dumps([list(outcome) for outcome in outcomes], default=_as_text)
    return hashlib.sha256(encoded).hexdigest()


def _as_text(encoder: cbor2.CBOREncoder, value: Any) -> None:
    encoder.encode(repr(value))


async def digest_lines(
    source: LogSource,
    machine_class: type[StateMachine],
    config: ReplicaConfig,
    *,
    from_index: int | None,
    to_index: int,
    per_command: bool,
) -> AsyncIterator[dict[str, Any]]:
    """One line per entry holding indexes `from_index..to_index` (per command with
    `per_command`); the log before `from_index` is applied without digests.  Without
    `from_index`, from the start of the log, or of a truncated log's newest snapshot at or
    below `to_index` (as `rsm bisect` starts)."""
    truncated = source.log.first_index > 1
    replay = await start(
        source,
        machine_class,
        config,
        to_index=to_index if from_index is None else from_index - 1,
        from_snapshot=truncated,
    )
    if from_index is None:
        from_index = replay.index + 1
    async with entries(source, replay.index + 1, to_index) as logged:
        async for entry in logged:
            if entry.last_index < from_index:
                replay.apply(entry)
                continue
            if per_command:
                for record, outcome in replay.steps(entry, to_index):
                    if record.index < from_index:
                        continue
                    yield {
                        "index": record.index,
                        "ledger_id": record.ledger_id,
                        "entry_id": record.entry_id,
                        "slot": record.slot,
                        "state": replay.state_hash().hex(),
                        "results": results_digest([outcome]),
                    }
            else:
                outcomes = list(replay.apply(entry))
                yield {
                    "index": entry.last_index,
                    "ledger_id": entry.ledger_id,
                    "entry_id": entry.entry_id,
                    "state": replay.state_hash().hex(),
                    "results": results_digest(outcomes),
                }
            if replay.index >= to_index:
                return


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first line where two children differ, and both lines."""

    first: dict[str, Any]
    second: dict[str, Any]

    @property
    def what(self) -> str:
        if self.first.get("results") != self.second.get("results"):
            return "results"
        return "state"


def parse_lines(output: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.decode().splitlines() if line.strip()]


def first_mismatch(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> Mismatch | None:
    """The first differing line of two children's outputs (a missing line differs too)."""
    for one, other in zip(first, second, strict=False):
        if one != other:
            return Mismatch(one, other)
    if len(first) != len(second):
        shorter, longer = (first, second) if len(first) < len(second) else (second, first)
        missing = {"index": None}
        line = longer[len(shorter)]
        return Mismatch(line, missing) if shorter is second else Mismatch(missing, line)
    return None
