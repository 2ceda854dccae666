"""Where GPU memory goes: the caching allocator's events of each rank (the allocator
table, :mod:`traceviz.parse.memory_table`), tied to the CPU op, the training phase and
the micro-batch that allocated each block.

**Timeline.** Per event on the rank's GPU (``device_type`` 1; the most common device
when there are several), in time order: the device's allocated and reserved bytes
after it (the trace's own ``Total Allocated`` / ``Total Reserved``), the bytes it
allocated (> 0) or freed (< 0), and its context: the innermost ``cpu_op`` around it on
its thread, the innermost ``nn.Module`` frame (``with_modules`` traces), and the phase,
micro-batch and iteration of the first GPU activity its thread launched at or after it
(the op that asks for a block launches the kernel that fills it; a free on the autograd
thread is the backward's).

**Peak.** The first event where allocated bytes reach their maximum in the trace (the
trace's own maximum: ``torch.cuda.max_memory_allocated`` when the maximum fell in the
profiled window). **Live at the peak**: the blocks allocated by the events before it
(and by it) and not freed since, by address, grouped by where they were allocated: in
the peak's iteration by phase and micro-batch (a forward micro-batch's are its
activations; the backward's gradients and temporaries), in an earlier iteration, or
outside every step; what the events do not explain is **before the trace** (allocated
before profiling began: parameters, optimizer state, caches): the peak's allocated bytes
less every live block. The groups add up to the peak exactly.

**Per stage.** Each rank's peak with its pipeline stage; the activations live at the
peak (forward and recompute) show the 1F1B warm-up: the first stage holds ``pp - stage``
micro-batches.

**Hostile input.** An event on the GPU whose ``Bytes`` or ``Addr`` is unreadable (absent,
not an integer, beyond int64) is left out (of the timeline and the live set) and counted
in one note of the rank. A ``Device Id`` that is unreadable or no device (below -1, the
CPU's, or above :data:`MAX_DEVICE`), a size (``Bytes``, a total) beyond ``±LIMIT`` bytes
or blocks live at the peak adding up beyond it are refused: a one-line error naming the
event and the rank's trace. So every size and every sum of live blocks is within
``±LIMIT`` (2^48): no int64 sum overflows.

Bytes are int64; times ns on the rank's clock.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import TraceVizError
from ..intervals.containment import innermost_enclosing, step_of
from ..table.arrays import codes_of, ints, row_texts
from ..table.schema import PHASES, metadata

CUDA = 1  # the allocator events' device_type of a GPU
GiB = 1 << 30
LIMIT = 1 << 48  # bytes (256 TiB): no device holds more; a size beyond it is refused
MAX_DEVICE = 1024  # the highest device id taken (-1: the CPU)
SIZES = (("Bytes", "bytes"), ("Total Allocated", "allocated"), ("Total Reserved", "reserved"))
MODULE_FRAME = re.compile(r"^nn\.Module: ")

TIMELINE_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("ts_ns", pa.int64()), ("allocated_bytes", pa.int64()),
    ("reserved_bytes", pa.int64()), ("delta", pa.int64()), ("addr", pa.int64()),
    ("op", pa.dictionary(pa.int32(), pa.string())),
    ("module", pa.dictionary(pa.int32(), pa.string())), ("iteration", pa.int32()),
    ("phase", pa.string()), ("microbatch", pa.int32())])
PEAK_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("origin", pa.string()), ("iteration", pa.int32()),
    ("phase", pa.string()), ("microbatch", pa.int32()), ("bytes", pa.int64()),
    ("blocks", pa.int64()), ("pct_of_peak", pa.float64())])
OPS_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("op", pa.string()), ("module", pa.string()),
    ("phase", pa.string()), ("bytes", pa.int64()), ("blocks", pa.int64()),
    ("largest_block", pa.int64())])
RANKS_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("stage", pa.int32()), ("device", pa.int32()),
    ("events", pa.int64()), ("peak_bytes", pa.int64()), ("peak_ts_ns", pa.int64()),
    ("peak_iteration", pa.int32()), ("peak_phase", pa.string()),
    ("peak_microbatch", pa.int32()), ("activations_bytes", pa.int64()),
    ("before_trace_bytes", pa.int64()), ("reserved_at_peak_bytes", pa.int64()),
    ("max_reserved_bytes", pa.int64())])

# origins of the bytes live at the peak
BEFORE_TRACE = "before the trace"
OUTSIDE_STEPS = "outside every step"
EARLIER = "an earlier iteration"
THIS = "the peak's iteration"


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory (see the module doc): its timeline, what is live at its peak
    by origin and by op, its summary row, its micro-batch steps' CPU windows (the
    figure shades them: (iteration, phase, micro-batch, start, end) ns), and its note
    on the events left out (None: none)."""

    rank: int
    stage: int | None
    timeline: pa.Table
    peak: pa.Table
    ops: pa.Table
    summary: dict
    windows: list[tuple[int, str, int, int, int]]
    note: str | None


