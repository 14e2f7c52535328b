"""A store secured every way this repository offers, and what its secrets protect.

One store (four bookies with their autorecovery, for ensembles of three,
and two replicas) runs with:

* ACL users on the RESP port (`kvstore serve --acl-file`): the default user
  has a password, a read-only and a read-write user, a user who is off;
* ZooKeeper digest credentials (`BOOKIE_ZK_DIGEST_FILE`) for every process;
* a ledger password of its own (`RSM_LEDGER_PASSWORD_FILE`) and HMAC-SHA256
  digests (`--ledger-digest hmac_sha256`);
* an admin token (`BOOKIE_ADMIN_TOKEN_FILE`) on the bookies' and replicas'
  admin HTTP APIs.

The test process is given the same variables while the store runs.  Redis
clients without the password are refused everything but logging in, a wrong
password is refused and counted while the connection goes on, a read-only
user cannot write; every znode the store made is ours alone, and `bookie
shell setacls` re-secures znodes opened up; ledgers are HMAC and refused
without their password, by the client and on a bookie; the replay tools
need the password, and so does autorecovery, which copies a lost bookie's
HMAC ledgers; the admin APIs' POSTs need the token.  Last, no secret
appears in any log, the metrics pages, INFO, CONFIG, ACL LIST, status
output or any error message the tests saw.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.exceptions
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl
from kvstore.tools.launcher import LEDGER_ROOT
from redis.utils import str_if_bytes

from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.ledgers import LedgerManager
from bookie.meta.underreplication import UnderReplication
from bookie.meta.zk import ZkMetadataStore
from bookie.meta.zk_digest import ZK_DIGEST_FILE_ENV
from bookie.net.admin_token import ADMIN_TOKEN_FILE_ENV
from rsm.config import LEDGER_PASSWORD_FILE_ENV
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

DEFAULT_PASSWORD = "default-Pa55word"
READER_PASSWORD = "reader-Pa55word"
WRITER_PASSWORD = "writer-Pa55word"
GHOST_PASSWORD = "ghost-Pa55word"
ZK_USER = "cluster"
ZK_PASSWORD = "Zk-Pa55word-for-tests"
LEDGER_PASSWORD = "Ledger-Pa55word-for-tests"
ADMIN_TOKEN = "Admin-T0ken-for-tests"
SECRETS = (
    DEFAULT_PASSWORD,
    READER_PASSWORD,
    WRITER_PASSWORD,
    GHOST_PASSWORD,
    ZK_PASSWORD,
    LEDGER_PASSWORD,
    ADMIN_TOKEN,
)
SHORT_AUTORECOVERY_GRACE = {"autorecovery_grace_ms": 1_000, "autorecovery_poll_interval_ms": 100}
"""A second's grace before a bookie gone from ZooKeeper counts as lost (default 30 s)."""
ACL_FILE = f"""\
user default on >{DEFAULT_PASSWORD} ~* +@all
user reader on >{READER_PASSWORD} ~* -@all +@read +@connection
user writer on >{WRITER_PASSWORD} ~app:* +@all -@dangerous
user ghost off >{GHOST_PASSWORD} ~* +@all
"""


@dataclass
class Secured:
    store: Store
    root: str
    hosts: str
    """ZooKeeper's connect string, without the store's chroot `root`."""
    seen: list[str] = field(default_factory=list)
    """Every output and error message the tests saw, for the last test to search."""

    def client(self, name: str, **options: Any) -> redis.Redis:
        options.setdefault("password", DEFAULT_PASSWORD)
        return self.store.client(name, **options)

    def run(self, *command: str, without: str | None = None) -> tuple[int, str]:
        """`python -m COMMAND...` with this process's environment (less the variable
        `without`); its exit status and output."""
        environment = dict(os.environ)
        if without is not None:
            environment.pop(without)
        result = subprocess.run(
            [sys.executable, "-m", *command],
            capture_output=True,
            text=True,
            env=environment,
            timeout=WAIT_S,
            check=False,
        )
        output = result.stdout + result.stderr
        self.seen.append(output)
        return result.returncode, output

    def shell(self, *arguments: str, without: str | None = None) -> tuple[int, str]:
        where = ("--zk", self.hosts, "--zk-root", f"{self.root}/ledgers")
        return self.run("bookie.tools.cli", "shell", *arguments, *where, without=without)

    def shell_json(self, *arguments: str) -> Any:
        code, output = self.shell(*arguments, "--json")
        assert code == 0, output
        return json.loads(output)


