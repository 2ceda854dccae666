"""Synthesized op timelines (:mod:`traceviz.table.timeline_schema`): Megatron-LM's timers
of a 1F1B pipeline on every rank over many steps, with the causes a large job slows by
and their ground truth, so that every predicted saving can be checked against a re-run
with the one cause removed (:meth:`TimelineConfig.without`).

Its own simulation, sharing nothing with the analysis: per step every pipeline (DP
replica) runs Megatron's 1F1B program (``megatron/core/pipeline_parallel/schedules.py``,
``forward_backward_pipelining_without_interleaving``: warm-up forwards, steady 1F1B with
``send_forward_recv_backward`` / ``send_backward_recv_forward``, cool-down backwards) on
each stage; a transfer ends when both of its sides have arrived plus its time; then the
gradients' DP reduce-scatter (``all-grads-sync``), the embedding all-reduce of the first
and last stage, the optimizer and the DP all-gather of the parameters
(``params-all-gather``), each collective ending when its group's last rank arrived plus
its time. ``batch-generator`` runs inside the first and last stage's forward compute.

The causes (each a knob; :meth:`TimelineConfig.without` turns one off and keeps every
random draw):

* natural spread: each GPU's speed (normal, ``gpu_sigma``) and each op's
  (``op_noise``), and the CPU gap between ops;
* ``seq_cv``: uneven sequence lengths: a micro-batch's compute on every stage scales by
  its tokens' share (log-normal per step, DP rank and micro-batch, mean 1 per step);
  removed: every micro-batch at the step's mean (packed sequences);
* ``slow_rank`` from ``slow_from`` on (for ``slow_steps``, else to the end): that
  worker's compute ``slow_factor`` x;
* ``last_stage_extra``: the last stage's compute that much heavier (output layer and
  loss); removed: every stage at the stages' mean (``even_stages``: an even split of
  the same work);
* ``slow_dp_factor``: the data-parallel transfers of stage ``slow_dp_stage``'s groups
  that much longer (a slow link of those nodes);
* ``data_ms``: the data loader's time per micro-batch, ``data_spike_ms`` extra on
  ``data_spike_every``-th steps.

Ranks are numbered as Megatron's default order: ``rank = tp + TP * (dp + DP * stage)``;
TP peers run in lockstep (the same times).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import UsageError
from ..table.timeline_schema import MEGATRON_OPS, OP_TIMELINE_SCHEMA

OP_NAMES = list(MEGATRON_OPS)


def _code(name: str) -> int:
    return OP_NAMES.index(name)

CAUSES = ("seq_cv", "slow_rank", "last_stage_extra", "slow_dp_factor", "data_spike_ms")


@dataclass(frozen=True)
class TimelineConfig:
    """A synthesized job's op timeline (times in ms)."""

    pp: int = 4
    dp: int = 4
    tp: int = 1
    microbatches: int = 8
    steps: int = 20
    fwd_ms: float = 10.0           # a stage's forward compute per micro-batch
    bwd_factor: float = 2.0
    p2p_ms: float = 0.3            # a pipeline transfer
    grad_sync_ms: float = 8.0      # the gradients' reduce-scatter
    param_gather_ms: float = 4.0
    embedding_ms: float = 1.0
    optimizer_ms: float = 6.0
    data_ms: float = 0.5
    gap_ms: float = 0.05           # CPU time between ops
    gpu_sigma: float = 0.01
    op_noise: float = 0.01
    seq_cv: float = 0.0
    slow_rank: int | None = None   # a global rank (its TP group is slow with it)
    slow_factor: float = 1.3
    slow_from: int = 0
    slow_steps: int | None = None  # steps it stays slow (None: to the end)
    last_stage_extra: float = 0.0  # 0.3: the last stage's compute 1.3 x
    slow_dp_factor: float = 1.0
    slow_dp_stage: int = 0
    data_spike_ms: float = 0.0
    data_spike_every: int = 5
    even_stages: bool = False      # the stages' compute split evenly (same total)
    transfer_given: bool = False   # write transfer_ns for communication ops
    seed: int = 0

    def __post_init__(self) -> None:
        for k in ("pp", "dp", "tp", "microbatches", "steps"):
            if getattr(self, k) < 1:
                raise UsageError(f"{k} must be at least 1")
        if self.slow_rank is not None and not 0 <= self.slow_rank < self.world:
            raise UsageError(f"slow_rank {self.slow_rank} is not a rank of {self.world}")

    @property
    def world(self) -> int:
        return self.pp * self.dp * self.tp

    def without(self, cause: str) -> TimelineConfig:
        """The same job with ``cause`` (one of :data:`CAUSES`) removed."""
        off: dict[str, dict[str, object]] = {"seq_cv": {"seq_cv": 0.0}, "slow_rank": {"slow_rank": None},
               "last_stage_extra": {"even_stages": True},
               "slow_dp_factor": {"slow_dp_factor": 1.0},
               "data_spike_ms": {"data_spike_ms": 0.0}}
        if cause not in off:
            raise UsageError(f"no cause {cause!r}: one of {', '.join(CAUSES)}")
        return replace(self, **off[cause])  # type: ignore[arg-type]


