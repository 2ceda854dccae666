"""Tables and files in and out: atomic writes (a temporary name in the target folder,
then a rename) and reading parsed tables.

A failure (or Ctrl-C) while writing never leaves a half-written file under the final
name; the temporary file is removed.
"""
from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import TraceError, TraceVizError
from .inputs import input_refused, is_input, note_input
from .schema import DELTA_COLUMNS
from .scratch import adopt, release, temp_file_for

# (temporary file, destination) of the files written while :func:`all_or_nothing` lasts,
# and the folders made for them
_staged: list[tuple[str, str]] | None = None
_made: list[str] = []


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """While it lasts, the files :func:`atomic_path` writes are renamed into place only at
    its end, all together; when anything fails they are all removed: a set of outputs
    appears complete or not at all (the files it would replace stay as they were).
    Nested, the outermost one decides."""
    global _staged
    if _staged is not None:
        yield
        return
    _staged = []
    _made.clear()
    try:
        yield
    except BaseException:
        for tmp, _ in _staged:
            discard(tmp)
        for folder in sorted(_made, key=len, reverse=True):  # the empty ones it made
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    else:
        staged = _staged
        for k, (tmp, dest) in enumerate(staged):
            try:
                place(tmp, dest, now=True)
            except BaseException:
                for rest, _ in staged[k + 1:]:
                    discard(rest)
                raise
    finally:
        _staged = None
        _made.clear()


def make_folder(folder: str | os.PathLike) -> None:
    """``os.makedirs``, remembering the folders it made while :func:`all_or_nothing` runs
    (removed, when empty, if it fails)."""
    folder = os.fspath(folder)
    missing = []
    parent = folder
    while parent and not os.path.isdir(parent):
        missing.append(parent)
        parent = os.path.dirname(parent)
    os.makedirs(folder, exist_ok=True)
    if _staged is not None:
        _made.extend(missing)


def place(tmp: str, dest: str, now: bool = False) -> None:
    """Put the finished temporary file ``tmp`` at ``dest``: now, or at the end of the
    running :func:`all_or_nothing`."""
    adopt(tmp)  # this process holds it (a worker may have written it)
    if _staged is not None and not now:
        _staged.append((tmp, dest))
        return
    try:
        os.replace(tmp, dest)
    except OSError as exc:
        discard(tmp)
        raise cannot_write(dest, exc) from None
    release(tmp)


def discard(tmp: str) -> None:
    """Remove an unfinished temporary file, and forget it."""
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    release(tmp)


def cannot_write(dest: str | os.PathLike, exc: OSError) -> TraceVizError:
    """The one-line error of a file that could not be written (a full disk, ...)."""
    return TraceVizError(f"{os.fspath(dest)}: cannot write: {exc.strerror or exc}")


def refuse_input(dest: str | os.PathLike) -> None:
    """An error when ``dest`` is one of the command's inputs (writing would destroy it)."""
    if is_input(dest):
        raise input_refused(dest)


