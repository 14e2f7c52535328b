"""Metrics: plain accumulators on the hot path, Prometheus families at scrape time.

Components count into objects they own (a `Histogram` from here, or integer
attributes of their own); a process builds one `CollectorRegistry` per
component it runs (`registry`), whose collectors read those objects only when
a scrape asks, and hand `prometheus_client` metric families over.  Hence:

* no global registry: several bookies and replicas in one process (tests, the
  simulation) each export their own numbers;
* an observation costs one bisection and two additions, with no lock: every
  observation happens on the component's event loop;
* gauges (queue depths, connections, disk use) cost nothing until scraped.

Names follow Prometheus's conventions: base units (`_seconds`, `_bytes`),
`_total` on counters (added by `prometheus_client` to a counter family's name),
histograms for latencies and sizes.  docs/observability.md lists every metric.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, TypeVar

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

LATENCY_BUCKETS_S: Final = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Upper bounds (seconds) of latency histograms: 100 µs to 10 s."""

COUNT_BUCKETS: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0)
"""Upper bounds of how-many histograms (entries per fsync, commands per batch)."""

SIZE_BUCKETS_BYTES: Final = tuple(float(4**power * 64) for power in range(11))
"""Upper bounds (bytes) of size histograms: 64 B to 64 MiB by factors of 4."""

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of `exposition`'s answer (Prometheus's text format)."""


_Family = TypeVar("_Family", CounterMetricFamily, GaugeMetricFamily)


class Histogram:
    """Counts of observations per bucket and their sum, exported as a Prometheus histogram.

    Buckets are cumulative only when exported; `counts[i]` holds the observations
    in (bounds[i-1], bounds[i]], and the last slot those above every bound.
    """

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float] = LATENCY_BUCKETS_S) -> None:
        assert list(bounds) == sorted(set(bounds)), "bucket bounds strictly increase"
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, float]]:
        """(le, count of observations at most le) per bucket, ending with +Inf."""
        buckets = []
        total = 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            buckets.append((_bound_label(bound), float(total)))
        return buckets


def _bound_label(bound: float) -> str:
    if bound == float("inf"):
        return "+Inf"
    return repr(float(bound))


def histogram(
    name: str,
    documentation: str,
    by_label: Mapping[tuple[str, ...], Histogram],
    labels: Sequence[str] = (),
) -> HistogramMetricFamily:
    """One histogram family, one series per label values."""
    family = HistogramMetricFamily(name, documentation, labels=labels)
    for values, observed in by_label.items():
        family.add_metric(list(values), observed.cumulative(), observed.sum)
    return family


def counter(
    name: str,
    documentation: str,
    by_label: Mapping[tuple[str, ...], float],
    labels: Sequence[str] = (),
) -> CounterMetricFamily:
    """One counter family (`name` without `_total`: the exposition adds it)."""
    return _filled(CounterMetricFamily(name, documentation, labels=labels), by_label)


def gauge(
    name: str,
    documentation: str,
    by_label: Mapping[tuple[str, ...], float],
    labels: Sequence[str] = (),
) -> GaugeMetricFamily:
    return _filled(GaugeMetricFamily(name, documentation, labels=labels), by_label)


def _filled(family: _Family, by_label: Mapping[tuple[str, ...], float]) -> _Family:
    for values, value in by_label.items():
        family.add_metric(list(values), value)
    return family


class FamiliesCollector(Collector):
    """A collector whose families come from one callable, called at every scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return list(self._families())


def registry(*sources: Callable[[], Iterable[Metric]]) -> CollectorRegistry:
    """A registry of its own (never the global one) exporting what each source yields."""
    built = CollectorRegistry(auto_describe=False)
    for source in sources:
        built.register(FamiliesCollector(source))
    return built


def process_registry() -> CollectorRegistry:
    """The process's `process_*` metrics (Prometheus's standard ones, read from /proc at each
    scrape: CPU seconds, resident memory, open and maximum file descriptors, start time);
    empty where /proc is not."""
    built = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=built)
    return built


def exposition(registries: Iterable[CollectorRegistry]) -> bytes:
    """The metrics of every registry in Prometheus's text format (`CONTENT_TYPE`)."""
    return b"".join(generate_latest(each) for each in registries)
