"""Op-level performance model of one rank: each modelled operator call's FLOPs and bytes
(:mod:`.op_model`), the GPU time of the kernels it launched, its achieved TFLOP/s and
TB/s and their share of the device's peak; what could not be modelled; GPU time per
model module; FLOPs per iteration (achieved TFLOP/s and MFU from the trace itself).

**Which op a kernel belongs to.** A kernel's launching runtime call sits inside a stack
of CPU operators on its thread (nesting by time). The kernel belongs to the innermost
enclosing operator that has a model (``aten::linear`` -> ``aten::addmm`` -> kernel: to
``addmm``; a kernel launched by an unmodelled child, e.g. ``aten::cudnn_convolution``
under ``aten::convolution``, to ``convolution``). Communication kernels are not
operators' work and are left out. A compute / memory kernel with no modelled operator
around it is *not modelled*, counted under its innermost operator's name.

**Module.** The module path of a kernel: the names of the ``nn.Module: ...`` python
frames and ``record_function`` / ``user_annotation`` ranges (not ``ProfilerStep#``, not
``nccl:``) around its launch, outermost first, joined by ``/``. A backward kernel
launched by the autograd thread (no module frames) takes the path of the forward
operator with the same autograd ``Sequence number``.

**Per iteration.** FLOPs of the calls launched in ``ProfilerStep#N`` (their first
kernel's launch); achieved TFLOP/s per GPU = FLOPs / the step's window on the GPU
(:mod:`.iterations`; its CPU span is ``cpu_span_ns``); MFU = that / the device's peak for
BF16 (or ``peak_tflops``). *Model* FLOPs leave out recompute (phase RECOMPUTE);
*executed* FLOPs count it too. Units: FLOPs, bytes, ns; TFLOP/s = FLOPs / ns / 1e3,
TB/s = bytes / ns / 1e3; a call's % of peak or an iteration's MFU / HFU above 100 means
the model, the shapes or the peak is wrong: it is null (n/a), never clipped, and the
command says so. An iteration in which a CUDA graph replayed compute kernels outside
every modelled op (``cudaGraphLaunch``: the ops ran when the graph was captured, before
the trace) has unknown FLOPs: null, with the reason in ``flops_unknown``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numba import njit

from ..table.arrays import codes_of, ints, row_texts, unique_rows
from ..table.schema import GRAPH_LAUNCH, metadata
from .activities import activities
from .devices import Device, device_of
from .host_device import ACTIVITY, CPU_OP, PYTHON, USER_ANNOT, RankEvents, rank_events
from .iterations import windows
from .op_model import Model, compact, family, model

MODULE_FRAME = re.compile(r"^nn\.Module: (.+)$")
NOT_A_MODULE = re.compile(r"^(ProfilerStep#|nccl:|Optimizer\.)")


@dataclass
class RankOps:
    """One rank's op model (see the module doc)."""

    rank: int
    calls: pa.Table
    not_modelled: pa.Table
    modules: pa.Table
    iterations: pa.Table
    device: str | None
    peak_tflops: float | None


@njit(cache=True)
def _parents(order, tid, ts, end):
    """Innermost event that holds each event whole (-1: none), per thread; ``order``
    sorts by (thread, start, longest first). An event that overlaps another only in
    part is not its child (nor its parent)."""
    parent = np.full(ts.size, -1, np.int64)
    stack = np.empty(order.size, np.int64)
    depth = 0
    last_tid = -(2 ** 62)
    for i in order:
        if tid[i] != last_tid:
            depth = 0
            last_tid = tid[i]
        while depth > 0 and (end[stack[depth - 1]] <= ts[i]
                             or end[stack[depth - 1]] < end[i]):
            depth -= 1
        if depth > 0:
            parent[i] = stack[depth - 1]
        stack[depth] = i
        depth += 1
    return parent


