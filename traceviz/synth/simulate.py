"""Discrete-event simulation of every rank's CPU threads and GPU streams.

Each rank runs its stage's program (:mod:`.program`) in order. A CPU thread (main, or
the autograd thread for backward work) issues each item: op overhead, then the launch
(``cudaLaunchKernel``), and runs ahead of the GPU, up to a synchronize (a ``sync``
item), which returns :data:`SYNC_RETURN_US` after the GPU work issued before it has
ended (all of it, or its stream's). On the GPU:

* compute items run on the compute stream after their launch and after every blocking
  communication issued before them (TP / CP / EP collectives, P2P receives);
* a collective's kernel starts on each member when that member reaches it (its stream
  is free, its launch is done and the compute work enqueued before it has finished:
  PyTorch makes the NCCL stream wait for the current stream) and ends on all members at
  the same true time, ``max(arrivals) + transfer``: waiting happens inside the kernel;
* a P2P send / receive pair behaves like a two-member collective.

Ranks advance cooperatively; a rank blocks at a collective until every member has
arrived. Times are true (unskewed) microseconds; clock skew is applied when writing.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ..errors import TraceVizError
from .config import SynthConfig
from .program import Item

BLOCKING_LANES = {"tp", "cp", "ep", "pp_fr", "pp_br"}
LAUNCH_US = {"comp": 4.0, "mem": 6.0, "coll": 7.0, "send": 7.0, "recv": 7.0, "sync": 3.0}
OVERHEAD_US = {"comp": 9.0, "mem": 12.0, "coll": 25.0, "send": 30.0, "recv": 30.0,
               "sync": 4.0}
SYNC_RETURN_US = 6.0  # a synchronize returns this long after the GPU work it waits for
ELEM_BYTES = {"BFloat16": 2, "Float": 4}
STEP_GAP_US = 150.0


@dataclass
class Timeline:
    """Times (µs, true clock) of one rank's items; aligned with its program."""

    issue: np.ndarray       # CPU start of the item's launching op
    launch: np.ndarray      # start of the launch runtime call
    launch_end: np.ndarray
    start: np.ndarray       # GPU start
    end: np.ndarray         # GPU end
    last_arrival: np.ndarray  # communication: the last member's start (NaN otherwise)
    last_rank: np.ndarray     # communication: that member's rank (-1 otherwise)
    step_start: list        # CPU start of each iteration (ProfilerStep)
    step_end: list


