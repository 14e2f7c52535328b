"""Accept loops that outlast a shortage: a server goes on serving when accept fails for
want of resources.

accept(2) fails with EMFILE or ENFILE when the process or the system is out of file
descriptors, ENOBUFS or ENOMEM when the kernel is short of memory, and ECONNABORTED or
EPROTO for a connection that was reset before it was taken.  None of these says anything
about the listening socket, yet anyio's `Listener.serve` and a plain `sock_accept` loop
raise them, which ends the server and the process hosting it: a burst of connections
would take a bookie down.  Here a connection gone before it was taken is skipped, and a
shortage is logged (`net.accept_failed`, warning, with the delay) and accept tried again
after a pause that doubles from `limits.accept_retry_delay_ms_min` to
`limits.accept_retry_delay_ms_max`, while the connections already open go on (and, as
they close, free what was short).  asyncio's own servers (`loop.create_server`, the
key-value store's RESP port) behave the same way.  Any other error still ends the loop.
"""

from __future__ import annotations

import errno
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import anyio
import anyio.abc
from anyio.streams.stapled import MultiListener

from bookie import limits
from bookie.logs import emit

logger = logging.getLogger(__name__)

_SHORTAGES: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_GONE_BEFORE_TAKEN: Final = frozenset({errno.ECONNABORTED, errno.EPROTO})

T = TypeVar("T")


class AcceptRetry:
    """What an accept loop does after accept raised `OSError` (see the module docstring)."""

    def __init__(self, server: str) -> None:
        self._server = server
        self._delay_ms = limits.accept_retry_delay_ms_min

    async def failed(self, error: OSError) -> None:
        """Return when accept may be tried again; re-raise an error that is not transient."""
        if error.errno in _GONE_BEFORE_TAKEN:
            return
        if error.errno not in _SHORTAGES:
            raise error
        delay_ms = self._delay_ms
        emit(
            logger,
            logging.WARNING,
            "net.accept_failed",
            server=self._server,
            error=error.strerror or repr(error),
            retry_ms=delay_ms,
        )
        await anyio.sleep(delay_ms / 1000)
        self._delay_ms = min(2 * delay_ms, limits.accept_retry_delay_ms_max)

    def succeeded(self) -> None:
        self._delay_ms = limits.accept_retry_delay_ms_min


async def accept_with_retry(accept: Callable[[], Awaitable[T]], retry: AcceptRetry) -> T:
    """`accept()`, tried again as `retry` says until it gives a connection."""
    while True:
        try:
            accepted = await accept()
        except OSError as error:
            await retry.failed(error)
            continue
        retry.succeeded()
        return accepted


async def serve_listener(
    listener: anyio.abc.Listener[Any],
    handler: Callable[[Any], Any],
    task_group: anyio.abc.TaskGroup,
    *,
    server: str,
) -> None:
    """`listener.serve(handler, task_group)`, but a socket listener's (and each of a
    multi-listener's) accept outlasts a shortage.  Other listeners (a simulated network's)
    serve as they do."""
    if isinstance(listener, MultiListener):
        async with anyio.create_task_group() as each:
            for one in listener.listeners:
                each.start_soon(
                    functools.partial(serve_listener, server=server), one, handler, task_group
                )
        return
    if not isinstance(listener, anyio.abc.SocketListener):
        await listener.serve(handler, task_group)
        return
    retry = AcceptRetry(server)
    while True:
        stream = await accept_with_retry(listener.accept, retry)
        task_group.start_soon(handler, stream)
