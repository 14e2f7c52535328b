"""The options of the `rsm-log` and `ledger` Spark sources, checked: pure.

Spark hands a source its options as text (keys compared without case).
`log_options` and `ledger_options` turn them into values or raise
`InvalidConfig` naming the option and what it accepts; `cluster_options`
checks only where the cluster is and how its bookies are reached.

`rsm-log` (docs/spark.md has the table):

    zk                      ZooKeeper HOST:PORT[,...][/chroot]        required
    app                     the application's name                    required
    ledgerRoot              the ledger cluster's metadata root        /ledgers
    tlsCaFile               PEM CAs of the bookies' certificates: read the bookies
                            through their TLS listeners (a path every executor can read)  none
    tlsCertFile             PEM client certificate chain (mutual TLS; needs tlsCaFile)    none
    tlsKeyFile              its private key, if not in tlsCertFile                        none
    startingIndex           first index read: N >= 1 or `earliest`    earliest
    endingIndex             index where the read stops (excluded): N or `latest`   latest
    startingTimestamp       keep commands logged at or after T (ms since the Unix epoch)
    endingTimestamp         keep commands logged before T (ms)
    minPartitions           see rsm/spark/planning.py                 1
    maxEntriesPerPartition  see rsm/spark/planning.py                 1000
    arrow                   executors yield Arrow record batches (true) or tuples     true
    maxCommandsPerTrigger   streaming: at most this many indexes per micro-batch       no limit
    minCommandsPerTrigger   streaming: no micro-batch of fewer indexes, until
                            maxTriggerDelay passed since the last (rsm/spark/admission.py)  none
    maxTriggerDelay         streaming: the longest wait for minCommandsPerTrigger: N with a
                            unit, ms, s, m or h (no unit: ms)                          15m
    onDataLoss              a start below the log's first index: `fail`, or `snapshot`
                            (go on from the first index when a snapshot covers the gap)  fail
    machine                 the application's MODULE:CLASS: adds the column `typed_arguments`
                            for the commands it types (rsm/spark/typed_arguments.py)    none
    mode                    an entry that cannot be read or decoded: `FAILFAST` fails the
                            read naming it, `PERMISSIVE` gives a row naming it in the
                            column `_corrupt` (rsm/spark/rows.py)                  FAILFAST

`ledger` takes `zk`, `ledgerRoot`, the `tls*` options, `minPartitions`, `maxEntriesPerPartition`,
`arrow`, `mode`, and `ledgers`: comma-separated ledger ids (default: every ledger).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bookie import limits as bookie_limits
from rsm import limits
from rsm.core.layout import AppLayout
from rsm.errors import InvalidConfig
from rsm.spark.planning import Bounds, Interval

DATA_LOSS_POLICIES = ("fail", "snapshot")
"""What a read does when its start was truncated away; the first is the default."""
MODES = ("failfast", "permissive")
"""What a read does with an entry it cannot read or decode (`mode`, any case); the first is
the default."""
_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """Where the ledgers and the application's znodes are, and how the bookies are reached:
    with `tls_ca_file`, their TLS listeners (paths, not contexts: options travel to the
    executors pickled, and each opens the files itself)."""

    zk: str
    ledger_root: str
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None


@dataclass(frozen=True, slots=True)
class SplitOptions:
    min_partitions: int
    max_entries_per_partition: int
    arrow: bool
    permissive: bool = False
    """`mode=PERMISSIVE`: an unreadable entry is a row naming it, not a failed read."""


@dataclass(frozen=True, slots=True)
class LogOptions:
    cluster: ClusterOptions
    app: str
    bounds: Bounds
    """Index bounds from startingIndex/endingIndex (start None: earliest), time bounds."""
    split: SplitOptions
    max_commands_per_trigger: int | None = None
    """Streaming: at most this many indexes per micro-batch (None: all that is readable)."""
    min_commands_per_trigger: int | None = None
    """Streaming: no micro-batch of fewer indexes until `max_trigger_delay_ms` passed."""
    max_trigger_delay_ms: int = 15 * 60_000
    on_data_loss: str = "fail"
    """`fail` or `snapshot` (DATA_LOSS_POLICIES)."""
    machine: str | None = None
    """The application's `MODULE:CLASS`, whose `spark_arguments` type the arguments."""


@dataclass(frozen=True, slots=True)
class LedgerOptions:
    cluster: ClusterOptions
    ledger_ids: tuple[int, ...] | None
    split: SplitOptions


