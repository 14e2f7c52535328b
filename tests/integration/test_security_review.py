"""Misconfigurations found by a security review, each refused at start-up with one line.

A TLS private key encrypted with a passphrase: OpenSSL asks for the passphrase
on the controlling terminal when nothing else supplies it, so a bookie, a
replica or a tool started from an operator's shell used to wait there for
ever ("Enter PEM pass phrase:"), and without a terminal failed with a
traceback (`OSError: [Errno 22] Invalid argument`).  Each is now a
configuration error naming the file (exit status 2), with a terminal or
without.  The processes here are real (`bookie serve`, `kvstore serve`,
`bookie shell`), the terminal a real pseudo-terminal; none gets as far as
ZooKeeper, which the addresses given do not serve.
"""

from __future__ import annotations

import os
import pty
import select
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
import redis.exceptions
from cryptography.hazmat.primitives import serialization

from bookie.local.zookeeper import LocalZooKeeper, free_port
from bookie.meta.zk_tls import ZK_TLS_CA_FILE_ENV, ZK_TLS_CERT_FILE_ENV, ZK_TLS_KEY_FILE_ENV
from rsm.config import LEDGER_PASSWORD_FILE_ENV
from tests.tls_certs import Certificates
from tests.unit.kvstore.local_store import Store, running_store

pytestmark = [pytest.mark.integration]

EXIT_S = 60.0
"""How long a refused start may take (a Python start-up on a loaded machine)."""
NOWHERE = "127.0.0.1:1"
"""A ZooKeeper address where nothing listens: no process here may get that far."""
PROMPT = b"pass phrase"
ENCRYPTED = "encrypted with a passphrase"
Runner = Callable[[list[str], dict[str, str]], tuple[int, str]]


def split_chain(chain: Path, directory: Path) -> tuple[Path, Path]:
    """The certificate chain of `chain` (key first, then certificates) in one file, and
    its key encrypted with a passphrase in another."""
    text = chain.read_bytes()
    start = text.index(b"-----BEGIN CERTIFICATE-----")
    key = serialization.load_pem_private_key(text[:start], password=None)
    certificate = directory / "chain.pem"
    certificate.write_bytes(text[start:])
    encrypted = directory / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"a passphrase"),
        )
    )
    encrypted.chmod(0o600)
    return certificate, encrypted


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Certificates, Path, Path]:
    certificates = Certificates.make(tmp_path / "certs")
    certificate, key = split_chain(certificates.server, tmp_path)
    return certificates, certificate, key


def run_in_terminal(command: list[str], environment: dict[str, str]) -> tuple[int, str]:
    """`command` run with a pseudo-terminal as its controlling terminal and standard
    streams (as from an operator's shell): its exit status and everything it wrote.  A
    process still running after `EXIT_S` is killed and the test fails."""
    pid, master = pty.fork()
    if pid == 0:  # the child: its own session, the terminal its controlling one
        try:
            os.execve(command[0], command, environment)
        finally:
            os._exit(127)
    output = bytearray()
    deadline = time.monotonic() + EXIT_S
    status = None
    try:
        while status is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError(
                    f"{command[2:5]} still runs after {EXIT_S} s; it wrote {bytes(output)!r}"
                )
            readable, _, _ = select.select([master], [], [], min(remaining, 1.0))
            if readable:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    chunk = b""
                output += chunk
                if not chunk:
                    _, status = os.waitpid(pid, 0)
            else:
                done, wait_status = os.waitpid(pid, os.WNOHANG)
                if done:
                    status = wait_status
    finally:
        os.close(master)
    return os.waitstatus_to_exitcode(status), output.decode(errors="replace")


def run_detached(command: list[str], environment: dict[str, str]) -> tuple[int, str]:
    """`command` run without a terminal (a service manager's way): exit status, output."""
    result = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=environment,
        timeout=EXIT_S,
        start_new_session=True,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def bookie_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "bookie.tools.cli", "serve", "--config", str(config),
            "--zk-servers", NOWHERE]  # fmt: skip


def write_bookie_config(directory: Path, certificate: Path, key: Path, ca: Path) -> Path:
    config = directory / "bookie.toml"
    config.write_text(
        f'listen_address = "127.0.0.1:{free_port()}"\n'
        'journal_dir = "journal"\n'
        'ledger_dirs = ["ledgers"]\n'
        f'tls_listen_address = "127.0.0.1:{free_port()}"\n'
        f'tls_cert_file = "{certificate}"\n'
        f'tls_key_file = "{key}"\n'
        f'tls_ca_file = "{ca}"\n'
    )
    return config


def kvstore_command(certificate: Path, key: Path) -> list[str]:
    return [sys.executable, "-m", "kvstore.tools.cli", "serve", "--zk", NOWHERE,
            "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0", "--resp-tls", "127.0.0.1:0",
            "--tls-cert-file", str(certificate), "--tls-key-file", str(key)]  # fmt: skip


def assert_refused(status: int, output: str, key: Path) -> None:
    assert status == 2, output
    assert PROMPT not in output.encode(), output
    assert ENCRYPTED in output, output
    assert str(key) in output, output
    assert "Traceback" not in output, output


@pytest.mark.parametrize("run", [run_in_terminal, run_detached])
def test_a_bookie_with_an_encrypted_tls_key_is_refused_at_start(
    tls_files: tuple[Certificates, Path, Path], tmp_path: Path, run: Runner
) -> None:
    certificates, certificate, key = tls_files
    config = write_bookie_config(tmp_path, certificate, key, certificates.ca)
    status, output = run(bookie_command(config), dict(os.environ))
    assert_refused(status, output, key)


