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


def parse_saying_where(task, *args):
    """parse_one, its outcome's last warning naming the process that parsed it."""
    outcome = parse_one(task, *args)
    outcome.warnings.append(f"pid {os.getpid()}")
    return outcome


def piece_dies_on_rank_3(task, *args):
    """The diagnosis's per-rank piece, but the process making rank 3's is SIGKILLed."""
    from traceviz.ingest.rank_pieces import piece_of_files

    if task[0] == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return piece_of_files(task, *args)


def square(x):
    """A task that costs nothing (the pool runner's own overhead, measured alone)."""
    return x * x


def init_dies(jobs, parent):
    """A worker initializer that kills its process (workers that cannot start)."""
    os.kill(os.getpid(), signal.SIGKILL)


def read_it(path):
    """Read a table in a worker (a damaged one raises the loader's one-line error)."""
    from traceviz.table.io import read_table

    return read_table(path).num_rows


def block_dies_at_step_place_4(task, *args):
    """A pass over an op timeline's blocks of steps, but the process modelling the
    block that holds step place 4 is SIGKILLed."""
    from traceviz.ingest.timeline_pieces import measured_of_block

    if task[1] <= 4 < task[2]:
        os.kill(os.getpid(), signal.SIGKILL)
    return measured_of_block(task, *args)
