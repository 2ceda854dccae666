"""Batch: parse every rank trace of a job in parallel processes.

Traces are found by :func:`.discover.find_traces` (every known layout). Each trace is
parsed in a worker process with the per-rank memory budget, so the peak memory of the
batch is about ``workers x budget``, never the sum of the traces; never more workers
than traces, and a batch of one small trace (:data:`HERE_MAX_BYTES`) is parsed in this
process (a worker's start, ~1-3 s with its imports, is longer than its parse). Each
parsed table goes to ``OUTDIR/<the trace's folder relative to DIR>/rank_XXXX.parquet``
(its CPU table next to it with ``--cpu``); a table newer than its trace is kept unless
``force``. A rank that fails is reported with its one-line reason and the others still
finish; a truncated trace is parsed up to its cut and listed with a warning.

Work runs on a local process pool, or on a Dask distributed cluster
(``scheduler="tcp://host:port"``, or ``"local"`` for a ``LocalCluster`` on this machine).
"""
from __future__ import annotations

import fnmatch
import json
import os
import time
from dataclasses import asdict, dataclass, field
from multiprocessing import parent_process
from pathlib import Path

from ..errors import TraceVizError, UsageError, one_line
from ..parse.metadata import content_stamp
from ..progress import byte_bar
from ..table.io import atomic_path
from ..table.schema import file_metadata
from .discover import TraceFile, find_traces
from .outputs import cpu_path, job_dir, trace_stem
from .topology import find_topology_file
from . import workers
from .workers import worker_init

# a batch of one trace up to this size on disk is parsed in this process; a larger one
# in a worker (its memory apart from the command's; a worker killed is a failed rank)
HERE_MAX_BYTES = 16 << 20

SUMMARY = "batch_summary.json"


@dataclass(frozen=True)
class Task:
    """One trace to parse: its path, rank (-1 unknown), output table, size in bytes."""

    trace: str
    rank: int
    output: str
    size: int


@dataclass
class Outcome:
    """What became of one task: ``status`` is parsed / skipped / failed."""

    trace: str
    rank: int
    output: str
    status: str
    seconds: float = 0.0
    events: int = 0
    warnings: list[str] = field(default_factory=list)
    error: str = ""


def output_root(root: str | os.PathLike, outdir: str | os.PathLike | None) -> Path:
    """Where a batch writes: ``outdir``, else the job's ``./traceviz-out/<job>``
    (:mod:`.outputs`)."""
    return Path(outdir) if outdir else job_dir(root)


def plan(root: str | os.PathLike, outdir: str | os.PathLike | None = None,
         folders: str | None = None, force: bool = False, options: dict | None = None,
         traces: list[TraceFile] | None = None, cpu: bool = False
         ) -> tuple[list[Task], list[Task], set[str]]:
    """(tasks to run, tasks whose table is up to date, traces whose table is stale).
    ``folders`` is a glob on the name of the trace's parent folder (e.g.
    ``iteration_*``). A table is up to date when it is newer than its trace and was parsed
    with ``options`` (see :func:`traceviz.ingest.build.parse_options`; the traceviz
    version included), and, with ``cpu``, has its CPU table next to it. ``traces``: those
    :func:`find_traces` found under ``root`` (found now when None)."""
    root = Path(root)
    if not root.exists():
        raise TraceVizError(f"{root}: no such folder")
    out = output_root(root, outdir)
    traces = find_traces(root) if traces is None else traces
    if folders:
        traces = [t for t in traces if fnmatch.fnmatch(t.path.parent.name, folders)]
    if not traces:
        if folders:
            raise TraceVizError(f"{root}: no Kineto traces in folders matching {folders!r}")
        from .discover import no_traces_message

        raise TraceVizError(no_traces_message(root))
    todo: list[Task] = []
    fresh: list[Task] = []
    stale: set[str] = set()
    seen: dict[Path, str] = {}
    for t in traces:
        rel = t.path.parent.relative_to(root) if root.is_dir() else Path()
        # a single trace's table has the name 'traceviz parse' gives it, so either
        # command reuses the other's table
        name = f"rank_{t.rank:04d}.parquet" if t.rank >= 0 and root.is_dir() else \
            trace_stem(t.path.name) + ".parquet"
        dest = out / rel / name
        if dest in seen:
            raise UsageError(f"{t.path} and {seen[dest]} both claim rank {t.rank} in one "
                             "folder; keep one trace per rank and iteration")
        seen[dest] = str(t.path)
        task = Task(str(t.path.absolute()), t.rank, str(dest), t.path.stat().st_size)
        up_to_date = dest.exists() and dest.stat().st_mtime >= t.path.stat().st_mtime
        if cpu and not Path(cpu_path(str(dest))).exists():
            up_to_date = False
        if dest.exists() and not parsed_from(dest, t.path):
            up_to_date = False  # another trace now sits at its path (even an older one)
            stale.add(task.trace)
        if up_to_date and options is not None and _parsed_with(dest) != options:
            up_to_date = False
            stale.add(task.trace)
        (fresh if up_to_date and not force else todo).append(task)
    return todo, fresh, stale


