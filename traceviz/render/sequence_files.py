"""The files of ``traceviz sequences`` (file names decided here): the frequent kernel
sequences and their figure."""
from __future__ import annotations

import pyarrow as pa

from ..table.result import Result
from .figures import Figure
from .sequence_figure import draw


def sequence_files(table: pa.Table, top_k: int, lines: list[str]) -> Result:
    """``frequent_sequences`` (.csv, .parquet), its figure of the ``top_k`` sequences and
    the summary ``lines``."""
    return Result(tables={"frequent_sequences": table},
                  figures={"frequent_sequences.png": Figure(draw, table, top_k)}, lines=lines)
