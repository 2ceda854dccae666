"""What a command produced, in memory, and the one writer that puts it on disk."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from ..progress import progress
from ..table.io import (
    all_or_nothing,
    refuse_input,
    write_csv,
    write_csv_and_parquet,
    write_text,
)

if TYPE_CHECKING:  # drawing is imported when there is a figure to save (parse has none)
    from ..render.figures import Figure


@dataclass
class Result:
    """Outputs by path relative to the output folder: ``tables`` are written as
    ``<name>.csv`` and ``<name>.parquet``, ``csv`` as CSV only, ``figures`` as PNG,
    ``texts`` as UTF-8 text, ``exports`` by their function (``write(path)``, atomic:
    e.g. a Perfetto trace; one that writes more than its file returns every path).
    ``lines`` go to stdout, ``notes`` to stderr; ``data`` holds structured results for
    the Python API (e.g. the report dict); ``failed`` names the ranks the outputs leave
    out (a trace or table that could not be read), with why."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    csv: dict[str, pa.Table] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    exports: dict[str, Callable[[Path], object]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)  # ranks left out: one line each


def write(result: Result, outdir: str | os.PathLike) -> list[Path]:
    """Write every output of ``result`` under ``outdir``, all or nothing (each file under
    a temporary name, all renamed into place once every one is written); returns the
    paths written."""
    out = Path(outdir)
    for dest in destinations(result, out):  # before any file: none, or all of them
        refuse_input(dest)
    written: list[Path] = []
    with all_or_nothing():  # the set appears whole, or not at all (a full disk)
        for name, table in result.tables.items():
            written += write_csv_and_parquet(table, (out / name).parent, Path(name).name)
        for name, table in result.csv.items():
            written.append(write_csv(table, out / name))
        for name, text in result.texts.items():
            written.append(write_text(text, out / name))
        for name, export in result.exports.items():
            made = export(out / name)
            written += [Path(p) for p in made] if isinstance(made, list) else [out / name]
        if result.figures:
            from ..render.figures import save_all

            written += save_all(result.figures, out,
                                lambda items, n: progress(items, "figures", total=n))
    return written


def destinations(result: Result, out: Path) -> list[Path]:
    """Every file :func:`write` would write for ``result`` under ``out``."""
    return ([out / f"{name}{ext}" for name in result.tables for ext in (".csv", ".parquet")]
            + [out / name for name in (*result.csv, *result.texts, *result.exports,
                                       *result.figures)])