@pytest.fixture(scope="module")
def secured(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("secured")
    files = {
        "users.acl": ACL_FILE,
        "zk-digest": f"{ZK_USER}:{ZK_PASSWORD}\n",
        "ledger-password": LEDGER_PASSWORD + "\n",
        "admin-token": ADMIN_TOKEN + "\n",
    }
    for name, content in files.items():
        (directory / name).write_text(content)
    root = f"/secured-{os.getpid()}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ZK_DIGEST_FILE_ENV, str(directory / "zk-digest"))
        patch.setenv(LEDGER_PASSWORD_FILE_ENV, str(directory / "ledger-password"))
        patch.setenv(ADMIN_TOKEN_FILE_ENV, str(directory / "admin-token"))
        with running_store(
            zookeeper,
            root,
            directory / "store",
            replicas=2,
            bookies=4,
            bookie_config=SHORT_AUTORECOVERY_GRACE,
            acl_file=directory / "users.acl",
            ledger_digest="hmac_sha256",
        ) as store:
            yield Secured(store, root, zookeeper.connect_string)


# --- Redis clients -----------------------------------------------------------------------------


def info_stats(secured: Secured, name: str) -> dict[str, int]:
    with secured.client(name) as client:
        stats: dict[str, int] = client.info("stats")
        return stats


def test_without_the_password_only_logging_in_is_served(secured: Secured) -> None:
    for name in secured.store.names:
        with secured.store.client(name, protocol=2) as client:
            with pytest.raises(redis.exceptions.AuthenticationError, match=r"^Authentication req"):
                client.get("app:k")
            with pytest.raises(redis.exceptions.AuthenticationError, match=r"^Authentication req"):
                client.set("app:k", "v")
        with (
            secured.store.client(name, protocol=3) as client,
            pytest.raises(redis.exceptions.AuthenticationError, match=r"^HELLO must be called"),
        ):
            client.ping()


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_default_password_and_users_log_in(secured: Secured, protocol: int) -> None:
    first, second = secured.store.names
    key = f"app:{protocol}"
    with secured.client(first, protocol=protocol) as client:
        assert client.set(key, "by default")
        assert str_if_bytes(client.acl_whoami()) == "default"
    with secured.client(
        second, username="writer", password=WRITER_PASSWORD, protocol=protocol
    ) as client:
        assert client.get(key) == b"by default"
        assert client.incr(f"{key}:n") == 1
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a key"):
            client.set("elsewhere", "v")
        with pytest.raises(redis.exceptions.NoPermissionError, match="'flushall' command"):
            client.flushall()
    with secured.client(
        first, username="reader", password=READER_PASSWORD, protocol=protocol
    ) as client:
        assert client.mget(key, f"{key}:n") == [b"by default", b"1"]
        with pytest.raises(redis.exceptions.NoPermissionError, match="'set' command"):
            client.set(key, "by reader")
        with pytest.raises(redis.exceptions.NoPermissionError, match="'del' command") as raised:
            client.delete(key)
        secured.seen.append(str(raised.value))
        assert client.get(key) == b"by default", "the refused writes changed nothing"


def test_a_wrong_password_is_refused_counted_and_the_connection_goes_on(secured: Secured) -> None:
    name = secured.store.names[1]
    before = info_stats(secured, name)["acl_access_denied_auth"]
    for username, password in (("writer", "wrong"), ("ghost", GHOST_PASSWORD), ("nobody", "x")):
        with (
            secured.client(name, username=username, password=password) as client,
            pytest.raises(redis.exceptions.AuthenticationError, match=r"^invalid username-pass"),
        ):
            client.ping()
    with socket.create_connection(("127.0.0.1", secured.store.port(name)), timeout=WAIT_S) as raw:
        raw.sendall(b"AUTH wrong-password\r\n")
        assert receive_line(raw) == (
            b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
        )
        raw.sendall(f"AUTH reader {READER_PASSWORD}\r\nSET app:raw v\r\n".encode())
        assert receive_line(raw) == b"+OK\r\n"
        assert receive_line(raw) == (
            b"-NOPERM User reader has no permissions to run the 'set' command\r\n"
        )
    assert info_stats(secured, name)["acl_access_denied_auth"] == before + 4
    assert info_stats(secured, name)["acl_access_denied_cmd"] >= 1
    admin = secured.store.cluster.replica(name).admin_url
    with urllib.request.urlopen(f"{admin}/metrics", timeout=WAIT_S) as page:
        metrics = page.read().decode()
    assert f'kvstore_acl_denied_total{{reason="auth"}} {before + 4}.0' in metrics
    assert 'kvstore_error_replies_total{code="WRONGPASS"}' in metrics


def receive_line(raw: socket.socket) -> bytes:
    line = b""
    while not line.endswith(b"\r\n"):
        chunk = raw.recv(1)
        assert chunk, "the server closed the connection"
        line += chunk
    return line


def test_acl_list_shows_hashes(secured: Secured) -> None:
    with secured.client(secured.store.names[0]) as client:
        assert sorted(client.acl_users()) == ["default", "ghost", "reader", "writer"]
        listing = "\n".join(client.acl_list())
        secured.seen += [listing, repr(client.info("everything")), repr(client.config_get("*"))]
    assert "user reader on #" in listing
    assert "~app:* +@all -@dangerous" in listing


# --- ZooKeeper ---------------------------------------------------------------------------------


@contextmanager
def owner_and_intruder(secured: Secured) -> Iterator[tuple[KazooClient, KazooClient]]:
    """Two kazoo clients, with the store's credentials and without; afterwards the store
    must still serve a write and a read."""
    clients = [
        KazooClient(hosts=secured.hosts, auth_data=auth)
        for auth in ([("digest", f"{ZK_USER}:{ZK_PASSWORD}")], None)
    ]
    try:
        for client in clients:
            client.start(timeout=WAIT_S)
        yield clients[0], clients[1]
    finally:
        for client in clients:
            client.stop()
            client.close()
    with secured.client(secured.store.names[1]) as redis_client:
        assert redis_client.set("after-zk", "v")
        assert redis_client.get("after-zk") == b"v"


def tree(client: KazooClient, root: str) -> list[str]:
    found, pending = [], [root]
    while pending:
        path = pending.pop()
        found.append(path)
        pending += (f"{path}/{name}" for name in client.get_children(path))
    return sorted(found)


def refused(operation: Any, *arguments: Any) -> None:
    with pytest.raises(NoAuthError):
        operation(*arguments)


def test_every_znode_is_ours_alone(secured: Secured) -> None:
    with owner_and_intruder(secured) as (owner, intruder):
        znodes = tree(owner, secured.root)
        root = secured.root
        for expected in (
            f"{root}/ledgers/INSTANCEID",
            f"{root}/ledgers/cookies",
            f"{root}/ledgers/available",
            f"{root}/rsm/kv/log",
            f"{root}/rsm/kv/leader",
        ):
            assert expected in znodes
        assert any("underreplication" in path for path in znodes), znodes
        ours = [make_digest_acl(ZK_USER, ZK_PASSWORD, all=True)]
        assert [path for path in znodes if owner.get_acls(path)[0] != ours] == []
        for path in znodes:
            refused(intruder.get, path)
            refused(intruder.get_children, path)
            refused(intruder.set, path, b"changed")
            refused(intruder.create, f"{path}/intruder", b"")
        refused(intruder.delete, f"{root}/rsm/kv/leader")
        refused(intruder.delete, f"{root}/ledgers/INSTANCEID")
        assert owner.exists(f"{root}/rsm/kv/leader") is not None


def test_setacls_secures_an_open_tree_once(secured: Secured) -> None:
    root = secured.root
    with owner_and_intruder(secured) as (owner, intruder):
        opened = [f"{root}/ledgers", f"{root}/ledgers/INSTANCEID", f"{root}/rsm/kv/log"]
        for path in opened:
            owner.set_acls(path, OPEN_ACL_UNSAFE)
        assert intruder.get(f"{root}/rsm/kv/log")[0], "opened up, as a cluster without ACLs"

        code, output = secured.shell("setacls", f"{root}/rsm", without=ZK_DIGEST_FILE_ENV)
        assert code == 2
        assert f"no ZooKeeper credentials to secure {root}/ledgers with" in output
        assert "Traceback" not in output

        trees = secured.shell_json("setacls", f"{root}/rsm")["trees"]
        assert [tree["path"] for tree in trees] == [f"{root}/ledgers", f"{root}/rsm"]
        assert sum(tree["changed"] for tree in trees) == len(opened)
        for path in opened:
            refused(intruder.get, path)

        code, output = secured.shell("setacls", f"{root}/rsm")
        assert code == 0, output
        assert f"{root}/rsm: {trees[1]['znodes']} znodes, 0 given the ACL" in output

        code, output = secured.shell("setacls", f"{root}/nothing-here")
        assert code == 1
        assert f"PROBLEM {root}/nothing-here: no such znode" in output


# --- ledgers -----------------------------------------------------------------------------------


def test_ledgers_are_hmac_and_need_the_password(secured: Secured, tmp_path: Path) -> None:
    with secured.client(secured.store.names[0]) as client:
        assert client.set("ledger", "written")
    ledgers = secured.shell_json("listledgers")["ledgers"]
    assert ledgers
    metadata = [secured.shell_json("ledgermetadata", str(ledger)) for ledger in ledgers]
    assert {record["digest_type"] for record in metadata} == {"hmac_sha256"}
    ledger = str(ledgers[0])

    password_file = tmp_path / "ledger-password"
    password_file.write_text(LEDGER_PASSWORD + "\n")  # as `echo` writes it
    read = secured.shell_json("readledger", ledger, "--password-file", str(password_file))
    assert read["entries"], "the log's first segment holds entries"
    assert secured.shell_json("readledger", ledger, "--password", LEDGER_PASSWORD) == read

    code, output = secured.shell("readledger", ledger, "--password", "wrong")
    assert code == 2, output
    assert f"wrong password for ledger {ledger}: the password given is not its password" in output
    assert "Traceback" not in output
    code, output = secured.shell("readledger", ledger)
    assert code == 2, output
    assert f"ledger {ledger} has a password: pass it with --password-file" in output

    addresses = {
        bookie["bookie_id"]: bookie["address"]
        for bookie in secured.shell_json("listbookies")["writable"]
    }
    address = addresses[metadata[0]["ensembles"][0][1][0]]
    entry = ("readentry", address, ledger, "0", "--digest", "hmac_sha256", "--json")
    code, output = secured.run("bookie.tools.cli", "shell", *entry, "--password", LEDGER_PASSWORD)
    assert code == 0, output
    assert json.loads(output)["digest"] == "ok"
    code, output = secured.run("bookie.tools.cli", "shell", *entry, "--password", "wrong")
    assert code == 0, output
    assert json.loads(output)["digest"].startswith("MISMATCH"), "another key fails the digest"


def test_the_replay_tools_read_with_the_password(secured: Secured) -> None:
    with secured.client(secured.store.names[0]) as client:
        assert client.set("replayed", "v4")
    zk = f"{secured.hosts}{secured.root}"
    code, output = secured.run("kvstore.tools.cli", "history", "replayed", "--zk", zk)
    assert code == 0, output
    assert "v4" in output
    code, output = secured.run(
        "kvstore.tools.cli", "history", "replayed", "--zk", zk, without=LEDGER_PASSWORD_FILE_ENV
    )
    assert code != 0
    assert "wrong password for ledger" in output
    assert "Traceback" not in output


# --- admin APIs --------------------------------------------------------------------------------


def post(url: str, token: str | None) -> int:
    """The status of an empty-JSON POST to `url` with `token` as its bearer token, if any."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            status: int = answer.status
    except urllib.error.HTTPError as error:
        error.close()
        status = error.code
    return status


def refused_count(url: str, reason: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=WAIT_S) as page:
        for line in page.read().decode().splitlines():
            if line.startswith(f'admin_requests_refused_total{{reason="{reason}"}}'):
                return float(line.split()[-1])
    raise AssertionError(f"{url}/metrics has no admin_requests_refused_total")


def test_admin_posts_need_the_token(secured: Secured) -> None:
    cluster = secured.store.cluster
    targets = [
        (cluster.replicas[0].admin_url, "/api/v1/snapshots", 202),
        (cluster.bookies.bookies[-1].admin_url, "/api/v1/bookie/gc", 202),
    ]
    for url, path, accepted in targets:
        assert post(url + path, None) == 401
        assert post(url + path, "not-the-token") == 403
        assert post(url + path, ADMIN_TOKEN) == accepted
        assert refused_count(url, "missing") == 1
        assert refused_count(url, "wrong") == 1
        with urllib.request.urlopen(f"{url}/health", timeout=WAIT_S) as page:
            assert page.status == 200, "GETs stay open"


UNREACHABLE_ZK = "127.0.0.1:9"
"""Nothing listens there: a process that got as far as connecting would wait, not exit."""


@pytest.mark.parametrize(
    "command",
    [
        ["bookie.tools.cli", "serve", "--journal-dir", "j", "--ledger-dirs", "l"],
        ["kvstore.tools.cli", "serve", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"],
        [
            "rsm.tools.cli",
            "run",
            "kvstore.state_machine:KVStore",
            "--app",
            "kv",
            "--listen",
            "127.0.0.1:0",
        ],
    ],
    ids=["bookie", "kvstore", "rsm"],
)
def test_an_unreadable_admin_token_file_is_a_usage_error_said_at_once(
    command: list[str], tmp_path: Path
) -> None:
    """Exit status 2 (a configuration error, as for any other) before the process
    connects to anything: not 1 once it has registered and started its admin server."""
    zk = ["--zk-servers" if command[0].startswith("bookie") else "--zk", UNREACHABLE_ZK]
    environment = {**os.environ, ADMIN_TOKEN_FILE_ENV: str(tmp_path / "missing")}
    done = subprocess.run(
        [sys.executable, "-m", *command, *zk],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert f"{ADMIN_TOKEN_FILE_ENV}={tmp_path / 'missing'}: cannot be read" in done.stderr


async def ledgers_naming(hosts: str, root: str, bookie_id: str) -> list[int] | None:
    """The ledgers whose ensembles name `bookie_id` (None while any ledger is marked
    under-replicated), read with this process's ZooKeeper credentials."""
    async with ZkMetadataStore.connect(hosts, root=root) as store:
        if await UnderReplication(store, LEDGER_ROOT).list_marks():
            return None
        manager = LedgerManager(store, LEDGER_ROOT)
        named = []
        for ledger_id in await manager.list_ledgers():
            metadata, _version = await manager.read(ledger_id)
            if any(bookie_id in ensemble for _, ensemble in metadata.ensembles):
                named.append(ledger_id)
        return named


def test_autorecovery_copies_hmac_ledgers_with_the_password(secured: Secured) -> None:
    snapshots = f"{secured.store.cluster.replicas[0].admin_url}/api/v1/snapshots"
    assert post(snapshots, ADMIN_TOKEN) == 202, "a snapshot: a closed HMAC ledger to copy"
    records = [
        secured.shell_json("ledgermetadata", str(ledger))
        for ledger in secured.shell_json("listledgers")["ledgers"]
    ]
    closed = [record for record in records if record["state"] == "closed"]
    assert closed, "the snapshot's ledger"
    lost = closed[0]["ensembles"][0][1][0]
    portal, bookies = secured.store.portal, secured.store.cluster.bookies
    held = portal.call(ledgers_naming, secured.hosts, secured.root, lost)
    assert held is not None
    assert closed[0]["ledger_id"] in held
    bookies.kill(next(bookie.name for bookie in bookies.bookies if bookie.bookie_id == lost))
    written = itertools.count()
    with secured.client(secured.store.names[0]) as client:

        def healed() -> bool:
            # Writes make the store's writer replace the lost bookie in its open segment.
            assert client.set(f"while-lost:{next(written)}", "v")
            return portal.call(ledgers_naming, secured.hosts, secured.root, lost) == []

        wait_for(healed)
    for ledger in held:
        report = secured.shell_json(
            "readledger", str(ledger), "--all-bookies", "--password", LEDGER_PASSWORD
        )
        assert report["problems"] == [], "every copy, the new ones too, passes its HMAC"


# --- no secret anywhere ------------------------------------------------------------------------


def failures_seen(secured: Secured, directory: Path) -> list[str]:
    """What clients and operators see when they get things wrong: a wrong password, a
    command refused, a wrong admin token, a bad ACL file, a ledger's wrong password."""
    seen = []
    name = secured.store.names[0]
    for username, password, call in (
        ("reader", "wrong", lambda client: client.ping()),
        ("reader", READER_PASSWORD, lambda client: client.set("app:x", "y")),
    ):
        with (
            secured.client(name, username=username, password=password) as client,
            pytest.raises(redis.exceptions.RedisError) as raised,
        ):
            call(client)
        seen.append(str(raised.value))
    replica = secured.store.cluster.replicas[0]
    assert post(f"{replica.admin_url}/api/v1/snapshots", "wrong-token") == 403
    bad = directory / "bad.acl"
    bad.write_text(f"user admin on >{DEFAULT_PASSWORD} <{READER_PASSWORD} ~* +@all\n")
    serve = ("serve", "--zk", "127.0.0.1:1", "--listen", "h:1", "--resp", "h:2")
    code, output = secured.run("kvstore.tools.cli", *serve, "--acl-file", str(bad))
    assert code == 2, output
    code, output = secured.shell("readledger", "0", "--password", "wrong")
    assert code == 2, output
    return [*seen, *secured.seen]


def test_no_secret_is_shown_anywhere(secured: Secured, tmp_path: Path) -> None:
    """Last: searches what every test saw (this one's failures too) and every log."""
    cluster = secured.store.cluster
    code, status = secured.run("kvstore.tools.cli", "status", "--zk", cluster.zk)
    assert code == 0, status
    pages = [status, *failures_seen(secured, tmp_path)]
    scraped = 0
    for server in (*cluster.replicas, *cluster.bookies.bookies):
        try:
            with urllib.request.urlopen(f"{server.admin_url}/metrics", timeout=WAIT_S) as page:
                pages.append(page.read().decode())
                scraped += 1
        except urllib.error.URLError:
            continue  # the bookie the autorecovery test killed
    assert scraped >= len(cluster.replicas) + len(cluster.bookies.bookies) - 1
    logs = {replica.log_file for replica in cluster.replicas}
    logs |= set(Path(cluster.data_dir).rglob("*.log"))
    pages += [path.read_text(errors="replace") for path in logs]
    assert any("kvstore.ready" in page for page in pages), "the replicas' logs were read"
    assert any("NOPERM" in page or "no permissions" in page for page in pages)
    leaked = [secret for secret in SECRETS if any(secret in page for page in pages)]
    assert leaked == []