def _nearest(parent: np.ndarray, start: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each row of ``start``: itself or its nearest ancestor where ``wanted`` (-1)."""
    out = np.full(start.size, -1, np.int64)
    cur = start.copy()
    for _ in range(256):
        live = (out < 0) & (cur >= 0)
        if not live.any():
            break
        hit = live & wanted[np.maximum(cur, 0)]
        out[hit] = cur[hit]
        cur = np.where(live & ~hit, parent[np.maximum(cur, 0)], -1)
    return out


def _wrappers(ev: RankEvents, parent: np.ndarray, modelled: np.ndarray) -> np.ndarray:
    """The attention calls that hold another attention call (``scaled_dot_product_attention``
    around ``_scaled_dot_product_flash_attention`` around ``_flash_attention_forward``;
    flash-attn's ``FlashAttnFunc`` around ``flash_attn::_flash_attn_forward``): wrappers,
    whose work the innermost call counts once. A kernel a wrapper launches itself belongs
    to the next modelled operator around it, or is not modelled."""
    attention = np.array([family(t) == "attention" for t in ev.names] + [False])
    attn = modelled & attention[ev.name]
    wrapper = np.zeros(attn.size, bool)
    cur = parent[np.flatnonzero(attn)]
    for _ in range(256):
        cur = cur[cur >= 0]
        if not cur.size:
            break
        wrapper[cur[attn[cur]]] = True
        cur = parent[cur]
    return wrapper


def rank_ops(gpu: pa.Table, cpu: pa.Table, peak_tflops: float | None = None) -> RankOps:
    """The op model of one rank from its GPU and CPU tables (see the module doc)."""
    ev = rank_events(gpu, cpu)
    meta = metadata(gpu)
    rank = int(meta.get("rank", -1))
    props = meta.get("device_properties") or []
    name = next((p.get("name") for p in props if isinstance(p, dict) and p.get("name")),
                None)
    dev: Device | None = device_of(name)
    peak = peak_tflops or (dev.peak("bf16") if dev else None)
    host = ~ev.gpu
    order = np.flatnonzero(host)
    order = order[np.lexsort((ev.order[order], -ev.dur[order], ev.ts[order],
                              ev.tid[order], ev.pid[order]))]
    tid_key = ev.pid * np.int64(1 << 32) + ev.tid
    parent = _parents(order, tid_key, ev.ts, ev.end)
    fam_of_name = np.array([family(t) is not None for t in ev.names] + [False])
    modelled = (ev.cls == CPU_OP) & fam_of_name[ev.name]
    modelled &= ~_wrappers(ev, parent, modelled)
    # kernels: compute and memory activities with a launch call
    kind = row_texts(gpu, "kind", "")
    launched = np.flatnonzero((ev.cls == ACTIVITY) & (ev.link >= 0))
    acts = launched[np.isin(kind[ev.table_row[launched]], ("COMP", "MEM"))]
    owner = _nearest(parent, ev.link[acts], modelled)
    # one model per distinct (name, shapes) of the owners
    owners = np.unique(owner[owner >= 0])
    crow = ev.cpu_row[owners]
    dims = row_texts(cpu, "input_dims")[crow].tolist()
    types = row_texts(cpu, "input_types")[crow].tolist()
    concrete = row_texts(cpu, "concrete_inputs")[crow].tolist()
    cache: dict[tuple, Model] = {}
    models = []
    for o, d, t, c in zip(owners.tolist(), dims, types, concrete):
        key = (int(ev.name[o]), d, t, c)
        if key not in cache:
            cache[key] = model(ev.names[ev.name[o]], d, t, c)
        models.append(cache[key])
    shown = {d: compact(d) for d in set(dims)}
    calls = _calls(ev, gpu, owners, models, owner, acts, [shown[d] for d in dims], dev, peak)
    # per module: compute, memory and each communication group's kernels
    group = row_texts(gpu, "comm_group", "")
    label = np.where(kind == "COMM", "COMM " + group.astype(str), kind)
    modules = _modules(ev, gpu, parent, launched, label)
    # compute kernels a CUDA graph replayed with no modelled op around the replay: their
    # ops ran when the graph was captured, their FLOPs are unknown
    trow = ev.table_row[acts]
    replayed = (owner < 0) & (kind[trow] == "COMP") & np.array(
        [bool(GRAPH_LAUNCH.match(n)) for n in row_texts(gpu, "launch_name", "")[trow]], bool)
    it = ints(gpu["iteration"])[trow] if "iteration" in gpu.column_names else None
    blind = (np.unique(it[replayed], return_counts=True) if it is not None
             else (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    return RankOps(rank, calls, _not_modelled(ev, gpu, owner, acts, parent, replayed),
                   modules, _iterations(ev, gpu, calls, peak, dict(zip(*map(
                       np.ndarray.tolist, blind)))), name, peak)


def _first_kernel(owner, acts, ev):
    """Per owner id: sum of its kernels' ns, count, first kernel row."""
    valid = owner >= 0
    o, a = owner[valid], acts[valid]
    uniq, inv = np.unique(o, return_inverse=True)
    ns = np.bincount(inv, weights=np.maximum(ev.dur[a], 0), minlength=uniq.size)
    count = np.bincount(inv, minlength=uniq.size)
    first = np.full(uniq.size, -1, np.int64)
    by_ts = np.argsort(ev.ts[a], kind="stable")[::-1]
    first[inv[by_ts]] = a[by_ts]
    return uniq, ns.astype(np.int64), count, first


def _calls(ev: RankEvents, gpu, owners, models, owner, acts, dims, dev, peak) -> pa.Table:
    uniq, ns, count, first = _first_kernel(owner, acts, ev)
    assert np.array_equal(uniq, owners)
    trow = ev.table_row[first]
    phase = row_texts(gpu, "phase", "")[trow] if "phase" in gpu.column_names else None
    mb = ints(gpu["microbatch"])[trow] if "microbatch" in gpu.column_names else None
    it = ints(gpu["iteration"])[trow] if "iteration" in gpu.column_names else None
    flops = np.array([m.flops if m.flops is not None else np.nan for m in models])
    nbytes = np.array([m.nbytes if m.nbytes is not None else np.nan for m in models])
    with np.errstate(divide="ignore", invalid="ignore"):
        tflops = np.where(ns > 0, flops / ns / 1e3, np.nan)
        tbps = np.where(ns > 0, nbytes / ns / 1e3, np.nan)
    peaks = np.array([(peak if m.dtype == "bf16" and peak else None)
                      or (dev.peak(m.dtype) if dev and m.dtype else None) or np.nan
                      for m in models])
    # FP32 faster than the FP32 peak ran on TF32 tensor cores (cuDNN's default for
    # convolutions, torch.backends.cuda.matmul.allow_tf32 for GEMMs): the TF32 peak
    tf32 = dev.peak("tf32") if dev else None
    fp32 = np.array([m.dtype == "fp32" for m in models], bool)
    if tf32:
        peaks = np.where(fp32 & (tflops > peaks), tf32, peaks)
    bw = dev.tbps if dev else np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        pct_peak = 100.0 * tflops / peaks
        pct_bw = 100.0 * tbps / bw
    # above 100 % the model, the shapes or the peak is wrong: unknown, not a number
    pct_peak = np.where(pct_peak > 100.0, np.nan, pct_peak)
    pct_bw = np.where(pct_bw > 100.0, np.nan, pct_bw)

    def col(x, t=pa.float64()):
        x = np.asarray(x, np.float64)
        return pa.array(x, t, mask=~np.isfinite(x))

    return pa.table({
        "rank": pa.array(np.full(owners.size, ev.rank), pa.int32()),
        "op": [ev.names[ev.name[o]] for o in owners.tolist()],
        "event_index": pa.array(ev.order[owners], pa.int64()),
        "family": [m.family for m in models],
        "input_dims": dims, "dtype": [m.dtype for m in models],
        "flops": col(flops), "bytes": col(nbytes),
        "gpu_ns": pa.array(ns, pa.int64()), "kernels": pa.array(count, pa.int64()),
        "start_ns": pa.array(ev.ts[first], pa.int64()),
        "tflops": col(tflops), "tbps": col(tbps),
        "pct_peak_flops": col(pct_peak), "pct_peak_bw": col(pct_bw),
        "phase": None if phase is None else [p or None for p in phase.tolist()],
        "microbatch": None if mb is None else pa.array(mb, pa.int64(), mask=mb < 0),
        "iteration": None if it is None else pa.array(it, pa.int64(), mask=it < 0),
    })


def _sum_by(codes: list[np.ndarray], ns: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows of the stacked ``codes``, summed ``ns`` per row), largest first."""
    if ns.size == 0:
        return np.empty((0, len(codes)), np.int64), np.empty(0, np.int64)
    keys, inv = unique_rows(np.stack(codes, 1))
    total = np.bincount(inv, weights=ns, minlength=keys.shape[0]).astype(np.int64)
    order = np.argsort(-total, kind="stable")
    return keys[order], total[order]


def _not_modelled(ev: RankEvents, gpu, owner, acts, parent, replayed) -> pa.Table:
    """Compute / memory kernels without a modelled op, per innermost op name and whether
    a CUDA graph replayed them (``replayed``): GPU ns and share of all compute / memory
    kernels' time."""
    innermost = _nearest(parent, ev.link[acts], ev.cls == CPU_OP)
    dur = np.maximum(ev.dur[acts], 0)
    total = int(dur.sum())
    free = owner < 0
    name_id = np.where(innermost >= 0, ev.name[np.maximum(innermost, 0)], -1)
    keys, ns = _sum_by([name_id[free], replayed[free].astype(np.int64)], dur[free])
    return pa.table({"rank": pa.array(np.full(ns.size, ev.rank), pa.int32()),
                     "op": [ev.names[i] if i >= 0 else "(no CPU operator)"
                            for i in keys[:, 0].tolist()],
                     "graph_replay": pa.array(keys[:, 1].astype(bool), pa.bool_()),
                     "gpu_ns": pa.array(ns, pa.int64()),
                     "pct_of_gpu_time": pa.array(100.0 * ns / total if total else
                                                 np.full(ns.size, np.nan), pa.float64(),
                                                 mask=np.full(ns.size, not total))})


def _modules(ev: RankEvents, gpu, parent, acts, kind) -> pa.Table:
    """GPU ns per (module path, phase, kind: COMP, MEM or ``COMM <group>``): see the
    module doc."""
    is_frame = np.array([bool(MODULE_FRAME.match(t)) for t in ev.names] + [False])
    not_mod = np.array([bool(NOT_A_MODULE.match(t)) for t in ev.names] + [False])
    scope = (((ev.cls == PYTHON) & is_frame[ev.name])
             | ((ev.cls == USER_ANNOT) & ~not_mod[ev.name]))
    rows = np.flatnonzero(scope)
    rows = rows[np.lexsort((-ev.dur[rows], ev.ts[rows]))]  # a parent before its children
    up = _nearest(parent, parent[rows], scope)
    paths: list[str] = []
    path_of_row = np.full(len(ev), -1, np.int64)
    for r, u in zip(rows.tolist(), up.tolist()):
        text = ev.names[ev.name[r]]
        m = MODULE_FRAME.match(text)
        here = m[1] if m else text
        path_of_row[r] = len(paths)
        paths.append(f"{paths[path_of_row[u]]}/{here}" if u >= 0 else here)
    around = _nearest(parent, ev.link[acts], scope)
    path = np.where(around >= 0, path_of_row[np.maximum(around, 0)], -1)
    # a kernel outside any module: the path of the forward op with its op's Sequence number
    fwd_ops = np.flatnonzero((ev.cls == CPU_OP) & (ev.seq >= 0))
    fwd_scope = _nearest(parent, fwd_ops, scope)
    fwd_ops, fwd_scope = fwd_ops[fwd_scope >= 0], fwd_scope[fwd_scope >= 0]
    seqs, first = np.unique(ev.seq[fwd_ops], return_index=True)
    seq_path = path_of_row[fwd_scope[first]]
    owner = _nearest(parent, ev.link[acts], (ev.cls == CPU_OP) & (ev.seq >= 0))
    owner_seq = np.where(owner >= 0, ev.seq[np.maximum(owner, 0)], -1)
    if seqs.size:
        at = np.minimum(np.searchsorted(seqs, owner_seq), seqs.size - 1)
        found = (owner_seq >= 0) & (seqs[at] == owner_seq)
        path = np.where((path < 0) & found, seq_path[at], path)
    trow = ev.table_row[acts]
    phase_codes, phase_names = codes_of(gpu["phase"]) if "phase" in gpu.column_names else \
        (np.full(gpu.num_rows, -1), [])
    kind_names = sorted(set(kind[trow].tolist()))
    kind_code = np.searchsorted(np.array(kind_names, dtype=object), kind[trow])
    keys, ns = _sum_by([path, phase_codes[trow], kind_code], np.maximum(ev.dur[acts], 0))
    phase_text = [str(t) for t in phase_names]
    return pa.table({"rank": pa.array(np.full(ns.size, ev.rank), pa.int32()),
                     "module": [paths[p] if p >= 0 else "(no module)"
                                for p in keys[:, 0].tolist()],
                     "phase": [phase_text[c] if c >= 0 else None for c in keys[:, 1].tolist()],
                     "kind": [kind_names[c] for c in keys[:, 2].tolist()],
                     "gpu_ns": pa.array(ns, pa.int64())})


def _utilization(tflops: float | None, peak: float | None) -> float | None:
    """100 x ``tflops`` / ``peak``; None when either is unknown or the result is above
    100 % (impossible: the peak or the recorded shapes are wrong)."""
    if tflops is None or not peak:
        return None
    pct = 100.0 * tflops / peak
    return pct if pct <= 100.0 else None


def _iterations(ev: RankEvents, gpu: pa.Table, calls: pa.Table, peak: float | None,
                replayed: dict[int, int]) -> pa.Table:
    """Per ProfilerStep#N of the rank: its window on the GPU (:mod:`.iterations`) and its
    CPU span, model / executed FLOPs of the calls it launched, TFLOP/s, MFU and HFU
    (null above 100 %: see :func:`_utilization`). ``replayed``: per iteration, the
    compute kernels CUDA graphs replayed outside every modelled op: their FLOPs are
    unknown, so are the iteration's (null, ``flops_unknown`` says why)."""
    win = windows(activities(gpu, rank=ev.rank))
    rows = []
    n = calls.num_rows
    it = (ints(calls["iteration"]) if n and "iteration" in calls.column_names
          else np.full(n, -1, np.int64))
    raw = calls["flops"].to_numpy(zero_copy_only=False) if n else np.empty(0)
    known = np.isfinite(raw)
    flops = np.where(known, raw, 0.0)
    recompute = (np.array([p == "RECOMPUTE" for p in calls["phase"].to_pylist()], bool)
                 if n and "phase" in calls.column_names else np.zeros(n, bool))
    for k in np.flatnonzero(win.cpu_start >= 0).tolist():
        span = int(win.end[k] - win.start[k])
        inside = it == win.iteration[k]
        # unknown (null), not 0, when no call of the step has FLOPs, or a graph replayed
        # kernels whose ops were captured outside the trace
        blind = replayed.get(int(win.iteration[k]), 0)
        has = bool((inside & known).any()) and span > 0 and not blind
        executed = float(flops[inside].sum()) if has else None
        mdl = float(flops[inside & ~recompute].sum()) if has else None
        tf = mdl / span / 1e3 if mdl is not None else None
        rows.append({"rank": ev.rank, "iteration": int(win.iteration[k]), "span_ns": span,
                     "cpu_span_ns": int(win.cpu_end[k] - win.cpu_start[k]),
                     "model_flops": mdl, "executed_flops": executed,
                     "model_tflops": tf,
                     "mfu_pct": _utilization(tf, peak),
                     "hfu_pct": _utilization(executed / span / 1e3 if executed is not None
                                             else None, peak),
                     "flops_unknown": (f"{blind} compute kernel(s) replayed from CUDA "
                                       "graphs: their ops were captured before the trace, "
                                       "their FLOPs are not in it" if blind else None)})
    return pa.Table.from_pylist(rows, schema=pa.schema([
        ("rank", pa.int32()), ("iteration", pa.int64()), ("span_ns", pa.int64()),
        ("cpu_span_ns", pa.int64()), ("model_flops", pa.float64()),
        ("executed_flops", pa.float64()), ("model_tflops", pa.float64()),
        ("mfu_pct", pa.float64()), ("hfu_pct", pa.float64()),
        ("flops_unknown", pa.string())]))
