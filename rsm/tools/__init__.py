"""The investigation tools, as an application's own command line offers them.

An application that ships a command of its own (the key-value store's
`kvstore`) gives its users the tools for its one class without `--class`;
it takes from here, and from nowhere else inside `rsm.tools`:

* `run_command(arguments, argv)`: runs `arguments.handler` (an async function
  of the parsed arguments) with the tools' exit statuses and one-line error
  messages (`error: <Type>: <message>`, never a traceback);
* `key_history(...)`: `rsm blame`, every command that changed one key, named
  on the command line as `key_bytes` reads it;
* `query_at(...)`: one of the class's queries on the state at an index, by
  replay from the newest snapshot at or below it (`QueryAt`);
* `source_options_of(app=..., zk=..., ledger_root=..., log_file=..., tls=...,
  zk_tls=...)`: what both take to name the log (a cluster, its bookies reached
  with the TLS context `tls` and its ZooKeeper with the `ZkTls` files `zk_tls`,
  or an exported file);
* for `--json`, `SCHEMA_VERSION` (the key "schema" of every object the tools
  print) and `plain_value` (a decoded value as JSON carries it: bytes as text
  when UTF-8, else `{"hex": ...}`).

docs/tools.md describes the commands; the modules of this package are the
library behind them.
"""

from __future__ import annotations

import ssl
from typing import Any

from bookie.meta.zk_tls import ZkTls
from rsm.tools.arguments import key_bytes
from rsm.tools.investigate import run as run_command
from rsm.tools.key_commands import QueryAt, key_history, query_at
from rsm.tools.records import SCHEMA_VERSION, plain_value

__all__ = [
    "SCHEMA_VERSION",
    "QueryAt",
    "key_bytes",
    "key_history",
    "plain_value",
    "query_at",
    "run_command",
    "source_options_of",
]


def source_options_of(
    *,
    app: str | None,
    zk: str | None,
    ledger_root: str,
    log_file: str | None,
    tls: ssl.SSLContext | None = None,
    zk_tls: ZkTls | None = None,
) -> dict[str, Any]:
    """The log a tool reads: application `app` on the cluster at `zk` (bookie metadata under
    `ledger_root`, bookies reached with `tls`, None: plain TCP; ZooKeeper dialled with
    `zk_tls`, None: as `BOOKIE_ZK_TLS_*` say), or the exported file `log_file`."""
    return {
        "app": app,
        "zk": zk,
        "ledger_root": ledger_root,
        "log_file": log_file,
        "tls": tls,
        "zk_tls": zk_tls,
    }
