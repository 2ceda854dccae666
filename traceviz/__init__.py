"""traceviz: analysis of PyTorch-profiler (Kineto) traces of distributed LLM training.

Public API::

    traceviz.parse(path_or_fileobj) -> pyarrow.Table      # GPU activity table of one rank
    traceviz.parse_trace(path, cpu=True) -> ParsedTrace   # + CPU table, metadata, warnings
    traceviz.load(parquet_path) -> pyarrow.Table
    traceviz.metadata(table) -> dict                      # rank-level facts of a table
"""
from __future__ import annotations

import gc as _gc

__version__ = "0.1.0"

# Importing numba and pyarrow makes ~170k objects, none of them garbage; the cyclic
# collector ran ~260 times over them (~0.1 s). It is paused only for this import.
_collecting = _gc.isenabled()
_gc.disable()
try:
    from .api import load, metadata, parse, parse_trace  # noqa: E402
finally:
    if _collecting:
        _gc.enable()

__all__ = ["__version__", "load", "metadata", "parse", "parse_trace"]