def parsed_from(table: Path, trace: Path) -> bool:
    """Whether ``table`` was parsed from ``trace`` as it is now: the same file (another
    job's trace of the same name, or a trace moved since, makes it stale), of the same
    size, modification time and content stamp as when it was parsed (a trace replaced by
    another, even one of the same size copied with its time kept, makes it stale; tables
    of versions that stored no stamp compare size and time)."""
    try:
        meta = file_metadata(table)
    except (OSError, ValueError):
        return False
    source, stat = meta.get("source"), meta.get("source_stat")
    try:
        if not (source and os.path.samefile(source, trace)):
            return False
        now = trace.stat()
    except OSError:
        return False
    if not isinstance(stat, dict):
        return True
    return (stat.get("size") == now.st_size and stat.get("mtime_ns") == now.st_mtime_ns
            and ("stamp" not in stat or stat["stamp"] == content_stamp(trace)))


def _parsed_with(table: Path) -> dict | None:
    """The parse options a table's metadata records (None: unreadable or none)."""
    try:
        return file_metadata(table).get("parse_options")
    except (OSError, ValueError):
        return None


def parse_one(task: Task, memory_budget: int, topology_file: str | None, cpu: bool,
              vpp: int | None) -> Outcome:
    """Parse one trace into its table (runs in a worker). Never raises for bad input."""
    start = time.perf_counter()
    try:
        from .build import parse_trace
        from .topology import from_file

        topology = from_file(topology_file) if topology_file else None
        # a worker process holds nothing but the runtime: its floor is worth a warning
        result = parse_trace(task.trace, cpu=cpu, memory_budget=memory_budget,
                             topology=topology, vpp=vpp,
                             warn_floor=parent_process() is not None)
        result.write(task.output)
        rank = int(result.meta.get("rank", task.rank))
        return Outcome(task.trace, rank, task.output, "parsed",
                       time.perf_counter() - start, result.columns.n_rows,
                       list(result.warnings))
    except TraceVizError as exc:
        return Outcome(task.trace, task.rank, task.output, "failed",
                       time.perf_counter() - start, error=str(exc))
    except MemoryError:
        return Outcome(task.trace, task.rank, task.output, "failed",
                       time.perf_counter() - start,
                       error=f"{task.trace}: out of memory; lower --memory-budget or -j")
    except Exception as exc:  # a bug: reported for this rank, the batch goes on
        return Outcome(task.trace, task.rank, task.output, "failed",
                       time.perf_counter() - start,
                       error=f"{task.trace}: internal error: {type(exc).__name__}: {exc}")


def _worker_init(jobs: int, parent: int | None = None) -> None:
    """A parsing worker: :func:`.workers.worker_init`, and its scans use their share of
    the cores (``jobs`` workers parse at once)."""
    from ..parse.reader import share_cores  # the parser, in the workers only

    worker_init(jobs, parent)
    share_cores(jobs)


def _run_local(tasks: list[Task], jobs: int, args: tuple, done,
               work=parse_one) -> list[Outcome]:
    """Outcomes of ``work(task, *args)`` for ``tasks`` on ``jobs`` worker processes,
    never more than the tasks; in this process for ``jobs`` 1, and for one task up to
    :data:`HERE_MAX_BYTES`. A worker that dies costs only the rank it dies on
    (:mod:`.workers`)."""
    here = jobs <= 1 or (len(tasks) == 1 and tasks[0].size <= HERE_MAX_BYTES)
    jobs = max(1, min(jobs, len(tasks)))
    return _outcomes(workers.run(work, tasks, args, jobs=jobs, init=_worker_init,
                                 here=here), done)


