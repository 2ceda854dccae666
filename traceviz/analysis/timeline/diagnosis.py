"""Why a job is slow, and since when, from its op timeline (:mod:`.findings`, every
saving re-simulated: :mod:`.whatif`), in the words and tables of the trace diagnosis:
ranked advice (:data:`~traceviz.analysis.advice.ADVICE_SCHEMA`), stragglers and a ledger.

**Step time**: the latest end of any rank's op in the step - the earliest start. The
**ideal step**: the step re-simulated with every op at its typical duration, transfer
and gap; a step's **slowdown** = the step re-simulated as measured / its ideal (the
re-simulated step is the measured one where the timers fit their dependencies; the
notes say by how much they do not).

**Savings** are per step: the step re-simulated as measured (the baseline) - re-simulated
with the cause removed, averaged over the steps the cause is present in (a slow worker:
the steps of its slow run; the others: every step), as a share of those steps' time. A fault is ranked only when it saves
at least :data:`~traceviz.analysis.advice.FAULT_PCT` % of the mean step; a change that
needs what the timers do not show (interleaving's overlap, the layer count) is
``conditional``.

**Attribution** (``op_attribution``): per step what fixing one worker (the slowest
:data:`TOP` by median slowdown), one DP rank, one op kind, the stages, the data or the
gaps would save; each row re-simulated on its own.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...table.records import records
from ..advice import ADVICE_SCHEMA, FAULT_PCT, STANDINGS, Advice, Finding, standing
from ..diagnose.stages import best_split
from . import whatif as W
from .cells import Cells, compute_cells
from .data import OpTimeline
from .findings import (MIN_Z, SlowWorker, WorkerSeries, data_imbalance, slow_dp_groups, slow_workers,
                       stage_balance, worker_series)
from .ledger import SCHEMA as LEDGER_SCHEMA, ledger_table, step_ledger
from .model import TimelineModel
from .ops import COMMUNICATION, DATA, DP
from .simulate import simulate

TOP = 5               # workers / DP ranks re-simulated one at a time for the attribution
TOP_FAULTS = 5        # slow workers turned into advice
MODEL = "re-simulated op timeline"
EXPOSED_PCT = 5.0     # a communication kind this share of the step gets overlap advice

STEPS_SCHEMA = pa.schema([("step", pa.int32()), ("time_ns", pa.int64()),
                          ("ideal_ns", pa.int64()), ("slowdown", pa.float64()),
                          ("worst", pa.string()), ("worst_saving_ns", pa.int64())])
STRAGGLERS_SCHEMA = pa.schema([
    ("worker", pa.int32()), ("rank", pa.int32()), ("ranks", pa.string()),
    ("stage", pa.int32()), ("dp_rank", pa.int32()), ("slowdown", pa.float64()),
    ("z_score", pa.float64()), ("since_step", pa.int32()), ("slow_steps", pa.int32()),
    ("persistent", pa.bool_()), ("saving_ns", pa.int64())])
ATTRIBUTION_SCHEMA = pa.schema([("what_if", pa.string()), ("step", pa.int32()),
                                ("saving_ns", pa.int64()), ("saving_pct", pa.float64())])
WORKER_STEPS_SCHEMA = pa.schema([
    ("worker", pa.int32()), ("rank", pa.int32()), ("stage", pa.int32()),
    ("dp_rank", pa.int32()), ("step", pa.int32()), ("speed", pa.float64()),
    ("slowdown", pa.float64()), ("z_score", pa.float64())])


@dataclass(frozen=True)
class TimelineDiagnosis:
    """The op timeline's diagnosis: its tables (:meth:`tables`), the typed advice and
    stragglers, each step's slowdown, the [worker, step] slowdown (``heat``), notes."""

    steps: pa.Table
    ledger: pa.Table
    stragglers_table: pa.Table
    attribution: pa.Table
    worker_steps: pa.Table
    advice_table: pa.Table
    heat: np.ndarray
    worker_names: tuple[str, ...]
    step_numbers: tuple[int, ...]
    summary: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def advice(self) -> tuple[Advice, ...]:
        return records(Advice, self.advice_table)

    def tables(self) -> dict[str, pa.Table]:
        """The tables ``traceviz diagnose`` writes for an op timeline, by file name."""
        return {"op_steps": self.steps, "op_ledger": self.ledger,
                "op_stragglers": self.stragglers_table, "op_attribution": self.attribution,
                "op_worker_steps": self.worker_steps, "advice": self.advice_table}


