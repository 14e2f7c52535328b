"""The server process as INFO reports it: memory, CPU time, the operating system.

Read from the kernel when INFO is asked (`process_status`): resident memory
from /proc/self/statm where there is one (else the peak, from getrusage),
the peak from getrusage (`ru_maxrss`, KiB on Linux), the machine's memory
from sysconf, CPU seconds of the process and of its children from getrusage.
"""

from __future__ import annotations

import os
import platform
import resource
import sys
from pathlib import Path
from typing import Final

from kvstore.connection.server_commands import ProcessStatus

_STATM: Final = Path("/proc/self/statm")
_KIB: Final = 1024


def process_status(run_id: str) -> ProcessStatus:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    page_bytes = os.sysconf("SC_PAGE_SIZE")
    peak_bytes = own.ru_maxrss * _KIB
    try:
        rss_bytes = int(_STATM.read_text().split()[1]) * page_bytes
    except (OSError, IndexError, ValueError):
        rss_bytes = peak_bytes
    system = platform.uname()
    return ProcessStatus(
        run_id=run_id,
        os=f"{system.system} {system.release} {system.machine}",
        executable=sys.executable,
        rss_bytes=rss_bytes,
        peak_rss_bytes=max(peak_bytes, rss_bytes),
        system_memory_bytes=page_bytes * os.sysconf("SC_PHYS_PAGES"),
        cpu_user_s=own.ru_utime,
        cpu_sys_s=own.ru_stime,
        cpu_user_children_s=children.ru_utime,
        cpu_sys_children_s=children.ru_stime,
    )
