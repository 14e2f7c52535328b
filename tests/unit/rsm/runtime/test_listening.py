"""`listen_tcp`: a replica process's port that cannot be had is a configuration error that
names the address and the port's role."""

from __future__ import annotations

import anyio
import pytest
from anyio.abc import SocketAttribute

from bookie.address import Address
from rsm.errors import InvalidConfig
from rsm.runtime.listening import listen_tcp

pytestmark = pytest.mark.anyio


async def test_a_free_port_is_listened_on() -> None:
    async with await listen_tcp(Address("127.0.0.1", 0), "the RESP port") as listener:
        assert listener.extra(SocketAttribute.local_port) > 0


async def test_a_port_in_use_names_the_address_and_its_role() -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as held:
        port = held.extra(SocketAttribute.local_port)
        with pytest.raises(
            InvalidConfig,
            match=rf"^cannot listen on 127\.0\.0\.1:{port} \(the RESP port\): .*in use",
        ):
            await listen_tcp(Address("127.0.0.1", port), "the RESP port")


async def test_a_host_that_is_not_this_machine_s_is_a_configuration_error() -> None:
    with pytest.raises(
        InvalidConfig, match=r"^cannot listen on 192\.0\.2\.1:0 \(the framework's port\)"
    ):
        await listen_tcp(Address("192.0.2.1", 0), "the framework's port")
