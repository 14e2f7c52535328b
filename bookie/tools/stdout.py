"""How a command-line program's main ends when its output cannot be written or the user
presses Ctrl-C.

A reader that left (`| head`) or a full disk fails a write.  A command's
output is its result, so the failure is the command's: one line on stderr
(none for a reader that left, who asked for no more) and status 1, never a
traceback.  `checking_stdout` runs a command so: it watches the writes to
stdout, to tell their failure from any other `OSError` (which stays a bug's
traceback), and flushes before it returns, since a short output fails only
then.  What is left in the output's buffer would fail again as the
interpreter exits and print a second error: `discard_stdout` points the
descriptor at /dev/null first.

Ctrl-C ends a command (`--follow`, a wait for a leader) with status 130, as a
shell reports a program that SIGINT ended, and without Python's traceback:
`program_main` runs a main so, and with its output checked.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO, cast

from bookie.errors import leaf_error

EXIT_UNWRITABLE: Final = 1
"""A command's status when its output could not be written."""

EXIT_INTERRUPTED: Final = 130
"""A command's status when Ctrl-C ended it: 128 + SIGINT, what shells report."""


def discard_stdout() -> None:
    """Point stdout at /dev/null, so that what is left in its buffer is not written again
    (and does not fail again) as the interpreter exits."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (a test's capture): nothing is flushed at exit
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


class _WatchedStream:
    """A text stream's stand-in that remembers the last error its writes raised."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.failure: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as error:
            self.failure = error
            raise

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as error:
            self.failure = error
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def checking_stdout(prefix: str, command: Callable[[], int]) -> int:
    """Run `command` and return its status; if writing its stdout fails, say so in one line
    on stderr starting with `prefix` and return `EXIT_UNWRITABLE` (quietly for a reader
    that left)."""
    watched = _WatchedStream(sys.stdout)
    sys.stdout = cast(TextIO, watched)
    try:
        status = command()
        if watched.failure is None:
            sys.stdout.flush()
        else:  # the command met the failure and said so: the buffer's rest goes nowhere
            discard_stdout()
    except OSError as error:
        if error is not watched.failure:
            raise
        discard_stdout()
        if not isinstance(error, BrokenPipeError):
            print(f"{prefix}{type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_UNWRITABLE
    finally:
        sys.stdout = watched.stream
    return status


def program_main(prefix: str, command: Callable[[], int]) -> int:
    """A program's main: `command`'s status, its output checked (`checking_stdout`), and
    `EXIT_INTERRUPTED` without a traceback when Ctrl-C ends it."""
    try:
        return checking_stdout(prefix, command)
    except BaseException as raised:
        if isinstance(leaf_error(raised), KeyboardInterrupt):
            return EXIT_INTERRUPTED
        raise
