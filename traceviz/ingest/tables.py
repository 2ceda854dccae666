"""Where the analyses find their ranks: trace files, parsed tables (``.parquet``) or
folders of either; parsing a job's traces first when it has no tables (one function,
:func:`ensure_tables`, for every command); loading one rank's table with a one-line
reason when it fails; the rank a table belongs to."""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ..errors import TraceVizError, UsageError
from ..progress import progress
from ..table.inputs import note_input
from ..table.io import read_footer, read_table
from ..table.parked import RANKS_PER_TRIM, release_free_memory
from ..table.schema import (
    METADATA_KEY,
    cut_groups,
    file_fact,
    file_metadata,
    is_activity_table,
    metadata,
    parquet_columns,
)


def input_files(paths: Sequence[str | os.PathLike]) -> list[Path]:
    """Trace and parquet files named by ``paths`` (folders searched recursively; a folder
    with parsed tables gives those, else its traces)."""
    from .discover import find_traces, no_traces_message
    from .outputs import job_files

    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            parquet = of_this_job([x for x in job_files(p, ".parquet")
                                   if is_activity_table(x)], p)
            out += parquet or [t.path for t in find_traces(p)]
        elif p.exists():
            note_input(p)
            out.append(p)
        else:
            raise TraceVizError(f"{p}: no such file or folder")
    if not out:
        raise TraceVizError("; ".join(no_traces_message(p) for p in paths))
    return out


def job_files(root: Path) -> list[Path]:
    """The table files of one profiled iteration's ranks under ``root``: ``root`` when it
    is a table, else its tables (a job's traces parsed once into them, where needed), of
    one folder (:func:`one_folder`)."""
    if root.is_file() and root.suffix == ".parquet":
        return [root]
    return one_folder(input_files([tables_folder(root)]), root)


def own_tables(root: Path, folder: Path) -> list[Path]:
    """The rank tables of ``folder`` that are the job ``root``'s: every one, but where
    ``root`` is one trace, the table parsed from it (none where it failed to parse). A
    trace's tables folder can hold another trace's (a folder of two runs' traces parsed
    together, named for the folder as the trace is)."""
    from .batch import parsed_from

    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    if not is_trace_file(root):
        return files
    return [p for p in files if parsed_from(p, root)]


def is_trace_file(root: Path) -> bool:
    """Whether ``root`` is one trace file (not a folder, not a table)."""
    return root.is_file() and root.suffix != ".parquet"


def of_this_job(tables: list[Path], folder: Path) -> list[Path]:
    """``tables`` but those another job left in ``folder``: where a batch wrote the
    folder (its ``batch_summary.json`` there or in a parent), a table parsed from a trace
    outside that batch's job folder belongs to another job of the same folder name (an
    earlier batch into the same output), and is left out."""
    from .batch import job_root

    root = job_root(folder)
    if root is None:
        return tables
    keep = []
    for t in tables:
        try:
            source = file_fact(t, "source")
        except (OSError, ValueError):
            keep.append(t)  # unreadable: its loader says why
            continue
        if not source or not os.path.isabs(source) or _under(Path(source), root):
            keep.append(t)
    return keep


def _under(path: Path, root: Path) -> bool:
    """Whether ``path`` is ``root`` or inside it (both resolved)."""
    try:
        path = path.resolve()
    except OSError:
        return False
    return path == root or path.is_relative_to(root)


def one_folder(files: list[Path], root: Path) -> list[Path]:
    """``files`` when they sit in one folder (one profiled iteration), else an error
    naming the folders to choose from."""
    only_folder(sorted({f.parent for f in files}), root)
    return files


def only_folder(folders: list[Path], root: Path) -> Path:
    """The one folder of ``folders`` (one profiled iteration's ranks), else an error
    naming the folders to choose from."""
    if len(folders) > 1:
        names = ", ".join(str(f.relative_to(root)) if f.is_relative_to(root) else str(f)
                          for f in folders[:6])
        raise TraceVizError(f"{root}: holds the ranks of several profiled iterations "
                            f"({names}{', ...' if len(folders) > 6 else ''}); pass one of "
                            "those folders")
    return folders[0]


def table_folders(root: Path) -> list[Path]:
    """The folders under ``root`` (itself included) that hold parsed rank tables."""
    from .outputs import job_files

    if not root.is_dir():
        return []
    return sorted({p.parent for p in job_files(root, ".parquet") if is_activity_table(p)})


