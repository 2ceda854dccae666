"""Both tables of one rank: the GPU activity table and the CPU table (every CPU-side
complete event), from a trace (parsed now) or a parsed table and its ``.cpu.parquet``."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..errors import TraceVizError
from .inputs import input_files


def gpu_and_cpu(path: Path, rank: int | None) -> tuple[pa.Table, pa.Table | None]:
    """GPU activity table and CPU table of one rank of ``path`` (a trace, a parsed table
    with its ``.cpu.parquet`` sibling, or a folder of either)."""
    import traceviz
    from ..discover import describe

    def known_rank(f: Path) -> int:
        """The rank a trace's header or name gives, without parsing it (-1 unknown)."""
        info = describe(f) if f.suffix != ".parquet" else None
        return info.rank if info else -1

    known = {f: known_rank(f) for f in input_files([path])}
    # lowest known rank first; files whose rank shows only once parsed come last
    files = sorted(known, key=lambda f: (known[f] < 0, known[f]))
    chosen = None
    for f in files:
        if f.suffix == ".parquet":
            gpu = traceviz.load(f)
            sibling = f.with_name(f.name[:-len(".parquet")] + ".cpu.parquet")
            cpu = traceviz.load(sibling) if sibling.exists() else None
        else:
            parsed = traceviz.parse_trace(f, cpu=True)
            gpu, cpu = parsed.activities, parsed.cpu
        r = int(traceviz.metadata(gpu).get("rank", -1))
        if rank is None or r == rank:
            if chosen is None or r < chosen[0]:
                chosen = (r, gpu, cpu)
            if rank is not None or known[f] >= 0:
                break
    if chosen is None:
        raise TraceVizError(f"{path}: no rank {rank} among its traces")
    return chosen[1], chosen[2]
