"""``traceviz diagnose``: who waits for whom in one profiled iteration's ranks (traces,
or ``traceviz batch`` tables): every communication kernel split into wait and transfer,
each rank's time ledger, the stragglers (:mod:`traceviz.analysis.diagnose`).

Outputs: ``comm_calls``, ``ledger``, ``ledger_waits``, ``ledger_totals``,
``stragglers``, ``peer_speed``, ``wait_chain``, ``links`` (every group's bus
bandwidth against its peers), ``advice`` (.csv and .parquet) and
``diagnosis.txt``.

An op timeline (per-op timers of every rank and step, :mod:`traceviz.ingest.op_timeline`)
is diagnosed over its steps instead (:mod:`traceviz.analysis.timeline.diagnosis`):
``op_steps``, ``op_ledger``, ``op_stragglers``, ``op_attribution``, ``op_worker_steps``,
``advice``, ``diagnosis.txt``, ``op_slowdown.png`` and ``op_heatmap.png``."""
from __future__ import annotations

import os

from ..job import Job
from ..render.diagnosis_text import advice_lines, diagnosis_text, ledger_lines
from ..render.timeline_figures import heatmap_figure, slowdown_figure
from ..render.timeline_text import timeline_lines, timeline_text
from ..table.result import Result


def run(root: Job | str | os.PathLike, topology: str | os.PathLike | None = None,
        advice: bool = True, num_layers: int | None = None,
        link_gbps: tuple[float, float] | None = None, jobs: int = 1,
        scheduler: str | None = None) -> Result:
    """The diagnosis of ``root`` as tables and text (see the module doc), ending with the
    advice unless ``advice`` is False; ``value``: the typed
    :class:`~traceviz.analysis.advice.JobDiagnosis` (``.diagnosis``, ``.advice``, its
    ``.advice_table``); ``jobs`` / ``scheduler``: where the per-rank work runs
    (:class:`~traceviz.job.Job`'s)."""
    job = Job.of(root, topology, jobs=jobs, scheduler=scheduler)
    if job.is_op_timeline:
        tl = job.timeline_diagnosis(num_layers=num_layers)
        return Result(tables=tl.tables(), texts={"diagnosis.txt": timeline_text(tl)},
                      figures={"op_slowdown.png": slowdown_figure(tl),
                               "op_heatmap.png": heatmap_figure(tl)},
                      lines=timeline_lines(tl), notes=list(tl.notes), value=tl)
    result = job.diagnose(advice=advice, num_layers=num_layers,
                                             link_gbps=link_gbps)
    diag, adv = result.diagnosis, result.advice_table
    typed = result.advice if adv is not None else None
    lines = ledger_lines(diag.summary()) + (advice_lines(typed) if typed is not None else [])
    return Result(tables=result.tables(), texts={"diagnosis.txt": diagnosis_text(diag, typed)},
                  lines=lines, notes=list(diag.notes),
                  value=result,
                  failed=list(result.failed))