def ensure_tables(root: str | os.PathLike, outdir: str | os.PathLike | None = None, *,
                  jobs: int = 0, topology: str | os.PathLike | None = None,
                  vpp: int | None = None, quiet: bool | None = None, cpu: bool = False,
                  scheduler: str | None = None) -> list[Path]:
    """The folders of parsed rank tables of ``root`` (one per profiled iteration).

    A ``root`` of traces is parsed by :func:`traceviz.ingest.batch.run` into ``outdir``
    (default: the batch output folder), which keeps the tables that are up to date (newer
    than their trace, parsed with these options); a ``root`` of tables only is taken as
    it is, but a ``vpp`` it contradicts is a one-line error. The parse shows a progress
    bar on stderr unless ``quiet`` (default: quiet unless stderr is a terminal); ``cpu``
    parses the CPU tables too (a table without one is parsed again); ``scheduler``: the
    Dask cluster parsing them (None: ``jobs`` local processes).
    """
    from . import batch
    from .discover import find_traces, no_traces_message
    from .outputs import inside_output

    root = Path(root)
    if not root.exists():
        raise TraceVizError(f"{root}: no such file or folder")
    if root.is_file() and root.suffix == ".parquet":
        folders = [root.parent]
    elif root.is_dir() and inside_output(root) and (folders := table_folders(root)):
        pass  # traceviz's own output folder: its tables (its .json.gz files are exports)
    elif traces := find_traces(root):
        out = batch.output_root(root, outdir)
        if quiet is None:
            import sys

            quiet = not sys.stderr.isatty()
        outcomes = batch.run(root, out, jobs=jobs or min(2, os.cpu_count() or 1),
                             topology=topology, vpp=vpp, quiet=quiet, traces=traces, cpu=cpu,
                             scheduler=scheduler)
        _warn([w for o in outcomes if o.status == "parsed" for w in o.warnings])
        folders = table_folders(out)
    else:
        folders = table_folders(root)
        if not folders:
            raise TraceVizError(no_traces_message(root))
    if not folders:
        raise TraceVizError(f"{root}: no trace could be parsed into a table")
    if vpp is not None:
        for folder in folders:
            check_vpp(folder, vpp)
    return folders


def check_vpp(folder: Path, vpp: int) -> None:
    """A one-line error when the tables of ``folder`` were classified with another vpp."""
    for path in sorted(folder.glob("*.parquet")):
        if not is_activity_table(path):
            continue
        try:
            used = (file_metadata(path).get("classification") or {}).get("vpp")
        except (OSError, ValueError):
            continue
        if used is not None and used != vpp:
            raise TraceVizError(
                f"{path}: parsed with vpp {used}, not {vpp}; parse the traces again with "
                f"'traceviz batch TRACES --vpp {vpp}' (or leave --vpp out: it is found from "
                "the traces)")


def _warn(warnings: list[str]) -> None:
    """What the parses just made found (a cut trace, negative durations, events of a
    kind not read), one line each on stderr, whichever command asked for the tables."""
    import sys

    from ..errors import one_line

    for w in warnings:
        print(f"traceviz: warning: {one_line(w)}", file=sys.stderr)


def tables_folder(root: Path, **options) -> Path:
    """The one folder of parsed rank tables of ``root``'s one profiled iteration (see
    :func:`ensure_tables`), else an error naming the folders to choose from."""
    return only_folder(ensure_tables(root, **options), Path(root))


def load_table(path: Path, columns: tuple[str, ...] | None = None) -> pa.Table:
    """A parsed table (only ``columns``, those there are; all when None; none, its
    footer alone read, when empty), or a trace parsed now."""
    if path.suffix == ".parquet":
        if columns is None:
            return read_table(path)
        if not columns:
            return read_footer(path)
        try:
            present = set(parquet_columns(path))
        except (OSError, pa.ArrowInvalid):
            present = set(columns)  # read_table reports the unreadable file
        return read_table(path, columns=[c for c in columns if c in present])
    from .build import parse_trace

    with parse_trace(path) as parsed:
        _warn(parsed.warnings)
        return parsed.columns.table(columns)


def stated_rank(table: pa.Table, path: Path) -> int | None:
    """The table's rank (``distributedInfo``), else the file name's, else None."""
    from ..parse.header import rank_in_name

    rank = int(metadata(table).get("rank", -1))
    return rank if rank >= 0 else rank_in_name(path.name)


def file_rank(path: Path) -> int | None:
    """The rank a table states in its footer, else its file name's (None: neither, or
    the file cannot be read)."""
    from ..parse.header import rank_in_name

    try:
        stated = file_fact(path, "rank")
        rank = -1 if stated is None else int(stated)
    except (OSError, ValueError, TypeError, pa.ArrowInvalid):
        rank = -1
    return rank if rank >= 0 else rank_in_name(path.name)


def rank_of(table: pa.Table, path: Path, fallback: int) -> int:
    """The table's rank (:func:`stated_rank`), else ``fallback``."""
    rank = stated_rank(table, path)
    return rank if rank is not None else fallback