def rank_memory(memory: pa.Table, gpu: pa.Table, cpu: pa.Table | None, rank: int
                ) -> RankMemory:
    """The memory of one rank from its allocator table, GPU activity table and CPU
    table (None: no op or module context); a one-line error on an absurd event (see
    the module doc)."""
    meta = metadata(gpu)
    where = f"{meta.get('source') or 'its trace'}: rank {rank}"
    _refuse_absurd(memory, where)
    stage = (meta.get("classification") or {}).get("stage")
    dev_type, device = ints(memory["device_type"]), ints(memory["device"])
    on_gpu = dev_type == CUDA
    dev = int(np.bincount(device[on_gpu & (device >= 0)]).argmax()) \
        if (on_gpu & (device >= 0)).any() else -1
    mine = on_gpu & (device == dev)
    unread = memory["bytes"].is_null().to_numpy() | memory["addr"].is_null().to_numpy()
    left_out = np.flatnonzero(mine & unread)
    note = (f"rank {rank}: {left_out.size} allocator event(s) with an unreadable Bytes or "
            f"Addr left out (first: {_event(memory, int(left_out[0]))})"
            if left_out.size else None)
    keep = np.flatnonzero(mine & ~unread)
    ts = ints(memory["ts"])[keep]
    order = keep[np.lexsort((ints(memory["index"])[keep], ts))]
    ts = ints(memory["ts"])[order]
    delta = ints(memory["bytes"])[order]
    allocated = ints(memory["allocated"])[order]
    reserved = ints(memory["reserved"])[order]
    addr = ints(memory["addr"])[order]
    thread = _thread_keys(ints(memory["pid"])[order], ints(memory["tid"])[order])
    op, module = _cpu_context(cpu, ts, ints(memory["pid"])[order], ints(memory["tid"])[order])
    iteration, phase, mb = _launch_context(gpu, ts, ints(memory["tid"])[order], meta)
    n = ts.size
    timeline = pa.table({
        "rank": pa.array(np.full(n, rank), pa.int32()), "ts_ns": pa.array(ts, pa.int64()),
        "allocated_bytes": pa.array(allocated, pa.int64()),
        "reserved_bytes": pa.array(reserved, pa.int64(), mask=reserved < 0),
        "delta": pa.array(delta, pa.int64()),
        "addr": pa.array(addr, pa.int64()),
        "op": op, "module": module,
        "iteration": pa.array(iteration, pa.int32()),
        "phase": pa.array([PHASES[p] if p >= 0 else None for p in phase.tolist()],
                          pa.string()),
        "microbatch": pa.array(mb, pa.int32())}, schema=TIMELINE_SCHEMA)
    del thread
    if not n:
        empty = _summary(rank, stage, dev, 0, None, None, None, None, None, 0, 0, None, None)
        return RankMemory(rank, stage, timeline, PEAK_SCHEMA.empty_table(),
                          OPS_SCHEMA.empty_table(), empty, [], note)
    at = int(np.argmax(allocated))  # the first event reaching the maximum
    live = _live_at(addr[:at + 1], delta[:at + 1])
    tracked = sum(delta[live].tolist())  # Python ints: exact
    if tracked > LIMIT:
        raise TraceVizError(f"{where}: the blocks live at the peak, "
                            f"{_event(memory, int(order[at]))}, add up to {tracked} bytes, "
                            "beyond 2^48 (256 TiB): no device holds that")
    peak_bytes = int(allocated[at])
    peak, acts = _peak_groups(rank, live, delta, iteration, phase, mb, iteration[at],
                              peak_bytes)
    ops = _peak_ops(rank, live, delta, op, module, phase)
    summary = _summary(rank, stage, dev, n, peak_bytes, int(ts[at]), int(iteration[at]),
                       phase[at], int(mb[at]), acts, peak_bytes - tracked, int(reserved[at]),
                       int(reserved.max()))
    return RankMemory(rank, stage, timeline, peak, ops, summary, _windows(gpu, meta), note)


