"""Synthesize a whole job: programs, simulation, one trace per rank, ground truth."""
from __future__ import annotations

import gzip
import io
import json
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..topology.groups_file import GroupsFile, default_name, render
from .config import SynthConfig
from .emit import RankWriter, emit_rank, write_trace
from .program import GROUPS, StageProgram
from .simulate import call_indices, simulate
from .truth import group_totals, microbatch_metrics, stage_ops

COLLECTIVE_LABEL = {"_allgather_base": "AllGather", "_reduce_scatter_base": "ReduceScatter",
                    "allreduce": "AllReduce", "all_to_allv": "AllToAll", "send": "SendRecv",
                    "recv": "SendRecv"}
# the descriptions DeviceMesh gives its groups (``mesh_<dim name>``, TorchTitan's names)
# and the layout's generator of each
MESH_DESC = {"tp": "mesh_tp", "cp": "mesh_cp", "dp-cp": "mesh_dp", "ep": "mesh_ep",
             "edp": "mesh_dp_shard_mod_ep", "pp": "mesh_pp"}
GEN = {"tp": ("dense", "tp"), "cp": ("dense", "cp"), "dp-cp": ("dense", "dp-cp"),
       "ep": ("expert", "ep"), "edp": ("expert", "dp"), "pp": ("dense", "pp")}
MODULE_NAMES = {"attention": "SelfAttention", "mlp": "MLP"}
DEVICE = {"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512,
          "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
          "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32,
          "sharedMemPerBlock": 49152, "numSms": 132}


def trace_path(cfg: SynthConfig, out: Path, rank: int) -> Path:
    it = cfg.first_iteration
    gz = ".gz" if cfg.gzip else ""
    if cfg.layout == "patch":
        return out / f"iteration_{it}" / f"rank_{rank:04d}_iter_{it}.pt.trace.json{gz}"
    if cfg.layout == "megatron":
        return out / "torch_profile" / f"rank-{rank}.json.gz"
    # TorchTitan's: {dump_folder}/profile_trace/iteration_{N}/rank{R}_trace.json
    return out / "profile_trace" / f"iteration_{it}" / f"rank{rank}_trace.json{gz}"


def _seq_tables(program) -> tuple[list[int], dict]:
    """Per item its sequence number within an iteration on its process group (collective
    calls per group token; P2P transfers per direction), and the count per iteration."""
    calls = call_indices(program)
    seq: list[int] = []
    per_iter: dict = {}
    for item, c in zip(program, calls):
        if item.kind == "coll":
            key = item.group
            seq.append(c)
        elif item.kind in ("send", "recv"):
            key = ("p2p", item.key[0])  # activations / gradients, each in order
            seq.append(per_iter.get(key, 0))
        else:
            seq.append(-1)
            continue
        per_iter[key] = max(per_iter.get(key, 0), seq[-1] + 1)
    return seq, per_iter