@pytest.mark.parametrize("run", [run_in_terminal, run_detached])
def test_a_replica_with_an_encrypted_tls_key_is_refused_at_start(
    tls_files: tuple[Certificates, Path, Path], run: Runner
) -> None:
    _, certificate, key = tls_files
    status, output = run(kvstore_command(certificate, key), dict(os.environ))
    assert_refused(status, output, key)


@pytest.mark.parametrize("run", [run_in_terminal, run_detached])
def test_an_encrypted_zookeeper_client_key_is_refused_before_connecting(
    tls_files: tuple[Certificates, Path, Path], run: Runner
) -> None:
    certificates, certificate, key = tls_files
    environment = {
        **os.environ,
        ZK_TLS_CA_FILE_ENV: str(certificates.ca),
        ZK_TLS_CERT_FILE_ENV: str(certificate),
        ZK_TLS_KEY_FILE_ENV: str(key),
    }
    command = [sys.executable, "-m", "bookie.tools.cli", "shell", "listbookies", "--zk", NOWHERE]
    status, output = run(command, environment)
    assert_refused(status, output, key)
    assert ZK_TLS_KEY_FILE_ENV in output, output


@pytest.mark.parametrize("program", ["kvstore", "rsm"])
def test_a_broken_client_tokens_file_is_refused_before_zookeeper(
    tmp_path: Path, program: str
) -> None:
    # Read after the ZooKeeper session before, so with ZooKeeper away the replica waited
    # 10 s and reported MetadataUnavailable instead of the file's mistake.
    broken = tmp_path / "tokens"
    broken.write_text("app a-token-long-enough-to-be-one\nagain\n")
    common = ["--zk", NOWHERE, "--app", "app", "--listen", "127.0.0.1:0"]
    command = (
        [sys.executable, "-m", "kvstore.tools.cli", "serve", *common, "--resp", "127.0.0.1:0"]
        if program == "kvstore"
        else [
            sys.executable,
            "-m",
            "rsm.tools.cli",
            "run",
            "kvstore.state_machine:KVStore",
            *common,
        ]
    )
    status, output = run_detached([*command, "--client-tokens-file", str(broken)], {**os.environ})
    assert status == 2, output
    assert "--client-tokens-file" in output, output
    assert "line 2" in output, output
    assert "MetadataUnavailable" not in output, output


# --- a store with ACL users and a ledger password ---------------------------------------------

REVIEW_LEDGER_PASSWORD = "Review-Ledger-Pa55word"
ADMIN_PASSWORD = "review-admin-Pa55word"
PARTIAL_PASSWORD = "review-partial-Pa55word"
REVIEW_ACL_FILE = f"""\
user default off
user admin on >{ADMIN_PASSWORD} ~* +@all
user partial on >{PARTIAL_PASSWORD} ~app:* +@all
"""
"""`partial` may run every command (DEBUG too) on the keys `app:*` only."""


@pytest.fixture(scope="module")
def review_store(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Store, Path]]:
    directory = tmp_path_factory.mktemp("review")
    (directory / "users.acl").write_text(REVIEW_ACL_FILE)
    password_file = directory / "ledger-password"
    password_file.write_text(REVIEW_LEDGER_PASSWORD + "\n")
    password_file.chmod(0o600)
    umask = os.umask(0o022)  # an operator's usual umask: the launcher's files are its own
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(LEDGER_PASSWORD_FILE_ENV, str(password_file))
            with running_store(
                zookeeper,
                f"/review-{os.getpid()}",
                directory / "store",
                replicas=1,
                bookies=3,
                acl_file=directory / "users.acl",
            ) as store:
                yield store, directory / "store"
    finally:
        os.umask(umask)


@pytest.mark.zookeeper
@pytest.mark.slow
def test_debug_digest_value_is_refused_on_keys_outside_the_users_patterns(
    review_store: tuple[Store, Path],
) -> None:
    store, _ = review_store
    name = store.names[0]
    with store.client(name, username="admin", password=ADMIN_PASSWORD) as admin:
        admin.set("secret:pin", "1234")
        admin.set("app:mine", "v")
        denied_before = admin.info("stats")["acl_access_denied_key"]
    with store.client(name, username="partial", password=PARTIAL_PASSWORD) as partial:
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a key"):
            partial.get("secret:pin")
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a key"):
            partial.execute_command("DEBUG", "DIGEST-VALUE", "secret:pin")
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a key"):
            partial.execute_command("DEBUG", "digest-value", "app:mine", "secret:pin")
        (digest,) = partial.execute_command("DEBUG", "DIGEST-VALUE", "app:mine")
        assert len(digest) == 40
        assert partial.execute_command("DEBUG", "DIGEST")  # names no key: as in Redis
    with store.client(name, username="admin", password=ADMIN_PASSWORD) as admin:
        assert admin.info("stats")["acl_access_denied_key"] == denied_before + 3


@pytest.mark.zookeeper
@pytest.mark.slow
def test_no_file_the_launcher_writes_shows_the_ledger_password_to_others(
    review_store: tuple[Store, Path],
) -> None:
    _, data_dir = review_store
    exposed = [
        f"{path} ({stat.filemode(path.stat().st_mode)})"
        for path in data_dir.rglob("*")
        if path.is_file()
        and path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH)
        and REVIEW_LEDGER_PASSWORD.encode() in path.read_bytes()
    ]
    assert not exposed, f"readable by others, with the ledger password: {exposed}"
