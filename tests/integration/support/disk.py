"""Disk usage of directories that a bookie's collectors change while a test measures them.

A garbage collector or compactor may delete a file between a listing and the stat of
that file; such a file holds no bytes any more and counts as zero, so a probe that
waits for disk usage to fall never fails on the very deletion it is waiting for.
"""

from __future__ import annotations

import stat
from collections.abc import Iterable
from pathlib import Path


def file_bytes(paths: Iterable[Path]) -> int:
    """Total size of the regular files among `paths`; files gone since listing count 0."""
    total = 0
    for path in paths:
        try:
            status = path.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(status.st_mode):
            total += status.st_size
    return total
