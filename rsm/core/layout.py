"""Where an application's coordination data lives in ZooKeeper: its znode paths.

Pure.  Everything of application `<app>` sits under `/rsm/<app>`
(`docs/architecture.md`, "ZooKeeper layout of one application")::

    /rsm/<app>/log                 the segments (rsm/core/log_format.py); changed only by CAS
    /rsm/<app>/election/n-<seq>    ephemeral sequential candidacies
                                   {replica_id, address, tls_address}
    /rsm/<app>/leader              ephemeral {replica_id, address, tls_address, epoch}:
                                   discovery
    /rsm/<app>/handoff             {target, epoch}: who should lead that epoch; empty: nobody
    /rsm/<app>/replicas/<id>       ephemeral {replica_id, address, tls_address}: membership
                                   for status and tools
    (address: the plain port, tls_address: the TLS port; either may be absent, formats
    in rsm/core/log_format.py)
    /rsm/<app>/snapshots           registered snapshots, pending ones, ledgers to delete
                                   (rsm/core/snapshot_manifest.py); changed only by CAS

Many applications share one ZooKeeper (and one bookie cluster): their trees
never overlap, because an application name is one path component.

Invariants: every path is valid for both metadata stores; application names
and replica ids are single znode names (`InvalidConfig` otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bookie.meta import paths
from rsm import limits
from rsm.core.election import CANDIDATE_PREFIX
from rsm.errors import InvalidConfig

RSM_ROOT: Final = "/rsm"

_APP_CHARS_MAX: Final = 128


def check_name(what: str, name: str, chars_max: int) -> str:
    """`name` if it can be one znode name of at most `chars_max` characters; else raise
    `InvalidConfig`."""
    if (
        not isinstance(name, str)
        or not 1 <= len(name) <= chars_max
        or not paths.is_valid_name(name)
        or not name.isprintable()
    ):
        raise InvalidConfig(
            f"{what} {name!r:.80} must be 1..{chars_max} printable characters, "
            "without '/', and not '.' or '..'"
        )
    return name


@dataclass(frozen=True, slots=True)
class AppLayout:
    """The znode paths of one application."""

    app: str
    root: str
    log: str
    election: str
    leader: str
    handoff: str
    replicas: str
    snapshots: str

    @classmethod
    def of(cls, app: str, rsm_root: str = RSM_ROOT) -> AppLayout:
        check_name("application name", app, _APP_CHARS_MAX)
        root = paths.join(rsm_root, app)
        return cls(
            app=app,
            root=root,
            log=paths.join(root, "log"),
            election=paths.join(root, "election"),
            leader=paths.join(root, "leader"),
            handoff=paths.join(root, "handoff"),
            replicas=paths.join(root, "replicas"),
            snapshots=paths.join(root, "snapshots"),
        )

    @property
    def candidate_prefix(self) -> str:
        """What a candidacy is created as (ZooKeeper appends the sequence number)."""
        return paths.join(self.election, CANDIDATE_PREFIX)

    def candidate(self, name: str) -> str:
        return paths.join(self.election, name)

    def replica(self, replica_id: str) -> str:
        return paths.join(self.replicas, check_replica_id(replica_id))


def check_replica_id(replica_id: str) -> str:
    """`replica_id` if it is acceptable (it names a znode and appears in log entries)."""
    return check_name("replica id", replica_id, limits.replica_id_chars_max)
