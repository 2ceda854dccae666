"""Where outputs go by default: ``./traceviz-out/<job>/``, one folder per job whatever
command runs first, outside the trace folders (which are often read-only shared
storage). ``<job>`` is the name of the job's folder, or a trace's name without its
extension; a profiler's ``iteration_N`` / ``torch_profile`` folder writes to the same
sub-folder of its parent's job that a batch of the parent does; a path already inside
``traceviz-out/<job>/`` belongs to that job. Every command's ``-o``
overrides its default."""
from __future__ import annotations

import os
import re
from pathlib import Path

OUT = "traceviz-out"
# the analyses' results kept beside a folder of rank tables (:mod:`.job_cache`): never
# tables or traces of the job
CACHE = ".traceviz-cache"
SUFFIXES = (".json.gz", ".json.zst", ".json.zstd", ".json", ".gz", ".zst", ".zstd")
_PROFILER_FOLDER = re.compile(r"^(iteration_\d+|torch_profile|profile_trace|traces?)$")


def job_files(root: Path, suffix: str = "", skip: tuple[str, ...] = (CACHE,)) -> list[Path]:
    """The files under the folder ``root`` whose names end with ``suffix``, sorted, the
    folders named in ``skip`` (default the kept-results folders, :data:`CACHE`) not
    looked into: other runs make and remove entries there meanwhile, and a walk into
    them fails on a folder gone. A folder that cannot be read, or vanishes while the
    walk goes on, is passed over; links to folders are not followed."""
    out = []
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip]
        out += [Path(top, f) for f in files if f.endswith(suffix)]
    return sorted(out)


def inside_output(path: Path) -> bool:
    """Whether ``path`` is in a job's folder under ``traceviz-out`` (traceviz's own
    outputs)."""
    return _inside(Path(path).absolute()) is not None


def _inside(path: Path) -> int | None:
    """Index of the ``traceviz-out`` part of ``path`` followed by a job, else None."""
    parts = path.parts
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == OUT:
            return i
    return None


def trace_stem(name: str) -> str:
    """A trace file's name without its extension (``rank3.pt.trace.json.gz`` ->
    ``rank3.pt.trace``): the name of its table and, alone, of its job."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def job_name(path: str | os.PathLike) -> str:
    """The name of the job ``path`` (a trace, a folder of traces or of tables) is of."""
    p = Path(path).resolve()
    i = _inside(p)
    if i is not None:
        return p.parts[i + 1]
    if p.is_file() or (not p.exists() and p.suffix):
        return trace_stem(p.name)
    if _PROFILER_FOLDER.match(p.name) and p.parent.name:
        return f"{p.parent.name}-{p.name}"
    return p.name or "job"


def job_dir(path: str | os.PathLike) -> Path:
    """``./traceviz-out/<job>`` of ``path`` (the existing one when ``path`` is inside
    one); a profiler's ``iteration_N`` / ``torch_profile`` folder gets the sub-folder of
    its parent's job that ``traceviz batch`` of the parent writes its tables to."""
    p = Path(path).resolve()
    i = _inside(p)
    if i is not None:
        return Path(*p.parts[:i + 2])
    if _PROFILER_FOLDER.match(p.name) and p.parent.name and p.is_dir():
        return job_dir(p.parent) / p.name
    return Path(OUT) / job_name(path)


def default_path(path: str | os.PathLike, *names: str) -> Path:
    """``job_dir(path) / names...``: where a command writes by default."""
    return job_dir(path).joinpath(*names)


def command_output(command: str, *inputs: str | os.PathLike) -> Path:
    """The default output (folder or file) of ``command`` run on ``inputs``: a folder
    named for the command in the job's folder; ``html``'s page ``report.html`` there;
    ``diff``'s ``traceviz-out/<a>_vs_<b>``."""
    if command == "diff":
        return Path(OUT) / f"{job_name(inputs[0])}_vs_{job_name(inputs[1])}"
    if command == "html":
        return default_path(inputs[0], "report.html")
    return default_path(inputs[0], command)


def cpu_path(dest: str) -> str:
    """Where the CPU table of a table written to ``dest`` goes: ``.cpu.parquet``."""
    return (dest[:-len(".parquet")] if dest.endswith(".parquet") else dest) + ".cpu.parquet"


def memory_path(dest: str) -> str:
    """Where the allocator table of a table written to ``dest`` goes (with its CPU
    table, when the trace has allocator events): ``.memory.parquet``."""
    return (dest[:-len(".parquet")] if dest.endswith(".parquet") else dest) + ".memory.parquet"