@dataclass
class _Cause:
    finding: Finding
    whatif: W.WhatIf
    since_index: int = 0   # the cause is present from this step on (its place in the run)
    since_step: int = 0    # that step's number
    until_index: int | None = None  # present up to this place (exclusive; None: the end)


@dataclass
class Measured:
    """Steps re-simulated as measured (the job's, or a block of them): each rank's ledger
    per step (:data:`~.ledger.SCHEMA`), every DP call's (op, stage, TP rank, transfer
    ns), how far the re-simulated ends are from the measured (ns), the communication
    ops left alone (:mod:`.graph`), the compute cells (:mod:`.cells`) and the notes on
    the model's steps (its notes: a step's transfers paired in a circle)."""

    ledger: pa.Table
    dp_calls: tuple[np.ndarray, ...]
    fit: int
    alone: int
    cells: Cells
    notes: list[str]

    @classmethod
    def joined(cls, parts: list[Measured]) -> Measured:
        """Blocks of consecutive steps, in order, as one."""
        return cls(pa.concat_tables([p.ledger for p in parts]),
                   tuple(np.concatenate(c) for c in zip(*(p.dp_calls for p in parts))),
                   max(p.fit for p in parts), sum(p.alone for p in parts),
                   Cells.joined([p.cells for p in parts]),
                   [n for p in parts for n in p.notes])


class Steps(Protocol):
    """Where the job's steps are re-simulated: as measured, and under what-ifs."""

    def measured(self) -> Measured:
        """Every step re-simulated as measured."""

    def times(self, whatifs: list[W.WhatIf]) -> tuple[np.ndarray, np.ndarray]:
        """(measured step times, [what-if, step] re-simulated times), ns."""


@dataclass
class InProcess:
    """The steps of a model of the whole job, re-simulated in this process."""

    model: TimelineModel

    def measured(self) -> Measured:
        return measured_steps(self.model)

    def times(self, whatifs: list[W.WhatIf]) -> tuple[np.ndarray, np.ndarray]:
        return W.step_times(self.model, whatifs)


def diagnose_timeline(tl: OpTimeline, num_layers: int | None = None) -> TimelineDiagnosis:
    """The diagnosis of ``tl`` (see the module doc)."""
    with warnings.catch_warnings():  # medians of workers without compute: NaN, said so
        warnings.simplefilter("ignore", RuntimeWarning)
        model = TimelineModel(tl)
        return diagnose_model(model, InProcess(model), num_layers)


def diagnose_model(model: TimelineModel, steps: Steps, num_layers: int | None = None
                   ) -> TimelineDiagnosis:
    """The diagnosis of the job ``model`` models (the whole job, or its shape alone),
    its steps re-simulated by ``steps``."""
    with warnings.catch_warnings():  # medians of workers without compute: NaN, said so
        warnings.simplefilter("ignore", RuntimeWarning)
        return _diagnose(model, steps, num_layers)


