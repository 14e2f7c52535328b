"""The hot-path histogram and the families built from it, read back by Prometheus's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from bookie.metrics import Histogram, counter, exposition, gauge, histogram, registry


def test_bucket_bounds_are_inclusive_and_cumulative() -> None:
    observed = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 1.0, 7.0):
        observed.observe(value)
    assert observed.cumulative() == [("0.1", 2.0), ("1.0", 4.0), ("+Inf", 5.0)]
    assert observed.count == 5
    assert observed.sum == 8.65


def test_registries_are_separate_and_read_at_scrape_time() -> None:
    latency = Histogram((0.001, 0.01))
    state = {"connections": 1}

    def families():  # type: ignore[no-untyped-def]
        yield histogram("x_latency_seconds", "latency", {("ok",): latency}, ["result"])
        yield counter("x_requests", "requests", {(): 3})
        yield gauge("x_connections", "connections", {(): state["connections"]})

    first, second = registry(families), registry()
    latency.observe(0.005)
    state["connections"] = 4
    parsed = {
        family.name: family
        for family in text_string_to_metric_families(exposition([first, second]).decode())
    }
    assert set(parsed) == {"x_latency_seconds", "x_requests", "x_connections"}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in parsed.values()
        for s in f.samples
    }
    assert samples[("x_latency_seconds_bucket", (("le", "0.01"), ("result", "ok")))] == 1
    assert samples[("x_latency_seconds_bucket", (("le", "0.001"), ("result", "ok")))] == 0
    assert samples[("x_requests_total", ())] == 3
    assert samples[("x_connections", ())] == 4
    assert exposition([second]) == b""