# one op of a stage's program: (timer name, micro-batch, side) with side 0 local,
# 1 talks to the next stage, 2 to the previous one
def _program(stage: int, pp: int, m: int) -> list[tuple[str, int, int]]:
    first, last = stage == 0, stage == pp - 1
    warm = min(pp - stage - 1, m)
    rest = m - warm
    out: list[tuple[str, int, int]] = []
    for i in range(warm):
        if not first:
            out.append(("forward-recv", i, 2))
        out.append(("forward-compute", i, 0))
        if not last:
            out.append(("forward-send", i, 1))
    if rest > 0 and not first:
        out.append(("forward-recv", warm, 2))
    for i in range(rest):
        out.append(("forward-compute", warm + i, 0))
        if not last:
            out.append(("forward-send-backward-recv", warm + i, 1))
        out.append(("backward-compute", i, 0))
        if not first:
            out.append(("backward-send" if i == rest - 1 else "backward-send-forward-recv",
                        i, 2))
    for i in range(rest, m):
        if not last:
            out.append(("backward-recv", i, 1))
        out.append(("backward-compute", i, 0))
        if not first:
            out.append(("backward-send", i, 2))
    return out


def simulate_steps(cfg: TimelineConfig) -> tuple[pa.Table, np.ndarray]:
    """Every rank's op timeline and each step's time (ns: the latest end of any rank -
    the earliest start)."""
    tables, times = zip(*step_tables(cfg))
    return pa.concat_tables(tables), np.array(times, dtype=np.int64)