def missing_columns(path: Path, table: pa.Table, columns: tuple[str, ...],
                    optional: tuple[str, ...] = ()) -> str | None:
    """The one line saying which of ``columns`` (not named ``optional``) the table of
    ``path`` lacks (a table parsed by an older version), None where it has them."""
    missing = [c for c in columns if c not in table.column_names and c not in optional]
    return (f"{path}: not a traceviz activity table (no column {', '.join(missing)}); "
            "parse the trace again") if missing else None


def rank_tables(files: list[Path], columns: tuple[str, ...] | None, failed: list[str],
                optional: tuple[str, ...] = ()) -> Iterator[tuple[int, Path, pa.Table]]:
    """(rank, path, table) of each file that loads, one at a time; the one-line reason of
    each file that does not, or that lacks one of ``columns`` not named ``optional``
    (tables parsed by older versions), goes to ``failed``, and so do the traces the last
    batch into the tables' folders failed to parse. Files that are not one run are a
    one-line error naming them (never merged silently): two of one rank, two that state
    no rank (separate processes: nothing makes them ranks of one job), two that state
    different job sizes."""
    from .batch import failures_of_files

    failed += failures_of_files(files)  # traces that never became a table
    seen: dict[int, tuple[Path, bool]] = {}
    runs: dict[str, tuple[Path, Any]] = {}  # what the first file said: no rank, a size
    for k, path in enumerate(progress(files, "reading ranks")):
        if k % RANKS_PER_TRIM == RANKS_PER_TRIM - 1:
            release_free_memory()  # the tables let go: their heap back to the system
        try:
            table = slim(load_table(path, columns))  # a job's tables are held at once
        except TraceVizError as exc:
            failed.append(str(exc))
            continue
        lacking = missing_columns(path, table, columns or (), optional)
        if lacking is not None:
            failed.append(lacking)
            continue
        stated = stated_rank(table, path)
        _one_run(Path(metadata(table).get("source") or path), stated,
                 metadata(table).get("world_size"), runs)
        rank = stated if stated is not None else k
        if rank in seen:
            _both(rank, (path, stated is not None), seen[rank])
        seen[rank] = (path, stated is not None)
        yield rank, path, table


def _both(rank: int, one: tuple[Path, bool], other: tuple[Path, bool]) -> None:
    """The one-line error of two tables (path, whether it states its rank) that are
    both rank ``rank``."""
    unstated = [str(p) for p, stated in (one, other) if not stated]
    why = (f" ({' and '.join(unstated)} states no rank: numbered by its position in the "
           "folder)" if unstated else "")
    raise TraceVizError(f"{one[0]} and {other[0]} are both rank {rank}{why}; pass one "
                        "trace per rank (one job, one profiled iteration)")


def _one_run(path: Path, rank: int | None, world: Any,
             runs: dict[str, tuple[Path, Any]]) -> None:
    """A one-line error where ``path`` (a trace, or the table parsed from it) cannot be
    of the run the files before it are of (``runs`` holds the first that stated no rank
    and the first job size stated)."""
    if rank is None:
        if "unranked" in runs:
            raise TraceVizError(
                f"{runs['unranked'][0]} and {path} both state no rank (no distributedInfo, "
                "no rank in the name): traces of separate runs, not ranks of one job; "
                "analyse each on its own, or name them rank_N where they are one job's")
        runs["unranked"] = (path, None)
    if isinstance(world, int) and world > 0:
        first = runs.setdefault("world", (path, world))
        if first[1] != world:
            raise TraceVizError(
                f"{first[0]} is of a job of {first[1]} ranks and {path} of one of {world}: "
                "traces of separate runs; keep one run's traces in a folder")


def gpu_and_cpu(path: Path, rank: int | None) -> tuple[pa.Table, pa.Table | None]:
    """GPU activity table and CPU table of one rank of ``path`` (a trace, a parsed table
    with its ``.cpu.parquet`` sibling, or a folder of either); the lowest rank when
    ``rank`` is None."""
    from .build import parse_trace
    from .discover import describe

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
            gpu = read_table(f)
            sibling = f.with_name(f.name[:-len(".parquet")] + ".cpu.parquet")
            cpu = read_table(sibling) if sibling.exists() else None
        else:
            parsed = parse_trace(f, cpu=True)
            gpu, cpu = parsed.activities, parsed.cpu
        r = int(metadata(gpu).get("rank", -1))
        if rank is None or r == rank:
            if chosen is None or r < chosen[0]:
                chosen = (r, gpu, cpu)
            if rank is not None or known[f] >= 0:
                break
    if chosen is None:
        raise TraceVizError(f"{path}: no rank {rank} among its traces")
    return chosen[1], chosen[2]


def has_cpu_tables(folder: Path) -> bool:
    """Whether every rank table of ``folder`` has its CPU table next to it."""
    from .outputs import cpu_path

    tables = [p for p in Path(folder).glob("*.parquet") if is_activity_table(p)]
    return bool(tables) and all(Path(cpu_path(str(p))).exists() for p in tables)


