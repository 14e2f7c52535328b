"""docs/observability.md held against a running key-value store: every metric its tables list
is on the `/metrics` of the process they name, with the documented type and labels; every
`/metrics` page is valid Prometheus text; the disk alert computes the fraction the bookie
turns read-only at; expired keys are counted as documented.

One store (three bookies and three replicas, each with its admin HTTP API, as `kvstore up`
runs them) for the module.  What test_kvstore_observability.py and test_bookie_admin.py
check already (INFO's sections, counters moving under load, the OpenAPI schemas) is not
repeated here.
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bookie.local.zookeeper import LocalZooKeeper
from tests.unit.kvstore.local_store import Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper]

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
ROW = re.compile(
    r"^\| `([a-z_:]+)(?:\{([a-z_,]*)\})?` \| (counter|gauge|histogram) \| [^|]* \| (.*) \|$"
)
TLS_ONLY = ("with a TLS listener", "with its port on TLS")
"""Rows of families exported only with TLS on (this store runs without)."""


@pytest.fixture(scope="module")
def store(zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = f"/obs-promises-{os.getpid()}"
    with running_store(zookeeper, root, tmp_path_factory.mktemp("store")) as running:
        yield running


# --- what the page says -------------------------------------------------------------------------


def documented(section: str) -> list[tuple[str, str, list[str], str]]:
    """(name, type, label names, meaning) of every row of the table under `## section`."""
    text = DOC.read_text()
    start = text.index(f"\n## {section}")
    end = text.find("\n## ", start + 1)
    rows = []
    for line in text[start:end].splitlines():
        found = ROW.match(line)
        if found:
            name, labels, kind, meaning = found.groups()
            rows.append((name, kind, labels.split(",") if labels else [], meaning))
    assert rows, f"no metric table under {section!r}"
    return rows


def alert_expression(alert: str) -> str:
    found = re.search(rf"- alert: {alert}\n\s+expr: (.+)\n", DOC.read_text())
    assert found, f"no alert {alert} in {DOC.name}"
    return found.group(1).strip()


# --- what a process serves ----------------------------------------------------------------------


def scrape(admin_url: str) -> str:
    with urllib.request.urlopen(f"{admin_url}/metrics", timeout=10) as answer:
        assert answer.headers["Content-Type"].startswith("text/plain")
        text: str = answer.read().decode()
        return text


def exposition_problems(text: str) -> list[str]:
    """What makes `text` not valid Prometheus text exposition (empty: nothing)."""
    problems: list[str] = []
    helps: Counter[str] = Counter()
    types: dict[str, str] = {}
    series: Counter[str] = Counter()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps[line.split(" ", 3)[2]] += 1
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            if name in types:
                problems.append(f"TYPE of {name} twice")
            types[name] = kind
        elif line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            series[key] += 1
            try:
                float(value)
            except ValueError:
                problems.append(f"not a number: {line!r}")
    problems += [f"HELP of {name} {count} times" for name, count in helps.items() if count > 1]
    problems += [f"{name} without HELP" for name in types if name not in helps]
    problems += [f"series {key} {count} times" for key, count in series.items() if count > 1]
    for family in text_string_to_metric_families(text):
        if family.name not in types and f"{family.name}_total" not in types:
            problems.append(f"{family.name} without TYPE")
        if family.type == "counter":
            problems += [
                f"counter sample {each.name} without _total"
                for each in family.samples
                if not each.name.endswith(("_total", "_created"))
            ]
        if family.type != "histogram":
            continue
        by_series: defaultdict[tuple[tuple[str, str], ...], dict[str, Any]] = defaultdict(
            lambda: {"buckets": []}
        )
        for each in family.samples:
            key = tuple(sorted((k, v) for k, v in each.labels.items() if k != "le"))
            if each.name == f"{family.name}_bucket":
                by_series[key]["buckets"].append((float(each.labels["le"]), each.value))
            else:
                by_series[key][each.name.removeprefix(family.name)] = each.value
        for key, parts in by_series.items():
            where = f"{family.name}{dict(key)}"
            buckets = parts["buckets"]
            if not buckets or buckets[-1][0] != math.inf:
                problems.append(f"{where}: no +Inf bucket last")
                continue
            bounds = [bound for bound, _ in buckets]
            counts = [count for _, count in buckets]
            if bounds != sorted(bounds) or counts != sorted(counts):
                problems.append(f"{where}: buckets not cumulative")
            if "_sum" not in parts or "_count" not in parts:
                problems.append(f"{where}: no _sum or _count")
            elif parts["_count"] != counts[-1]:
                problems.append(f"{where}: _count {parts['_count']} != +Inf {counts[-1]}")
    return problems


def types_and_labels(text: str) -> dict[str, tuple[str, set[str]]]:
    """Exposed name (counters with `_total`) -> (type, label names of its series)."""
    found = {}
    for family in text_string_to_metric_families(text):
        name = f"{family.name}_total" if family.type == "counter" else family.name
        labels = {label for each in family.samples for label in each.labels if label != "le"}
        found[name] = (family.type, labels)
    return found


def evaluate(expression: str, text: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The left side of an alert's `A > N` or `A / B > N` (A, B metric names), per series,
    matched on identical labels as PromQL's `/` matches them."""
    left = expression.split(">", maxsplit=1)[0].strip()
    names = [part.strip() for part in left.split("/")]
    assert all(re.fullmatch(r"[a-z_:]+", name) for name in names), expression
    values: dict[str, dict[tuple[tuple[str, str], ...], float]] = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for each in family.samples:
            if each.name in names:
                values[each.name][tuple(sorted(each.labels.items()))] = each.value
    result = dict(values[names[0]])
    for divisor in names[1:]:
        result = {key: value / values[divisor][key] for key, value in result.items()}
    return result


