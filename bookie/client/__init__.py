"""The ledger client: async API over bookie connections and the metadata store.

`LedgerClient` (create, open with or without recovery, delete, list),
`WriteHandle` (append, close), `ReadHandle` (read, LAC, tail) and
`ClientConfig`; `SyncLedgerClient` in `bookie.client.sync` for scripts.
"""

from bookie.client.config import ClientConfig
from bookie.client.ledger_client import LedgerClient
from bookie.client.read_handle import LedgerEntry, LedgerTail, ReadHandle
from bookie.client.write_handle import WriteHandle

__all__ = ["ClientConfig", "LedgerClient", "LedgerEntry", "LedgerTail", "ReadHandle", "WriteHandle"]
