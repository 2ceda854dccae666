"""Results of a job's analyses kept beside its tables, so that the commands that need
them reuse what the first computed: the diagnosis (``diagnose``, reused by ``report``,
``html``, ``pipeline``, ``critical-path`` and ``aggregate``), the op model (``ops``,
reused by ``report`` and ``html``), the report, the breakdown, the step windows and the
process groups the tables' footers state (``layout``).

Each result is a folder ``.traceviz-cache/<name>`` inside the folder of rank tables:
its tables (parquet) and ``entry.json`` (its other fields and the **key**). The key
names what the result was computed from: every table of the folder (name, size,
modification time), the topology file (path, size, time), the options and traceviz's
version. An entry whose key differs, or that cannot be read, is ignored and replaced.
It is written to a temporary folder renamed into place, and not at all where the folder
is read-only (nothing is lost: the next command recomputes).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._version import __version__
from ..analysis.advice import ADVICE_SCHEMA
from ..analysis.diagnose.diagnosis import Diagnosis
from ..analysis.diagnose.stages import StageBalance
from ..analysis.diagnose.stragglers import PeerSpeed
from ..analysis.ops_summary import OpModel
from .outputs import CACHE

FOLDER = CACHE
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, pa.ArrowException)


def key_of(folder: Path, topology: str | os.PathLike | None, options: dict) -> dict:
    """What a result of ``folder`` is computed from (see the module doc)."""
    files = []
    for p in sorted(folder.glob("*.parquet")):
        st = p.stat()
        files.append([p.name, st.st_size, st.st_mtime_ns])
    topo = None
    if topology is not None:
        try:
            st = Path(topology).stat()
            topo = [os.fspath(Path(topology).resolve()), st.st_size, st.st_mtime_ns]
        except OSError:
            topo = [os.fspath(topology), None, None]
    return {"version": __version__, "files": files, "topology": topo,
            "options": {k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in sorted(options.items())}}


def load(folder: Path, name: str, key: dict) -> tuple[dict[str, pa.Table], dict] | None:
    """The tables and fields of the entry ``name`` of ``folder`` for ``key``; None
    (none, another key, unreadable)."""
    where = folder / FOLDER / name
    try:
        entry = json.loads((where / "entry.json").read_text())
        if entry.get("key") != key:
            return None
        return ({t: pq.read_table(where / f"{t}.parquet") for t in entry["tables"]},
                entry["fields"])
    except _UNREADABLE:
        return None


def store(folder: Path, name: str, key: dict, tables: dict[str, pa.Table | None],
          fields: dict) -> None:
    """Keep ``tables`` (None ones left out) and ``fields`` (JSON-able) as the entry
    ``name`` of ``folder`` for ``key``; nothing where the folder cannot be written."""
    base = folder / FOLDER
    try:
        base.mkdir(exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=base))
    except OSError:
        return
    try:
        kept = {t: table for t, table in tables.items() if table is not None}
        for t, table in kept.items():
            pq.write_table(table, tmp / f"{t}.parquet")
        (tmp / "entry.json").write_text(json.dumps(
            {"key": key, "tables": sorted(kept), "fields": fields}))
        final, old = base / name, base / f"{name}.old-{os.getpid()}"
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except OSError:
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_diagnosis(folder: Path, key: dict, advice: bool
                   ) -> tuple[Diagnosis, pa.Table | None, list[str]] | None:
    """The kept diagnosis for ``key`` (with its advice when ``advice``) and the ranks it
    left out; None where there is none (or none with advice, when asked)."""
    found = load(folder, "diagnosis", key)
    if found is None:
        return None
    t, d = found
    if advice and "advice" not in t:
        return None
    if "advice" in t and not t["advice"].schema.equals(ADVICE_SCHEMA):
        return None  # kept by another version of the advice
    try:
        b = d["balance"]
        balance = (StageBalance(**{**b, "ranks": {int(k): v for k, v in b["ranks"].items()}})
                   if b else None)
        diag = Diagnosis(
            ranks=d["ranks"], synced=d["synced"],
            offsets={int(k): v for k, v in d["offsets"].items()},
            comm_calls=t["comm_calls"], ledger=t["ledger"], ledger_waits=t["ledger_waits"],
            totals=t["totals"], speed=PeerSpeed(t["peer_speed"]), chain=t["chain"],
            notes=d["notes"], pipelines=d["pipelines"], stages_ordered=d["stages_ordered"],
            clocks=d["clocks"], links=t["links"], balance=balance)
    except _UNREADABLE:
        return None
    return diag, t.get("advice"), list(d.get("failed") or [])


def store_diagnosis(folder: Path, key: dict, diag: Diagnosis, advice: pa.Table | None,
                    failed: list[str]) -> None:
    """Keep ``diag`` (its ``advice``, the ranks it left out) for ``key``."""
    balance: dict[str, Any] | None = None
    if diag.balance is not None:
        balance = dataclasses.asdict(diag.balance)
        balance["ranks"] = {str(k): v for k, v in diag.balance.ranks.items()}
    store(folder, "diagnosis", key, {
        "comm_calls": diag.comm_calls, "ledger": diag.ledger,
        "ledger_waits": diag.ledger_waits, "totals": diag.totals,
        "peer_speed": diag.speed.table, "chain": diag.chain, "links": diag.links,
        "advice": advice}, {
        "ranks": diag.ranks, "synced": diag.synced,
        "offsets": {str(k): int(v) for k, v in diag.offsets.items()},
        "notes": diag.notes, "pipelines": diag.pipelines,
        "stages_ordered": diag.stages_ordered, "clocks": diag.clocks,
        "balance": balance, "failed": failed})


_OP_TABLES = ("calls", "by_shape", "by_microbatch", "not_modelled", "by_module",
              "iterations")


def load_op_model(folder: Path, key: dict) -> OpModel | None:
    """The kept op model for ``key``, None where there is none."""
    found = load(folder, "op_model", key)
    if found is None:
        return None
    t, d = found
    try:
        return OpModel(ranks=tuple(d["ranks"]), **{n: t[n] for n in _OP_TABLES},
                       **{k: v for k, v in d.items() if k != "ranks"})
    except _UNREADABLE:
        return None


def store_op_model(folder: Path, key: dict, model: OpModel) -> None:
    """Keep ``model`` for ``key``."""
    fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.name not in _OP_TABLES}
    fields["ranks"] = list(model.ranks)
    store(folder, "op_model", key, {n: getattr(model, n) for n in _OP_TABLES}, fields)
