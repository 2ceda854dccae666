"""Batch work functions for tests (importable by spawned worker processes)."""
from __future__ import annotations

import os
import signal

from traceviz.ingest.batch import parse_one


def dies_on_rank_3(task, *args):
    """parse_one, but the process parsing rank 3 is SIGKILLed (as the OOM killer does)."""
    if task.rank == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return parse_one(task, *args)