def has_memory_tables(folder: Path) -> bool:
    """Whether a rank table of ``folder`` has an allocator table next to it (its trace
    has allocator events and was parsed with its CPU table)."""
    from .outputs import memory_path

    return any(Path(memory_path(str(p))).exists() for p in Path(folder).glob("*.parquet")
               if is_activity_table(p))


def slim(table: pa.Table) -> pa.Table:
    """``table`` (its buffers shared) with its metadata's process groups cut
    (:func:`~traceviz.table.schema.cut_groups`)."""
    meta = metadata(table)
    if "pg_config" not in meta and "pg_config" not in (meta.get("distributed") or {}):
        return table
    meta = cut_groups(meta)
    return table.replace_schema_metadata({
        **(table.schema.metadata or {}), METADATA_KEY: orjson.dumps(meta)})


def rank_files(folder: Path) -> list[tuple[int, Path, Path]]:
    """(rank, GPU activity table, CPU table) files of every rank table of ``folder``
    (:func:`numbered`: one run, one table per rank), none read."""
    return [(r, p, _cpu_table_of(p)) for r, p in numbered(input_files([folder]))]


def numbered(files: list[Path]) -> list[tuple[int, Path]]:
    """(rank, file) of the rank tables ``files``: the rank from the footer
    (:func:`file_rank`), else numbered as :func:`rank_tables` numbers it; a one-line
    error where they are not one run or two claim one rank. A file whose footer cannot
    be read and whose name states no rank is numbered -1, -2, ... (its loader says why
    it cannot be read). None is read."""
    out = []
    ranks: list[tuple[int, Path, bool]] = []
    runs: dict[str, tuple[Path, Any]] = {}
    unreadable = 0
    for k, p in enumerate(files):
        rank = file_rank(p)
        try:
            source, world = file_fact(p, "source"), file_fact(p, "world_size")
        except (OSError, pa.ArrowInvalid):  # its loader names it: not a rank to check
            if rank is None:  # numbered apart from every rank (-1, -2, ...)
                unreadable += 1
                out.append((-unreadable, p))
                continue
            source = world = None
        _one_run(Path(source or p), rank, world, runs)
        out.append((k if rank is None else rank, p))
        ranks.append((out[-1][0], p, rank is not None))
    _one_table_per_rank(ranks)
    return out


def _one_table_per_rank(ranks: list[tuple[int, Path, bool]]) -> None:
    """The one-line error where two of the (rank, table, whether it states its rank)
    ``ranks`` are one rank (:func:`_both`)."""
    seen: dict[int, tuple[Path, bool]] = {}
    for rank, path, stated in ranks:
        if rank in seen:
            _both(rank, (path, stated), seen[rank])
        seen[rank] = (path, stated)


def load_with_memory(path: Path, rank: int | None = None
                     ) -> Iterator[tuple[int, pa.Table, pa.Table, pa.Table | None]]:
    """(rank, GPU table, CPU table, allocator table or None) of a table with its
    siblings, or of every rank of a trace or job (its traces parsed with their CPU and
    allocator tables where needed, kept with its tables), one rank at a time; ``rank``:
    only that rank."""
    from .outputs import memory_path

    path = Path(path)
    files = ([path] if path.suffix == ".parquet"
             else input_files([tables_folder(path, cpu=True)]))
    for k, p in enumerate(files):
        gpu = read_table(p)
        r = rank_of(gpu, p, k)
        if rank is not None and r != rank:
            continue
        sibling = Path(memory_path(str(p)))
        yield (r, gpu, read_table(_cpu_table_of(p)),
               read_table(sibling) if sibling.exists() else None)


def _cpu_table_of(table: Path) -> Path:
    """The CPU table next to ``table``; a one-line error when there is none."""
    from .outputs import cpu_path

    sibling = Path(cpu_path(str(table)))
    if not sibling.exists():
        raise TraceVizError(f"{table}: no CPU table next to it; parse the job again with "
                            "CPU tables ('traceviz ops' or 'critical-path' on its traces "
                            "does)")
    return sibling


def one_rank_with_cpu(path: Path, rank: int | None) -> tuple[pa.Table, pa.Table] | None:
    """(GPU table, CPU table) of ``path`` when it names one rank (a trace, a table, a
    folder of one rank, or ``rank`` of a job); None for a job of several ranks (then
    ``rank_files(tables_folder(path, cpu=True))``). One-line error when the table
    has no CPU table."""
    if rank is None and not path.is_file() and len(input_files([path])) > 1:
        return None
    gpu, cpu = gpu_and_cpu(path, rank)
    if cpu is None:
        raise UsageError(f"{path}: no CPU table next to this table; pass the trace, or "
                         "parse it with --cpu")
    return gpu, cpu