def _refuse_absurd(memory: pa.Table, where: str) -> None:
    """A one-line error naming the first event (in file order) of the allocator table
    ``memory`` whose Device Id is unreadable or no device (not -1, the CPU, nor 0 to
    :data:`MAX_DEVICE`) or whose Bytes or totals lie beyond ``±LIMIT`` bytes; ``where``:
    the rank's trace and rank."""
    unread = memory["device"].is_null().to_numpy()  # absent or not an int64 integer
    device = ints(memory["device"])
    no_device = unread | (device < -1) | (device > MAX_DEVICE)
    sizes = {name: ints(memory[col], 0) for name, col in SIZES}
    huge = {name: (v < -LIMIT) | (v > LIMIT) for name, v in sizes.items()}
    bad = np.flatnonzero(no_device | np.logical_or.reduce(list(huge.values())))
    if not bad.size:
        return
    k = int(bad[0])
    if no_device[k]:
        what = ("Device Id is absent or not an integer" if unread[k]
                else f"Device Id {device[k]} is no device") + \
            f" (-1: the CPU, else 0 to {MAX_DEVICE})"
    else:
        name = next(name for name, h in huge.items() if h[k])
        what = f"{name} {sizes[name][k]} is beyond ±2^48 bytes (256 TiB): no device holds that"
    raise TraceVizError(f"{where}: {_event(memory, k)}: {what}")


def _event(memory: pa.Table, row: int) -> str:
    """Row ``row`` of the allocator table as the trace names it: its position in
    ``traceEvents`` and its ``ts`` (µs, exact)."""
    index, ts = memory["index"][row].as_py(), memory["ts"][row].as_py()
    us, ns = divmod(abs(ts), 1000)
    frac = f".{ns:03d}".rstrip("0") if ns else ""
    return f"the allocator event traceEvents[{index}] at ts {'-' if ts < 0 else ''}{us}{frac} µs"


def _summary(rank, stage, dev, n, peak, ts, it, phase, mb, acts, before, reserved,
             max_reserved) -> dict:
    return {"rank": rank, "stage": stage, "device": dev, "events": n, "peak_bytes": peak,
            "peak_ts_ns": ts, "peak_iteration": it,
            "peak_phase": PHASES[phase] if phase is not None and phase >= 0 else None,
            "peak_microbatch": mb if mb is not None and mb >= 0 else None,
            "activations_bytes": acts if peak is not None else None,
            "before_trace_bytes": before if peak is not None else None,
            "reserved_at_peak_bytes": reserved if reserved is not None and reserved >= 0
            else None,
            "max_reserved_bytes": max_reserved if max_reserved is not None
            and max_reserved >= 0 else None}


