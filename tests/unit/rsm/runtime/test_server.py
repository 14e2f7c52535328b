"""The replica's server under bad and unusual client input, over a raw socket."""

from __future__ import annotations

import socket
import struct

import anyio
import anyio.abc
import cbor2
import pytest

from rsm import limits
from rsm.client import tcp_connector
from rsm.core.protocol import CallRequest, Op, StatusRequest, encode_request
from rsm.errors import RsmStatus
from rsm.runtime.replica import Replica
from tests.unit.bookie.server.support import read_bodies, read_until_closed
from tests.unit.rsm.runtime.harness import replica_cluster, wait_until
from tests.unit.rsm.runtime.test_failover import start_three

pytestmark = pytest.mark.anyio


async def open_raw(replica: Replica) -> anyio.abc.ByteStream:
    return await tcp_connector(replica.address)


def raw_frame(item: object) -> bytes:
    body = cbor2.dumps(item)
    return struct.pack(">I", len(body)) + body


async def test_bad_requests_are_answered_and_the_connection_goes_on() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        async with await open_raw(leader) as stream:
            await stream.send(
                raw_frame([1, 99, 1])  # unknown op
                + raw_frame([9, Op.STATUS, 2])  # unknown version
                + raw_frame([1, Op.CALL, 3, "add", "not a list", {}, None, None, None])
                + raw_frame([1, Op.CALL, 4, "no_such_command", [], {}, None, None, None])
                + raw_frame([1, Op.CALL, 5, "add", ["x", "y"], {}, None, None, None])
                + encode_request(CallRequest(6, "add", [2], {}))
                + encode_request(StatusRequest(7))
            )
            answers = {body[2]: body for body in await read_bodies(stream, 7)}
        assert {answers[i][3] for i in (1, 2, 3)} == {RsmStatus.BAD_REQUEST}
        assert answers[4][3] == RsmStatus.UNKNOWN_COMMAND
        assert answers[5][3] == RsmStatus.BAD_ARGUMENTS
        assert (answers[6][3], answers[6][6]) == (RsmStatus.OK, 2)
        assert answers[7][3] == RsmStatus.OK
        assert answers[7][6]["role"] == "leader"
        assert await leader.call("add", 1) == 3


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00\x00\x00",  # an empty frame
        struct.pack(">I", limits.frame_bytes_max + 1),  # oversized
        struct.pack(">I", 2) + b"\xff\xff",  # not CBOR
        raw_frame({"op": 1}),  # not an array
        raw_frame([1, Op.CALL, "id"]),  # no usable request id
    ],
)
async def test_unanswerable_input_closes_only_that_connection(garbage: bytes) -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        async with await open_raw(leader) as stream:
            await stream.send(garbage)
            assert await read_until_closed(stream) == []
        assert await leader.call("add", 1) == 1, "the replica goes on serving"


async def test_a_follower_answers_commands_with_the_leaders_address() -> None:
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        follower = next(r.replica for r in replicas.running.values() if r.replica is not leader)
        await wait_until(lambda: follower.status()["leader_address"] == leader.address)
        async with await open_raw(follower) as stream:
            await stream.send(encode_request(CallRequest(1, "add", [1], {})))
            [answer] = await read_bodies(stream, 1)
        assert answer[3] == RsmStatus.NOT_LEADER
        assert answer[5] == leader.address


async def test_a_replica_counts_the_clients_connected_to_it() -> None:
    """What a follower's CPU priority looks at (rsm/runtime/cpu_priority.py)."""
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        follower = next(r.replica for r in replicas.running.values() if r.replica is not leader)
        before_s = anyio.current_time()
        assert follower.clients_connected_since(before_s) == 0
        async with await open_raw(follower) as stream:
            await stream.send(encode_request(StatusRequest(1)))
            assert len(await read_bodies(stream, 1)) == 1
            now_s = anyio.current_time()
            assert follower.clients_connected_since(now_s) == 1
            assert follower.clients_connected_since(before_s) == 0, "opened after before_s"
        await wait_until(lambda: follower.clients_connected_since(anyio.current_time()) == 0)


async def test_connections_over_the_per_address_bound_are_closed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(limits, "server_connections_per_address_max", 1)
    async with replica_cluster() as replicas:
        leader = await start_three(replicas)
        host, port = leader.address.rsplit(":", 1)
        async with await anyio.connect_tcp(host, int(port)) as first:
            await first.send(encode_request(StatusRequest(1)))
            assert len(await read_bodies(first, 1)) == 1
            async with await anyio.connect_tcp(host, int(port)) as same_host:
                assert await read_until_closed(same_host) == []
            async with await anyio.connect_tcp(host, int(port), local_host="127.0.0.2") as other:
                await other.send(encode_request(StatusRequest(2)))
                assert len(await read_bodies(other, 1)) == 1


def test_a_client_that_never_reads_is_slowed_by_tcp() -> None:
    # The server's reader stops at a backlog of answers; its transport must stop reading
    # too, or the requests pile up in the replica's memory instead of in TCP.  The client
    # sends before the server first reads (on uvloop, as replica processes run, a new
    # connection's transport reads from the start).
    burst = encode_request(StatusRequest(1)) * 8192

    async def scenario() -> None:
        async with replica_cluster() as replicas:
            leader = await start_three(replicas)
            host, port = leader.address.rsplit(":", 1)
            with socket.create_connection((host, int(port))) as greedy:
                greedy.sendall(burst)
                greedy.setblocking(False)
                sent = len(burst)
                while sent < UNREAD_SEND_BYTES_MAX:
                    with anyio.move_on_after(STALL_S) as scope:
                        await anyio.wait_writable(greedy)
                    if scope.cancelled_caught:
                        break
                    sent += greedy.send(burst)
                assert sent < UNREAD_SEND_BYTES_MAX, "the server never stopped reading"
            assert await leader.call("add", 1) == 1, "the replica goes on serving"

    anyio.run(scenario, backend_options={"use_uvloop": True})


UNREAD_SEND_BYTES_MAX = 256 * 1024 * 1024
STALL_S = 1.0