def make_readable(tmp: str) -> None:
    """Give a finished temporary file the permissions a new file gets (the umask's)."""
    os.chmod(tmp, 0o666 & ~_umask())


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path next to ``dest``; on success it is renamed to ``dest`` (or
    at the end of a running :func:`all_or_nothing`). Refused when ``dest`` is a folder
    or one of the command's inputs; a failure to write (a full disk) is one line naming
    ``dest``, and the temporary file is removed."""
    dest = os.fspath(dest)
    folder = os.path.dirname(os.path.abspath(dest))
    if os.path.isdir(dest):
        raise TraceVizError(f"{dest}: is a folder; name a file to write")
    refuse_input(dest)
    try:
        make_folder(folder)
        tmp = temp_file_for(dest)
    except OSError as exc:
        raise cannot_write(dest, exc) from None
    try:
        yield tmp
        make_readable(tmp)
    except BaseException as exc:
        discard(tmp)
        if isinstance(exc, OSError):
            raise cannot_write(dest, exc) from None
        raise
    place(tmp, dest)


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


def writer_options(schema: pa.Schema) -> dict:
    """Parquet writer options: zstd, and dictionary encoding only for the columns that
    are dictionaries already. Dictionary-encoding int64 columns (times, ids: mostly
    unique) builds a hash table of every value before falling back to plain pages; on
    our activity tables that made files twice as large, writing twice as slow and cost
    ~70 MB of memory per row group. Min / max statistics (what lets a reader skip row
    groups) for every column but those dictionaries: the strings' min / max were ~20 %
    of writing an activity table and skip nothing (every row group holds most names).
    Integer columns of :data:`~.schema.DELTA_COLUMNS` are delta-encoded."""
    dictionaries = [f.name for f in schema if pa.types.is_dictionary(f.type)]
    return {"compression": "zstd", "use_dictionary": dictionaries,
            "column_encoding": {f.name: "DELTA_BINARY_PACKED" for f in schema
                                if f.name in DELTA_COLUMNS and pa.types.is_integer(f.type)},
            "write_statistics": [path for f in schema if f.name not in dictionaries
                                 for path in _leaf_paths(f.name, f.type)]}


def _leaf_paths(path: str, type_: pa.DataType) -> list[str]:
    """The parquet column paths of an Arrow field (a list's values are
    ``<name>.list.element``, a struct's fields ``<name>.<field>``)."""
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return _leaf_paths(f"{path}.list.element", type_.value_type)
    if pa.types.is_struct(type_):
        return [p for k in range(type_.num_fields)
                for p in _leaf_paths(f"{path}.{type_.field(k).name}", type_.field(k).type)]
    return [path]


def write_parquet(table: pa.Table, dest: str | os.PathLike) -> None:
    """Write ``table`` (see :func:`writer_options`) to ``dest`` or ``"-"``."""
    with parquet_sink(dest) as sink:
        pq.write_table(table, sink, **writer_options(table.schema))


# a cell a spreadsheet would run as a formula, or a control character a terminal obeys
_FORMULA = r"^[=+\-@]"
_CONTROL = "[\x00-\x1f\x7f-\x9f]"


def write_csv(table: pa.Table, dest: str | os.PathLike) -> Path:
    """Write ``table`` as CSV to ``dest`` (atomically); returns the path. A list column
    (CSV has none) is written as its items joined by spaces. Texts a trace or dump wrote
    are neutralised (:func:`safe_texts`): the Parquet file keeps them as they are."""
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv

    for i, field in enumerate(table.schema):
        if pa.types.is_list(field.type) or pa.types.is_large_list(field.type):
            texts = pc.cast(table.column(i), pa.list_(pa.string()))
            table = table.set_column(i, field.name, pc.binary_join(texts, " "))
        if pa.types.is_dictionary(table.schema.field(i).type):
            table = table.set_column(i, field.name, pc.cast(
                table.column(i), table.schema.field(i).type.value_type))
        if pa.types.is_string(table.schema.field(i).type) or \
                pa.types.is_large_string(table.schema.field(i).type):
            table = table.set_column(i, field.name, safe_texts(table.column(i)))
    with atomic_path(dest) as tmp:
        pacsv.write_csv(table, tmp)
    return Path(dest)


def safe_texts(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """``column`` (strings) with each cell that starts with ``=``, ``+``, ``-`` or ``@``
    prefixed by ``'`` (a spreadsheet shows it, and runs no formula) and control
    characters written as ``\\xNN`` escapes; other cells unchanged (no copy where none
    needs it)."""
    import pyarrow.compute as pc

    bad = pc.or_(pc.match_substring_regex(column, _FORMULA),
                 pc.match_substring_regex(column, _CONTROL))
    if not pc.any(bad).as_py():
        return column
    return pa.chunked_array([pa.array(
        [None if v is None else _safe(v) for v in column.to_pylist()], column.type)])


def _safe(text: str) -> str:
    text = "".join(f"\\x{ord(c):02x}" if ord(c) < 32 or 127 <= ord(c) < 160 else c
                   for c in text)
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def write_csv_and_parquet(table: pa.Table, folder: str | os.PathLike, name: str
                          ) -> list[Path]:
    """``folder/name.csv`` and ``folder/name.parquet``; returns both paths."""
    folder = Path(folder)
    paths = [write_csv(table, folder / f"{name}.csv"), folder / f"{name}.parquet"]
    write_parquet(table, paths[1])
    return paths


def write_text(text: str, dest: str | os.PathLike) -> Path:
    """Write ``text`` (UTF-8) to ``dest`` atomically; returns the path."""
    with atomic_path(dest) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return Path(dest)


def read_table(path: str | os.PathLike, columns: Sequence[str] | None = None) -> pa.Table:
    """A table written by ``traceviz parse`` (schema metadata included); only ``columns``
    when given. An unreadable file raises :class:`~traceviz.errors.TraceError`."""
    note_input(path)
    try:
        return pq.read_table(path, columns=list(columns) if columns else None)
    except (OSError, pa.ArrowInvalid) as exc:
        raise _unreadable(path, exc) from None


def read_footer(path: str | os.PathLike) -> pa.Table:
    """An empty table with the schema (and metadata) of the table at ``path``: its footer
    alone is read. An unreadable file raises :class:`~traceviz.errors.TraceError`."""
    note_input(path)
    try:
        return pq.read_schema(path).empty_table()
    except (OSError, pa.ArrowInvalid) as exc:
        raise _unreadable(path, exc) from None


def _unreadable(path: str | os.PathLike, exc: Exception) -> TraceError:
    reason = str(exc).split("': ", 1)[-1].split(". Either")[0]  # not the path again
    return TraceError(os.fspath(path), f"is not a readable table ({reason})",
                      hint="parse its trace again (traceviz batch --force) or remove it")