def _diagnose(model: TimelineModel, run: Steps, num_layers: int | None) -> TimelineDiagnosis:
    t = model.timeline
    m = run.measured()
    have = set(t.notes)  # the blocks' notes on their steps, each once, in step order
    t.notes += [n for n in dict.fromkeys(m.notes) if n not in have]
    series = worker_series(model, m.cells)
    slow = slow_workers(model, series)
    data = data_imbalance(model, m.cells, slow)
    balance = stage_balance(model, m.cells, num_layers)
    groups = slow_dp_groups(model, *m.dp_calls)
    causes = _causes(model, slow, data, balance, groups, m.ledger, num_layers)
    attribution = _attribution(model, series)
    ledger, fit, alone = m.ledger, m.fit, m.alone
    del m  # the cells
    # every what-if re-simulated once (a cause and an attribution may be the same)
    unique: dict[str, W.WhatIf] = {}
    for w in [W.WhatIf("measured"), W.ideal()] + [c.whatif for c in causes] + attribution:
        unique.setdefault(w.spec, w)
    measured, times = run.times(list(unique.values()))
    at = {spec: i for i, spec in enumerate(unique)}
    base, ideal = times[0], times[1]
    cause_t = times[[at[c.whatif.spec] for c in causes]] if causes else times[:0]
    attr_t = times[[at[w.spec] for w in attribution]] if attribution else times[:0]
    notes = list(t.notes)
    if alone:
        notes.append(f"{alone:,} communication ops whose peers did not line up (a link "
                     "with different numbers of transfers on its two sides, a group whose "
                     "ranks ran an op a different number of times in a step) run alone "
                     "with their measured time")
    if fit > 0:
        notes.append(f"the timers do not fit their dependencies exactly: the steps "
                     f"re-simulated as measured end up to {fit / 1e6:.3f} ms from the "
                     "measured (savings are against the re-simulated steps)")
    advice = _advice(causes, base, cause_t)
    strag = _stragglers(slow, causes, base, cause_t)
    steps = _steps(model, measured, ideal, causes, base, cause_t)
    attr_rows = [{"what_if": w.spec, "step": int(model.steps[i]),
                  "saving_ns": int(base[i] - attr_t[k][i]),
                  "saving_pct": 100.0 * (base[i] - attr_t[k][i]) / base[i] if base[i] else None}
                 for k, w in enumerate(attribution) for i in range(len(base))]
    names = tuple(_worker_name(model, w) for w in range(model.workers))
    summary = _summary(model, measured, base, ideal, slow, series)
    return TimelineDiagnosis(
        steps, ledger, strag,
        pa.Table.from_pylist(attr_rows, schema=ATTRIBUTION_SCHEMA),
        _worker_steps(model, series), advice, series.slowdown, names,
        tuple(int(s) for s in model.steps), tuple(summary), tuple(notes))


def measured_steps(model: TimelineModel) -> Measured:
    """The model's own steps re-simulated as measured (:class:`Measured`)."""
    t = model.timeline
    steps: list[pa.Table] = []
    ops, stages, tps, transfers = [], [], [], []
    fit = alone = 0
    for i, g in model.graphs():
        alone += g.uncoupled
        v = W.StepView.of(model, i, g)
        sim = simulate(g)
        if len(g):
            fit = max(fit, int(np.abs(sim.end - g.end).max()))
        ranks, parts = step_ledger(v, sim)
        steps.append(ledger_table(t.ranks[ranks], g.step, sim.step_ns, parts))
        m = (v.cls == DP) & (g.group >= 0)
        ops.append(v.op[m])
        stages.append(v.stage[m])
        tps.append(v.tp[m])
        transfers.append(g.transfer[m])
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))  # noqa: E731
    return Measured(pa.concat_tables(steps) if steps else LEDGER_SCHEMA.empty_table(),
                    (cat(ops), cat(stages), cat(tps), cat(transfers)), fit, alone,
                    compute_cells(model), list(t.notes))


def _worker_name(model: TimelineModel, w: int) -> str:
    ranks = model.worker_ranks(w)
    t = model.timeline
    r = int(model.first_rank[w])
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
    return f"{who} (stage {int(t.stage[r])}, DP {int(t.dp[r])})"


def _share(ledger: pa.Table, part: str) -> float:
    """``part``'s mean share of the step over ranks and steps (%)."""
    total = pc.sum(ledger["step_ns"]).as_py() or 0
    return 100.0 * (pc.sum(ledger[f"{part}_ns"]).as_py() or 0) / total if total else 0.0


