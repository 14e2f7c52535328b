"""Benchmark: acknowledged adds per second and add latency of one bookie PROCESS.

    python bench/bookie_bench.py [--seconds 5] [--window 1000] [--connections 2] ...

Starts a ZooKeeper (unless `--zk`) and one real `bookie serve` process on
loopback with fsync on (every acknowledged add is on disk), then, for 100-byte
and 1-KiB entries, drives it with pipelined clients (`--connections`
connections, `--window` adds outstanding on each) for `--seconds` after a
short warm-up, and reports adds/s and the p50/p99/p99.9 latency from submit to
acknowledgement.

Baselines, measured in the same run on the same disk, so results read as
ratios:

* `fdatasync-100B`: one 100-byte write + fdatasync at a time, the rate a
  bookie without group commit could at best reach;
* `group-commit-loop-100B`: a bare asyncio server (no protocol, no storage
  engine) that reads length-prefixed frames, appends them to a file and
  acknowledges each group after one fdatasync, driven the same way: the
  ceiling for this design in Python on this machine.

Metrics on and off, in the same run (`--metrics-rounds`, default 1): a second
bookie process with its admin HTTP API on, scraped at `/metrics` every
`--scrape-interval-s` while it is driven, and the first one, without an admin
API, are driven in turn, off then on, per size and round; `metrics` in the
JSON holds every run and the ratios of the medians, on over off, of the
rates and of the bookie's CPU per add.  The
hot path's accumulators (bookie/metrics.py) cannot be switched off, so both
pay for them: what differs is the admin server and the scrapes.

TLS on and off, in the same run (`--tls-rounds`, default 1): the first bookie
also has a mutual-TLS listener (certificates from
bookie/local/certificates.py), and per size and round it is driven through
its plain port and its TLS port in turn, who goes first alternating; `tls`
in the JSON holds every run and the ratios of the medians, TLS over plain,
of the rates and of the bookie's CPU per add.

The last line of output is ONE JSON object (its shape: docs/operations.md,
"Benchmark"); progress goes to stderr.  The defaults keep the whole run under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc

REPOSITORY = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPOSITORY))

from proc_cpu import process_cpu_s  # noqa: E402

from bookie.client.bookie_conn import BookieConnection  # noqa: E402
from bookie.errors import BookieError  # noqa: E402
from bookie.local.certificates import development_certificates  # noqa: E402
from bookie.local.cluster import bookie_command  # noqa: E402
from bookie.local.zookeeper import LocalZooKeeper, free_port  # noqa: E402
from bookie.net.tls import client_context  # noqa: E402
from bookie.runtime_tuning import tune_for_throughput  # noqa: E402
from bookie.server.config import render_toml  # noqa: E402
from bookie.wire.messages import AddRequest, Response  # noqa: E402
from bookie.wire.packet import Digest, DigestType, master_key  # noqa: E402

UVLOOP = importlib.util.find_spec("uvloop") is not None
"""The load generators (and the baseline server) use uvloop when it is installed, so the
client side costs as little CPU as it can on a machine the bookie shares."""
HOST = "127.0.0.1"
PASSWORD = b"bench"
KEY = master_key(PASSWORD)
ADD_TIMEOUT_MS = 30_000
START_TIMEOUT_S = 60.0
WARMUP_S = 0.5
_LENGTH = struct.Struct(">I")
_ID = struct.Struct(">Q")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(fraction * len(sorted_values)))
    return sorted_values[index]


def summary(name: str, count: int, seconds: float, latencies_ns: list[int]) -> dict[str, Any]:
    ordered = sorted(value / 1e6 for value in latencies_ns)
    return {
        "name": name,
        "ops_per_s": round(count / seconds),
        "p50_ms": round(percentile(ordered, 0.50), 3),
        "p99_ms": round(percentile(ordered, 0.99), 3),
        "p999_ms": round(percentile(ordered, 0.999), 3),
    }


# --- baseline: fdatasync ----------------------------------------------------------------------


def fdatasync_rate(directory: Path, seconds: float, size_bytes: int = 100) -> dict[str, Any]:
    path = directory / "fdatasync.bench"
    data = b"x" * size_bytes
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        count = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            os.write(fd, data)
            os.fdatasync(fd)
            count += 1
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
        path.unlink()
    return {"name": f"fdatasync-{size_bytes}B", "ops_per_s": round(count / elapsed)}


# --- baseline: a bare group-commit loop -------------------------------------------------------


async def group_commit_server(directory: Path, port: int) -> None:
    """Frames in, appended to one file, acknowledged (8-byte id) after one fdatasync per group."""
    fd = os.open(directory / "loop.bench", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    pending: list[tuple[asyncio.StreamWriter, bytes]] = []
    buffered: list[bytes] = []
    wakeup = asyncio.Event()

    async def sync_loop() -> None:
        while True:
            await wakeup.wait()
            wakeup.clear()
            data, acks = b"".join(buffered), list(pending)
            buffered.clear()
            pending.clear()

            def write(group: bytes) -> None:
                os.write(fd, group)
                os.fdatasync(fd)

            await asyncio.to_thread(write, data)
            by_writer: dict[asyncio.StreamWriter, list[bytes]] = {}
            for writer, ack in acks:
                by_writer.setdefault(writer, []).append(ack)
            for writer, items in by_writer.items():
                writer.write(b"".join(items))
            if buffered:
                wakeup.set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # The load generator just drops its connections at the end of the run.
        with contextlib.suppress(ConnectionError):
            await receive(reader, writer)

    async def receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        while chunk := await reader.read(256 * 1024):
            buffer += chunk
            offset = 0
            while len(buffer) - offset >= 4:
                (length,) = _LENGTH.unpack_from(buffer, offset)
                if len(buffer) - offset - 4 < length:
                    break
                body = buffer[offset + 4 : offset + 4 + length]
                buffered.append(body)
                pending.append((writer, body[:8]))
                offset += 4 + length
            buffer = buffer[offset:]
            wakeup.set()

    syncer = asyncio.create_task(sync_loop())
    server = await asyncio.start_server(serve, HOST, port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()
    syncer.cancel()


async def drive_group_commit_loop(
    port: int, seconds: float, window: int, connections: int, size_bytes: int
) -> dict[str, Any]:
    latencies: list[int] = []
    counted = [0]
    measuring = [False]
    stop = [False]

    async def one(index: int) -> None:
        reader, writer = await asyncio.open_connection(HOST, port)
        sent: dict[int, int] = {}
        next_id = index << 48
        payload = b"p" * size_bytes

        def send_one() -> None:
            nonlocal next_id
            next_id += 1
            sent[next_id] = time.perf_counter_ns()
            body = _ID.pack(next_id) + payload
            writer.write(_LENGTH.pack(len(body)) + body)

        for _ in range(window):
            send_one()
        buffer = b""
        while not stop[0]:
            buffer += await reader.read(65536)
            usable = len(buffer) - len(buffer) % 8
            now = time.perf_counter_ns()
            for offset in range(0, usable, 8):
                (request_id,) = _ID.unpack_from(buffer, offset)
                started = sent.pop(request_id)
                if measuring[0]:
                    latencies.append(now - started)
                    counted[0] += 1
                send_one()
            buffer = buffer[usable:]
        writer.close()

    tasks = [asyncio.create_task(one(index)) for index in range(connections)]
    await asyncio.sleep(WARMUP_S)
    measuring[0] = True
    started = time.perf_counter()
    await asyncio.sleep(seconds)
    measuring[0] = False
    elapsed = time.perf_counter() - started
    stop[0] = True
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return summary(f"group-commit-loop-{size_bytes}B", counted[0], elapsed, latencies)


def run_group_commit_baseline(
    directory: Path, seconds: float, window: int, connections: int
) -> dict[str, Any]:
    port = free_port(HOST)
    server = subprocess.Popen(
        [sys.executable, __file__, "--group-commit-server", str(directory), str(port)],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        return anyio.run(
            drive_group_commit_loop,
            port,
            seconds,
            window,
            connections,
            100,
            backend_options={"use_uvloop": UVLOOP},
        )
    finally:
        server.terminate()
        server.wait()


# --- the bookie -------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def bookie_process(
    directory: Path, zk_servers: str, options: dict[str, object], taken: set[int]
) -> AsyncIterator[tuple[int, int]]:
    """A `bookie serve` process, on a port not in `taken` (the ports handed out to servers
    that may not listen yet; its own is added); yields its port and pid once it listens.
    A bookie that exits first is an error at once, with the end of its log."""
    port = free_port(HOST, taken=taken)
    taken.add(port)
    directory.mkdir(parents=True, exist_ok=True)
    config_file = directory / "bookie.toml"
    values: dict[str, object] = {
        "listen_address": f"{HOST}:{port}",
        "journal_dir": directory / "journal",
        "ledger_dirs": [directory / "ledgers"],
        "zk_servers": zk_servers,
        # A root of its own: a cookie left under a shared one by an earlier bookie on
        # the same port (another run, on a long-lived ZooKeeper) would refuse this one.
        "zk_root": f"/bookie-bench-{port}-{time.time_ns()}",
    }
    values.update(options)
    config_file.write_text(render_toml(values))
    log_file = directory / "bookie.log"
    async with await anyio.open_process(
        bookie_command(config_file), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
    ) as process:
        assert process.stderr is not None
        started = anyio.Event()  # the bookie says it listens, or its stderr ended: it exited
        listening = False

        async def follow() -> None:
            nonlocal listening
            assert process.stderr is not None
            with log_file.open("ab") as sink:
                async for chunk in process.stderr:
                    sink.write(chunk)
                    if b'"bookie.listening"' in chunk:
                        listening = True
                        started.set()
            started.set()

        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(follow)
                try:
                    with anyio.fail_after(START_TIMEOUT_S):
                        await started.wait()
                    if not listening:
                        tail = log_file.read_text(errors="replace")[-2000:]
                        raise RuntimeError(f"the bookie exited before listening: {tail}")
                    yield port, process.pid
                finally:
                    # The bookie's exit ends `follow` (end of its stderr).
                    with contextlib.suppress(ProcessLookupError):
                        process.terminate()
        finally:
            await process.wait()


async def drive_bookie(
    port: int,
    pid: int,
    *,
    seconds: float,
    window: int,
    connections: int,
    size_bytes: int,
    ledger_base: int,
    tls: ssl.SSLContext | None = None,
) -> dict[str, Any]:
    digest = Digest(DigestType.CRC32C, PASSWORD)
    payload = b"p" * size_bytes
    latencies: list[int] = []
    state = {"measuring": False, "done": False, "counted": 0, "errors": 0}

    async def one(index: int, connection: BookieConnection) -> None:
        ledger_id = ledger_base + index
        next_entry = 0

        def submit() -> None:
            nonlocal next_entry
            entry_id = next_entry
            next_entry += 1
            packet = digest.build_entry(
                ledger_id, entry_id, entry_id - 1, size_bytes * (entry_id + 1), payload
            )
            started = time.perf_counter_ns()

            def on_response(outcome: Response | BookieError) -> None:
                if isinstance(outcome, BookieError) or outcome.status != 0:
                    # Adds still in flight when the run ends fail with the connection.
                    if not state["done"]:
                        state["errors"] += 1
                    return
                if state["measuring"]:
                    latencies.append(time.perf_counter_ns() - started)
                    state["counted"] += 1
                submit()

            connection.submit(
                AddRequest(0, ledger_id, entry_id, KEY, 0, packet), on_response, ADD_TIMEOUT_MS
            )

        for _ in range(window):
            submit()

    async with contextlib.AsyncExitStack() as stack:
        opened = [
            await stack.enter_async_context(
                BookieConnection.connect(HOST, port, inflight_max=max(window, 1) + 1, tls=tls)
            )
            for _ in range(connections)
        ]
        for index, connection in enumerate(opened):
            await one(index, connection)
        await anyio.sleep(WARMUP_S)
        state["measuring"] = True
        started = time.perf_counter()
        client_cpu = time.process_time()
        bookie_cpu = process_cpu_s(pid)
        await anyio.sleep(seconds)
        state["measuring"] = False
        elapsed = time.perf_counter() - started
        client_cpu = time.process_time() - client_cpu
        bookie_cpu = process_cpu_s(pid) - bookie_cpu
        state["done"] = True
    if state["errors"]:
        log(f"warning: {state['errors']} adds failed")
    label = "1KiB" if size_bytes == 1024 else f"{size_bytes}B"
    counted = int(state["counted"])
    result = summary(f"add-{label}", counted, elapsed, latencies)
    # CPU per add tells the bookie's cost apart from the load generator's and
    # from other load on the machine, which wall-clock rates cannot.
    result["bookie_cpu_us_per_op"] = round(bookie_cpu * 1e6 / max(counted, 1), 1)
    result["client_cpu_us_per_op"] = round(client_cpu * 1e6 / max(counted, 1), 1)
    return result


async def scrape_metrics(port: int, interval_s: float, scrapes: list[float]) -> None:
    """GET /metrics from the bookie's admin API every `interval_s`; each scrape's seconds."""
    request = f"GET /metrics HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode()
    while True:
        started = time.perf_counter()
        async with await anyio.connect_tcp(HOST, port) as stream:
            await stream.send(request)
            answer = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    answer += await stream.receive()
        assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
        scrapes.append(time.perf_counter() - started)
        await anyio.sleep(interval_s)


async def bench_bookie(
    arguments: argparse.Namespace, directory: Path
) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any] | None]:
    options: dict[str, object] = {
        "group_wait_ms": arguments.group_wait_ms,
        "event_loop": arguments.event_loop,
    }
    # TLS on and off (`--tls-rounds`): the first bookie gets a mutual-TLS listener too.
    taken: set[int] = set()
    tls_port = free_port(HOST)
    taken.add(tls_port)
    certificates = development_certificates(directory / "tls")
    tls_options: dict[str, object] = {}
    if arguments.tls_rounds:
        tls_options = {
            "tls_listen_address": f"{HOST}:{tls_port}",
            "tls_cert_file": certificates.node,
            "tls_ca_file": certificates.ca,
            "tls_require_client_cert": True,
        }
    results = []
    runs: list[dict[str, Any]] = []
    scrapes: list[float] = []
    async with contextlib.AsyncExitStack() as stack:
        zk_servers = arguments.zk
        if zk_servers is None:
            zookeeper = LocalZooKeeper(directory / "zookeeper")
            await anyio.to_thread.run_sync(zookeeper.start)
            stack.callback(zookeeper.stop)
            zk_servers = zookeeper.connect_string
        port, pid = await stack.enter_async_context(
            bookie_process(directory / "bookie", zk_servers, {**options, **tls_options}, taken)
        )
        metered: tuple[int, int] | None = None
        admin_port = free_port(HOST, taken=taken)
        taken.add(admin_port)
        if arguments.metrics_rounds:
            metered = await stack.enter_async_context(
                bookie_process(
                    directory / "bookie-metrics",
                    zk_servers,
                    {**options, "admin_address": f"{HOST}:{admin_port}"},
                    taken,
                )
            )
        modes = [("off", (port, pid))] + ([] if metered is None else [("on", metered)])
        for number, size_bytes in enumerate(arguments.sizes):
            for round_number in range(max(arguments.metrics_rounds, 1)):
                for metrics, (run_port, run_pid) in modes:
                    log(f"bookie (metrics {metrics}): {size_bytes}-byte adds ...")
                    async with anyio.create_task_group() as scraping:
                        if metrics == "on":
                            scraping.start_soon(
                                scrape_metrics, admin_port, arguments.scrape_interval_s, scrapes
                            )
                        run = await drive_bookie(
                            run_port,
                            run_pid,
                            seconds=arguments.seconds,
                            window=arguments.window,
                            connections=arguments.connections,
                            size_bytes=size_bytes,
                            # Each run its own ledgers: a bookie never sees an entry twice.
                            ledger_base=1 + (number * 100 + round_number) * 1000,
                        )
                        scraping.cancel_scope.cancel()
                    log(f"  {run}")
                    runs.append({**run, "metrics": metrics, "round": round_number})
                    if metrics == "off" and round_number == 0:
                        results.append(run)
        tls = None
        if arguments.tls_rounds:
            context = client_context(certificates.ca, certificates.client)
            tls = await tls_runs(arguments, port, tls_port, pid, context)
    return results, metrics_report(runs, scrapes, arguments), tls


async def tls_runs(
    arguments: argparse.Namespace, port: int, tls_port: int, pid: int, context: ssl.SSLContext
) -> dict[str, Any]:
    """Per size and round, the same bookie through its plain and its TLS port in turn (who
    goes first alternating); every run, and the ratios of the medians, TLS over plain."""
    runs: list[dict[str, Any]] = []
    modes: list[tuple[str, int, ssl.SSLContext | None]] = [
        ("off", port, None),
        ("on", tls_port, context),
    ]
    for number, size_bytes in enumerate(arguments.sizes):
        for round_number in range(arguments.tls_rounds):
            turns = modes if round_number % 2 == 0 else modes[::-1]
            for tls, run_port, run_context in turns:
                log(f"bookie (TLS {tls}): {size_bytes}-byte adds ...")
                run = await drive_bookie(
                    run_port,
                    pid,
                    seconds=arguments.seconds,
                    window=arguments.window,
                    connections=arguments.connections,
                    size_bytes=size_bytes,
                    ledger_base=1_000_000
                    + (number * 100 + round_number) * 1000
                    + (0 if tls == "off" else 500),
                    tls=run_context,
                )
                log(f"  {run}")
                runs.append({**run, "tls": tls, "round": round_number})
    return {
        "rounds": arguments.tls_rounds,
        "mutual": True,
        "on_over_off_ops": on_over_off(runs, lambda run: run["ops_per_s"], mode_key="tls"),
        "on_over_off_bookie_cpu_per_op": on_over_off(
            runs, lambda run: run["bookie_cpu_us_per_op"], mode_key="tls"
        ),
        "on_over_off_p99_ms": on_over_off(runs, lambda run: run["p99_ms"], mode_key="tls"),
        "runs": runs,
    }


def on_over_off(
    runs: list[dict[str, Any]],
    value: Callable[[dict[str, Any]], float],
    *,
    mode_key: str = "metrics",
) -> dict[str, float]:
    """Per run name, the median of `value` over the runs whose `mode_key` (metrics, TLS) is
    on, over that of the runs where it is off (names measured only one way are left out)."""
    found = {}
    for name in dict.fromkeys(run["name"] for run in runs):
        medians = {
            mode: statistics.median(
                value(run) for run in runs if run["name"] == name and run[mode_key] == mode
            )
            for mode in ("off", "on")
            if any(run["name"] == name and run[mode_key] == mode for run in runs)
        }
        if len(medians) == 2 and medians["off"]:
            found[name] = round(medians["on"] / medians["off"], 3)
    return found


def scrape_report(scrapes: list[float], arguments: argparse.Namespace) -> dict[str, Any]:
    """The comparison's rounds and how scraping went: how often, how many, the slowest."""
    return {
        "rounds": arguments.metrics_rounds,
        "scrape_interval_s": arguments.scrape_interval_s,
        "scrapes": len(scrapes),
        "scrape_ms_max": round(max(scrapes, default=0.0) * 1000, 3),
    }


