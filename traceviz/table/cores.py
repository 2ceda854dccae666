"""How many cores this process may use (its affinity: a batch system's or container's
share, not the machine's count)."""
from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (at least 1)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1
