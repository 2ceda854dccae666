"""``traceviz sequences``: frequent CUDA kernel sequences launched by a CPU operator
(:mod:`traceviz.analysis.sequences`)."""
from __future__ import annotations

import os

from ..analysis.sequences import frequent_sequences
from ..errors import UsageError
from ..job import Job
from ..render.sequence_figure import label
from ..render.sequence_files import sequence_files
from ..table.result import Result


def run(trace: str | os.PathLike, operator: str, rank: int | None = None,
        min_len: int = 3, top_k: int = 5) -> Result:
    """The sequences table, its figure (``top_k`` sequences) and the lines to print."""
    gpu, cpu = Job.of(trace).gpu_and_cpu(rank)
    if cpu is None:
        raise UsageError(f"{trace}: no CPU table; pass the trace, or parse it with --cpu")
    table = frequent_sequences(gpu, cpu, operator, min_len)
    lines = [] if table.num_rows else [
        f"no op containing {operator!r} launches {min_len} or more kernels"]
    lines += [f"{r['count']:6d} x  GPU {r['gpu_time_ns'] / 1e6:9.3f} ms  {label(r['pattern'])}"
              for r in table.slice(0, top_k).to_pylist()]
    return sequence_files(table, top_k, lines)