def metrics_report(
    runs: list[dict[str, Any]], scrapes: list[float], arguments: argparse.Namespace
) -> dict[str, Any]:
    """Every run, on and off, and per size the ratios of the medians, on over off: of the
    rates, and of the bookie's CPU per add (which other load on the machine moves less)."""
    return {
        **scrape_report(scrapes, arguments),
        "on_over_off_ops": on_over_off(runs, lambda run: run["ops_per_s"]),
        "on_over_off_bookie_cpu_per_op": on_over_off(runs, lambda run: run["bookie_cpu_us_per_op"]),
        "runs": runs,
    }


# --- main -------------------------------------------------------------------------------------


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per run")
    parser.add_argument("--window", type=int, default=200, help="adds outstanding per connection")
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1024])
    parser.add_argument("--group-wait-ms", type=int, default=2)
    parser.add_argument("--event-loop", choices=["asyncio", "uvloop"], default="uvloop")
    parser.add_argument("--zk", help="use this ZooKeeper instead of starting one")
    parser.add_argument("--data-dir", type=Path, help="where to put files (default: a temp dir)")
    parser.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    parser.add_argument(
        "--metrics-rounds",
        type=int,
        default=1,
        help="rounds of metrics off then on per size (0: no metrics comparison)",
    )
    parser.add_argument(
        "--scrape-interval-s",
        type=float,
        default=1.0,
        help="how often /metrics is scraped while metrics are on",
    )
    parser.add_argument(
        "--tls-rounds",
        type=int,
        default=1,
        help="rounds of plain and TLS adds per size (0: no TLS comparison)",
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> None:
    tune_for_throughput()  # as the bookies do; see bookie/runtime_tuning.py
    if argv[:1] == ["--group-commit-server"]:
        anyio.run(
            group_commit_server,
            Path(argv[1]),
            int(argv[2]),
            backend_options={"use_uvloop": UVLOOP},
        )
        return
    arguments = parse(argv)
    parent = arguments.data_dir
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="bookie-bench-", dir=parent) as name:
        directory = Path(name)
        baselines = []
        if not arguments.no_baselines:
            log("baseline: fdatasync ...")
            baselines.append(fdatasync_rate(directory, min(arguments.seconds, 2.0)))
            log(f"  {baselines[-1]}")
            log("baseline: bare group-commit loop ...")
            baselines.append(
                run_group_commit_baseline(
                    directory, arguments.seconds, arguments.window, arguments.connections
                )
            )
            log(f"  {baselines[-1]}")
        results, metrics, tls = anyio.run(
            bench_bookie, arguments, directory, backend_options={"use_uvloop": UVLOOP}
        )
    config = {key: value for key, value in vars(arguments).items() if key not in ("data_dir", "zk")}
    config["fsync"] = True
    config["client_event_loop"] = "uvloop" if UVLOOP else "asyncio"
    config["cpus"] = os.cpu_count()
    config["runtime_tuned"] = True
    print(
        json.dumps(
            {
                "benchmark": "bookie",
                "config": config,
                "results": results,
                "baselines": baselines,
                "metrics": metrics,
                "tls": tls,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
