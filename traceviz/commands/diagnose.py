"""``traceviz diagnose``: who waits for whom in one profiled iteration's ranks (traces,
or ``traceviz batch`` tables): every communication kernel split into wait and transfer,
each rank's time ledger, the stragglers (:mod:`traceviz.analysis.diagnose`).

Outputs: ``comm_calls``, ``ledger``, ``ledger_waits``, ``ledger_totals``,
``stragglers``, ``peer_speed``, ``wait_chain``, ``advice`` (.csv and .parquet) and
``diagnosis.txt``."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from ..analysis.activities import COLUMNS as ACTIVITY_COLUMNS
from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.critical_path.paths import job_path, what_if_context
from ..analysis.diagnose.advice import advise
from ..analysis.diagnose.diagnosis import Diagnosis, diagnose
from ..analysis.diagnose.diagnosis import diagnosis_of as diagnose_comm
from ..analysis.diagnose.waits import META_COLUMNS
from ..errors import TraceVizError
from ..ingest.tables import (
    has_cpu_tables,
    input_files,
    load_with_cpu,
    one_folder,
    rank_tables,
    tables_folder,
)
from ..ingest.topology import job_layout
from ..render.diagnosis_text import advice_lines, diagnosis_text, ledger_lines
from .result import Result

COLUMNS = tuple(dict.fromkeys(ACTIVITY_COLUMNS + CALL_COLUMNS + META_COLUMNS))


def job_tables(root: Path, columns: tuple[str, ...], failed: list[str]
               ) -> dict[int, pa.Table]:
    """rank -> table of one profiled iteration's ranks (a job's traces are parsed once
    into its tables; one table is read alone); ``failed`` gets the ranks left out."""
    if not root.exists():
        raise TraceVizError(f"{root}: no such file or folder")
    if root.is_file() and root.suffix == ".parquet":
        files = [root]
    else:
        files = one_folder(input_files([tables_folder(root)]), root)
    tables = {rank: t for rank, _, t in rank_tables(files, columns, failed)}
    if not tables:
        raise TraceVizError(f"{root}: no rank could be read: " + "; ".join(failed))
    return tables


def diagnosis_of(root: str | os.PathLike, topology: str | os.PathLike | None = None,
                 advice: bool = False) -> tuple[Diagnosis, list[str], pa.Table | None]:
    """The diagnosis of ``root``, the ranks it leaves out (one line each) and, with
    ``advice``, the advice (its savings re-timed on the job's graph, which needs the
    ranks' CPU tables: parsed with the traces; tables without them give no savings)."""
    root = Path(root)
    failed: list[str] = []
    folder = root if root.is_dir() else root.parent
    if advice and root.is_dir():
        cpu_folder = tables_folder(root, cpu=True)
        if has_cpu_tables(cpu_folder):
            notes: list[str] = []
            jp = job_path(load_with_cpu(cpu_folder), notes, where=str(cpu_folder))
            diag = diagnose_comm(jp.jc, _pipelines(root, folder, topology, jp.jc.acts))
            ctx = what_if_context(jp.jc, jp.jg, jp.measured, diag)
            diag.notes += [n for n in notes if n not in diag.notes]
            adv = advise(diag, ctx)
            # the stragglers' cost: the re-timed saving of fixing each
            diag.speed = diag.speed.with_costs({
                int(r["what_if"].split(":")[1].split("=")[0]): r["saving_ns"]
                for r in adv.to_pylist()
                if r["what_if"].startswith("straggler:") and r["saving_ns"] is not None})
            return diag, failed, adv
    tables = job_tables(root, COLUMNS, failed)
    diag = diagnose(tables, _pipelines(root, folder, topology, tables))
    why = ("one rank: nothing to re-time across ranks" if len(tables) < 2 else
           "the ranks' CPU tables are not parsed (run 'traceviz batch JOB --cpu', or give "
           "diagnose the traces)")
    return diag, failed, advise(diag, None, why) if advice else None


def _pipelines(root: Path, folder: Path, topology, ranks) -> list[list[int]] | None:
    """The PP groups of the job's layout (None: no layout, or not this job's size)."""
    if len(ranks) < 2:
        return None
    layout, _ = job_layout(root, folder, topology)
    top = max(ranks) if isinstance(ranks, dict) else max(a.rank for a in ranks)
    if layout is not None and layout.world >= top + 1:
        return layout.groups().get("PIPELINE_MODEL_PARALLEL_GROUP")
    return None


def run(root: str | os.PathLike, topology: str | os.PathLike | None = None,
        advice: bool = True) -> Result:
    """The diagnosis of ``root`` as tables and text (see the module doc), ending with the
    advice unless ``advice`` is False; ``data["diagnosis"]`` is the
    :class:`~traceviz.analysis.diagnose.diagnosis.Diagnosis`, ``data["advice"]`` the
    advice table (None without)."""
    diag, failed, adv = diagnosis_of(root, topology, advice)
    tables = {"comm_calls": diag.comm_calls, "ledger": diag.ledger,
              "ledger_waits": diag.ledger_waits, "ledger_totals": diag.totals,
              "stragglers": diag.stragglers, "peer_speed": diag.speed.table,
              "wait_chain": diag.chain}
    if adv is not None:
        tables["advice"] = adv
    lines = ledger_lines(diag.summary()) + (advice_lines(adv) if adv is not None else [])
    return Result(tables=tables, texts={"diagnosis.txt": diagnosis_text(diag, adv)},
                  lines=lines, notes=list(diag.notes),
                  data={"diagnosis": diag, "advice": adv}, failed=failed)
