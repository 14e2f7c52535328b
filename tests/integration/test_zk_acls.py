"""ZooKeeper digest ACLs on a running store: every process given `BOOKIE_ZK_DIGEST_FILE`.

A store (three bookies with their autorecovery, one replica) runs with
credentials under its own chroot.  Every znode it created carries the
digest ACL and nothing else; a second kazoo client without the credentials
can neither read, change, delete nor create under any of them, while the
store serves writes and reads.  `bookie shell setacls` secures a tree whose
znodes were opened up (a cluster from before credentials), idempotently,
and refuses to run without credentials.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl

from bookie.local.zookeeper import LocalZooKeeper
from bookie.meta.zk_digest import ZK_DIGEST_FILE_ENV
from tests.unit.kvstore.local_store import WAIT_S, Store, running_store

pytestmark = [pytest.mark.integration, pytest.mark.zookeeper, pytest.mark.slow]

USER = "cluster"
PASSWORD = "Zk-Pa55word-for-tests"


@dataclass
class Secured:
    store: Store
    root: str
    digest_file: Path
    hosts: str


@pytest.fixture(scope="module")
def secured(
    zookeeper: LocalZooKeeper, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("zkacl")
    digest_file = directory / "zk-digest"
    digest_file.write_text(f"{USER}:{PASSWORD}\n")
    root = f"/kvzkacl-{os.getpid()}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ZK_DIGEST_FILE_ENV, str(digest_file))
        with running_store(zookeeper, root, directory / "store", replicas=1) as store:
            yield Secured(store, root, digest_file, zookeeper.connect_string)


def kazoo(hosts: str, *, credentials: bool) -> KazooClient:
    auth = [("digest", f"{USER}:{PASSWORD}")] if credentials else None
    client = KazooClient(hosts=hosts, auth_data=auth)
    client.start(timeout=WAIT_S)
    return client


def tree(client: KazooClient, root: str) -> list[str]:
    found, pending = [], [root]
    while pending:
        path = pending.pop()
        found.append(path)
        pending += (f"{path}/{name}" for name in client.get_children(path))
    return sorted(found)


def test_every_znode_is_ours_alone(secured: Secured) -> None:
    name = secured.store.names[0]
    with secured.store.client(name) as redis:
        assert redis.set("k", "v")
        assert redis.get("k") == b"v"
    owner = kazoo(secured.hosts, credentials=True)
    intruder = kazoo(secured.hosts, credentials=False)
    try:
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
        ours = [make_digest_acl(USER, PASSWORD, all=True)]
        assert [path for path in znodes if owner.get_acls(path)[0] != ours] == []
        for path in znodes:
            refused(intruder.get, path)
            refused(intruder.get_children, path)
            refused(intruder.set, path, b"changed")
            refused(intruder.create, f"{path}/intruder", b"")
        refused(intruder.delete, f"{root}/rsm/kv/leader")
        refused(intruder.delete, f"{root}/ledgers/INSTANCEID")
        assert owner.exists(f"{root}/rsm/kv/leader") is not None
    finally:
        for client in (owner, intruder):
            client.stop()
            client.close()
    with secured.store.client(name) as redis:
        assert redis.incr("n") == 1


def refused(operation: Any, *arguments: Any) -> None:
    with pytest.raises(NoAuthError):
        operation(*arguments)


def shell(secured: Secured, *arguments: str, credentials: bool = True) -> tuple[int, str]:
    environment = dict(os.environ)
    if not credentials:
        environment.pop(ZK_DIGEST_FILE_ENV, None)
    result = subprocess.run(
        [sys.executable, "-m", "bookie.tools.cli", "shell", "setacls", *arguments],
        capture_output=True,
        text=True,
        env=environment,
        timeout=WAIT_S,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def test_setacls_secures_an_open_tree_once(secured: Secured) -> None:
    root = secured.root
    where = ("--zk", secured.hosts, "--zk-root", f"{root}/ledgers")
    owner = kazoo(secured.hosts, credentials=True)
    intruder = kazoo(secured.hosts, credentials=False)
    try:
        opened = [f"{root}/ledgers", f"{root}/ledgers/INSTANCEID", f"{root}/rsm/kv/log"]
        for path in opened:
            owner.set_acls(path, OPEN_ACL_UNSAFE)
        assert intruder.get(f"{root}/rsm/kv/log")[0], "opened up, as a cluster without ACLs"

        code, output = shell(secured, *where, f"{root}/rsm", credentials=False)
        assert code == 2
        assert f"no ZooKeeper credentials to secure {root}/ledgers with" in output
        assert "Traceback" not in output

        code, output = shell(secured, *where, f"{root}/rsm", "--json")
        assert code == 0, output
        trees = json.loads(output)["trees"]
        assert [tree["path"] for tree in trees] == [f"{root}/ledgers", f"{root}/rsm"]
        assert sum(tree["changed"] for tree in trees) == len(opened)
        for path in opened:
            refused(intruder.get, path)

        code, output = shell(secured, *where, f"{root}/rsm")
        assert code == 0, output
        assert f"{root}/rsm: {trees[1]['znodes']} znodes, 0 given the ACL" in output

        code, output = shell(secured, *where, f"{root}/nothing-here")
        assert code == 1
        assert f"PROBLEM {root}/nothing-here: no such znode" in output
    finally:
        for client in (owner, intruder):
            client.stop()
            client.close()
    with secured.store.client(secured.store.names[0]) as redis:
        assert redis.set("after", "setacls")
        assert redis.get("after") == b"setacls"
    assert PASSWORD not in output