def transfer_us(cfg: SynthConfig, item: Item, n: int, members=()) -> float:
    """Time to move the collective's data once all members are ready (ring model),
    times the config's communication scales (and the slow link's factor where
    ``members``, the call's ranks, hold the slow link's rank on its group)."""
    size = max(item.in_nelems, item.out_nelems) * ELEM_BYTES.get(item.dtype, 2)
    factor = {"allreduce": 2 * (n - 1) / n, "_allgather_base": (n - 1) / n,
              "_reduce_scatter_base": (n - 1) / n, "all_to_allv": (n - 1) / n}.get(
                  item.collective, 1.0)
    # inside a node every group shares the GPUs' NVLink (tp_gbps); across nodes each
    # kind has its rate
    intra = bool(members) and len({m // cfg.gpus_per_node for m in members}) == 1
    gbps = cfg.tp_gbps if intra else {"tp": cfg.tp_gbps, "pp": cfg.pp_gbps}.get(
        item.group, cfg.dp_gbps)
    scale = cfg.comm_scale * {"tp": cfg.tp_comm_scale, "pp": cfg.pp_comm_scale,
                              "dp-cp": cfg.dp_comm_scale, "edp": cfg.dp_comm_scale}.get(
                                  item.group, 1.0)
    if cfg.slow_link_rank in members and item.group == cfg.slow_link_group:
        scale *= cfg.slow_link_factor
    return (8.0 + size * factor / (gbps * 1e3)) * scale


def call_indices(program: list[Item]) -> list[int]:
    """Per item: the how-many-th call on its collective group token (-1: not a collective).

    Members of one group run programs with the same calls on it, so (token, group,
    iteration, index) names one call on every member; the index is also its ``Seq``."""
    counts: dict[str, int] = {}
    out = []
    for item in program:
        if item.kind == "coll":
            out.append(counts.get(item.group, 0))
            counts[item.group] = out[-1] + 1
        else:
            out.append(-1)
    return out


def simulate(cfg: SynthConfig, programs: list[list[Item]], stage_of: list[int],
             members: dict[str, list[list[int]]], pp_groups: list[list[int]]
             ) -> list[Timeline]:
    """Timelines of all ranks for ``cfg.iterations`` iterations of their programs.

    ``members[token][rank]`` is the member list of the rank's group for a collective
    token; ``pp_groups[rank]`` its pipeline group (index = stage).
    """
    world = len(stage_of)
    rng = random.Random(cfg.seed)
    speed = [rng.uniform(1 - cfg.jitter, 1 + cfg.jitter) for _ in range(world)]
    if cfg.gpu_sigma:  # a stream of its own: the jitter's draws stay those of the seed
        spread = np.random.default_rng((cfg.seed, 1)).normal(0.0, cfg.gpu_sigma, world)
        speed = [s * max(0.5, 1.0 + d) for s, d in zip(speed, spread.tolist())]
    if cfg.straggler_rank is not None:
        speed[cfg.straggler_rank] *= cfg.straggler_factor
    calls = [call_indices(p) for p in programs]
    n_items = [len(programs[stage_of[r]]) * cfg.iterations for r in range(world)]
    # each compute kernel's own variation (per rank and item: the same in a re-run with
    # another knob changed)
    noise = [np.maximum(0.5, 1.0 + np.random.default_rng((cfg.seed, 2, r)).normal(
        0.0, cfg.kernel_noise, n_items[r])) if cfg.kernel_noise else None
             for r in range(world)]
    arrays = [{k: np.zeros(n_items[r]) for k in ("issue", "launch", "launch_end", "start",
                                                  "end")} for r in range(world)]
    for r, a in enumerate(arrays):
        a["last_arrival"] = np.full(n_items[r], np.nan)
        a["last_rank"] = np.full(n_items[r], -1, dtype=np.int64)
    step_start: list[list[float]] = [[] for _ in range(world)]
    step_end: list[list[float]] = [[] for _ in range(world)]
    cpu = [{"main": 1000.0, "bwd": 1000.0} for _ in range(world)]
    st = [_RankState() for _ in range(world)]
    last_thread = ["main"] * world
    for it in range(cfg.iterations):
        for r in range(world):  # a step begins once the rank's GPU is idle (step-end sync)
            idle = max([cpu[r]["main"], cpu[r]["bwd"],  # or its CPU is, running ahead
                        *(st[r].lanes.values() if cfg.step_sync else [])])
            cpu[r]["main"] = cpu[r]["bwd"] = idle + STEP_GAP_US
            step_start[r].append(cpu[r]["main"])
        ptr = [0] * world
        issued = [0] * world  # the CPU runs ahead of the GPU up to its next synchronize
        waiting: dict = {}
        while True:
            progress = False
            for r in range(world):
                prog = programs[stage_of[r]]
                base = it * len(prog)
                a, s = arrays[r], st[r]
                while ptr[r] < len(prog):
                    k = ptr[r]
                    item, idx = prog[k], base + k
                    while issued[r] < len(prog) and prog[issued[r]].kind != "sync":
                        _issue(r, prog[issued[r]], base + issued[r], a, cpu, last_thread)
                        issued[r] += 1
                    if item.kind == "sync":
                        if s.open_lanes:
                            break  # it returns once the work issued before it has ended
                        awaited = (s.lanes.values() if item.lane == "all"
                                   else [s.lanes.get(item.lane, 0.0)])
                        _issue(r, item, idx, a, cpu, last_thread,
                               release=max(awaited, default=0.0) + SYNC_RETURN_US)
                        issued[r] += 1
                    elif item.kind in ("comp", "mem"):
                        if item.kind == "comp" and s.open_blocking:
                            break  # its inputs are still in flight
                        if item.frame == "optimizer_step" and s.open_lanes:
                            break  # gradients must be synced first
                        ready = max(s.lanes.get("compute", 0.0), a["launch_end"][idx],
                                    s.blocking if item.kind == "comp" else 0.0)
                        if item.frame == "optimizer_step":
                            ready = max(ready, *s.lanes.values())
                        own = noise[r]
                        dur = item.dur * (speed[r] * cfg.compute_scale
                                          * (float(own[idx]) if own is not None else 1.0)
                                          if item.kind == "comp" else 1.0)
                        a["start"][idx], a["end"][idx] = ready, ready + dur
                        s.lanes["compute"] = s.last_comp = ready + dur
                    else:
                        if item.lane in s.open_lanes:
                            break  # the previous call on this stream has not ended
                        key: tuple
                        if item.kind == "coll":
                            key = ("coll", item.group, tuple(members[item.group][r]), it,
                                   calls[stage_of[r]][k])
                            expected = len(members[item.group][r])
                        else:
                            key = ("p2p", tuple(pp_groups[r]), it, item.key)
                            expected = 2
                        arrival = max(s.lanes.get(item.lane, 0.0), a["launch_end"][idx],
                                      s.last_comp)
                        s.open(item.lane)
                        group = waiting.setdefault(key, {})
                        group[r] = (arrival, idx, item)
                        if len(group) == expected:
                            _resolve(cfg, waiting.pop(key), arrays, st)
                    ptr[r] += 1
                    progress = True
            if all(ptr[r] >= len(programs[stage_of[r]]) for r in range(world)) and not waiting:
                break
            if not progress:
                raise TraceVizError(f"synth: the schedule deadlocked (waiting on "
                                    f"{sorted(waiting, key=str)[:3]})")
        for r in range(world):
            step_end[r].append(max([cpu[r]["main"], cpu[r]["bwd"],
                                    *(st[r].lanes.values() if cfg.step_sync else [])]))
    return [Timeline(issue=a["issue"], launch=a["launch"], launch_end=a["launch_end"],
                     start=a["start"], end=a["end"], last_arrival=a["last_arrival"],
                     last_rank=a["last_rank"], step_start=step_start[r],
                     step_end=step_end[r]) for r, a in enumerate(arrays)]


class _RankState:
    """GPU-side state of one rank: when each stream is free, which calls are in flight."""

    def __init__(self) -> None:
        self.lanes: dict[str, float] = {}
        self.blocking = 0.0      # end of the latest blocking call (compute waits for it)
        self.last_comp = 0.0     # end of the latest compute (NCCL streams wait for it)
        self.open_lanes: set[str] = set()
        self.open_blocking = 0   # blocking calls issued but not yet ended

    def open(self, lane: str) -> None:
        self.open_lanes.add(lane)
        if lane in BLOCKING_LANES:
            self.open_blocking += 1

    def close(self, lane: str, end: float) -> None:
        self.open_lanes.discard(lane)
        self.lanes[lane] = end
        if lane in BLOCKING_LANES:
            self.open_blocking -= 1
            self.blocking = max(self.blocking, end)


def _issue(r, item, idx, a, cpu, last_thread, release: float = 0.0) -> None:
    """CPU side: the launching op and the launch call, on the item's thread; a
    synchronize (``release``: when the GPU work it waits for has ended, plus its return)
    holds the thread until then."""
    th = item.thread
    if th != last_thread[r]:
        other = "main" if th == "bwd" else "bwd"
        # backward() hands over to the autograd thread, which hands back when done
        cpu[r][th] = max(cpu[r][th], cpu[r][other])
        last_thread[r] = th
    t = cpu[r][th]
    a["issue"][idx] = t
    a["launch"][idx] = t + OVERHEAD_US[item.kind]
    a["launch_end"][idx] = max(a["launch"][idx] + LAUNCH_US[item.kind], release)
    cpu[r][th] = a["launch_end"][idx] + 2.0


def _resolve(cfg, group: dict, arrays, states) -> None:
    """All members have arrived: the call ends at the same time on all of them. Each
    member's kernel waits from its own arrival to the last member's (the truth of
    ``wait``), then moves the data (``transfer``)."""
    n = len(group)
    item = next(iter(group.values()))[2]
    last_rank, (last, _, _) = max(group.items(), key=lambda kv: (kv[1][0], -kv[0]))
    end = last + transfer_us(cfg, item, max(n, 2), tuple(group))
    for r, (arrival, idx, it) in group.items():
        arrays[r]["start"][idx] = arrival
        arrays[r]["end"][idx] = end
        arrays[r]["last_arrival"][idx] = last
        arrays[r]["last_rank"][idx] = last_rank
        states[r].close(it.lane, end)