def _thread_keys(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (pid, tid)."""
    return (pid.astype(np.int64) << 32) ^ (tid.astype(np.int64) & 0xFFFFFFFF)


def _cpu_context(cpu: pa.Table | None, ts: np.ndarray, pid: np.ndarray, tid: np.ndarray
                 ) -> tuple[pa.Array, pa.Array]:
    """Per event: the innermost cpu_op and ``nn.Module`` frame around it on its thread,
    as dictionary arrays (null where none, or no CPU table): no Python object per
    event."""
    n = ts.size
    none = pa.DictionaryArray.from_arrays(pa.nulls(n, pa.int32()), pa.array([], pa.string()))
    if cpu is None or not n:
        return none, none
    codes, names = codes_of(cpu["name"])
    cat = row_texts(cpu, "cat", "")
    c_ts, c_dur = ints(cpu["ts"]), np.maximum(ints(cpu["dur"], 0), 0)
    c_thread = _thread_keys(ints(cpu["pid"]), ints(cpu["tid"]))
    _, inv = np.unique(np.concatenate([c_thread, _thread_keys(pid, tid)]),
                       return_inverse=True)
    inv = inv.ravel()
    ct, qt = inv[:c_thread.size], inv[c_thread.size:]
    is_module = np.array([bool(MODULE_FRAME.match(x)) for x in names] + [False], bool)
    out = []
    for select, strip in ((cat == "cpu_op", 0),
                          ((cat == "python_function") & is_module[codes], len("nn.Module: "))):
        rows = np.flatnonzero(select)
        hit = innermost_enclosing(c_ts[rows], c_dur[rows], ct[rows], ts, qt)
        code = np.where(hit >= 0, codes[rows][np.maximum(hit, 0)] if rows.size else -1, -1)
        out.append(pa.DictionaryArray.from_arrays(
            pa.array(code.astype(np.int32), mask=code < 0),
            pa.array([x[strip:] for x in names], pa.string())))
    return out[0], out[1]


def _launch_context(gpu: pa.Table, ts: np.ndarray, tid: np.ndarray, meta: dict
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per event: iteration, phase (index into PHASES, -1 unknown) and micro-batch of
    the first GPU activity its thread launched at or after it; an event after its
    thread's last launch: its step by time, phase unknown."""
    n = ts.size
    it_out = np.full(n, -1, np.int32)
    ph_out = np.full(n, -1, np.int64)
    mb_out = np.full(n, -1, np.int32)
    if not n or "launch_ts" not in gpu.column_names:
        return it_out, ph_out, mb_out
    lts = ints(gpu["launch_ts"])
    ltid = ints(gpu["launch_tid"])
    codes, names = codes_of(gpu["phase"])
    lut = np.array([PHASES.index(x) if x in PHASES else -1 for x in names] + [-1])
    phase = lut[codes]
    it = ints(gpu["iteration"])
    mb = ints(gpu["microbatch"])
    ok = lts >= 0
    for t in np.unique(tid).tolist():
        mine = np.flatnonzero(ok & (ltid == t))
        q = np.flatnonzero(tid == t)
        if not mine.size:
            continue
        mine = mine[np.argsort(lts[mine], kind="stable")]
        at = np.searchsorted(lts[mine], ts[q], side="left")
        found = at < mine.size
        row = mine[np.minimum(at, mine.size - 1)]
        it_out[q[found]] = it[row[found]]
        ph_out[q[found]] = phase[row[found]]
        mb_out[q[found]] = mb[row[found]]
    steps = [s for s in meta.get("steps") or [] if isinstance(s, dict) and "ts" in s]
    late = np.flatnonzero(it_out < 0)
    if steps and late.size:
        it_out[late] = step_of(ts[late], np.array([s["ts"] for s in steps], np.int64),
                               np.array([s.get("dur", 0) for s in steps], np.int64),
                               np.array([s["iteration"] for s in steps], np.int64))
    return it_out, ph_out, mb_out


def _live_at(addr: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """Positions of the allocations among these events (in order) whose block is still
    allocated after the last one: an allocation at an address, not freed by a later
    event at that address."""
    live: dict[int, int] = {}
    for k, (a, d) in enumerate(zip(addr.tolist(), delta.tolist())):
        if d > 0:
            live[a] = k
        elif d < 0:
            live.pop(a, None)
    return np.array(sorted(live.values()), np.int64)


def _peak_groups(rank: int, live: np.ndarray, delta: np.ndarray, iteration: np.ndarray,
                 phase: np.ndarray, mb: np.ndarray, peak_it: int, peak_bytes: int
                 ) -> tuple[pa.Table, int]:
    """The bytes live at the peak by origin (see the module doc; they add up to
    ``peak_bytes``), and those of them that are activations (the peak's iteration's
    forward and recompute)."""
    groups: dict[tuple, list[int]] = {}
    for k in live.tolist():
        it = int(iteration[k])
        key: tuple[str, int | None, str | None, int | None]
        if it < 0:
            key = (OUTSIDE_STEPS, None, None, None)
        elif it != peak_it:
            key = (EARLIER, it, None, None)
        else:
            p = int(phase[k])
            key = (THIS, it, PHASES[p] if p >= 0 else None,
                   int(mb[k]) if mb[k] >= 0 else None)
        g = groups.setdefault(key, [0, 0])
        g[0] += int(delta[k])
        g[1] += 1
    tracked = sum(g[0] for g in groups.values())
    found: list[tuple[str, int | None, str | None, int | None, int, int | None]] = [
        (BEFORE_TRACE, None, None, None, peak_bytes - tracked, None)]
    found += [(o, it, ph, m, b, c) for (o, it, ph, m), (b, c) in sorted(
        groups.items(), key=lambda kv: (-kv[1][0], str(kv[0])))]
    rows = [{"rank": rank, "origin": o, "iteration": it, "phase": ph, "microbatch": m,
             "bytes": b, "blocks": c,
             "pct_of_peak": 100.0 * b / peak_bytes if peak_bytes > 0 else None}
            for o, it, ph, m, b, c in found]
    acts = sum(b for (o, _, ph, _), (b, _) in groups.items()
               if o == THIS and ph in ("FWD", "RECOMPUTE"))
    return pa.Table.from_pylist(rows, schema=PEAK_SCHEMA), acts


def _peak_ops(rank: int, live: np.ndarray, delta: np.ndarray, op: pa.Array,
              module: pa.Array, phase: np.ndarray) -> pa.Table:
    """The bytes live at the peak by the op (and module, phase) that allocated them,
    largest first."""
    acc: dict[tuple, list[int]] = {}
    ops, mods = op.take(pa.array(live)).to_pylist(), module.take(pa.array(live)).to_pylist()
    for k, o, m in zip(live.tolist(), ops, mods):
        p = int(phase[k])
        g = acc.setdefault((o, m, PHASES[p] if p >= 0 else None), [0, 0, 0])
        g[0] += int(delta[k])
        g[1] += 1
        g[2] = max(g[2], int(delta[k]))
    rows = [{"rank": rank, "op": o, "module": m, "phase": p, "bytes": b, "blocks": c,
             "largest_block": big}
            for (o, m, p), (b, c, big) in sorted(acc.items(), key=lambda kv: -kv[1][0])]
    return pa.Table.from_pylist(rows, schema=OPS_SCHEMA)


def _windows(gpu: pa.Table, meta: dict) -> list[tuple[int, str, int, int, int]]:
    """The CPU windows of the rank's micro-batch steps: per (iteration, phase,
    micro-batch) of FWD / BWD / RECOMPUTE activities, their first launch start to their
    last launch end (where the allocations they ask for happen)."""
    if "launch_ts" not in gpu.column_names:
        return []
    lts = ints(gpu["launch_ts"])
    lend = lts + np.maximum(ints(gpu["launch_dur"], 0), 0)
    phase = row_texts(gpu, "phase", "")
    mb, it = ints(gpu["microbatch"]), ints(gpu["iteration"])
    sel = np.flatnonzero((lts >= 0) & (mb >= 0) & np.isin(phase, ("FWD", "BWD")))
    spans: dict[tuple, list[int]] = {}
    for k in sel.tolist():
        key = (int(it[k]), str(phase[k]), int(mb[k]))
        s = spans.setdefault(key, [int(lts[k]), int(lend[k])])
        s[0], s[1] = min(s[0], int(lts[k])), max(s[1], int(lend[k]))
    return sorted((k[0], k[1], k[2], a, b) for k, (a, b) in spans.items())


@dataclass(frozen=True)
class JobMemory:
    """Every rank's memory and the job's summary (one row per rank)."""

    ranks: list[RankMemory]

    def tables(self) -> dict[str, pa.Table]:
        """``memory_timeline``, ``memory_peak``, ``memory_peak_ops``, ``memory_ranks``."""
        def cat(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
            return pa.concat_tables(tables) if tables else schema.empty_table()

        return {"memory_timeline": cat([r.timeline for r in self.ranks], TIMELINE_SCHEMA),
                "memory_peak": cat([r.peak for r in self.ranks], PEAK_SCHEMA),
                "memory_peak_ops": cat([r.ops for r in self.ranks], OPS_SCHEMA),
                "memory_ranks": pa.Table.from_pylist([r.summary for r in self.ranks],
                                                     schema=RANKS_SCHEMA)}

    def stage_peaks(self) -> list[dict]:
        """Per pipeline stage (None: unknown) the rank with the highest peak: stage,
        rank, peak bytes, activations live at it."""
        best: dict = {}
        for r in self.ranks:
            s = r.summary
            if s["peak_bytes"] is None:
                continue
            cur = best.get(r.stage)
            if cur is None or s["peak_bytes"] > cur["peak_bytes"]:
                best[r.stage] = s
        return [best[k] for k in sorted(best, key=lambda s: (s is None, s or 0))]
