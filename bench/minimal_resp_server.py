"""The fastest plain Python can answer redis-benchmark's GET and SET: a baseline, nothing more.

    python bench/minimal_resp_server.py PORT

asyncio on uvloop, one dict, no replication, no durability, no limits.  It
parses RESP arrays of bulk strings (what redis-benchmark sends), answers
GET, SET, PING and CONFIG (an empty list: redis-benchmark asks for the
server's configuration first), and writes one reply buffer per read, so
pipelined requests get one send.  Anything else gets an error reply.  It
is here to be measured beside the key-value store on the same host, in the
same run (bench/kvstore_bench.py): the store's cost per request compared
with what the interpreter needs.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

import uvloop

OK = b"+OK\r\n"
NIL = b"$-1\r\n"
PONG = b"+PONG\r\n"
EMPTY = b"*0\r\n"


class Resp(asyncio.Protocol):
    def __init__(self, data: dict[bytes, bytes]) -> None:
        self.data = data
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, chunk: bytes) -> None:
        buffer = self.buffer + chunk
        replies = []
        position = 0
        while True:
            command, end = parse(buffer, position)
            if command is None:
                break
            position = end
            replies.append(self.answer(command))
        self.buffer = buffer[position:]
        if replies and self.transport is not None:
            self.transport.write(b"".join(replies))

    def answer(self, command: list[bytes]) -> bytes:
        name = command[0].upper()
        if name == b"GET":
            value = self.data.get(command[1])
            return NIL if value is None else b"$%d\r\n%s\r\n" % (len(value), value)
        if name == b"SET":
            self.data[command[1]] = command[2]
            return OK
        if name == b"PING":
            return PONG
        if name == b"CONFIG":
            return EMPTY
        return b"-ERR unknown command\r\n"


def parse(buffer: bytes, position: int) -> tuple[list[bytes] | None, int]:
    """One `*N` array of `$len` bulk strings at `position`, and where it ends; None if partial."""
    line_end = buffer.find(b"\r\n", position)
    if line_end < 0:
        return None, position
    count = int(buffer[position + 1 : line_end])
    items = []
    cursor = line_end + 2
    for _ in range(count):
        line_end = buffer.find(b"\r\n", cursor)
        if line_end < 0:
            return None, position
        length = int(buffer[cursor + 1 : line_end])
        start = line_end + 2
        if start + length + 2 > len(buffer):
            return None, position
        items.append(buffer[start : start + length])
        cursor = start + length + 2
    return items, cursor


async def serve(port: int) -> None:
    data: dict[bytes, bytes] = {}
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Resp(data), "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve(int(sys.argv[1])))