def synthesize(cfg: SynthConfig, out: str | os.PathLike) -> Path:
    """Write the job's traces and ground truth under ``out``; returns ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    layout = cfg.layout_obj()
    world = cfg.world
    coords = [layout.coordinates(r) for r in range(world)]
    stage_of = [c["pp_rank"] for c in coords]
    programs = [StageProgram(cfg, p).build() for p in range(cfg.pp)]
    program_of = list(stage_of)  # the program each rank runs: its stage's
    if cfg.extra_kernel_rank is not None:  # one rank's own: its stage's and extra work
        programs.append(StageProgram(cfg, stage_of[cfg.extra_kernel_rank],
                                     cfg.extra_kernel_us).build())
        program_of[cfg.extra_kernel_rank] = len(programs) - 1

    def by_rank(groups: list[list[int]]) -> list[list[int]]:
        of: list[list[int]] = [[] for _ in range(world)]
        for g in groups:
            for r in g:
                of[r] = g
        return of

    members = {"tp": by_rank(layout.generator("dense", "tp")),
               "cp": by_rank(layout.generator("dense", "cp")),
               "dp-cp": by_rank(layout.generator("dense", "dp-cp")),
               "tp-pp": by_rank(layout.generator("dense", "tp-pp")),
               "ep": by_rank(layout.generator("expert", "ep")),
               "edp": by_rank(layout.generator("expert", "dp"))}
    pipes = layout.generator("dense", "pp")
    members["pp"] = by_rank(pipes)
    members["emb"] = by_rank([[p[0], p[-1]] for p in pipes if len(p) > 1])
    timelines = simulate(cfg, programs, program_of, members, members["pp"])

    all_groups = layout.groups()
    if cfg.framework != "megatron":  # the DeviceMesh's groups
        all_groups = {MESH_DESC[t]: layout.generator(*GEN[t]) for t in MESH_DESC
                      if (t != "pp" or cfg.framework == "torchtitan")
                      and (t not in ("ep", "edp") or cfg.ep > 1)}
        all_groups = {d: g for d, g in all_groups.items() if len(g[0]) > 1}
    pg_name: dict[tuple[str, tuple], str] = {}
    for desc in sorted(all_groups):
        for g in all_groups[desc]:
            pg_name[(desc, tuple(g))] = str(len(pg_name) + 1)
    on_default = cfg.framework == "pipelining"  # the pipeline on the default group
    rng = random.Random(cfg.seed + 1)
    nodes = (world + cfg.gpus_per_node - 1) // cfg.gpus_per_node
    node_skew = [0] + [int(rng.uniform(-cfg.skew_us, cfg.skew_us) * 1000)
                       for _ in range(nodes - 1)]
    skew = [node_skew[r // cfg.gpus_per_node] for r in range(world)]

    truth_rows: list[dict] = []
    per_rank: dict[str, dict] = {}
    for r in range(world):
        prog, tl = programs[program_of[r]], timelines[r]
        seq_in_iter, per_iter = _seq_tables(prog)

        def desc_of(item):
            if cfg.framework == "megatron":
                return GROUPS[item.group][1]
            if item.group == "pp" and on_default:
                return "default_pg"
            return MESH_DESC.get(item.group) or "undefined"

        def members_of(item, r=r):
            if item.group == "pp" and on_default:
                return list(range(world))
            return members[item.group][r]

        def peer_of(item, r=r):
            if item.group != "pp":
                return None
            pipe = members["pp"][r]
            return members_of(item).index(
                pipe[(pipe.index(r) + item.peer) % len(pipe)])

        def name_of(item, r=r):
            if item.group == "pp" and on_default:
                return "0"
            return pg_name.get((desc_of(item), tuple(members[item.group][r])), "0")

        def seq_of(it, k, prog=prog, seq_in_iter=seq_in_iter, per_iter=per_iter):
            item = prog[k]
            key = item.group if item.kind == "coll" else ("p2p", item.key[0])
            return it * per_iter[key] + seq_in_iter[k]

        w = RankWriter(r, pid=20000 + 97 * r, skew_ns=skew[r])
        rows = emit_rank(w, prog, tl, device=r % cfg.gpus_per_node, iterations=cfg.iterations,
                         first_iteration=cfg.first_iteration, schedule=cfg.schedule,
                         with_stack=cfg.with_stack, pg_desc=cfg.pg_desc,
                         members_of=members_of,
                         pg_name_of=name_of, seq_of=seq_of, corr_base=1_000_000 * (r + 1),
                         desc_of=desc_of, peer_of=peer_of)
        rank_rows = []
        for row in rows:
            item = prog[row["index"]]
            elem = 4 if item.dtype == "Float" else 2
            kind = ("MEM" if item.kind == "mem" else "COMP" if item.kind == "comp"
                    else "COMM")
            rank_rows.append({
                "rank": r, "stage": stage_of[r], "iteration": row["iteration"],
                "correlation": row["correlation"], "ts": row["ts"], "dur": row["dur"],
                "stream": row["stream"], "kind": kind, "phase": item.phase,
                "microbatch": item.mb, "chunk": item.chunk,
                "comm_group": GROUPS[item.group][0] if kind == "COMM" else None,
                "collective": COLLECTIVE_LABEL.get(item.collective) if kind == "COMM" else None,
                "group_size": len(members_of(item)) if kind == "COMM" else None,
                "msg_in_bytes": item.in_nelems * elem if kind == "COMM" else 0,
                "msg_out_bytes": item.out_nelems * elem if kind == "COMM" else 0,
                "pg_name": name_of(item) if kind == "COMM" else None,
                "seq": (seq_of(row["iteration"] - cfg.first_iteration, row["index"])
                        if kind == "COMM" else None),
                "p2p": item.kind in ("send", "recv"),
                "wait_ns": row["wait_ns"], "transfer_ns": row["transfer_ns"],
                "waited_for_rank": (row["waited_for"] if row["waited_for"] is not None
                                    and row["waited_for"] != r and row["wait_ns"] > 0
                                    else None),
                "flops": item.flops, "name": item.name,
                # the module path a profiler with_modules shows (the forward's, for a
                # backward kernel with an autograd sequence number)
                "module": (f"TransformerLayer_{item.layer}/{MODULE_NAMES[item.module]}_"
                           f"{item.layer}" if item.module and (
                               item.phase in ("FWD", "RECOMPUTE") or item.seq_op >= 0)
                           else None)})
        truth_rows += rank_rows
        per_rank[str(r)] = {"stage": stage_of[r], "skew_ns": skew[r],
                            # FLOPs of the GEMMs / attention of one iteration: all of
                            # them, and without the recompute (the model's own)
                            "flops": {"executed": sum(i.flops for i in prog),
                                      "model": sum(i.flops for i in prog
                                                   if i.phase != "RECOMPUTE")},
                            "microbatches": microbatch_metrics(rank_rows),
                            "groups": group_totals(rank_rows), "ops": stage_ops(rank_rows),
                            "steps": [[int(round(a * 1000)) + skew[r],
                                       int(round(b * 1000)) + skew[r]]
                                      for a, b in zip(tl.step_start, tl.step_end)]}
        pg_config = [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                      "pg_size": world, "ranks": list(range(world))}]
        pg_config += [{"pg_name": pg_name[(desc, tuple(g))],
                       "pg_desc": desc if cfg.pg_desc else "undefined",
                       "backend_config": "cuda:nccl", "pg_size": len(g), "ranks": g}
                      for desc in sorted(all_groups) for g in all_groups[desc] if r in g]
        header = {"schemaVersion": 1, "deviceProperties": [
            {**DEVICE, "id": d} for d in range(min(cfg.gpus_per_node, world))],
            "distributedInfo": {"backend": "nccl", "rank": r, "world_size": world,
                                "pg_count": len(pg_name) + 1, "pg_config": pg_config,
                                "nccl_version": "2.21.5"},
            "record_shapes": 1}
        if cfg.with_stack:
            header["with_stack"] = 1
        path = trace_path(cfg, out, r)
        span = (int(round(tl.step_start[0] * 1000)) + skew[r] - 50_000,
                int(round(tl.step_end[-1] * 1000)) + skew[r] + 50_000)
        _write(path, w, header, min(cfg.gpus_per_node, world), span,
               gz=cfg.gzip or cfg.layout == "megatron", truncate=cfg.truncate_rank == r)
    if cfg.layout == "patch" and cfg.framework == "megatron":
        topo = GroupsFile.from_layout(layout, cfg.microbatches * cfg.dp * cfg.micro_batch_size,
                                      "2026-11-21 10:00:00.000000")
        (out / default_name(_fixed_time())).write_text(render(topo))
    _write_truth(out, cfg, layout, all_groups, skew, per_rank, truth_rows)
    return out


def _fixed_time():
    import datetime as dt

    return dt.datetime(2026, 11, 21, 10, 0, 0)


def _write(path: Path, w: RankWriter, header: dict, devices: int, span, gz: bool,
           truncate: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = io.StringIO()
    write_trace(text, w, header, devices, path.name, span)
    data = text.getvalue().encode()
    if truncate:  # a profiler killed while writing: cut in the middle of an event
        cut = len(data) * 3 // 5
        data = data[:data.index(b'"ts"', cut) + 3]
    if gz:
        data = gzip.compress(data, compresslevel=1)
    path.write_bytes(data)


def _write_truth(out: Path, cfg, layout, all_groups, skew, per_rank, rows) -> None:
    folder = out / "ground_truth"
    folder.mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "kernels.parquet")
    summary = {"config": cfg.to_dict(),
               "layout": {"world": layout.world, "tp": layout.tp, "pp": layout.pp,
                          "cp": layout.cp, "ep": layout.ep, "dp": layout.dp},
               "groups": all_groups, "skew_ns": skew, "ranks": per_rank}
    (folder / "ground_truth.json").write_text(json.dumps(summary, indent=1))
