"""One job, resolved once: its tables (parsed first where needed), its layout, and each
job-wide product computed once per session as the typed result of
:mod:`traceviz.analysis` (:mod:`.analyses`; the diagnosis, the op model, the report and
the step windows are also kept on disk beside the tables, :mod:`.job_cache`). A command
that needs several products (``traceviz html``) asks one session for them: the
diagnosis is computed once, and every product after it reuses it."""
from __future__ import annotations

import os
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from ..analysis.advice import JobDiagnosis
from ..analysis.breakdown import Breakdown
from ..analysis.memory import JobMemory
from ..analysis.ops_summary import OpModel
from ..analysis.pipeline import PipelineViews
from ..analysis.report_types import Report
from ..errors import TraceVizError
from ..topology.layout import Layout
from . import analyses
from .job_report import make_report
from .tables import tables_folder
from .topology import job_layout

T = TypeVar("T")


def pipeline_places(layout: Layout | None) -> list[dict]:
    """Per rank of a pipeline group of ``layout``: rank, pp_group, stage (empty without
    a layout)."""
    if layout is None:
        return []
    return [{"rank": r, "pp_group": g, "stage": p} for g, grp in
            enumerate(layout.groups()["PIPELINE_MODEL_PARALLEL_GROUP"])
            for p, r in enumerate(grp)]


class Session:
    """The job under ``root`` (traces, tables, or a folder of either) with its
    ``topology`` (None: found); every product memoised by its arguments."""

    def __init__(self, root: str | os.PathLike,
                 topology: str | os.PathLike | None = None) -> None:
        self.root = Path(root)
        if not self.root.exists():
            raise TraceVizError(f"{self.root}: no such file or folder")
        self.topology = os.fspath(topology) if topology else None
        self._kept: dict[tuple, Any] = {}

    def _keep(self, key: tuple, make: Callable[[], T]) -> T:
        if key not in self._kept:
            self._kept[key] = make()
        return self._kept[key]

    @cached_property
    def folder(self) -> Path:
        """The folder of the job's rank tables (parsed from its traces first)."""
        return tables_folder(self.root)

    @cached_property
    def layout(self) -> tuple[Layout | None, str | None]:
        """(the job's parallel layout, None) or (None, why it is unknown)."""
        return job_layout(self.root, self.folder, self.topology)

    def pipeline_places(self) -> list[dict]:
        """:func:`pipeline_places` of the job's layout."""
        return pipeline_places(self.layout[0])

    def diagnosis(self, advice: bool = True, num_layers: int | None = None,
                  link_gbps: tuple[float, float] | None = None) -> JobDiagnosis:
        """Who waits for whom and the advice (``traceviz diagnose``)."""
        return self._keep(("diagnosis", advice, num_layers, link_gbps),
                          lambda: analyses.job_diagnosis(self.folder, self.topology, advice,
                                                         num_layers, link_gbps))

    def report(self, overrides: dict | None = None, config_file: str | None = None,
               clock_sync: bool = True) -> Report:
        """The collectives and throughput report (``traceviz report``), with the
        diagnosis and its advice (computed there, or reused where kept)."""
        return self._keep(("report", tuple(sorted((overrides or {}).items())),
                           config_file, clock_sync),
                          lambda: make_report(self.folder, config_file=config_file,
                                              overrides=overrides, topology=self.topology,
                                              clock_sync=clock_sync))

    def breakdown(self) -> tuple[Breakdown, list[str]]:
        """The breakdown of every rank (``traceviz breakdown``) and the ranks left out."""
        def make() -> tuple[Breakdown, list[str]]:
            failed: list[str] = []
            return analyses.breakdown([self.folder], failed=failed), failed
        return self._keep(("breakdown",), make)

    def pipeline(self) -> tuple[PipelineViews, list[str]]:
        """The pipeline view of the first profiled iteration (``traceviz pipeline``) and
        the ranks left out; TraceVizError where the job has none."""
        def make() -> tuple[PipelineViews, list[str]]:
            failed: list[str] = []
            return analyses.pipeline(self.folder, topology=self.topology,
                                     failed=failed), failed
        return self._keep(("pipeline",), make)

    def step_windows(self) -> tuple[pa.Table, bool]:
        """Every rank's micro-batch steps and whether they are on synced clocks."""
        return self._keep(("steps",), lambda: analyses.step_windows(
            self.root, self.folder, self.topology))

    def ops(self) -> OpModel:
        """The op model (``traceviz ops``; the ranks' CPU tables needed)."""
        return self._keep(("ops",), lambda: analyses.ops(self.folder))

    def memory(self) -> tuple[JobMemory, list[str]]:
        """Where GPU memory goes (``traceviz memory``) and the ranks without allocator
        events."""
        return self._keep(("memory",), lambda: analyses.memory(self.folder))
