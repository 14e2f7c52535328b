"""Write the log docs/tools.md investigates, so that its commands can be followed by hand.

    .venv/bin/python scripts/notes_history.py [--zk 127.0.0.1:2181] [--ledger-root /ledgers]
                                              [--app notes-docs]

On a running bookie cluster (`make cluster` in another terminal), writes the
application `notes-docs`: 29 commands of `tests/integration/support/replay_apps.py:Notes`
in three segments, with fixed times, seeds and sessions and a state hash every
5 commands: the history the replay tools' tests read
(tests/integration/support/replay_cluster.py), through the same writer.  Run it
from the repository's root, so that `--class tests.integration.support.replay_apps:Notes`
imports.  An application of that name already there is refused (exit status 2).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bookie import limits as bookie_limits  # noqa: E402
from bookie.client.ledger_client import LedgerClient  # noqa: E402
from rsm.core.layout import AppLayout  # noqa: E402
from rsm.host import command_zk_store, quiet_kazoo  # noqa: E402
from rsm.testing.logs import LogWriter  # noqa: E402
from tests.integration.support.replay_apps import Notes  # noqa: E402
from tests.integration.support.replay_cluster import CONFIG, write_known_history  # noqa: E402


async def write(arguments: argparse.Namespace) -> int:
    async with (
        command_zk_store(arguments.zk) as store,
        LedgerClient.open(store, root=arguments.ledger_root) as ledgers,
    ):
        if await store.exists(AppLayout.of(arguments.app).log) is not None:
            print(f"error: application {arguments.app!r} exists already", file=sys.stderr)
            return 2
        writer = LogWriter(store, ledgers, arguments.app, Notes, CONFIG)
        await write_known_history(writer)
        log = await writer.finish()
    ledgers_text = ", ".join(str(segment.ledger_id) for segment in log.segments)
    print(f"wrote {arguments.app}: {writer.last_index} commands in ledgers {ledgers_text}")
    print(
        f"try: .venv/bin/rsm log dump --app {arguments.app} --zk {arguments.zk} "
        f"--ledger-root {arguments.ledger_root} --last 3"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zk", default="127.0.0.1:2181", help="ZooKeeper (127.0.0.1:2181)")
    parser.add_argument("--ledger-root", default=bookie_limits.metadata_root_default)
    parser.add_argument("--app", default="notes-docs", help="the application's name")
    arguments = parser.parse_args()
    with quiet_kazoo():
        result: int = anyio.run(write, arguments)
    return result


if __name__ == "__main__":
    sys.exit(main())
