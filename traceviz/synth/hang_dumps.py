"""NCCL Flight Recorder dumps of a synthesized Megatron-like hang, with its truth.

A job of ``world`` ranks laid out as Megatron does (TP fastest, then DP, then PP: rank =
tp_rank + tp * (dp_rank + dp * pp_rank)); with ``ep`` > 1 a mixture-of-experts layer:
expert-parallel groups of ``ep`` consecutive DP ranks (same TP rank and stage) and an
expert-tensor-parallel group per TP group. Each step every rank runs, in order: a
receive from the previous stage, a TP all-reduce, (MoE: an EP all-to-all dispatching
tokens, whose sizes differ per rank, an ETP all-reduce, an EP all-to-all combining
them,) a TP all-reduce and a send to the next stage (forward); the same backward, with
the sends to the previous stage; a DP reduce-scatter and all-gather and a world
all-reduce. Point-to-point ops are named as PyTorch names them, by ranks in the group
(``send 0->1``).

Two faults, from step ``stop_step`` on: the ranks in ``stopped`` issue nothing more (a
stuck data loader, an exception); the ranks in ``gpu_fault`` issue their next op but
their GPU never starts it (a GPU fault). Every other rank runs each op as far as
blocking semantics allow: an op completes once every member entered it and no member's
GPU is stuck; a rank enters its ops in order and waits in the first that does not
complete. Each dump keeps the last ``ring`` entries (the ring buffer), in the layout
PyTorch writes (format ``version``); with ``timing`` (``TORCH_NCCL_ENABLE_TIMING``) an
op whose GPU kernel began is ``started``, else every op not completed is
``scheduled``.

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

    causes: tuple[int, ...]               # the stopped and GPU-faulted ranks
    waiting: dict[int, tuple[str, str]]   # rank -> (its op's group description, op name)
    groups: dict[str, tuple[str, tuple[int, ...]]]  # pg name -> (desc, ranks)


def hang_dumps(world: int, tp: int = 2, pp: int = 2, stopped: tuple[int, ...] = (1,),
               steps: int = 3, stop_step: int = 2, ring: int = 2000, ep: int = 1,
               gpu_fault: tuple[int, ...] = (), timing: bool = False,
               version: str = "2.10") -> tuple[dict[int, dict], HangTruth]:
    """Every rank's dump (a dict as the Flight Recorder writes it) and the truth."""
    dp = world // (tp * pp)
    if dp * tp * pp != world or dp % ep:
        raise ValueError(f"world {world} is not tp {tp} x pp {pp} x dp (a multiple of ep {ep})")
    groups: dict[str, tuple[str, tuple[int, ...]]] = {"0": ("default_pg", tuple(range(world)))}
    of: dict[int, dict[str, str]] = {r: {"world": "0"} for r in range(world)}

    def add(kind: str, desc: str, members: list[int]) -> None:
        name = str(len(groups))
        groups[name] = (desc, tuple(members))
        for r in members:
            of[r][kind] = name

    def rank(t: int, d: int, p: int) -> int:
        return t + tp * (d + dp * p)

    for p in range(pp):
        for d in range(dp):
            add("tp", "TENSOR_MODEL_PARALLEL_GROUP", [rank(t, d, p) for t in range(tp)])
    for p in range(pp):
        for t in range(tp):
            add("dp", "DATA_PARALLEL_GROUP", [rank(t, d, p) for d in range(dp)])
    for d in range(dp):
        for t in range(tp):
            add("pp", "PIPELINE_MODEL_PARALLEL_GROUP", [rank(t, d, p) for p in range(pp)])
    if ep > 1:
        for p in range(pp):
            for t in range(tp):
                for e0 in range(0, dp, ep):
                    add("ep", "EXPERT_MODEL_PARALLEL_GROUP",
                        [rank(t, d, p) for d in range(e0, e0 + ep)])
        for p in range(pp):
            for d in range(dp):
                add("etp", "EXPERT_TENSOR_PARALLEL_GROUP", [rank(t, d, p) for t in range(tp)])
    halt = {r: stop_step for r in (*stopped, *gpu_fault)}
    programs = {r: _program(r, groups, of[r], steps, halt.get(r), r in gpu_fault)
                for r in range(world)}
    done, entered = _run(programs, groups, set(gpu_fault))
    dumps = {r: _dump(programs[r], done[r], entered[r], groups, of[r], ring, timing,
                      r in gpu_fault, version) for r in range(world)}
    waiting = {r: (groups[programs[r][done[r]][0]][0], programs[r][done[r]][1])
               for r in range(world) if done[r] < len(programs[r]) and r not in stopped}
    return dumps, HangTruth(tuple(sorted({*stopped, *gpu_fault})), waiting, groups)