def _causes(model: TimelineModel, slow: list[SlowWorker], data, balance, groups,
            ledger: pa.Table, num_layers: int | None) -> list[_Cause]:
    t = model.timeline
    out: list[_Cause] = []
    for x in [s for s in slow if s.persistent][:TOP_FAULTS]:
        n = len(model.steps)
        ended = x.until_index < n
        since = (f"from step {x.since_step} to step {x.until_step} ({x.slow_steps} of {n} "
                 "steps)" if ended else
                 f"since step {x.since_step} ({x.slow_steps} of {n} steps)"
                 if x.since_index > 0 else f"in {x.slow_steps} of {n} steps")
        out.append(_Cause(Finding(
            f"{_worker_name(model, x.worker)} computes {x.slowdown:.2f}x as long as its "
            f"peers {since}",
            "drain or replace its GPU / node (check its clocks, temperature and errors)",
            "", f"its compute ops against their typical time, robust z {x.z:.1f} "
            f"(the ordinary spread between GPUs: z < {MIN_Z})", kind="fault",
            target_rank=x.ranks[0]),
            W.slow_worker(x.worker, x.slowdown, x.since_index, x.until_index,
                          f"{x.since_step}-{x.until_step}" if ended else f"{x.since_step}"),
            x.since_index, x.since_step, x.until_index))
    if data is not None and data.uneven:
        alike = ("changes from step to step" if not np.isfinite(data.step_to_step)
                 or data.step_to_step < 0.5 else "repeats from step to step")
        out.append(_Cause(Finding(
            f"the micro-batches' compute varies by {100 * data.cv:.1f} % (CV within a "
            f"step), their forward and backward alike, and the pattern {alike}: uneven "
            "sequence lengths",
            "balance the micro-batches: pack or bucket sequences so that every "
            "micro-batch and DP rank holds the same tokens",
            "", f"forward and backward shares agree (r = {data.agreement:.2f}); pattern "
            f"from step to step r = {data.step_to_step:.2f}"),
            W.balance(data.factors())))
    if balance is not None and balance.heavy:
        s = balance.heaviest
        split = best_split(balance)
        where = "last" if s == balance.pp - 1 else "first" if s == 0 else f"{s}"
        stage_ms = ", ".join(f"{c / 1e6:.2f}" for c in balance.compute_ns)
        if split is not None:
            factors = np.array(split.compute_ns) / np.array(balance.compute_ns)
            out.append(_Cause(Finding(
                f"the {where} stage computes {balance.ratio:.2f}x the median stage",
                f"split the layers {split.layers} ({split.options})", "",
                f"compute per micro-batch by stage: {stage_ms} ms"),
                W.stages(factors, "stages=" + ",".join(f"{f:.3f}" for f in factors))))
        else:
            even = float(np.mean(balance.compute_ns)) / np.array(balance.compute_ns)
            ask = ("" if num_layers else "; give --num-layers for the split Megatron's "
                   "options allow")
            out.append(_Cause(Finding(
                f"the {where} stage computes {balance.ratio:.2f}x the median stage",
                "move layers off it (--decoder-first-pipeline-num-layers / "
                "--decoder-last-pipeline-num-layers, --account-for-embedding-in-pipeline-"
                f"split / --account-for-loss-in-pipeline-split){ask}", "",
                f"compute per micro-batch by stage: {stage_ms} ms; the saving is of "
                "perfectly even stages (an upper bound)", conditional=True),
                W.stages(even, "stages=even")))
    for stage in sorted({g.stage for g in groups}):
        mine = [g for g in groups if g.stage == stage]
        factor = {(g.op, g.tp): 1.0 / g.ratio for g in mine}
        names = sorted({g.name for g in mine})
        tps = sorted({g.tp for g in mine})
        tp_known = model.layout_from("tp") != "unknown"  # else every rank is TP rank 0
        which = (f" (TP rank{'s' if len(tps) > 1 else ''} {', '.join(map(str, tps))})"
                 if tp_known else "")
        out.append(_Cause(Finding(
            f"stage {stage}'s DP group{'s' if len(tps) > 1 else ''}{which} transfer"
            f"{'' if len(tps) > 1 else 's'} {', '.join(names)} "
            f"{max(g.ratio for g in mine):.2f}x as long as the other groups",
            "check the network of its nodes (NIC, switch port, cables)", "",
            "; ".join(f"{g.name}{f' (TP {g.tp})' if tp_known else ''} median transfer "
                      f"{g.median_ns / 1e6:.2f} ms, {g.ratio:.2f}x" for g in mine),
            kind="fault"),
            W.dp_groups(f"dp-group:{stage}=" + ",".join(
                f"{g.name}.{g.tp}/{g.ratio:.3f}" for g in mine), stage,
                tuple((op, tp, x) for (op, tp), x in factor.items()))))
    dp_share = _share(ledger, "transfer_dp")
    if dp_share >= EXPOSED_PCT:
        out.append(_Cause(Finding(
            f"{dp_share:.1f} % of the step is data-parallel transfers no compute hides",
            "overlap them with the backward and forward (--overlap-grad-reduce, "
            "--overlap-param-gather with --use-distributed-optimizer), where not on: the "
            "timers do not show it", "", "the ledger's transfer_dp", conditional=True),
            W.overlap(DP, "overlap=DP")))
    present = model.shape.present
    if (t.classes[present] == DATA).any():
        out.append(_Cause(Finding(
            "data loading (batch-generator) or the step's first gap beyond their typical "
            "time", "more data-loader workers or prefetching; check the storage", "",
            "batch-generator and each rank's first gap at most their typical time",
            kind="fault"), W.data_fix()))
    out.append(_Cause(Finding(
        "gaps between timed ops (CPU work no timer covers) beyond their typical time",
        "find the host stalls (garbage collection, logging, synchronizations, "
        "checkpointing)", "", "every gap at most its typical time", kind="fault"),
        W.gaps_fix()))
    for o, name in enumerate(t.names):
        if t.classes[o] in COMMUNICATION and o in present:
            out.append(_Cause(Finding(
                f"{name} transfers beyond their typical time in some steps",
                "check the network for congestion (other jobs, a degraded link)", "",
                f"{name}'s transfers at most typical", kind="fault"),
                W.op_fix(o, name, True)))
    return out


