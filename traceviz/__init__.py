"""traceviz: analysis of PyTorch-profiler (Kineto) traces of distributed LLM training.

Public API (imported on first use, so ``import traceviz`` is instant)::

    traceviz.parse_table(path_or_fileobj) -> pyarrow.Table  # GPU activity table of one rank
    traceviz.parse_trace(path, cpu=True) -> ParsedTrace   # + CPU table, metadata, warnings
    traceviz.load(parquet_path) -> pyarrow.Table
    traceviz.metadata(table) -> dict                      # rank-level facts of a table
    traceviz.Job(path)                                    # a whole job, for notebooks
    traceviz.TraceVizError, TraceError, UsageError        # what they raise (one line)

Nothing inside the package imports this module: it is the face for users only.
"""
from __future__ import annotations

from ._version import __version__

_PUBLIC = {
    "parse_table": ("traceviz.ingest.build", "parse_table"),
    "parse_trace": ("traceviz.ingest.build", "parse_trace"),
    "load": ("traceviz.table.io", "read_table"),
    "metadata": ("traceviz.table.schema", "metadata"),
    "Job": ("traceviz.job", "Job"),
    "TraceVizError": ("traceviz.errors", "TraceVizError"),
    "TraceError": ("traceviz.errors", "TraceError"),
    "UsageError": ("traceviz.errors", "UsageError"),
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str):
    if name in _PUBLIC:
        import importlib

        module, attr = _PUBLIC[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'traceviz' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
