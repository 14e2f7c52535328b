"""A real bookie's admin HTTP API: metrics that move under load, every endpoint schema-checked.

The bookie runs as a process with `admin_address` set; a ledger client writes
through it, and the test reads `/metrics` with Prometheus's own text parser
before and after: add latencies, journal groups and bytes must have risen.
Every endpoint's JSON answer is checked against the OpenAPI document the
bookie serves, and the two POSTs are shown to act (read-only mode on and off,
a GC round run).
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

import pytest

from bookie.local.zookeeper import LocalZooKeeper, free_port

from .support.admin_http import AdminClient, sample
from .support.ledgers import ledger_client
from .support.processes import HOST, BookieCluster

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.zookeeper]

ENTRIES = 50


async def test_bookie_admin_api(zookeeper: LocalZooKeeper, zk_root: str, tmp_path: Path) -> None:
    async with BookieCluster(zookeeper, zk_root, tmp_path) as cluster:
        admin_port = free_port(HOST)
        setup = cluster.add_bookie(
            ledger_dirs=1,
            config={
                "admin_address": f"{HOST}:{admin_port}",
                "disk_usage_threshold": 1.0,
                "disk_usage_low_water_mark": 0.999,
            },
        )
        bookie = await cluster.start(setup, wait_for="bookie.ready")
        assert bookie.named("admin.listening")[0]["address"] == f"{HOST}:{admin_port}"
        admin = AdminClient(f"{HOST}:{admin_port}")
        document = (await admin.request("GET", "/openapi.json")).json()
        assert document["openapi"].startswith("3.")

        before = await admin.metrics()
        assert sample(before, "bookie_add_latency_seconds_count", result="ok") == 0
        if os.path.isdir(f"/proc/{bookie.pid}/fd"):  # the process's own, from /proc
            assert sample(before, "process_open_fds") > 0
            soft, _ = resource.prlimit(bookie.pid, resource.RLIMIT_NOFILE)
            assert sample(before, "process_max_fds") == soft

        async with ledger_client(cluster, seed=1) as client:
            handle = await client.create_ledger(1, 1, 1, password=b"admin")
            for number in range(ENTRIES):
                await handle.append(f"entry {number}".encode())
            reader = await client.open_ledger(handle.ledger_id, b"admin", recovery=False)
            await reader.read(0, ENTRIES - 1, allow_unconfirmed=True)
            await handle.close()

        after = await admin.metrics()
        assert sample(after, "bookie_add_latency_seconds_count", result="ok") >= ENTRIES
        assert sample(after, "bookie_add_latency_seconds_sum", result="ok") > 0
        inf_bucket = sample(after, "bookie_add_latency_seconds_bucket", result="ok", le="+Inf")
        assert inf_bucket == sample(after, "bookie_add_latency_seconds_count", result="ok")
        assert sample(after, "bookie_read_latency_seconds_count", result="ok") > 0
        assert sample(after, "bookie_journal_sync_latency_seconds_count") > sample(
            before, "bookie_journal_sync_latency_seconds_count"
        )
        assert sample(after, "bookie_journal_group_entries_sum") >= ENTRIES
        assert sample(after, "bookie_journal_group_bytes_sum") > sample(
            before, "bookie_journal_group_bytes_sum"
        )
        assert sample(after, "bookie_storage_bytes", kind="journal") > 0
        assert sample(after, "bookie_read_only") == 0
        directory = str(setup.ledger_dirs[0])
        assert sample(after, "bookie_disk_total_bytes", directory=directory) > 0
        assert after["bookie_connections"].type == "gauge"
        assert after["bookie_gc_runs"].type == "counter"

        status, health = await admin.checked(document, "GET", "/health")
        assert (status, health) == (200, {"status": "ok"})
        status, ready = await admin.checked(document, "GET", "/ready")
        assert (status, ready["ready"]) == (200, True)
        _, info = await admin.checked(document, "GET", "/api/v1/bookie/info")
        assert info["bookie_id"] == setup.bookie_id
        _, bookies = await admin.checked(document, "GET", "/api/v1/bookies")
        assert [each["bookie_id"] for each in bookies["bookies"]] == [setup.bookie_id]
        _, ledgers = await admin.checked(document, "GET", "/api/v1/ledgers")
        assert handle.ledger_id in ledgers["ledgers"]
        pattern = "/api/v1/ledgers/{ledger_id}"
        _, ledger = await admin.checked(
            document, "GET", f"/api/v1/ledgers/{handle.ledger_id}", pattern=pattern
        )
        assert (ledger["state"], ledger["last_entry_id"]) == ("CLOSED", ENTRIES - 1)
        assert ledger["ensembles"] == [{"first_entry_id": 0, "bookies": [setup.bookie_id]}]
        status, missing = await admin.checked(
            document, "GET", "/api/v1/ledgers/999999", pattern=pattern
        )
        assert status == 404
        assert "999999" in missing["error"]
        for past_every_id in ("9" * 20, "9" * 5000):  # no AssertionError, no int() limit: 404
            status, missing = await admin.checked(
                document, "GET", f"/api/v1/ledgers/{past_every_id}", pattern=pattern
            )
            assert (status, "ledger ids are 0.." in missing["error"]) == (404, True)

        since = len(bookie.events)
        status, _ = await admin.checked(
            document, "POST", "/api/v1/bookie/read_only", {"read_only": True}
        )
        assert status == 202
        assert (await bookie.wait_event("bookie.read_only", since=since))["reasons"] == ["forced"]
        _, state = await admin.checked(document, "GET", "/api/v1/bookie/read_only")
        assert state == {"read_only": True, "forced": True, "reasons": ["forced"]}
        status, not_ready = await admin.checked(document, "GET", "/ready")
        assert (status, not_ready["ready"]) == (503, False)
        assert sample(await admin.metrics(), "bookie_read_only") == 1
        since = len(bookie.events)
        await admin.checked(document, "POST", "/api/v1/bookie/read_only", {"read_only": False})
        await bookie.wait_event("bookie.writable", since=since)
        assert (await admin.checked(document, "GET", "/ready"))[0] == 200
        status, refused = await admin.checked(
            document, "POST", "/api/v1/bookie/read_only", {"read_only": "yes"}
        )
        assert status == 400
        assert "read_only" in refused["error"]

        _, gc_before = await admin.checked(document, "GET", "/api/v1/bookie/gc")
        since = len(bookie.events)
        status, _ = await admin.checked(document, "POST", "/api/v1/bookie/gc")
        assert status == 202
        await bookie.wait_event("bookie.gc", since=since)
        _, gc_after = await admin.checked(document, "GET", "/api/v1/bookie/gc")
        assert gc_after["rounds"] > gc_before["rounds"]
        assert sample(await admin.metrics(), "bookie_gc_runs_total") > gc_before["rounds"]

        assert (await admin.request("GET", "/nowhere")).status == 404
        assert (await admin.request("POST", "/health")).status == 405
