"""``traceviz diagnose``: who waits for whom in one profiled iteration's ranks (traces,
or ``traceviz batch`` tables): every communication kernel split into wait and transfer,
each rank's time ledger, the stragglers (:mod:`traceviz.analysis.diagnose`).

Outputs: ``comm_calls``, ``ledger``, ``ledger_waits``, ``ledger_totals``,
``stragglers``, ``peer_speed``, ``wait_chain`` (.csv and .parquet) and
``diagnosis.txt``."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from ..analysis.activities import COLUMNS as ACTIVITY_COLUMNS
from ..analysis.calls import COLUMNS as CALL_COLUMNS
from ..analysis.diagnose.diagnosis import Diagnosis, diagnose
from ..analysis.diagnose.waits import META_COLUMNS
from ..errors import TraceVizError
from ..ingest.tables import input_files, one_folder, rank_tables, tables_folder
from ..ingest.topology import job_layout
from ..render.diagnosis_text import diagnosis_text, ledger_lines
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


def diagnosis_of(root: str | os.PathLike, topology: str | os.PathLike | None = None
                 ) -> tuple[Diagnosis, list[str]]:
    """The diagnosis of ``root`` and the ranks it leaves out (one line each)."""
    root = Path(root)
    failed: list[str] = []
    tables = job_tables(root, COLUMNS, failed)
    folder = root if root.is_dir() else root.parent
    layout, _ = job_layout(root, folder, topology) if len(tables) > 1 else (None, None)
    pipelines = None
    if layout is not None and layout.world >= max(tables) + 1:
        pipelines = layout.groups().get("PIPELINE_MODEL_PARALLEL_GROUP")
    return diagnose(tables, pipelines), failed


def run(root: str | os.PathLike, topology: str | os.PathLike | None = None) -> Result:
    """The diagnosis of ``root`` as tables and text (see the module doc);
    ``data["diagnosis"]`` is the :class:`~traceviz.analysis.diagnose.diagnosis.Diagnosis`."""
    diag, failed = diagnosis_of(root, topology)
    return Result(
        tables={"comm_calls": diag.comm_calls, "ledger": diag.ledger,
                "ledger_waits": diag.ledger_waits, "ledger_totals": diag.totals,
                "stragglers": diag.stragglers, "peer_speed": diag.speed.table,
                "wait_chain": diag.chain},
        texts={"diagnosis.txt": diagnosis_text(diag)}, lines=ledger_lines(diag.summary()),
        notes=list(diag.notes), data={"diagnosis": diag}, failed=failed)
