"""Hand-built multi-rank Kineto traces for tests whose expected numbers are worked out by
hand (not by traceviz's synthesizer): each kernel written as PyTorch's profiler writes it
(a ``cudaLaunchKernel`` with its correlation and flow, the kernel on a stream, collective
arguments on communication kernels: ``Process Group Name`` / ``Ranks``, ``Seq``, and for
a send / receive ``Dst Rank`` / ``Src Rank`` = the peer's *global* rank and ``Rank`` =
the peer's rank in the group), no python stacks, no ``cuda_sync`` events.

Times are in µs on the rank's clock (``skew`` µs ahead of the true clock)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class K:
    """One kernel: true start / end (µs), what it is, and when its launch returned."""

    start: float
    end: float
    name: str = "sm90_gemm_bf16"
    stream: int = 7
    coll: str | None = None      # Collective name (allreduce, send, recv, ...)
    group: list[int] | None = None  # the process group's global ranks
    pg: str = ""                 # Process Group Name
    desc: str | None = None      # Process Group Description
    seq: int | None = None
    peer: int | None = None      # send / recv: the peer's global rank
    nbytes: int = 1 << 20
    launch_end: float | None = None  # default: 5 µs before the kernel starts
    # a coalesced block (batch_isend_irecv, _coalescing_manager), as PyTorch 2.11 writes
    # it: one record_param_comms per (Collective name, peer's global rank or None)
    # before the launch, launching nothing (``Seq`` = ``seq`` where set), the launch
    # inside ``nccl:coalesced``, the kernel without args
    ops: list[tuple[str, int | None]] = field(default_factory=list)


@dataclass
class Rank:
    rank: int
    world: int
    kernels: list[K]
    steps: list[tuple[int, float, float]]  # (iteration, start, end) µs
    skew: float = 0.0
    pg_config: list[dict] = field(default_factory=list)


def trace(r: Rank) -> dict:
    """The Kineto trace of one hand-built rank."""
    events: list[dict] = []
    pid, tid = 100 + r.rank, 1

    def at(t: float) -> float:
        return round(t + r.skew, 3)

    for it, a, b in r.steps:
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{it}",
                       "pid": pid, "tid": tid, "ts": at(a), "dur": round(b - a, 3)})
    for i, k in enumerate(r.kernels):
        corr = 1000 * (r.rank + 1) + i
        le = k.launch_end if k.launch_end is not None else k.start - 5
        for j, (coll, peer) in enumerate(k.ops):  # each op 1 µs, ending before the launch
            t = le - 4 - 1.5 * (len(k.ops) - j)
            op_args: dict = {
                "Collective name": coll, "dtype": "BFloat16",
                "In msg nelems": k.nbytes // 2, "Out msg nelems": k.nbytes // 2,
                "Group size": len(k.group), "Process Group Name": k.pg,
                "Process Group Description": k.desc or "undefined",
                "Process Group Ranks": json.dumps(k.group), "Rank": k.group.index(r.rank)}
            if peer is not None:
                op_args["Rank"] = k.group.index(peer)
                op_args["Dst Rank" if coll == "send" else "Src Rank"] = peer
            if k.seq is not None:
                op_args["Seq"] = k.seq
            events.append({"ph": "X", "cat": "cpu_op", "name": "record_param_comms",
                           "pid": pid, "tid": tid, "ts": at(t), "dur": 1, "args": op_args})
        if k.ops:
            events.append({"ph": "X", "cat": "user_annotation", "name": "nccl:coalesced",
                           "pid": pid, "tid": tid, "ts": at(le - 3.5), "dur": 4})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                       "pid": pid, "tid": tid, "ts": at(le - 3), "dur": 3,
                       "args": {"correlation": corr, "External id": corr}})
        args: dict = {"device": 0, "stream": k.stream, "correlation": corr,
                      "External id": corr}
        if k.coll is not None:
            me = k.group.index(r.rank)
            args.update({"Collective name": k.coll, "dtype": "BFloat16",
                         "In msg nelems": k.nbytes // 2, "Out msg nelems": k.nbytes // 2,
                         "Group size": len(k.group), "Process Group Name": k.pg,
                         "Process Group Ranks": json.dumps(k.group), "Rank": me})
            if k.desc:
                args["Process Group Description"] = k.desc
            if k.seq is not None:
                args["Seq"] = k.seq
            if k.peer is not None:  # as torch/csrc/profiler/util.cpp writes it
                args["Rank"] = k.group.index(k.peer)
                args["Dst Rank" if k.coll == "send" else "Src Rank"] = k.peer
        events.append({"ph": "X", "cat": "kernel", "name": k.name, "pid": 0,
                       "tid": k.stream, "ts": at(k.start), "dur": round(k.end - k.start, 3),
                       "args": args})
        events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": at(le - 3),
                       "cat": "ac2g", "name": "ac2g"})
        events.append({"ph": "f", "id": corr, "pid": 0, "tid": k.stream, "ts": at(k.start),
                       "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return {"schemaVersion": 1,
            "distributedInfo": {"backend": "nccl", "rank": r.rank, "world_size": r.world,
                                "pg_config": r.pg_config},
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
            "traceEvents": events}


def write_job(folder: Path, ranks: list[Rank]) -> Path:
    """One ``rank_XXXX.json`` per rank under ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        (folder / f"rank_{r.rank:04d}.json").write_text(json.dumps(trace(r), indent=1))
    return folder