def _run_dask(tasks: list[Task], scheduler: str, args: tuple, done) -> list[Outcome]:
    return _outcomes(workers.run(parse_one, tasks, args, scheduler=scheduler), done)


def _outcomes(finished, done) -> list[Outcome]:
    """Each task's outcome, ``done`` called as each finishes; a task whose process died
    is a failed outcome naming how."""
    out = []
    for f in finished:
        t = f.task
        outcome = f.result if f.died is None else Outcome(
            t.trace, t.rank, t.output, "failed", error=(
                f"{t.trace}: the process parsing it {f.died}; lower --memory-budget or "
                "-j, or check the trace"))
        if f.rerun and outcome.status != "failed":
            outcome.warnings.append(
                f"a worker of the batch died while this rank was queued or being parsed "
                f"({f.rerun}); parsed again")
        out.append(outcome)
        done(t, outcome)
    return out


def run(root: str | os.PathLike, outdir: str | os.PathLike | None = None, *,
        folders: str | None = None, jobs: int = 0, force: bool = False,
        memory_budget: int = 512 << 20, topology: str | os.PathLike | None = None,
        cpu: bool = False, vpp: int | None = None, scheduler: str | None = None,
        quiet: bool = False, traces: list[TraceFile] | None = None) -> list[Outcome]:
    """Parse every trace under ``root`` whose table is missing, older than the trace or
    parsed with other options (``vpp``, topology, patterns, traceviz version); write
    ``batch_summary.json`` into the output folder; return one outcome per trace
    (skipped ones included), in rank order. ``traces``: see :func:`plan`.

    The topology: ``topology``, else a topology file beside the traces, else the one the
    traces' process groups state; where none does, the pipelines the parsed tables'
    sends / receives show (:func:`.topology.derive_file`, kept in the output folder,
    found again where no table was parsed): when it changes, the tables are parsed again
    with it."""
    from .topology import DERIVED_NAME, derive_file, from_traces, is_derived

    kw = dict(folders=folders, jobs=jobs, force=force, memory_budget=memory_budget,
              cpu=cpu, vpp=vpp, scheduler=scheduler, quiet=quiet, traces=traces)
    if topology is None:
        found = find_topology_file(root if Path(root).is_dir() else Path(root).parent)
        topology = str(found) if found and not is_derived(found) else None
    out = output_root(root, outdir)
    derived = out / DERIVED_NAME
    if topology is not None:
        derived.unlink(missing_ok=True)  # a layout stated: none derived is kept
        return _parse(root, outdir, topology=topology, **kw)  # type: ignore[arg-type]
    outcomes = _parse(root, outdir, topology=str(derived) if derived.is_file() else None,
                      **kw)  # type: ignore[arg-type]
    from .tables import table_folders

    tables = table_folders(out)
    if not tables or not any(o.status == "parsed" for o in outcomes):
        return outcomes  # no table changed: nor does what they show
    try:
        from_traces(root)  # the traces state their layout: nothing to derive
        stated = True
    except TraceVizError:
        stated = False
    if stated:
        changed = derived.is_file()
        derived.unlink(missing_ok=True)
    else:
        changed = derive_file(out, tables[0])
    if not changed:
        return outcomes
    again = _parse(root, outdir, topology=str(derived) if derived.is_file() else None,
                   again=True, **kw)  # type: ignore[arg-type]
    parsed = {o.trace for o in again if o.status != "skipped"}
    return sorted([o for o in outcomes if o.trace not in parsed]
                  + [o for o in again if o.trace in parsed], key=lambda o: (o.rank, o.trace))