def step_tables(cfg: TimelineConfig) -> Iterator[tuple[pa.Table, int]]:
    """Each step's rows and time (ns), one step at a time (the memory of one step)."""
    rng = np.random.default_rng(cfg.seed)
    pp, dp, m, tp = cfg.pp, cfg.dp, cfg.microbatches, cfg.tp
    programs = [_program(s, pp, m) for s in range(pp)]
    plen = max(len(p) for p in programs)
    # every random draw made up front, whatever the causes (a re-run keeps them)
    gpu = 1.0 + cfg.gpu_sigma * rng.standard_normal((pp, dp))
    seq = np.exp(rng.standard_normal((cfg.steps, dp, m)) * 1.0)
    seq = seq ** (cfg.seq_cv if cfg.seq_cv else 0.0)
    seq /= seq.mean(axis=(1, 2), keepdims=True)
    stage_w = np.ones(pp)
    stage_w[-1] += cfg.last_stage_extra
    if cfg.even_stages:  # the same work split evenly
        stage_w[:] = stage_w.mean()
    slow = np.ones((cfg.steps, pp, dp))
    if cfg.slow_rank is not None:
        s_stage = cfg.slow_rank // (tp * dp)
        s_dp = (cfg.slow_rank // tp) % dp
        until = None if cfg.slow_steps is None else cfg.slow_from + cfg.slow_steps
        slow[cfg.slow_from:until, s_stage, s_dp] = cfg.slow_factor
    out: dict[str, list] = {}

    def record(step, stage, name, mb, start, dur, transfer=None):
        out["stage"].append(np.full(dp, stage))
        out["dp"].append(np.arange(dp))
        out["step"].append(np.full(dp, step))
        out["op"].append(np.full(dp, _code(name), dtype=np.int16))
        out["mb"].append(np.full(dp, mb))
        out["start"].append(start.copy())
        out["dur"].append(dur.copy())
        out["transfer"].append(np.full(dp, -1.0) if transfer is None else transfer.copy())

    for step in range(cfg.steps):
        for key in ("stage", "dp", "step", "op", "mb", "start", "dur", "transfer"):
            out[key] = []
        # this step's draws (the same whatever the causes)
        draw = np.random.default_rng([cfg.seed, 1, step])
        noise = 1.0 + cfg.op_noise * draw.standard_normal((1, pp, plen + 8, dp))
        gaps = cfg.gap_ms * (1.0 + 0.2 * draw.random((1, pp, plen + 8, dp)))
        t = np.zeros((pp, dp))          # each stage's clock, per DP replica
        ptr = [0] * pp
        k_op = [0] * pp                 # ops run so far (the noise index)
        waiting: dict[int, np.ndarray] = {}  # stage -> arrival of its pending transfer
        data = cfg.data_ms + (cfg.data_spike_ms if cfg.data_spike_ms and
                              step % cfg.data_spike_every == cfg.data_spike_every - 1
                              else 0.0)
        progressed = True
        while progressed:
            progressed = False
            for s in range(pp):
                while ptr[s] < len(programs[s]):
                    name, mb, side = programs[s][ptr[s]]
                    k = k_op[s]
                    if side == 0:
                        start = t[s] + gaps[0, s, k]
                        w = stage_w[s] * gpu[s] * slow[step, s] * seq[step, :, mb] \
                            * noise[0, s, k]
                        dur = cfg.fwd_ms * w * (1.0 if name == "forward-compute"
                                                else cfg.bwd_factor)
                        has_data = name == "forward-compute" and s in (0, pp - 1)
                        if has_data:
                            record(step, s, "batch-generator", mb, start,
                                   np.full(dp, data))
                            dur = dur + data
                        record(step, s, name, mb, start, dur)
                        t[s] = start + dur
                    else:
                        peer = s + 1 if side == 1 else s - 1
                        if s not in waiting:
                            waiting[s] = t[s] + gaps[0, s, k]
                        if peer not in waiting:
                            break  # the peer has not reached its side yet
                        pname, _, pside = programs[peer][ptr[peer]]
                        if pside != (2 if side == 1 else 1):
                            break
                        a, b = waiting.pop(s), waiting.pop(peer)
                        p2p = cfg.p2p_ms * noise[0, s, k]
                        end = np.maximum(a, b) + p2p
                        record(step, s, name, mb, a, end - a, p2p)
                        record(step, peer, pname, programs[peer][ptr[peer]][1], b, end - b,
                               p2p)
                        t[s] = end
                        t[peer] = end
                        ptr[peer] += 1
                        k_op[peer] += 1
                    ptr[s] += 1
                    k_op[s] += 1
                    progressed = True
        if any(ptr[s] < len(programs[s]) for s in range(pp)):
            raise RuntimeError("synthesized pipeline deadlocked")  # a bug here
        # after the schedule: gradients, embedding, optimizer, parameters
        dp_slow = np.ones((pp, 1))
        dp_slow[min(cfg.slow_dp_stage, pp - 1)] = cfg.slow_dp_factor
        for name, ms, group in (("all-grads-sync", cfg.grad_sync_ms, "dp"),
                                ("embedding-grads-all-reduce", cfg.embedding_ms, "emb"),
                                ("optimizer", cfg.optimizer_ms, "local"),
                                ("params-all-gather", cfg.param_gather_ms, "dp")):
            arrive = np.stack([t[s] + gaps[0, s, k_op[s]] for s in range(pp)])
            xfer: np.ndarray | None
            if group == "dp":
                xfer = ms * dp_slow * noise[0, :, k_op[0] + 1, 0][:, None] \
                    * np.ones((1, dp))
                end = arrive.max(axis=1, keepdims=True) + xfer
            elif group == "emb" and pp > 1:
                xfer = ms * np.ones((pp, dp))
                ends = np.maximum(arrive[0], arrive[-1]) + ms
                end = arrive + ms * 0.02  # a middle stage's call returns at once
                end[0], end[-1] = ends, ends
                xfer[1:-1] = ms * 0.02
            else:
                xfer = None
                end = arrive + ms * noise[0, :, k_op[0] + 2]
            for s in range(pp):
                record(step, s, name, -1, arrive[s], end[s] - arrive[s],
                       None if xfer is None else xfer[s])
                k_op[s] += 1
            t = end
        table = _rows(cfg, out)
        ends = pc.add(table["start_ns"], table["duration_ns"])
        yield table, pc.max(ends).as_py() - pc.min(table["start_ns"]).as_py()


def _rows(cfg: TimelineConfig, out: dict[str, list]) -> pa.Table:
    stage = np.concatenate(out["stage"])
    dpr = np.concatenate(out["dp"])
    ops = np.concatenate(out["op"])
    n = len(stage)
    tp = cfg.tp
    cols = {
        "stage": np.repeat(stage, tp), "dp_rank": np.repeat(dpr, tp),
        "tp_rank": np.tile(np.arange(tp), n),
        "step": np.repeat(np.concatenate(out["step"]), tp),
        "op": pa.DictionaryArray.from_arrays(pa.array(np.repeat(ops, tp), pa.int16()),
                                             pa.array(OP_NAMES)).cast(pa.string()),
        "microbatch": np.repeat(np.concatenate(out["mb"]), tp),
        "start_ns": np.repeat(np.round(np.concatenate(out["start"]) * 1e6).astype(np.int64),
                              tp),
        "duration_ns": np.repeat(np.round(np.concatenate(out["dur"]) * 1e6).astype(np.int64),
                                 tp),
    }
    cols["rank"] = cols["tp_rank"] + tp * (cols["dp_rank"] + cfg.dp * cols["stage"])
    cols["chunk"] = np.zeros(n * tp, dtype=np.int32)
    xfer = np.repeat(np.concatenate(out["transfer"]), tp)
    cols["transfer_ns"] = pa.array(np.minimum(np.round(xfer * 1e6).astype(np.int64),
                                              cols["duration_ns"]),
                                   mask=(xfer < 0) | (not cfg.transfer_given))
    return pa.table({f.name: pa.array(cols[f.name], type=f.type)
                     if not isinstance(cols[f.name], pa.Array) else cols[f.name]
                     for f in OP_TIMELINE_SCHEMA}, schema=OP_TIMELINE_SCHEMA)


def write_timeline(cfg: TimelineConfig, out: str | os.PathLike) -> tuple[Path, np.ndarray]:
    """The op timeline as ``out`` (a .parquet file, written a step at a time; a .csv or
    .jsonl file) and each step's true time (ns)."""
    path = Path(out)
    if path.suffix not in (".parquet", ".csv", ".jsonl"):
        raise UsageError(f"{path}: name it .parquet, .csv or .jsonl (the format written)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    times = []
    try:
        if path.suffix in (".csv", ".jsonl"):
            table, steps = simulate_steps(cfg)
            times = list(steps)
            if path.suffix == ".csv":
                from pyarrow import csv
                csv.write_csv(table, tmp)
            else:
                import orjson
                with open(tmp, "wb") as f:
                    for row in table.to_pylist():
                        f.write(orjson.dumps(row) + b"\n")
        else:
            import pyarrow.parquet as pq
            with pq.ParquetWriter(tmp, OP_TIMELINE_SCHEMA) as writer:
                for table, ns in step_tables(cfg):
                    writer.write_table(table)
                    times.append(ns)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path, np.array(times, dtype=np.int64)
