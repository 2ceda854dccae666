"""Find the rank traces of a job under a folder, in every layout tools write them.

Known layouts (all found by one rule, a recursive walk plus a header check):

* Megatron-TraceViz patch: ``iteration_N/rank_XXXX_iter_N.pt.trace.json`` with
  ``unique_parallel_groups_*.txt`` in a parent folder;
* Megatron-LM main: ``torch_profile/rank-N.json.gz``;
* TorchTitan: ``iteration_N/rankN_trace.json``;
* ``torch.profiler.tensorboard_trace_handler``: ``<host>_<pid>.<ns>.pt.trace.json[.gz]``;
* anything else ending in ``.json``, ``.json.gz`` or ``.json.zst`` whose start is a Kineto
  trace (a ``traceEvents`` key, or a bare array of events).

The rank comes from ``distributedInfo.rank``, else from the file name (``rank_0003``,
``rank-3``, ``rank3``, ``worker3``), else it is unknown (-1). The iteration comes from an
``iteration_N`` folder or ``iter_N`` in the name.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..parse.header import is_rank, rank_in_name, read_header
from ..table.inputs import note_input
from .outputs import CACHE, OUT, job_files

TRACE_SUFFIXES = (".json", ".json.gz", ".json.zst", ".json.zstd")
_ITER_DIR = re.compile(r"^iteration_(\d+)$")
_ITER_NAME = re.compile(r"iter_(\d+)")


@dataclass(frozen=True)
class TraceFile:
    """One rank's trace found under a folder."""

    path: Path
    rank: int
    rank_source: str  # "distributedInfo", "file name" or "unknown"
    iteration: int | None
    size: int


def iteration_of(path: Path) -> int | None:
    for part in reversed(path.parts[:-1]):
        m = _ITER_DIR.match(part)
        if m:
            return int(m.group(1))
    m = _ITER_NAME.search(path.name)
    return int(m.group(1)) if m else None


def is_trace_name(name: str) -> bool:
    return name.endswith(TRACE_SUFFIXES) and not name.endswith((".info.json",))


_RANK_PLACE = re.compile(r"^(iteration_\d+|torch_profile)$")


def looks_like_rank_trace(path: Path) -> bool:
    """Whether ``path`` is a rank's trace by its name or place, whatever its content:
    ``rank*`` / ``worker*`` names, ``*.pt.trace.json*`` (tensorboard_trace_handler),
    files in ``iteration_N`` (Megatron-TraceViz, TorchTitan) or ``torch_profile``
    (Megatron-LM) folders. Such a file that cannot be read is a failed rank, never
    skipped."""
    return (rank_in_name(path.name) is not None or ".pt.trace.json" in path.name
            or bool(_RANK_PLACE.match(path.parent.name)))


def describe(path: Path) -> TraceFile | None:
    """A :class:`TraceFile` if ``path`` starts like a Kineto trace or looks like a rank's
    trace (:func:`looks_like_rank_trace`; its parse then says what is wrong), else
    None."""
    try:
        header = read_header(path, limit=8 << 20)
    except Exception:  # unreadable: let the parse report it with its reason
        header = {}
    if header is None and not _starts_with_event_array(path) \
            and not looks_like_rank_trace(path):
        return None
    dist = (header or {}).get("distributedInfo") or {}
    rank = dist.get("rank") if isinstance(dist, dict) else None
    source = "distributedInfo"
    if not is_rank(rank):
        rank, source = rank_in_name(path.name), "file name"
        if rank is None:
            rank, source = -1, "unknown"
    return TraceFile(path=path, rank=rank, rank_source=source, iteration=iteration_of(path),
                     size=path.stat().st_size)


def _starts_with_event_array(path: Path) -> bool:
    from ..parse.source import ByteSource

    try:
        source = ByteSource(path)
    except Exception:
        return False
    try:
        buf = bytearray(256)
        got = source.readinto(memoryview(buf))
        head = bytes(buf[:got]).lstrip()
        return head.startswith(b"[") and head[1:].lstrip().startswith(b"{")
    except Exception:
        return False
    finally:
        source.close()


def find_traces(root: str | os.PathLike) -> list[TraceFile]:
    """Every rank trace under ``root`` (a folder, or one file), sorted by path; traceviz's
    own output folders (``traceviz-out``: exports, reports; ``.traceviz-cache``: results
    kept beside tables) are not looked into."""
    root = Path(root)
    if root.is_file():
        candidates = [root]
    else:
        candidates = [p for p in job_files(root, skip=(OUT, CACHE)) if is_trace_name(p.name)
                      and p.is_file()]
    found = [describe(p) for p in candidates]
    for f in found:
        if f is not None:
            note_input(f.path)  # read now, or through its cached table: never an output
    return [f for f in found if f is not None]


NSIGHT_SUFFIXES = (".nsys-rep", ".qdrep", ".sqlite", ".ncu-rep")


def no_traces_message(root: str | os.PathLike) -> str:
    """What to tell a user whose ``root`` holds no Kineto traces: what is there instead
    (Nsight reports, other JSON) and what to pass."""
    root = Path(root)
    files = [root] if root.is_file() else (job_files(root) if root.is_dir() else [])
    nsight = [p for p in files if p.name.endswith(NSIGHT_SUFFIXES)]
    jsons = [p for p in files if is_trace_name(p.name)]
    if nsight:
        return (f"{root}: {len(nsight)} Nsight Systems file(s) ({nsight[0].name}, ...) and no "
                "PyTorch profiler traces: traceviz reads Kineto traces; record with "
                "torch.profiler and export_chrome_trace (Megatron-LM: --profile "
                "--use-pytorch-profiler, see patch/README.md)")
    if jsons:
        return (f"{root}: {len(jsons)} JSON file(s) but none is a Kineto trace (no "
                "'traceEvents' with GPU or CPU events in its header); pass the folder the "
                "profiler wrote (e.g. tensorboard_dir or iteration_N)")
    return (f"{root}: no Kineto traces found (looked for *.json, *.json.gz, *.json.zst); "
            "pass the folder the profiler wrote, e.g. tensorboard_dir/ or iteration_N/, "
            "or try 'traceviz demo' for an example job")
