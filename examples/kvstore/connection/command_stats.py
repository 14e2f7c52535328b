"""Commands counted by name and result, and error replies by code, as Redis's INFO shows them.

Pure.  Each connection counts into a `CommandStats` of its own (plain dicts,
no lock, no metric objects: one dictionary increment per command on the
request path); the server folds the connections' counts together
(`CommandStats.add`) only when INFO or a metrics scrape asks, and keeps
those of closed connections in one more.

Per command name (a subcommand as `container|sub`, Redis's spelling):
`calls`, commands taken (queued ones inside MULTI included, each at the time
it was queued); `rejected`, requests refused before running (a wrong number
of arguments, an unknown subcommand, a transaction too large to queue);
`failed`, commands that ran and answered an error.  `errors` counts every
error reply by its code, the first word of the message (`ERR`, `WRONGTYPE`,
`TRYAGAIN`...), an unknown command's included.

INFO's lines (`commandstats_fields`, `errorstats_fields`), as Redis 7 writes
them and as client libraries parse them::

    cmdstat_<name>:calls=<n>,rejected_calls=<n>,failed_calls=<n>
    errorstat_<CODE>:count=<n>

Redis also writes `usec` and `usec_per_call`: the CPU time inside each
command.  This server does not time commands one by one (the clock
readings would cost more than a GET), so they are left out rather than
written as 0.
"""

from __future__ import annotations

from collections.abc import Iterable


def error_code(message: str) -> str:
    """The code of an error reply: its first word (`ERR`, `WRONGTYPE`, ...)."""
    return message.split(" ", 1)[0]


class CommandStats:
    """A connection's (or a server's) counts; see the module docstring."""

    __slots__ = ("calls", "errors", "failed", "rejected")

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}
        self.rejected: dict[str, int] = {}
        self.failed: dict[str, int] = {}
        self.errors: dict[str, int] = {}

    def call(self, name: str) -> None:
        calls = self.calls
        calls[name] = calls.get(name, 0) + 1

    def reject(self, name: str | None, message: str) -> None:
        """A request refused before running (`name` None: not a command of this server)."""
        if name is not None:
            self.rejected[name] = self.rejected.get(name, 0) + 1
        self.error(message)

    def fail(self, name: str | None, message: str) -> None:
        """A command that ran and answered the error `message`."""
        if name is not None:
            self.failed[name] = self.failed.get(name, 0) + 1
        self.error(message)

    def error(self, message: str) -> None:
        code = error_code(message)
        self.errors[code] = self.errors.get(code, 0) + 1

    def add(self, other: CommandStats) -> None:
        for mine, theirs in (
            (self.calls, other.calls),
            (self.rejected, other.rejected),
            (self.failed, other.failed),
            (self.errors, other.errors),
        ):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count

    @staticmethod
    def total(parts: Iterable[CommandStats]) -> CommandStats:
        summed = CommandStats()
        for part in parts:
            summed.add(part)
        return summed


def commandstats_fields(stats: CommandStats) -> list[tuple[str, str]]:
    """INFO commandstats: one line per command name seen, sorted by name."""
    names = sorted(stats.calls.keys() | stats.rejected.keys() | stats.failed.keys())
    return [
        (
            f"cmdstat_{name}",
            f"calls={stats.calls.get(name, 0)},rejected_calls={stats.rejected.get(name, 0)},"
            f"failed_calls={stats.failed.get(name, 0)}",
        )
        for name in names
    ]


def errorstats_fields(stats: CommandStats) -> list[tuple[str, str]]:
    """INFO errorstats: one line per error code seen, sorted by code."""
    return [(f"errorstat_{code}", f"count={count}") for code, count in sorted(stats.errors.items())]
