"""``traceviz report``: the collectives and throughput report of one profiled iteration's
ranks (:meth:`traceviz.job.Job.report`) rendered as text and JSON, with every rank's
numbers as a table."""
from __future__ import annotations

import datetime as dt
import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..analysis.report import ranks_table, report_json
from ..analysis.report_types import Report
from ..errors import TraceVizError
from ..job import Job
from ..ingest.outputs import default_path
from ..render.report_text import report_text
from ..table.result import Result


@dataclass(frozen=True)
class ReportFiles:
    """The report (its typed record) and where it goes: the text, its JSON twin and the
    ranks' table (a path without suffix: .csv and .parquet)."""

    report: Report
    text: Path
    json: Path
    ranks: Path


def default_name(report: Report, when: dt.datetime) -> str:
    """``<YYYYmmdd-HHMMSS>_<model>_dp<X>_tp<Y>_pp<Z>_gpu<N>.txt``."""
    c = report["configuration"]
    p = c["parallelism"] or {}
    model = (c["model"] or "model").replace("/", "-").replace(" ", "")
    return (f"{when:%Y%m%d-%H%M%S}_{model}_dp{p.get('dp', 'X')}_tp{p.get('tp', 'X')}"
            f"_pp{p.get('pp', 'X')}_gpu{c['gpus']}.txt")


def run(root: Job | str | os.PathLike, *, config_file: str | None = None,
        output: str | None = None, topology: str | None = None, clock_sync: bool = True,
        jobs: int = 1, scheduler: str | None = None, **facts) -> Result:
    """The report of ``root`` as text (``output``, default
    ``traceviz-out/<job>/report/<default_name>``), its JSON twin next to it (``output`` ending in
    .json names the JSON; the text gets .txt) and every rank's overlap and network numbers
    as ``<text's stem>_ranks`` (.csv, .parquet); ``value``: :class:`ReportFiles`;
    ``facts``: what :meth:`Job.report` takes about the run (batch, model,
    peaks); ``jobs`` / ``scheduler``: where the per-rank work runs."""
    job = Job.of(root, topology, jobs=jobs, scheduler=scheduler)
    if job.is_op_timeline:
        raise TraceVizError(f"{job.path}: an op timeline (per-op timers): the report's "
                            "collectives and throughput need profiler traces; "
                            "`traceviz diagnose` and `traceviz html` read it")
    report = job.report(config_file=config_file, clock_sync=clock_sync, **facts)
    text = Path(output) if output else default_path(job.path, "report", default_name(
        report, dt.datetime.now()))
    twin = text.with_suffix(".json")
    if text == twin:  # -o x.json names the JSON report; the text goes next to it
        text = text.with_suffix(".txt")
    ranks = text.with_name(f"{text.stem}_ranks")
    return Result(texts={str(twin): json.dumps(report_json(report), indent=1,
                                               allow_nan=False),
                         str(text): report_text(report, ranks.name)},
                  tables={str(ranks): ranks_table(report)},
                  value=ReportFiles(report, text, twin, ranks),
                  failed=report["failed"])
