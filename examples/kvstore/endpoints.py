"""Where each replica of a store serves Redis clients, kept in ZooKeeper for `kvstore status`.

Pure (paths and values; the store's calls are the caller's).  The framework
registers a replica's own address (`/rsm/<app>/replicas/<id>`); the Redis
port is the key-value store's business, so it lives beside it::

    /kvstore/<app>/endpoints/<replica id>   {"resp": "host:port", "address": "host:port"}

as UTF-8 JSON: `resp` is where Redis clients connect, `address` the
replica's framework address.  The node is persistent (a stopped replica's
entry stays, so status can say where it would serve) and rewritten by every
start; whether a replica runs is the framework's ephemeral registration.

Invariants: a path names exactly one replica of one app; `decode_endpoint`
accepts exactly what `encode_endpoint` writes and raises `MalformedValue`
for anything else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from bookie.meta import paths
from rsm.errors import MalformedValue
from rsm.host import check_name, check_replica_id

KVSTORE_ROOT: Final = "/kvstore"
_APP_CHARS_MAX: Final = 128


@dataclass(frozen=True, slots=True)
class Endpoint:
    replica_id: str
    resp: str
    """host:port of the Redis protocol server."""
    address: str
    """host:port of the framework's client protocol (what NotLeader names)."""


def endpoints_path(app: str) -> str:
    """The parent of every endpoint node of `app`."""
    return paths.join(
        KVSTORE_ROOT, check_name("application name", app, _APP_CHARS_MAX), "endpoints"
    )


def endpoint_path(app: str, replica_id: str) -> str:
    return paths.join(endpoints_path(app), check_replica_id(replica_id))


def encode_endpoint(endpoint: Endpoint) -> bytes:
    return json.dumps({"resp": endpoint.resp, "address": endpoint.address}).encode()


def decode_endpoint(replica_id: str, value: bytes) -> Endpoint:
    try:
        fields = json.loads(value)
    except (ValueError, RecursionError) as error:  # RecursionError: nested too deep
        raise MalformedValue(f"endpoint of {replica_id} is not JSON: {error}") from None
    if (
        not isinstance(fields, dict)
        or set(fields) != {"resp", "address"}
        or not all(isinstance(each, str) for each in fields.values())
    ):
        raise MalformedValue(f"endpoint of {replica_id} is not {{resp, address}}: {fields!r:.80}")
    return Endpoint(replica_id, fields["resp"], fields["address"])
