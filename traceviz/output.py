"""Write outputs atomically: to a temporary name in the target folder, then rename.

A failure (or Ctrl-C) while writing never leaves a half-written file under the final
name; the temporary file is removed.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import TraceVizError


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``dest``; on success it is renamed to ``dest``."""
    dest = os.fspath(dest)
    folder = os.path.dirname(os.path.abspath(dest))
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(dest) + ".",
                                   suffix=".tmp", dir=folder)
    except OSError as exc:
        raise TraceVizError(f"{dest}: cannot write: {exc.strerror or exc}") from None
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def parquet_sink(dest: str | os.PathLike) -> Iterator:
    """Where to write a parquet file: a temporary path renamed to ``dest`` on success, or
    stdout for ``"-"`` (refused when stdout is a terminal)."""
    if os.fspath(dest) == "-":
        if sys.stdout.isatty():
            raise TraceVizError("refusing to write binary parquet to a terminal; "
                                "redirect stdout or use -o FILE")
        yield pa.PythonFile(sys.stdout.buffer, mode="w")
        sys.stdout.buffer.flush()
        return
    with atomic_path(dest) as tmp:
        try:
            yield tmp
        except OSError as exc:
            raise TraceVizError(f"{dest}: cannot write: {exc}") from None


def write_parquet(table: pa.Table, dest: str | os.PathLike) -> None:
    """Write ``table`` (zstd-compressed parquet) to ``dest`` or ``"-"``."""
    with parquet_sink(dest) as sink:
        pq.write_table(table, sink, compression="zstd")
