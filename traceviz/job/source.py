"""What a command line or a notebook names, resolved once: the paths, the job's layout
file, model chunks per stage, which profiled iteration and where traces are parsed to.
A :class:`~traceviz.job.job.Job` holds one and every product reads it from there; no
layer below looks for the layout file again."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceVizError
from ..ingest.rank_pieces import Workers
from ..ingest.topology import find_topology_file, is_derived


@dataclass(frozen=True)
class Source:
    """One job's inputs as named.

    ``paths``: what was named, each existing (one path for a job; several traces or
    tables only where a command takes several, as ``breakdown`` does); ``topology``: the
    layout file given, else the ``unique_parallel_groups_*.txt`` stated beside the traces
    (None: the layout is derived from the traces' pg_config, or unknown); ``vpp``: model
    chunks per stage (None: found from the traces); ``iteration``: the profiled iteration
    looked at (None: see ``first_iteration``); ``tables``: where traces without a table
    are parsed to (None: the batch output folder); ``jobs``: worker processes parsing
    the traces and making each rank's share of the diagnosis (0: as many as cores);
    ``scheduler``: a Dask cluster doing that work instead (``tcp://HOST:PORT`` or
    ``"local"``; None: local processes); ``quiet``: no progress bar while parsing (None: on a terminal only);
    ``first_iteration``: a folder of several profiled iterations means its first (the
    notebook's Job) rather than an error naming them (a command's)."""

    paths: tuple[Path, ...]
    topology: str | None = None
    vpp: int | None = None
    iteration: int | None = None
    tables: str | os.PathLike | None = None
    jobs: int = 1
    quiet: bool | None = None
    first_iteration: bool = True
    scheduler: str | None = None

    @classmethod
    def of(cls, paths: str | os.PathLike | list[str | os.PathLike], *,
           topology: str | os.PathLike | None = None, vpp: int | None = None,
           iteration: int | None = None, tables: str | os.PathLike | None = None,
           jobs: int = 1, quiet: bool | None = None, first_iteration: bool = True,
           scheduler: str | None = None) -> Source:
        """The source of ``paths`` (one or several), each checked to exist, its layout
        file resolved (given, else the one stated beside one folder of traces)."""
        named = [Path(p) for p in (paths if isinstance(paths, (list, tuple)) else [paths])]
        if not named:
            raise TraceVizError("no trace, table or folder named")
        for p in named:
            if not p.exists():
                raise TraceVizError(f"{p}: no such file or folder")
        found = (find_topology_file(named[0]) if len(named) == 1 and named[0].is_dir()
                 else None)
        layout = (os.fspath(topology) if topology else
                  os.fspath(found) if found is not None and not is_derived(found) else None)
        return cls(tuple(named), layout, vpp, iteration, tables, jobs, quiet,
                   first_iteration, scheduler)

    @property
    def workers(self) -> Workers:
        """Where the per-rank work runs (:class:`~traceviz.ingest.rank_pieces.Workers`)."""
        return Workers(self.jobs, self.scheduler)

    @property
    def path(self) -> Path:
        """The job's path (the first named)."""
        return self.paths[0]

    @property
    def one_job_folder(self) -> bool:
        """Whether one folder was named (a job: its tables are parsed once and kept)."""
        return len(self.paths) == 1 and self.path.is_dir()
