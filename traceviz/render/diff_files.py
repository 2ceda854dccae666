"""The files of ``traceviz diff`` (file names decided here): the comparison table and
its figure."""
from __future__ import annotations

import pyarrow as pa

from ..table.result import Result
from .diff_figure import draw
from .figures import Figure


def diff_files(table: pa.Table, lines: list[str]) -> Result:
    """``trace_diff`` (.csv, .parquet), ``trace_diff.png`` and the summary ``lines``."""
    return Result(tables={"trace_diff": table}, figures={"trace_diff.png": Figure(draw, table)},
                  lines=lines)
