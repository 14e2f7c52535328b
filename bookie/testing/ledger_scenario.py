"""What one seed of the ledger simulation decides before it starts: the scenario.

`draw_scenario` turns a seed's `Random` into a `Scenario` (the world's
physical constants, the ledger configuration E/Qw/Qa with E <= 5 among 5-7
bookies, the client knobs, whether the run is survivable or harsh, how hard
and how often the nemesis strikes); `draw_generation` plans one writer's
generation (how many entries, whether it closes its ledger, which readers and
recoverers meet it, and when).  `SimOptions` is what a run depends on besides
its seed, and `replay_command` the command line that replays a seed.

Pure functions of their `Random`: the draws happen in a fixed order, so a
seed always gives the same scenario.  Knobs are drawn over wide ranges on
purpose (FoundationDB's randomised knobs): a bug that needs one add timeout,
one read-ahead batch or one window size to show is met by some seed.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass

from bookie import limits
from bookie.client.config import ClientConfig
from bookie.testing.nemesis import ALL_FAULTS, FaultKind
from bookie.testing.simcluster import WorldConfig

STEPS_DEFAULT = 8
"""Nemesis steps per seed unless told otherwise."""

ENTRIES_PER_STEP = 25
"""A run's writers push at most this many entries per nemesis step, all generations together:
what keeps a few hundred seeds within a minute or two."""

NEMESIS_PAUSES_MS_MAX = (20.0, 200.0, 1_000.0, 4_000.0)
"""The longest pause between two nemesis steps is one of these."""

BURST_PROBABILITY = 0.3
"""Chance that a generation writes as fast as its window allows instead of at a pace."""

HARSH_FAULT_WEIGHTS = {FaultKind.CRASH: 4, FaultKind.SLOW_DISK: 2}
"""A harsh run crashes bookies (slow ones by preference) far more often than it does anything
else: losing unsynced data on several bookies at once is what only a harsh run can do."""


class Mode(enum.Enum):
    MIXED = "mixed"
    """Each seed picks: mostly survivable, sometimes harsh."""
    SURVIVABLE = "survivable"
    HARSH = "harsh"


@dataclass(frozen=True, slots=True)
class SimOptions:
    """What a run depends on besides its seed (all of it goes into the replay command)."""

    steps: int = STEPS_DEFAULT
    """Nemesis steps; the run lasts as long as they take."""
    mode: Mode = Mode.MIXED
    faults: tuple[FaultKind, ...] = ALL_FAULTS

    def __post_init__(self) -> None:
        assert self.steps >= 0

    @property
    def entries_max(self) -> int:
        """Entries all the writers of a run push at most."""
        return ENTRIES_PER_STEP * max(self.steps, 1)


def replay_command(seed: int, options: SimOptions) -> str:
    """The command line that runs exactly this seed again, with its trace."""
    words = [
        "python -m bookie.testing.ledger_sim",
        f"--seeds 1 --first {seed} --steps {options.steps}",
    ]
    if options.mode is not Mode.MIXED:
        words.append(f"--mode {options.mode.value}")
    if options.faults != ALL_FAULTS:
        words.append("--faults " + ",".join(kind.value for kind in options.faults))
    words.append("--verbose")
    return " ".join(words)


# --- what a seed decides ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a seed decides before the run starts."""

    world: WorldConfig
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    survivable: bool
    client_config: ClientConfig
    crashed_max: int
    """Bookies down at once at most (Qa - 1 in a survivable run)."""
    payload_bytes_max: int
    entries_max: int
    """Entries one generation writes at most."""
    think_ms_mean: float
    """Mean pause between two appends of a paced generation."""
    nemesis_pause_ms_max: float
    """The nemesis pauses up to this long between two steps."""


def draw_scenario(rng: random.Random, options: SimOptions) -> Scenario:
    """The scenario of one seed (`rng` is the seed's own `Random`)."""
    bookie_count = rng.randint(5, 7)
    ensemble_size = rng.randint(2, 5)
    write_quorum = rng.randint(1, ensemble_size)
    ack_quorum = rng.randint(1, write_quorum)
    if ack_quorum == write_quorum and write_quorum > 1 and rng.random() < 0.5:
        # Qw > Qa is where recovery must tell "absent" from "not there yet".
        ack_quorum -= 1
    if ack_quorum == 1 and write_quorum > 1 and rng.random() < 0.5:
        # Qa = 1 tolerates no crash in a survivable run: make it rarer.
        ack_quorum = 2
    if options.mode is Mode.MIXED:
        survivable = rng.random() < 0.75
    else:
        survivable = options.mode is Mode.SURVIVABLE
    latency_ms_min, latency_ms_max = rng.choice([(0.05, 1.0), (0.1, 3.0), (0.5, 10.0)])
    fsync_ms_min, fsync_ms_max = rng.choice([(0.05, 0.5), (0.2, 2.0), (1.0, 8.0)])
    world = WorldConfig(
        bookie_count=bookie_count,
        latency_ms_min=latency_ms_min,
        latency_ms_max=latency_ms_max,
        fsync_ms_min=fsync_ms_min,
        fsync_ms_max=fsync_ms_max,
        connect_timeout_ms=rng.choice([200, 1_000]),
        bookie_session_timeout_ms=rng.choice([500, 2_000, 5_000]),
    )
    # Faults last from a few milliseconds to several seconds, from much shorter to
    # much longer than the client's timeouts: what a fault does depends on which.
    nemesis_pause_ms_max = rng.choice(NEMESIS_PAUSES_MS_MAX)
    # The writers spread their entries over the nemesis' lifetime, so that faults
    # keep meeting a writer that writes.
    nemesis_ms = options.steps * nemesis_pause_ms_max / 2
    think_ms_mean = rng.uniform(0.3, 1.0) * nemesis_ms / options.entries_max
    return Scenario(
        world=world,
        ensemble_size=ensemble_size,
        write_quorum=write_quorum,
        ack_quorum=ack_quorum,
        survivable=survivable,
        client_config=_draw_client_config(rng),
        crashed_max=ack_quorum - 1 if survivable else bookie_count,
        payload_bytes_max=rng.choice([16, 200, 2_000]),
        entries_max=rng.choice([10, 30, 80]),
        think_ms_mean=think_ms_mean,
        nemesis_pause_ms_max=nemesis_pause_ms_max,
    )