def log_options(raw: Mapping[str, str]) -> LogOptions:
    options = _lowered(raw)
    app = _required(options, "app")
    AppLayout.of(app)  # checks the name
    index = Interval(
        _position(options, "startingindex", "earliest"),
        _position(options, "endingindex", "latest"),
    )
    time_ms = Interval(
        _integer(options, "startingtimestamp", 0, None),
        _integer(options, "endingtimestamp", 0, None),
    )
    return LogOptions(
        cluster=_cluster(options),
        app=app,
        bounds=Bounds(index=index, time_ms=time_ms),
        split=_split(options),
        max_commands_per_trigger=_integer(options, "maxcommandspertrigger", 1, None),
        min_commands_per_trigger=_integer(options, "mincommandspertrigger", 1, None),
        max_trigger_delay_ms=_duration_ms(options, "maxtriggerdelay", 15 * 60_000),
        on_data_loss=_choice(options, "ondataloss", DATA_LOSS_POLICIES),
        machine=options.get("machine", "").strip() or None,
    )


def ledger_options(raw: Mapping[str, str]) -> LedgerOptions:
    options = _lowered(raw)
    text = options.get("ledgers")
    ids: tuple[int, ...] | None = None
    if text is not None and text.strip():
        try:
            ids = tuple(sorted({int(word) for word in text.split(",")}))
        except ValueError:
            raise InvalidConfig(f"option ledgers={text!r:.80} is not comma-separated ids") from None
        if any(ledger_id < 0 for ledger_id in ids):
            raise InvalidConfig(f"option ledgers={text!r:.80} has a negative id")
    return LedgerOptions(cluster=_cluster(options), ledger_ids=ids, split=_split(options))


def cluster_options(raw: Mapping[str, str]) -> ClusterOptions:
    """`zk`, `ledgerRoot` and the `tls*` options, checked."""
    return _cluster(_lowered(raw))


def _lowered(raw: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): str(value) for key, value in raw.items()}


def _required(options: Mapping[str, str], key: str) -> str:
    value = options.get(key, "").strip()
    if not value:
        raise InvalidConfig(f"option {key} is required")
    return value


def _cluster(options: Mapping[str, str]) -> ClusterOptions:
    ca_file, cert_file, key_file = (
        options.get(key, "").strip() or None for key in ("tlscafile", "tlscertfile", "tlskeyfile")
    )
    if ca_file is None and (cert_file is not None or key_file is not None):
        raise InvalidConfig("options tlsCertFile and tlsKeyFile need tlsCaFile")
    if key_file is not None and cert_file is None:
        raise InvalidConfig("option tlsKeyFile needs tlsCertFile")
    return ClusterOptions(
        zk=_required(options, "zk"),
        ledger_root=options.get("ledgerroot", bookie_limits.metadata_root_default),
        tls_ca_file=ca_file,
        tls_cert_file=cert_file,
        tls_key_file=key_file,
    )


def _split(options: Mapping[str, str]) -> SplitOptions:
    arrow = options.get("arrow", "true").strip().lower()
    if arrow not in _TRUE + _FALSE:
        raise InvalidConfig(f"option arrow={arrow!r:.40} is not true or false")
    return SplitOptions(
        min_partitions=_count(options, "minpartitions", limits.spark_min_partitions_default),
        max_entries_per_partition=_count(
            options,
            "maxentriesperpartition",
            limits.spark_entries_per_partition_max_default,
        ),
        arrow=arrow in _TRUE,
        permissive=_choice(options, "mode", MODES) == "permissive",
    )


def _integer(options: Mapping[str, str], key: str, lowest: int, default: int | None) -> int | None:
    text = options.get(key)
    if text is None or not text.strip():
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidConfig(f"option {key}={text!r:.40} is not an integer") from None
    if value < lowest:
        raise InvalidConfig(f"option {key}={value} is below {lowest}")
    return value


def _choice(options: Mapping[str, str], key: str, choices: tuple[str, ...]) -> str:
    value = options.get(key, choices[0]).strip().lower()
    if value not in choices:
        raise InvalidConfig(f"option {key}={value!r:.40} is not one of {', '.join(choices)}")
    return value


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}
_DURATION = re.compile(r"([0-9]+)\s*(ms|s|m|h)?")


def _duration_ms(options: Mapping[str, str], key: str, default: int) -> int:
    text = options.get(key)
    if text is None or not text.strip():
        return default
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise InvalidConfig(f"option {key}={text!r:.40} is not a duration: N with ms, s, m or h")
    return int(match.group(1)) * _UNITS_MS[match.group(2) or "ms"]


def _count(options: Mapping[str, str], key: str, default: int) -> int:
    value = _integer(options, key, 1, default)
    assert value is not None
    return value


def _position(options: Mapping[str, str], key: str, open_end: str) -> int | None:
    """An index option: N >= 1, or the word for an open end (None)."""
    text = options.get(key, open_end).strip().lower()
    if text == open_end:
        return None
    try:
        value = int(text)
    except ValueError:
        raise InvalidConfig(
            f"option {key}={text!r:.40} is neither an index nor {open_end}"
        ) from None
    if value < 1:
        raise InvalidConfig(f"option {key}={value}: indexes start at 1")
    return value
