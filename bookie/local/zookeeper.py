"""Starts and stops a real, standalone ZooKeeper server from Debian's package.

Used by the test suite (one server per test session, on a free loopback port,
in a temporary directory) and by the local-cluster launchers.  Nothing here is
a fake: it runs `org.apache.zookeeper.server.quorum.QuorumPeerMain` from
`/usr/share/java/zookeeper.jar` with a generated `zoo.cfg`.

The tick is short by default (100 ms) so tests can use session timeouts well
under a second (ZooKeeper bounds them to 2..20 ticks unless told otherwise; we
widen the upper bound so production-like timeouts also work).

Given `tls` (`ZooKeeperTls`), the server listens with TLS only: its port is a
`secureClientPort` served by the Netty connection factory (Debian's package
leaves netty-codec out of the jar's class path: it is added here), with PEM
key and trust stores (`ssl.keyStore.type=PEM`: the key, then the certificate
chain, in one file); there is no plain port.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bookie import limits

ZOOKEEPER_JARS = (
    Path("/usr/share/java/zookeeper.jar"),
    Path("/usr/share/zookeeper/lib/zookeeper.jar"),
)
ZOOKEEPER_CONF_DIR = Path("/etc/zookeeper/conf")
NETTY_CODEC_JAR = Path("/usr/share/java/netty-codec.jar")
"""What the Netty connection factory (TLS) needs beyond the jar's own class path."""
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
EPHEMERAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
EPHEMERAL_PORTS_LOW_DEFAULT = 32_768


class ZooKeeperUnavailable(RuntimeError):
    """ZooKeeper (or Java) is not installed, or the server did not come up."""


def free_port(host: str = "127.0.0.1", *, taken: Container[int] = ()) -> int:
    """A TCP port nobody uses right now (the caller binds it soon after), and not in
    `taken`: ports handed out for servers not yet listening.

    Chosen below the system's ephemeral port range (`limits.local_free_port_low` up),
    where the system never puts an outgoing connection: a server killed and started
    again on the same port (the local clusters record theirs) would otherwise, now and
    then, find a client's connection holding it.  Any free port when that range is
    empty or full."""
    rng = random.Random()
    high = ephemeral_ports_low() - 1
    if high > limits.local_free_port_low:
        for _attempt in range(limits.local_free_port_attempts_max):
            port = rng.randint(limits.local_free_port_low, high)
            if port not in taken and port_is_free(port, host):
                return port
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port not in taken:
            return port


