"""What a command does with its standard output once writing it failed.

A reader that left (`| head`) or a full disk fails a write.  A command's
output is its result, so the failure is the command's: one line on stderr
(none for a reader that left, who asked for no more) and status 1, never a
traceback.  `checking_stdout` runs a command so: it watches the writes to
stdout, to tell their failure from any other `OSError` (which stays a bug's
traceback), and flushes before it returns, since a short output fails only
then.  What is left in the output's buffer would fail again as the
interpreter exits and print a second error: `discard_stdout` points the
descriptor at /dev/null first.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, Final, TextIO, cast

EXIT_UNWRITABLE: Final = 1
"""A command's status when its output could not be written."""


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