def _program(rank: int, groups: dict, mine: dict[str, str], steps: int,
             stop: int | None, one_more: bool) -> list[tuple[str, str, int, tuple]]:
    """The ops ``rank`` issues: (group name, op name, collective seq or -1, key); from
    step ``stop`` on nothing, or (``one_more``) only that step's first op."""
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

    def layer() -> None:
        coll("tp", "all_reduce")
        if "ep" in mine:
            coll("ep", "all_to_all")
            coll("etp", "all_reduce")
            coll("ep", "all_to_all")
        coll("tp", "all_reduce")

    last = len(pp_ranks) - 1
    for step in range(steps):
        start = len(out)
        if stage > 0:
            p2p(stage - 1, False)
        layer()
        if stage < last:
            p2p(stage + 1, True)
            p2p(stage + 1, False)
        layer()
        if stage > 0:
            p2p(stage - 1, True)
        coll("dp", "_reduce_scatter_base")
        coll("dp", "_allgather_base")
        coll("world", "all_reduce")
        if stop is not None and step == stop:
            del out[start + (1 if one_more else 0):]
            break
    return out


def _run(programs: dict[int, list], groups: dict, faulty: set[int]
         ) -> tuple[dict[int, int], dict[int, int]]:
    """How many of its ops each rank completed, and how many it entered (blocking
    semantics, see the module doc; a faulty rank's last op never completes)."""
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
            stuck = any(m in faulty and at[m] == len(programs[m]) - 1 for m in members)
            if len(here) == len(members) and not stuck:
                for m in members:
                    at[m] += 1
                    nxt.append(m)
        ready = nxt
    entered = {r: min(at[r] + 1, len(programs[r])) for r in programs}
    return at, entered


def _dump(prog: list, done: int, entered: int, groups: dict, mine: dict[str, str],
          ring: int, timing: bool, faulty: bool, version: str) -> dict:
    entries = []
    p2p_seq = 0
    for i, (g, op, seq, _) in enumerate(prog[:entered]):
        state = ("completed" if i < done else
                 "started" if timing and not faulty else "scheduled")
        if seq < 0:
            p2p_seq += 1
        size = 1048576 if op != "all_to_all" else 4096 * (1 + (i * 7 + len(prog)) % 5)
        entries.append({
            "record_id": i, "pg_id": int(g), "process_group": (g, groups[g][0]),
            "collective_seq_id": max(seq, 0), "p2p_seq_id": p2p_seq if seq < 0 else 0,
            "op_id": i, "profiling_name": f"nccl:{op}", "time_created_ns": 10**18 + i,
            "input_sizes": [[size]], "input_dtypes": ["Float"],
            "output_sizes": [[size]], "output_dtypes": ["Float"], "state": state,
            "retired": state == "completed", "timeout_ms": 600000, "is_p2p": seq < 0,
            "frames": [{"name": "train_step", "filename": "pretrain_gpt.py",
                        "line": 100 + i % 7}]})
    status = {}
    for g in mine.values():
        seqs = [(s, i) for i, (gg, _, s, _) in enumerate(prog[:entered])
                if gg == g and s >= 0]
        started = [s for s, i in seqs if i < done or (timing and not faulty)]
        status[g] = {"last_enqueued_collective": max((s for s, _ in seqs), default=-1),
                     "last_started_collective": max(started, default=-1) if timing else -1,
                     "last_completed_collective": max((s for s, i in seqs if i < done),
                                                      default=-1)}
    return {"version": version, "comm_lib_version": "2.28.9",
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
