"""`CopyReader`: every bookie's copy of a ledger's entries, compared.

The async shell of `bookie.core.copies`.  For each entry it asks every bookie
of the entry's write set (from the ledger's metadata) for its copy at once,
with plain reads (never fencing, never writing), checks each digest, and
returns one `Copy` per bookie in write-set order; `odd_copies` then names the
bookies that disagree.  It holds one connection per bookie for its `async with`
block; a bookie it cannot connect to is not retried: its copies of every later
entry are UNREACHABLE with the first failure as the detail.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable

import anyio

from bookie import limits
from bookie.client.bookie_conn import BookieConnection
from bookie.client.connections import bookie_address
from bookie.core.copies import Copy, CopyState
from bookie.core.metadata import LedgerMetadata
from bookie.errors import BookieError, DigestMismatch, NoSuchEntry, NoSuchLedger, StatusError
from bookie.wire.packet import Digest


class CopyReader:
    """Reads every copy of entries of one ledger; open with `CopyReader.open`."""

    def __init__(
        self,
        metadata: LedgerMetadata,
        digest: Digest,
        address_of: Callable[[str], str | None],
        stack: contextlib.AsyncExitStack,
        *,
        timeout_ms: int,
        tls: ssl.SSLContext | None,
    ) -> None:
        self._metadata = metadata
        self._digest = digest
        self._address_of = address_of
        self._stack = stack
        self._timeout_ms = timeout_ms
        self._tls = tls
        self._connections: dict[str, BookieConnection | str] = {}
        """Bookie id -> its connection, or why there is none."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        metadata: LedgerMetadata,
        password: bytes,
        address_of: Callable[[str], str | None],
        *,
        timeout_ms: int = limits.read_timeout_ms_default,
        tls: ssl.SSLContext | None = None,
    ) -> AsyncIterator[CopyReader]:
        """A reader of `metadata`'s ledger; `address_of` maps a bookie id to where it is
        registered (None: not registered), `tls` is the context to connect with there
        (None: plain TCP).  Connections close when the block ends."""
        async with contextlib.AsyncExitStack() as stack:
            digest = Digest(metadata.digest_type, password)
            yield cls(metadata, digest, address_of, stack, timeout_ms=timeout_ms, tls=tls)

    async def read(self, entry_id: int) -> list[Copy]:
        """Every copy of `entry_id`, in the order of its write set."""
        ensemble = self._metadata.ensemble_at(entry_id)
        bookie_ids = [ensemble[index] for index in self._metadata.quorum.write_set(entry_id)]
        for bookie_id in bookie_ids:
            # Connections are entered here, not in the tasks below: each lives in
            # the block's exit stack, which the calling task leaves.
            await self._connection(bookie_id)
        copies: dict[str, Copy] = {}

        async def read_one(bookie_id: str) -> None:
            copies[bookie_id] = await self._read_copy(bookie_id, entry_id)

        async with anyio.create_task_group() as task_group:
            for bookie_id in bookie_ids:
                task_group.start_soon(read_one, bookie_id)
        return [copies[bookie_id] for bookie_id in bookie_ids]

    async def _read_copy(self, bookie_id: str, entry_id: int) -> Copy:
        connection = self._connections[bookie_id]
        if isinstance(connection, str):
            return Copy(bookie_id, CopyState.UNREACHABLE, detail=connection)
        ledger_id = self._metadata.ledger_id
        try:
            response = await connection.read(ledger_id, entry_id, timeout_ms=self._timeout_ms)
            _, _, payload = self._digest.verify_entry(response.packet or b"", ledger_id, entry_id)
        except (NoSuchEntry, NoSuchLedger) as error:
            return Copy(bookie_id, CopyState.MISSING, detail=str(error))
        except DigestMismatch as error:
            return Copy(bookie_id, CopyState.CORRUPT, detail=str(error))
        except StatusError as error:
            return Copy(bookie_id, CopyState.UNREACHABLE, detail=f"answered {error.status.name}")
        except BookieError as error:
            self._connections[bookie_id] = str(error)
            return Copy(bookie_id, CopyState.UNREACHABLE, detail=str(error))
        return Copy(bookie_id, CopyState.OK, payload)

    async def _connection(self, bookie_id: str) -> BookieConnection | str:
        known = self._connections.get(bookie_id)
        if known is not None:
            return known
        address = self._address_of(bookie_id)
        if address is None:
            outcome: BookieConnection | str = "not registered (down?)"
        else:
            try:
                target = bookie_address(address)
                outcome = await self._stack.enter_async_context(
                    BookieConnection.connect(
                        target.host, target.port, connect_timeout_ms=self._timeout_ms, tls=self._tls
                    )
                )
            except BookieError as error:
                outcome = str(error)
        self._connections[bookie_id] = outcome
        return outcome
