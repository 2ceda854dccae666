"""What a command produced, in memory (tables, figures, texts, lines), and the one writer
that puts it on disk."""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from ..progress import progress
from .io import (
    all_or_nothing,
    discard,
    make_folder,
    place,
    refuse_input,
    write_csv,
    write_csv_and_parquet,
    write_text,
)


class Drawing(Protocol):
    """A result's figure as its writer and the page see it
    (:class:`traceviz.render.figures.Figure`: drawn only when saved, so that a command
    without figures imports no drawing)."""

    def figure(self) -> Any: ...

    def save(self, path: str | os.PathLike) -> Path: ...

    def save_temp(self, path: str | os.PathLike) -> str: ...

    def png(self) -> bytes: ...


@dataclass
class Result:
    """Outputs by path relative to the output folder: ``tables`` are written as
    ``<name>.csv`` and ``<name>.parquet``, ``csv`` as CSV only, ``figures`` as PNG,
    ``texts`` as UTF-8 text, ``exports`` by their function (``write(path)``, atomic:
    e.g. a Perfetto trace; one that writes more than its file returns every path).
    ``lines`` go to stdout, ``notes`` to stderr; ``value`` is the typed result the
    outputs came from (each command's own: a ``JobDiagnosis``, an ``OpModel``, a
    :class:`ReportFiles`, ...), for the demo and the Python API; ``failed`` names the
    ranks the outputs leave out (a trace or table that could not be read), with why."""

    tables: dict[str, pa.Table] = field(default_factory=dict)
    csv: dict[str, pa.Table] = field(default_factory=dict)
    figures: dict[str, Drawing] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    exports: dict[str, Callable[[Path], object]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    value: Any = None
    failed: list[str] = field(default_factory=list)  # ranks left out: one line each


@dataclass
class Written:
    """What a streamed export wrote, once written: its file and the events in it."""

    output: Path
    events: int = 0


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
            written += save_all(result.figures, out,
                                lambda items, n: progress(items, "figures", total=n))
    return written


def destinations(result: Result, out: Path) -> list[Path]:
    """Every file :func:`write` would write for ``result`` under ``out``."""
    return ([out / f"{name}{ext}" for name in result.tables for ext in (".csv", ".parquet")]
            + [out / name for name in (*result.csv, *result.texts, *result.exports,
                                       *result.figures)])


PARALLEL_FIGURES = 24  # from this many figures on, they are drawn in worker processes


def save_all(figures: dict[str, Drawing], outdir: Path, wrap=lambda it, n: it) -> list[Path]:
    """Save every figure as ``outdir / name``; returns the paths in ``figures``' order.
    Many figures are drawn in parallel worker processes (one per core, at most 4; drawing
    is CPU-bound Python); ``wrap(iterable, total)`` can put a progress bar on them."""
    paths = {name: outdir / name for name in figures}
    workers = min(os.cpu_count() or 1, 4)
    if len(figures) < PARALLEL_FIGURES or workers < 2:
        return [figures[n].save(p) for n, p in wrap(paths.items(), len(paths))]
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool
    from multiprocessing import get_context

    from .scratch import exit_on_sigterm

    done: set[str] = set()
    futures: dict = {}
    for folder in {p.parent for p in paths.values()}:
        make_folder(folder)  # here: the workers only write files
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"),
                                 initializer=exit_on_sigterm, initargs=(None,)) as pool:
            futures = {pool.submit(_save_temp, figures[n], p): n for n, p in paths.items()}
            for fut in wrap(as_completed(futures), len(futures)):
                tmp = fut.result()  # a drawing error is raised here, as when drawn here
                place(tmp, os.fspath(paths[futures[fut]]))
                done.add(futures[fut])
    except BrokenProcessPool:  # no worker could start (e.g. a __main__ read from stdin)
        for n in paths.keys() - done:
            figures[n].save(paths[n])
    except BaseException:  # what the other workers drew is not put in place
        for fut, n in futures.items():
            if n not in done and fut.done() and not fut.cancelled() and not fut.exception():
                discard(fut.result())
        raise
    return list(paths.values())


def _save_temp(figure: Drawing, path: Path) -> str:
    return figure.save_temp(path)