def _attribution(model: TimelineModel, series) -> list[W.WhatIf]:
    t = model.timeline
    with np.errstate(all="ignore"):
        med = np.nan_to_num(np.nanmedian(series.slowdown, axis=1), nan=0.0)
    out = [W.worker_typical(int(w)) for w in np.argsort(-med, kind="stable")[:TOP]]
    dps = np.unique(t.dp)
    if len(dps) > 1:
        by_dp = [float(np.nanmedian(series.slowdown[t.dp[model.first_rank] == d]))
                 for d in dps]
        out += [W.dp_typical(int(dps[i])) for i in np.argsort(by_dp)[::-1][:TOP]]
    out += [W.op_fix(o, n, bool(t.classes[o] in COMMUNICATION))
            for o, n in enumerate(t.names) if o in model.shape.present]
    out += [W.data_fix(), W.gaps_fix()]
    return out


def _advice(causes: list[_Cause], base: np.ndarray, times: np.ndarray) -> pa.Table:
    """The causes as advice rows, in the order of :mod:`traceviz.analysis.advice`; a
    fault whose fix gains under a tenth of :data:`FAULT_PCT` % names no cause and is
    left out."""
    kept: list[tuple[_Cause, int, int, str, float]] = []
    for c, ts in zip(causes, times):
        on = slice(c.since_index, c.until_index)
        if not len(base[on]):
            continue
        saving = int(round(float((base[on] - ts[on]).mean())))
        step = float(base[on].mean())  # the same steps' time: the share's basis
        if c.finding.kind == "fault" and 100.0 * saving / max(step, 1.0) < FAULT_PCT / 10:
            continue
        kept.append((c, saving, int(round(float(ts[on].mean()))),
                     standing(c.finding, saving, int(step)), step))
    kept.sort(key=lambda k: (STANDINGS.index(k[3]), -k[1]))
    rows = []
    for i, (c, saving, predicted, stand, step) in enumerate(kept, 1):
        f = c.finding
        rows.append({"rank": i, "standing": stand, "kind": f.kind, "finding": f.finding,
                     "action": f.action, "saving_ns": saving,
                     "predicted_iteration_ns": predicted,
                     # of the same steps' time; 0 where it gains nothing (saving_ns
                     # then says how much slower it predicts), as the trace diagnosis's
                     "saving_pct": max(0.0, 100.0 * saving / step) if step else None,
                     "evidence": f.evidence + (
                         "; saving per step over the steps it was slow in"
                         if c.since_index or c.until_index is not None else ""),
                     "what_if": c.whatif.spec, "model": MODEL,
                     "target_rank": f.target_rank, "bound": None, "same_as": None})
    return pa.Table.from_pylist(rows, schema=ADVICE_SCHEMA)


