"""traceviz: analysis of PyTorch-profiler (Kineto) traces of distributed LLM training.

Public API::

    traceviz.parse(path_or_fileobj) -> pyarrow.Table      # GPU activity table of one rank
    traceviz.parse_trace(path, cpu=True) -> ParsedTrace   # + CPU table, metadata, warnings
    traceviz.load(parquet_path) -> pyarrow.Table
    traceviz.metadata(table) -> dict                      # rank-level facts of a table
"""
from __future__ import annotations

__version__ = "0.1.0"

from .api import load, metadata, parse, parse_trace  # noqa: E402

__all__ = ["__version__", "load", "metadata", "parse", "parse_trace"]