def ephemeral_ports_low() -> int:
    """The lowest port the system gives outgoing connections (Linux's default if unknown)."""
    try:
        return int(EPHEMERAL_PORT_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return EPHEMERAL_PORTS_LOW_DEFAULT


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on `port` now (as the servers bind: SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
        return True


@dataclass(frozen=True, slots=True)
class ZooKeeperTls:
    """A server on TLS only: its private key then certificate chain in one PEM file, the
    PEM CAs its clients' certificates are checked against, and whether clients must
    present one."""

    key_and_chain: Path
    ca: Path
    require_client_cert: bool = False


def _zookeeper_classpath(*, tls: bool) -> str:
    for jar in ZOOKEEPER_JARS:
        if jar.exists():
            parts = [str(ZOOKEEPER_CONF_DIR), str(jar)]
            if tls:
                parts.append(str(NETTY_CODEC_JAR))
            return os.pathsep.join(parts)
    raise ZooKeeperUnavailable(
        "ZooKeeper is not installed: run `make bootstrap` (installs Debian's zookeeper package)"
    )


def four_letter_word(
    host: str,
    port: int,
    word: str,
    timeout_s: float = 1.0,
    tls: ssl.SSLContext | None = None,
) -> str:
    """Send a ZooKeeper four-letter command (`srvr`, `ruok`, ...) and return the answer
    (with `tls`, over TLS)."""
    with contextlib.ExitStack() as stack:
        conn = stack.enter_context(socket.create_connection((host, port), timeout=timeout_s))
        if tls is not None:
            conn = stack.enter_context(tls.wrap_socket(conn, server_hostname=host))
        conn.sendall(word.encode())
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


class LocalZooKeeper:
    """One standalone ZooKeeper server process.  Use as a context manager or call start/stop."""

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tick_time_ms: int = 100,
        max_session_timeout_ms: int = 120_000,
        tls: ZooKeeperTls | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.tls = tls
        self.host = host
        self.port = port
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self._process: subprocess.Popen[bytes] | None = None
        self._foreign_port: int | None = None
        """A port on which another ZooKeeper answered while this one was starting."""

    @property
    def connect_string(self) -> str:
        assert self.port is not None
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _write_config(self, port: int) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "data").mkdir(exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_time_ms}",
                    f"dataDir={self.data_dir / 'data'}",
                    *self._port_lines(port),
                    f"minSessionTimeout={2 * self.tick_time_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=srvr,ruok,mntr,cons,stat,conf",
                    "maxClientCnxns=0",
                    "snapCount=100000",
                    "autopurge.snapRetainCount=3",
                    "autopurge.purgeInterval=1",
                    # fsync per transaction is ZooKeeper's own durability; kept on.
                    "forceSync=yes",
                    "",
                ]
            )
        )
        return config

    def _port_lines(self, port: int) -> list[str]:
        tls = self.tls
        if tls is None:
            return [f"clientPort={port}", f"clientPortAddress={self.host}"]
        return [
            f"secureClientPort={port}",
            f"secureClientPortAddress={self.host}",
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={tls.key_and_chain}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={tls.ca}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={'need' if tls.require_client_cert else 'none'}",
        ]

    def _probe_context(self) -> ssl.SSLContext | None:
        """How the readiness probe talks to a TLS-only server (its CA, a client
        certificate if it needs one: its own chain serves)."""
        tls = self.tls
        if tls is None:
            return None
        context = ssl.create_default_context(cafile=tls.ca)
        if tls.require_client_cert:
            context.load_cert_chain(tls.key_and_chain)
        return context

    def start(self) -> LocalZooKeeper:
        """Start the server and return once it serves requests."""
        assert self._process is None, "already started"
        java = shutil.which("java")
        if java is None:
            raise ZooKeeperUnavailable("no `java` on PATH: run `make bootstrap`")
        classpath = _zookeeper_classpath(tls=self.tls is not None)
        attempts = 1 if self.port is not None else 5
        last_error = ""
        for _ in range(attempts):
            port = self.port if self.port is not None else free_port(self.host)
            config = self._write_config(port)
            log_path = self.data_dir / "zookeeper.log"
            with open(log_path, "ab") as log:
                self._process = subprocess.Popen(
                    [
                        java,
                        "-Xmx256m",
                        "-XX:+UseSerialGC",
                        "-XX:TieredStopAtLevel=1",
                        f"-Dzookeeper.log.dir={self.data_dir}",
                        "-Dzookeeper.root.logger=INFO,CONSOLE",
                        "-cp",
                        classpath,
                        "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                        str(config),
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            if self._wait_serving(port):
                self.port = port
                return self
            last_error = log_path.read_text(errors="replace")[-2000:]
            if self._foreign_port == port:
                last_error = f"port {port} is served by another ZooKeeper\n{last_error}"
            self._kill()
        raise ZooKeeperUnavailable(f"ZooKeeper did not start; last log lines:\n{last_error}")

    def _wait_serving(self, port: int) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        context = self._probe_context()
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            with contextlib.suppress(OSError):
                conf = four_letter_word(self.host, port, "conf", tls=context)
                if self._is_ours(conf):
                    return True
                self._foreign_port = port if "dataDir=" in conf else None
            time.sleep(0.05)
        return False

    def _is_ours(self, conf: str) -> bool:
        """Whether a server's `conf` answer is this one's: another ZooKeeper may have taken the
        port between our choosing it and our server binding it (then ours exits)."""
        return f"dataDir={self.data_dir / 'data'}" in conf

    def _kill(self) -> None:
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after a grace period)."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._kill()
        self._process = None

    def __enter__(self) -> LocalZooKeeper:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