def _stragglers(slow: list[SlowWorker], causes: list[_Cause], base: np.ndarray,
                times: np.ndarray) -> pa.Table:
    saving = {}
    for c, ts in zip(causes, times):
        if c.whatif.spec.startswith("worker:"):
            w = int(c.whatif.spec.split(":")[1].split("/")[0])
            on = slice(c.since_index, c.until_index)
            saving[w] = int(round(float((base[on] - ts[on]).mean())))
    return pa.Table.from_pylist([{
        "worker": x.worker, "rank": x.ranks[0], "ranks": ",".join(map(str, x.ranks)),
        "stage": x.stage, "dp_rank": x.dp, "slowdown": x.slowdown, "z_score": x.z,
        "since_step": x.since_step, "slow_steps": x.slow_steps, "persistent": x.persistent,
        "saving_ns": saving.get(x.worker)} for x in slow], schema=STRAGGLERS_SCHEMA)


def _steps(model, measured, ideal, causes, base, times) -> pa.Table:
    rows = []
    for i, step in enumerate(model.steps):
        gains = [(int(base[i] - times[k][i]), c.whatif.spec) for k, c in enumerate(causes)]
        best = max(gains, default=(0, None))
        rows.append({"step": int(step), "time_ns": int(measured[i]),
                     "ideal_ns": int(ideal[i]),
                     "slowdown": base[i] / ideal[i] if ideal[i] else None,
                     "worst": best[1] if best[0] > 0 else None,
                     "worst_saving_ns": best[0] if best[0] > 0 else None})
    return pa.Table.from_pylist(rows, schema=STEPS_SCHEMA)


def _worker_steps(model: TimelineModel, series) -> pa.Table:
    t = model.timeline
    nw, ns = series.slowdown.shape
    first = model.first_rank
    w = np.repeat(np.arange(nw), ns)
    fin = lambda a: pa.array(a.ravel(), mask=~np.isfinite(a.ravel()))  # noqa: E731
    return pa.table({
        "worker": pa.array(w, pa.int32()), "rank": pa.array(t.ranks[first][w], pa.int32()),
        "stage": pa.array(t.stage[first][w], pa.int32()),
        "dp_rank": pa.array(t.dp[first][w], pa.int32()),
        "step": pa.array(np.tile(model.steps, nw), pa.int32()),
        "speed": fin(series.speed), "slowdown": fin(series.slowdown), "z_score": fin(series.z)},
        schema=WORKER_STEPS_SCHEMA)


def _summary(model: TimelineModel, measured, base, ideal, slow: list[SlowWorker],
             series: WorkerSeries) -> list[str]:
    """The summary lines; the slowdown is the re-simulated step's (its basis: the
    savings') over its ideal."""
    t = model.timeline
    ms = measured / 1e6
    lines = [f"op timeline: {len(t.ranks)} ranks ({model.workers} workers, {model.pp} "
             f"stages), {len(model.steps)} steps, {model.shape.ops:,} ops; step time median "
             f"{np.median(ms):.2f} ms (min {ms.min():.2f}, max {ms.max():.2f}); ideal "
             f"{np.median(ideal) / 1e6:.2f} ms"]
    with np.errstate(all="ignore"):
        slowdown = base / np.where(ideal > 0, ideal, np.nan)
    if np.isfinite(slowdown).any():
        worst = int(np.nanargmax(slowdown))
        lines.append(f"slowdown (step / its ideal): median {np.nanmedian(slowdown):.2f}, "
                     f"worst {slowdown[worst]:.2f} at step {int(model.steps[worst])}")
    persistent = [s for s in slow if s.persistent]
    transient = [s for s in slow if not s.persistent]
    if not np.isfinite(series.slowdown).any():
        lines.append("slow workers: not assessed (no forward-compute / backward-compute "
                     "timers to compare workers by)")
    elif model.workers < 3:
        lines.append(f"slow workers: not assessed ({model.workers} worker(s): too few to "
                     "tell a slow one from the spread between GPUs)")
    elif persistent:
        lines.append("slow workers: " + "; ".join(
            f"{_worker_name(model, s.worker)} {s.slowdown:.2f}x since step {s.since_step}"
            for s in persistent[:5]))
    else:
        lines.append("slow workers: none beyond the ordinary spread between GPUs")
    if transient:
        lines.append(f"transient: {len(transient)} worker(s) slow in single steps (e.g. "
                     f"{_worker_name(model, transient[0].worker)} at step "
                     f"{transient[0].since_step})")
    return lines