# --- the tests ----------------------------------------------------------------------------------


def test_every_metrics_page_is_valid_exposition(store: Store) -> None:
    leader = store.leader()
    with store.client(leader) as client:
        for number in range(20):
            client.set(f"exposition:{number}", number)
    urls = [replica.admin_url for replica in store.cluster.replicas]
    urls += [bookie.admin_url for bookie in store.cluster.bookies.bookies]
    for url in urls:
        text = scrape(url)
        assert exposition_problems(text) == [], url
        assert "bookie_add_latency_seconds_bucket" in text or "rsm_applied_index" in text


def test_every_documented_metric_is_exported_as_documented(store: Store) -> None:
    leader = store.leader()
    with store.client(leader) as client:
        client.set("documented", 1)
    on_bookie = types_and_labels(scrape(store.cluster.bookies.bookies[0].admin_url))
    on_replica = types_and_labels(scrape(store.cluster.replica(leader).admin_url))
    sections = {
        "Bookie metrics": (on_bookie, []),
        "Ledger client metrics": (on_replica, []),
        "Framework metrics": (on_replica, ["app", "replica"]),
        "Key-value store metrics": (on_replica, []),
    }
    wrong = []
    for section, (exported, common) in sections.items():
        for name, kind, labels, meaning in documented(section):
            if meaning.startswith(TLS_ONLY):
                continue
            if name not in exported:
                wrong.append(f"{section}: {name} is not exported")
                continue
            found_kind, found_labels = exported[name]
            if found_kind != kind:
                wrong.append(f"{name}: documented {kind}, exported {found_kind}")
            # A family with no series yet (no command seen) shows no labels to compare.
            if found_labels and found_labels != {*common, *labels}:
                wrong.append(f"{name}: documented {sorted(labels)}, has {sorted(found_labels)}")
    assert wrong == []


def test_the_disk_alert_counts_as_the_bookie_turns_read_only(store: Store) -> None:
    """BookieDiskNearlyFull must compare the fraction the bookie compares with its
    `disk_usage_threshold`, which `bookie.read_only` logs as `disk_usage`."""
    bookie = store.cluster.bookies.bookies[-1]
    logged = len(bookie.log_file.read_text().splitlines())

    def post_read_only(value: bool) -> None:
        body = json.dumps({"read_only": value}).encode()
        request = urllib.request.Request(
            f"{bookie.admin_url}/api/v1/bookie/read_only", data=body, method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 202

    def event(name: str) -> dict[str, Any] | None:
        for line in bookie.log_file.read_text().splitlines()[logged:]:
            if line.startswith("{") and json.loads(line)["event"] == name:
                found: dict[str, Any] = json.loads(line)
                return found
        return None

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"{bookie.admin_url}/ready", timeout=10) as answer:
                return bool(answer.status == 200)
        except urllib.error.HTTPError:
            return False

    post_read_only(True)
    try:
        turned = wait_for(lambda: event("bookie.read_only"))
        text = scrape(bookie.admin_url)
    finally:
        post_read_only(False)
        wait_for(lambda: event("bookie.writable"))
        wait_for(ready)
    ratios = evaluate(alert_expression("BookieDiskNearlyFull"), text)
    assert ratios, "the alert's expression has no series"
    # Every data directory of a test bookie is on one file system; the disk may move a
    # little between the bookie's check and the scrape.
    for labels, ratio in ratios.items():
        assert abs(ratio - turned["disk_usage"]) < 0.005, (labels, ratio, turned)


def test_expired_keys_are_counted_on_every_replica(store: Store) -> None:
    leader = store.leader()
    replicas = store.running()

    def counted(name: str) -> float:
        for family in text_string_to_metric_families(scrape(store.cluster.replica(name).admin_url)):
            if family.name == "kvstore_expired_keys":
                return float(family.samples[0].value)
        raise AssertionError("no kvstore_expired_keys_total")

    before = {name: counted(name) for name in replicas}
    with store.client(leader) as client:
        client.set("expiring", "soon", px=1)

        def deleted() -> bool:
            client.set("nudge", "x")  # a logged command: its active expiry deletes due keys
            return client.exists("expiring") == 0 and all(
                counted(name) > before[name] for name in replicas
            )

        wait_for(deleted)
    for name in replicas:
        with store.client(name, protocol=2) as client:
            assert client.info("stats")["expired_keys"] == counted(name)