def _draw_client_config(rng: random.Random) -> ClientConfig:
    read_timeout_ms = rng.choice([300, 1_000, 2_000])
    reconnect_delay_ms_min = rng.choice([10, 50])
    return ClientConfig(
        add_timeout_ms=rng.choice([300, 1_000, 2_000]),
        read_timeout_ms=read_timeout_ms,
        speculative_read_timeout_ms=rng.randint(20, read_timeout_ms - 1),
        connect_timeout_ms=rng.choice([200, 1_000]),
        outstanding_adds_max=rng.choice([1, 4, 16, 64]),
        explicit_lac_interval_ms=rng.choice([0, 20, 200]),
        ensemble_changes_max=rng.choice([3, 1_000, 1_000]),
        recovery_read_batch_max=rng.choice([1, 2, 8, 64]),
        long_poll_timeout_ms=rng.choice([100, 1_000, 3_000]),
        tail_retry_delay_ms=rng.choice([10, 100]),
        reconnect_delay_ms_min=reconnect_delay_ms_min,
        reconnect_delay_ms_max=reconnect_delay_ms_min * rng.choice([1, 10, 40]),
        metadata_retry_delay_ms=rng.choice([20, 200]),
    )


@dataclass(frozen=True, slots=True)
class ActorPlan:
    """A reader or recoverer of one generation's ledger."""

    name: str
    """Its client name, which is also its host on the network."""
    after_entries: int
    """It starts once the writer pushed this many entries (or stopped), ..."""
    delay_ms: float
    """... and this long after that."""
    tail: bool = True
    """Readers: follow with `tail` (True) or poll the LAC and read ranges (False)."""
    reset_after_ms: float | None = None
    """Recoverers: their connections are reset this long after they start (None: never)."""
    reset_link_index: int | None = None
    """Recoverers: with a reset, only the link to the ensemble's bookie at this index
    (modulo E) breaks, so one fencing request is lost and the others arrive."""


@dataclass(frozen=True, slots=True)
class GenerationPlan:
    number: int
    entries: int
    think_ms_mean: float
    """Mean pause between two appends (0: a burst, as fast as the window allows)."""
    closes: bool
    """Whether the writer closes its ledger after its last entry (else it abandons it)."""
    readers: tuple[ActorPlan, ...]
    recoverers: tuple[ActorPlan, ...]


def draw_generation(
    rng: random.Random, number: int, scenario: Scenario, entries_left: int
) -> GenerationPlan:
    """Generation `number`'s plan; it pushes at most `entries_left` entries (at least 1)."""
    entries = rng.randint(1, max(1, min(scenario.entries_max, entries_left)))
    readers = tuple(
        ActorPlan(
            f"reader-{number}.{index}",
            rng.randint(0, entries),
            rng.uniform(0, 2),
            tail=rng.random() < 0.6,
        )
        for index in range(1, rng.choice([0, 0, 1, 2]) + 1)
    )
    recoverers: list[ActorPlan] = []
    for _ in range(rng.choice([0, 1, 1, 2])):
        after_entries = rng.randint(0, entries)
        for _ in range(rng.choice([1, 1, 2, 3])):
            reset_after_ms = rng.uniform(0, 3) if rng.random() < 0.25 else None
            reset_link_index = None
            if reset_after_ms is not None and rng.random() < 0.5:
                reset_link_index = rng.randrange(limits.ensemble_size_max)
            recoverers.append(
                ActorPlan(
                    f"recoverer-{number}.{len(recoverers) + 1}",
                    after_entries,
                    rng.uniform(0, 2),
                    reset_after_ms=reset_after_ms,
                    reset_link_index=reset_link_index,
                )
            )
    return GenerationPlan(
        number=number,
        entries=entries,
        think_ms_mean=0.0 if rng.random() < BURST_PROBABILITY else scenario.think_ms_mean,
        closes=rng.random() < 0.3,
        readers=readers,
        recoverers=tuple(recoverers),
    )
