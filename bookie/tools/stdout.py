"""What a command does with its standard output once writing it failed.

A reader that left (`| head`) or a full disk fails a write; what is left in
the output's buffer would fail again as the interpreter exits and print a
second error.  `discard_stdout` points the descriptor at /dev/null first.
"""

from __future__ import annotations

import os
import sys


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
