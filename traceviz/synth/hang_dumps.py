"""NCCL Flight Recorder dumps of a synthesized Megatron-like hang, with its truth.

A job of ``world`` ranks laid out as Megatron does (TP fastest, then DP, then PP: rank =
tp_rank + tp * (dp_rank + dp * pp_rank)); each step every rank runs, in order: a receive
from the previous stage, two TP all-reduces, a send to the next stage (forward), a
receive from the next stage, two TP all-reduces, a send to the previous stage
(backward), a DP reduce-scatter and all-gather and a world all-reduce. The ranks in
``stopped`` issue nothing from step ``stop_step`` on (a stuck data loader); every other
rank runs each op as far as blocking semantics allow: an op completes once every member
entered it, a rank enters its ops in order and waits in the first that does not
complete. Each dump keeps the last ``ring`` entries (the ring buffer), in the layout
PyTorch 2.11 writes (format 2.10).

Imports nothing of the analysis it checks.
"""
from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HangTruth:
    """What the synthesized dumps must be read as."""

    stopped: tuple[int, ...]
    waiting: dict[int, tuple[str, str]]   # rank -> (its op's group description, op name)
    groups: dict[str, tuple[str, tuple[int, ...]]]  # pg name -> (desc, ranks)


def hang_dumps(world: int, tp: int = 2, pp: int = 2, stopped: tuple[int, ...] = (1,),
               steps: int = 3, stop_step: int = 2, ring: int = 2000
               ) -> tuple[dict[int, dict], HangTruth]:
    """Every rank's dump (a dict as the Flight Recorder writes it) and the truth."""
    dp = world // (tp * pp)
    if dp * tp * pp != world:
        raise ValueError(f"world {world} is not tp {tp} x pp {pp} x dp")
    groups: dict[str, tuple[str, tuple[int, ...]]] = {"0": ("default_pg", tuple(range(world)))}
    of: dict[int, dict[str, str]] = {r: {"world": "0"} for r in range(world)}

    def add(kind: str, desc: str, members: list[int]) -> None:
        name = str(len(groups))
        groups[name] = (desc, tuple(members))
        for r in members:
            of[r][kind] = name

    for p in range(pp):
        for d in range(dp):
            add("tp", "TENSOR_MODEL_PARALLEL_GROUP", [t + tp * (d + dp * p) for t in range(tp)])
    for p in range(pp):
        for t in range(tp):
            add("dp", "DATA_PARALLEL_GROUP", [t + tp * (d + dp * p) for d in range(dp)])
    for d in range(dp):
        for t in range(tp):
            add("pp", "PIPELINE_MODEL_PARALLEL_GROUP", [t + tp * (d + dp * p) for p in range(pp)])
    programs = {r: _program(r, groups, of[r], steps, stop_step if r in stopped else None)
                for r in range(world)}
    done = _run(programs, groups)
    dumps = {r: _dump(r, programs[r], done[r], groups, of[r], ring) for r in range(world)}
    waiting = {r: (groups[programs[r][done[r]][0]][0], programs[r][done[r]][1])
               for r in range(world) if done[r] < len(programs[r])}
    return dumps, HangTruth(tuple(sorted(stopped)), waiting, groups)


def _program(rank: int, groups: dict, mine: dict[str, str], steps: int,
             stop: int | None) -> list[tuple[str, str, int, tuple]]:
    """The ops ``rank`` issues: (group name, op name, collective seq or -1, key)."""
    out: list[tuple[str, str, int, tuple]] = []
    seq = {g: 0 for g in mine.values()}
    sends: dict[tuple, int] = {}
    pp_ranks = groups[mine["pp"]][1]
    stage = pp_ranks.index(rank)

    def coll(kind: str, op: str) -> None:
        g = mine[kind]
        seq[g] += 1
        out.append((g, op, seq[g], (g, seq[g])))

    def p2p(peer_stage: int, send: bool) -> None:
        g = mine["pp"]
        pair = (stage, peer_stage) if send else (peer_stage, stage)
        n = sends.get(pair, 0)
        sends[pair] = n + 1
        name = f"send {stage}->{peer_stage}" if send else f"recv {stage}<-{peer_stage}"
        out.append((g, name, -1, (g, pair, n)))

    last = len(pp_ranks) - 1
    for step in range(steps if stop is None else stop):
        if stage > 0:
            p2p(stage - 1, False)
        coll("tp", "all_reduce")
        coll("tp", "all_reduce")
        if stage < last:
            p2p(stage + 1, True)
            p2p(stage + 1, False)
        coll("tp", "all_reduce")
        coll("tp", "all_reduce")
        if stage > 0:
            p2p(stage - 1, True)
        coll("dp", "_reduce_scatter_base")
        coll("dp", "_allgather_base")
        coll("world", "all_reduce")
    return out


def _run(programs: dict[int, list], groups: dict) -> dict[int, int]:
    """How many of its ops each rank completed (blocking semantics, see the module doc)."""
    at = {r: 0 for r in programs}
    arrived: dict[tuple, set[int]] = {}
    ready = list(programs)
    while ready:
        nxt = []
        for r in ready:
            prog = programs[r]
            if at[r] >= len(prog):
                continue
            g, _, seq, key = prog[at[r]]
            members = groups[g][1] if seq >= 0 else tuple(groups[g][1][s] for s in key[1])
            here = arrived.setdefault(key, set())
            here.add(r)
            if len(here) == len(members):
                for m in members:
                    at[m] += 1
                    nxt.append(m)
        ready = nxt
    return at


def _dump(rank: int, prog: list, done: int, groups: dict, mine: dict[str, str],
          ring: int) -> dict:
    entries = []
    p2p_seq = 0
    for i, (g, op, seq, _) in enumerate(prog[:done + 1]):
        state = "completed" if i < done else "started"
        if seq < 0:
            p2p_seq += 1
        entries.append({
            "record_id": i, "pg_id": int(g), "process_group": (g, groups[g][0]),
            "collective_seq_id": max(seq, 0), "p2p_seq_id": p2p_seq if seq < 0 else 0,
            "op_id": i, "profiling_name": f"nccl:{op}", "time_created_ns": 10**18 + i,
            "input_sizes": [[1048576]], "input_dtypes": ["Float"],
            "output_sizes": [[1048576]], "output_dtypes": ["Float"], "state": state,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": seq < 0,
            "frames": [{"name": "train_step", "filename": "pretrain_gpt.py", "line": 100 + i % 7}]})
    status = {}
    for g in mine.values():
        seqs = [(s, i < done) for i, (gg, _, s, _) in enumerate(prog[:done + 1])
                if gg == g and s >= 0]
        status[g] = {"last_enqueued_collective": max((s for s, _ in seqs), default=-1),
                     "last_started_collective": -1,
                     "last_completed_collective": max((s for s, c in seqs if c), default=-1)}
    return {"version": "2.10", "comm_lib_version": "2.28.9",
            "pg_config": {g: {"name": g, "desc": groups[g][0], "ranks": str(list(groups[g][1]))}
                          for g in sorted(set(mine.values()), key=int)},
            "pg_status": status, "entries": entries[-ring:]}


def write_dumps(folder: str | Path, dumps: dict[int, dict], as_json: bool = False) -> Path:
    """``dumps`` as ``folder/nccl_trace_rank_<rank>`` (pickles, or JSON)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for rank, d in dumps.items():
        path = folder / f"nccl_trace_rank_{rank}"
        if as_json:
            path.write_text(json.dumps(d))
        else:
            path.write_bytes(pickle.dumps(d))
    return folder