def _parse(root: str | os.PathLike, outdir: str | os.PathLike | None = None, *,
           folders: str | None = None, jobs: int = 0, force: bool = False,
           memory_budget: int = 512 << 20, topology: str | None = None,
           cpu: bool = False, vpp: int | None = None, scheduler: str | None = None,
           quiet: bool = False, traces: list[TraceFile] | None = None,
           again: bool = False) -> list[Outcome]:
    """:func:`run` with ``topology`` resolved (None: none); ``again``: the tables are
    parsed a second time with the topology their first parse showed (not said)."""
    from ..classify.patterns import load_patterns
    from .build import parse_options
    from .topology import from_file

    options = parse_options(from_file(topology) if topology else None, load_patterns(), vpp)
    todo, fresh, stale = plan(root, outdir, folders, force, options, traces, cpu)
    args = (memory_budget, str(topology) if topology else None, cpu, vpp)
    jobs = jobs or os.cpu_count() or 1
    bar = byte_bar(sum(t.size for t in todo), f"ranks 0/{len(todo)}", quiet or not todo)
    finished = [0]

    def done(task: Task, outcome: Outcome) -> None:
        finished[0] += 1
        bar.set_description(f"ranks {finished[0]}/{len(todo)}")
        bar.update(task.size)

    try:
        if scheduler:
            outcomes = _run_dask(todo, scheduler, args, done)
        else:
            outcomes = _run_local(todo, jobs, args, done)
    finally:
        bar.close()
    earlier = _earlier_outcomes(output_root(root, outdir))
    for t in fresh:  # up to date: what the run that parsed it said, marked skipped
        before = earlier.get(t.trace)
        kept = Outcome(t.trace, t.rank, t.output, "skipped")
        if before is not None and before.get("output") == t.output \
                and before.get("status") in ("parsed", "skipped"):
            kept.seconds, kept.events = before.get("seconds", 0.0), before.get("events", 0)
            kept.warnings = list(before.get("warnings") or [])
        outcomes.append(kept)
    for o in outcomes:
        if o.trace in stale and o.status == "parsed" and not again:
            o.warnings.append("parsed again: its table was parsed from another trace, with "
                              "other options (vpp, topology, patterns) or by another "
                              "traceviz version")
    outcomes.sort(key=lambda o: (o.rank, o.trace))
    with atomic_path(output_root(root, outdir) / SUMMARY) as tmp, open(tmp, "w") as fh:
        json.dump({"root": str(Path(root).resolve()), "topology": args[1],
                   "outcomes": [asdict(o) for o in outcomes]}, fh, indent=1)
    return outcomes


def _earlier_outcomes(out: Path) -> dict[str, dict]:
    """The outcomes of the last batch into ``out`` by trace path ({} if none / damaged)."""
    try:
        doc = json.loads((out / SUMMARY).read_text())
        return {o["trace"]: o for o in doc["outcomes"] if isinstance(o, dict) and "trace" in o}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def job_root(folder: Path) -> Path | None:
    """The job (its traces' folder or trace, resolved) the last batch into ``folder`` (its
    ``batch_summary.json`` in ``folder`` or up to three parents) parsed; None: none."""
    folder = Path(folder).resolve()
    for parent in (folder, *list(folder.parents)[:3]):
        try:
            doc = json.loads((parent / SUMMARY).read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError):
            return None
        root = doc.get("root") if isinstance(doc, dict) else None
        return Path(root).resolve() if isinstance(root, str) else None
    return None


def failures_of(folder: Path) -> list[str]:
    """The one-line reasons of the traces whose tables belong in ``folder`` but that the
    last batch (its ``batch_summary.json`` in ``folder`` or a parent) failed to parse."""
    folder = Path(folder).resolve()
    for parent in (folder, *list(folder.parents)[:3]):
        if (parent / SUMMARY).is_file():
            return [o.get("error") or f"{o['trace']}: failed" for o in
                    _earlier_outcomes(parent).values() if o.get("status") == "failed"
                    and Path(o.get("output", "")).resolve().parent == folder]
    return []


def failures_of_files(files: list[Path]) -> list[str]:
    """:func:`failures_of` each folder that holds one of the rank tables ``files``, the
    folders in order."""
    return [line for folder in sorted({f.parent for f in files if f.suffix == ".parquet"})
            for line in failures_of(folder)]


def summary(outcomes: list[Outcome], seconds: float) -> str:
    """Counts, throughput, and one line per failed or truncated rank."""
    parsed = [o for o in outcomes if o.status == "parsed"]
    failed = [o for o in outcomes if o.status == "failed"]
    skipped = [o for o in outcomes if o.status == "skipped"]
    lines = [f"{len(parsed)} parsed, {len(skipped)} up to date (use --force to re-parse), "
             f"{len(failed)} failed in {seconds:.1f} s"]
    for o in failed:
        lines.append(f"  failed rank {o.rank}: {one_line(o.error)}")
    for o in parsed:
        for w in o.warnings:
            lines.append(f"  warning rank {o.rank}: {one_line(w)}")
    return "\n".join(lines)
