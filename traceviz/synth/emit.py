"""Write one rank's simulated timeline as a Kineto (PyTorch profiler) trace.

The text follows Kineto's own layout (one event per few lines, the header keys before
``traceEvents``, process/thread metadata and the profiler span after the events). What a
real Megatron trace contains is reproduced (research/pp_collectives_megatron.md C.3):

* per kernel: the launching ``cpu_op`` chain, a ``cudaLaunchKernel`` runtime call with
  the correlation id, the kernel on its stream, ``ac2g`` flow events;
* backward ops as ``autograd::engine::evaluate_function: XBackward0`` on the autograd
  thread, carrying the forward op's ``Sequence number`` and linked by ``fwdbwd`` flows;
* recompute as forward ops nested under ``CheckpointFunctionBackward``;
* collectives as ``c10d::*`` -> ``record_param_comms`` (collective metadata, also copied
  onto the NCCL kernel as Kineto does) -> ``nccl:*`` annotation -> launch;
* pipeline sends / receives of the 1F1B schedule as PyTorch 2.11 writes Megatron's
  ``batch_isend_irecv`` (``batched_p2p``): ``c10d::send`` / ``c10d::recv_`` ->
  ``record_param_comms`` launching nothing, then the block's one kernel launched inside a
  ``nccl:coalesced`` annotation, the kernel without collective args (each send or
  receive is a block of its own here; Megatron's merges a step's send and receive);
  the interleaved schedule's (``overlap_p2p_comm``: no batching) as other collectives;
* ``ProfilerStep#N`` and ``Optimizer.step#FusedAdam.step`` annotations;
* with ``with_stack``, python_function frames of Megatron's schedule (forward_step,
  backward_step, recv_forward, ..., finalize_model_grads, optimizer step).
"""
from __future__ import annotations

import dataclasses
import functools
import json

from .program import GROUPS, STREAMS, Item

TS_OFFSET_NS = 1_234_567_890_123_000  # Kineto writes µs relative to baseTimeNanoseconds
BASE_TIME_NS = 1_760_000_000_000_000_000
FRAMES = {
    "step": "megatron/training/training.py(1187): train_step",
    "1f1b": "megatron/core/pipeline_parallel/schedules.py(1844): "
            "forward_backward_pipelining_without_interleaving",
    "interleaved": "megatron/core/pipeline_parallel/schedules.py(1109): "
                   "forward_backward_pipelining_with_interleaving",
    "forward_step": "megatron/core/pipeline_parallel/schedules.py(399): forward_step",
    "backward_step": "megatron/core/pipeline_parallel/schedules.py(522): backward_step",
    "recv_forward": "megatron/core/pipeline_parallel/p2p_communication.py(489): recv_forward",
    "send_forward": "megatron/core/pipeline_parallel/p2p_communication.py(541): send_forward",
    "recv_backward": "megatron/core/pipeline_parallel/p2p_communication.py(515): "
                     "recv_backward",
    "send_backward": "megatron/core/pipeline_parallel/p2p_communication.py(566): "
                     "send_backward",
    "recompute": "megatron/core/transformer/transformer_block.py(383): custom_forward",
    "checkpoint": "megatron/core/tensor_parallel/random.py(317): backward",
    "grad_sync": "megatron/core/distributed/param_and_grad_buffer.py(612): start_grad_sync",
    "finalize_model_grads": "megatron/core/distributed/finalize_model_grads.py(254): "
                            "finalize_model_grads",
    "optimizer_step": "megatron/core/optimizer/optimizer.py(477): step",
}
SYNC_CBID = {"cudaDeviceSynchronize": 165, "cudaStreamSynchronize": 131}  # CUPTI ids
FORWARD_OPS = {
    "linear": ("aten::linear", "aten::mm"), "layer_norm": ("aten::layer_norm",
                                                           "aten::native_layer_norm"),
    "flash_attn": ("FlashAttnFunc", "flash_attn::_flash_attn_forward"),
    "add": ("aten::add", "aten::add"), "gelu": ("aten::gelu", "aten::gelu"),
    "cross_entropy": ("aten::cross_entropy_loss", "aten::_log_softmax"),
    "grouped_gemm": ("GroupedMLP", "aten::bmm"),
    "optimizer": ("FusedAdam", "multi_tensor_adam"), "copy": ("aten::copy_", "aten::copy_"),
    "zero": ("aten::zero_", "aten::fill_"), "mul": ("aten::mul", "aten::mul"),
    "ones_like": ("aten::ones_like", "aten::fill_"), "nested_add": ("aten::add", "aten::add"),
    "item": ("aten::item", "aten::_local_scalar_dense"),
    "embedding": ("aten::embedding", "aten::index_select"),
    "spin": ("mylib::spin", "mylib::spin"),  # a user's own extension kernel
}
BACKWARD_NODES = {
    "mm_backward": ("MmBackward0", "aten::mm"), "add_backward": ("AddBackward0", "aten::add"),
    "gelu_backward": ("GeluBackward0", "aten::gelu_backward"),
    "layer_norm_backward": ("NativeLayerNormBackward0", "aten::native_layer_norm_backward"),
    "flash_attn_backward": ("FlashAttnFuncBackward", "flash_attn::_flash_attn_backward"),
    "mul_backward": ("MulBackward0", "aten::mul"),
    "cross_entropy_backward": ("LogSoftmaxBackward0", "aten::_log_softmax_backward_data"),
    "embedding_backward": ("EmbeddingBackward0", "aten::embedding_dense_backward"),
}
BACKWARD_COMM_NODE = {  # Megatron's autograd functions around its collectives
    "_allgather_base": "_GatherFromSequenceParallelRegionBackward",
    "_reduce_scatter_base": "_ReduceScatterToSequenceParallelRegionBackward",
    "all_to_allv": "_AllToAllBackward", "send": "AttnFuncWithCPAndKVP2PBackward",
    "recv": "AttnFuncWithCPAndKVP2PBackward", "allreduce": "_ReduceFromModelParallelRegionBackward"}
C10D = {"_allgather_base": ("c10d::_allgather_base_", "nccl:_all_gather_base"),
        "_reduce_scatter_base": ("c10d::_reduce_scatter_base_", "nccl:_reduce_scatter_base"),
        "allreduce": ("c10d::allreduce_", "nccl:all_reduce"),
        "all_to_allv": ("c10d::alltoall_base_", "nccl:all_to_all"),
        "send": ("c10d::send", "nccl:send"), "recv": ("c10d::recv_", "nccl:recv")}


def ns(us: float) -> int:
    return int(round(us * 1000.0))


def fmt_ts(t_ns: int) -> str:
    """Kineto's µs with exactly three decimals, from integer ns (no float rounding)."""
    v = t_ns + TS_OFFSET_NS
    sign = "-" if v < 0 else ""
    v = abs(v)
    return f"{sign}{v // 1000}.{v % 1000:03d}"


@functools.lru_cache(maxsize=1 << 16)
def _json_text(text: str) -> str:
    """``json.dumps`` of a string (names and args repeat: each written once)."""
    return json.dumps(text)


def json_value(value: object) -> str:
    """``json.dumps(value)``, byte for byte, with ints and strings (most of an event's
    args) written without it."""
    if type(value) is int:  # (not bool: json writes true / false)
        return str(value)
    if type(value) is str:
        return _json_text(value)
    return json.dumps(value)


def fmt_dur(d_ns: int) -> str:
    return f"{d_ns // 1000}.{d_ns % 1000:03d}"


class RankWriter:
    """Accumulates one rank's events as Kineto JSON text."""

    def __init__(self, rank: int, pid: int, skew_ns: int) -> None:
        self.rank = rank
        self.pid = pid
        self.tid = {"main": pid, "bwd": pid + 17}
        self.skew = skew_ns
        self.cpu: list[tuple[int, str]] = []   # (ts, text) CPU events
        self.gpu: list[tuple[int, str]] = []
        self.flows: list[str] = []
        self.ext = 100
        self.ev_idx = 0
        self.py_id = 1000

    def _event(self, cat: str, name: str, t0: float, t1: float, thread: str, args: dict,
               gpu: tuple[int, int] | None = None) -> int:
        a, b = ns(t0) + self.skew, ns(t1) + self.skew
        pid, tid = gpu if gpu else (self.pid, self.tid[thread])
        text = (f'  {{\n    "ph": "X", "cat": "{cat}", "name": {_json_text(name)}, '
                f'"pid": {pid}, "tid": {tid},\n    "ts": {fmt_ts(a)}, "dur": '
                f'{fmt_dur(b - a)},\n    "args": {{\n      '
                + ", ".join(f'"{k}": {json_value(v)}' for k, v in args.items())
                + "\n    }\n  }")
        (self.gpu if gpu else self.cpu).append((a, text))
        return a

    def cpu_op(self, name, t0, t1, thread, cat="cpu_op", **extra) -> int:
        self.ext += 1
        self.ev_idx += 1
        args = {"External id": self.ext, "Record function id": 0, **extra,
                "Ev Idx": self.ev_idx}
        return self._event(cat, name, t0, t1, thread, args)

    def frame(self, name, t0, t1, thread, parent: int) -> int:
        self.py_id += 1
        self._event("python_function", name, t0, t1, thread,
                    {"Python parent id": parent, "Python id": self.py_id, "Python thread": 0})
        return self.py_id

    def flow(self, ph: str, cat: str, fid: int, t: int, pid, tid) -> None:
        bp = ', "bp": "e"' if ph == "f" else ""
        self.flows.append(f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, '
                          f'"ts": {fmt_ts(t)},\n    "cat": "{cat}", "name": "{cat}"{bp}\n  }}')


def comm_args(item: Item, members: list[int], pg_name: str, seq: int, rank: int,
              with_desc: bool, desc: str | None = None, peer: int | None = None) -> dict:
    """The record_param_comms arguments of a collective (also copied onto its kernel).
    PyTorch < 2.4 writes no Process Group Description (``with_desc`` False); ``desc``:
    the group's description (default: Megatron's); ``peer``: a send / receive's peer,
    its index in ``members`` (default: the next / previous member)."""
    desc = desc or GROUPS[item.group][1]
    args = {"Collective name": item.collective, "dtype": item.dtype,
            "In msg nelems": item.in_nelems, "Out msg nelems": item.out_nelems,
            "Group size": len(members), "In split size": "[]", "Out split size": "[]",
            "Process Group Name": pg_name, "Process Group Description": desc,
            "Process Group Ranks": "[" + ", ".join(map(str, members)) + "]",
            "Rank": members.index(rank), "Seq": seq}
    if item.kind in ("send", "recv"):
        # as PyTorch's profiler writes a point-to-point call (torch/csrc/profiler/util.cpp):
        # ``Rank`` is the peer's rank in the group, ``Dst Rank`` / ``Src Rank`` the peer's
        # global rank (groupRanks[peer])
        if peer is None:
            peer = (members.index(rank) + item.peer) % len(members)
        args["Rank"] = peer
        args["Dst Rank" if item.kind == "send" else "Src Rank"] = members[peer]
    if not with_desc:
        del args["Process Group Description"]
    return args


def emit_rank(w: RankWriter, program: list[Item], tl, *, device: int, iterations: int,
              first_iteration: int, schedule: str, with_stack: bool, pg_desc: bool, members_of,
              pg_name_of, seq_of, corr_base: int, desc_of=None, peer_of=None
              ) -> list[dict]:
    """Add every event of one rank to ``w``; returns the per-kernel truth rows. The 1F1B
    schedule's sends / receives are batched (see the module doc). ``desc_of(item)``: a
    group's description (default Megatron's); ``peer_of(item)``: a send / receive's
    peer as its index in ``members_of(item)`` (default the next / previous member)."""
    batched_p2p = schedule == "1f1b"
    desc_of = desc_of or (lambda item: None)
    peer_of = peer_of or (lambda item: None)

    def args_of(item: Item, it: int, k: int) -> dict:
        return comm_args(item, members_of(item), pg_name_of(item), seq_of(it, k), w.rank,
                         pg_desc, desc_of(item), peer_of(item))

    truth = []
    n = len(program)
    forward_op_ts: dict[int, int] = {}  # autograd sequence number -> forward op ts
    seq_span = max((item.seq_op for item in program), default=0) + 1
    flow_id = 0
    for it in range(iterations):
        base = it * n
        step0, step1 = tl.step_start[it], tl.step_end[it]
        w.cpu_op(f"ProfilerStep#{first_iteration + it}", step0, step1, "main",
                 cat="user_annotation")
        root = 0
        if with_stack:
            root = w.frame(FRAMES["step"], step0 + 5, step1 - 5, "main", 0)
            body = [base + k for k, item in enumerate(program)
                    if item.phase != "OPTIMIZER" and item.frame != "zero_grad"]
            if body:
                w.frame(FRAMES[schedule], tl.issue[body[0]] - 8,
                        max(tl.launch_end[i] for i in body) + 8, "main", root)
        _frames_and_spans(w, program, tl, base, with_stack, root)
        for k, item in enumerate(program):
            idx = base + k
            corr = corr_base + idx
            if it and item.seq_op >= 0:  # autograd sequence numbers never repeat
                item = dataclasses.replace(item, seq_op=item.seq_op + it * seq_span)
            if item.kind == "sync":  # the host waits for the GPU: a runtime call alone
                w._event("cuda_runtime", item.name, tl.launch[idx], tl.launch_end[idx],
                         item.thread, {"cbid": SYNC_CBID[item.name], "correlation": corr})
                continue
            batch = batched_p2p and item.kind in ("send", "recv")
            ext = _launching_ops(w, item, tl, idx, forward_op_ts, members_of,
                                 lambda: args_of(item, it, k), batch, peer_of)
            if item.thread == "bwd" and item.phase == "BWD" and item.seq_op in forward_op_ts:
                flow_id += 1
                t_f = forward_op_ts.pop(item.seq_op)
                w.flow("s", "fwdbwd", flow_id, t_f, w.pid, w.tid["main"])
                w.flow("f", "fwdbwd", flow_id, ns(tl.issue[idx]) + w.skew, w.pid,
                       w.tid["bwd"])
            memset = item.name.startswith("Memset")
            runtime = (("cudaMemsetAsync" if memset else "cudaMemcpyAsync")
                       if item.kind == "mem" else
                       "cudaLaunchKernel" if item.kind == "comp" else "cudaLaunchKernelExC")
            linked = {"External id": ext} if ext is not None else {}
            t_launch = w._event("cuda_runtime", runtime, tl.launch[idx], tl.launch_end[idx],
                                item.thread, {**linked, "cbid": 211, "correlation": corr})
            stream = STREAMS[item.lane]
            kargs: dict = {**linked, "queued": 0, "device": device,
                           "context": 1, "stream": stream, "correlation": corr}
            if item.kind == "mem":
                nbytes = 4 << 20
                dur_ns = max(ns(tl.end[idx]) - ns(tl.start[idx]), 1)
                kargs.update({"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / dur_ns})
                cat = "gpu_memset" if memset else "gpu_memcpy"
            else:
                cat = "kernel"
                kargs.update({"registers per thread": 128, "shared memory": 0,
                              "grid": [132, 1, 1], "block": [256, 1, 1]})
                if item.kind != "comp" and not batch:
                    kargs.update(args_of(item, it, k))
            t_kernel = w._event(cat, item.name, tl.start[idx], tl.end[idx], "main", kargs,
                                gpu=(device, stream))
            w.flow("s", "ac2g", corr, t_launch, w.pid, w.tid[item.thread])
            w.flow("f", "ac2g", corr, t_kernel, device, stream)
            talk = item.kind in ("coll", "send", "recv")
            truth.append({"iteration": first_iteration + it, "index": k, "correlation": corr,
                          "ts": t_kernel,
                          "dur": ns(tl.end[idx]) + w.skew - t_kernel, "stream": stream,
                          # communication: waiting for the last member, then moving data
                          "wait_ns": ns(tl.last_arrival[idx]) - ns(tl.start[idx])
                          if talk else None,
                          "transfer_ns": ns(tl.end[idx]) - ns(tl.last_arrival[idx])
                          if talk else None,
                          "waited_for": int(tl.last_rank[idx]) if talk else None})
    return truth


def _launching_ops(w: RankWriter, item: Item, tl, idx, forward_op_ts, members_of,
                   comm_args_now, batch: bool = False, peer_of=None) -> int | None:
    """The cpu_op chain around an item's launch; returns the External id of the launch
    (None: the launch has none). ``comm_args_now()`` gives a collective's
    record_param_comms arguments; ``batch``: a send / receive of a coalescing block (its
    op and record_param_comms end before the launch, made in ``nccl:coalesced``)."""
    i0, l1 = tl.issue[idx], tl.launch_end[idx]
    th = item.thread
    if batch:
        outer, _ = C10D[item.collective]
        op_end = tl.launch[idx] - 4.0
        w.cpu_op(outer, i0, op_end, th)
        w.cpu_op("record_param_comms", i0 + 1.0, op_end - 1.0, th, **comm_args_now())
        w.cpu_op("nccl:coalesced", op_end + 1.0, l1 + 1.0, th, cat="user_annotation")
        return None
    if item.kind in ("coll", "send", "recv"):
        outer, note = C10D[item.collective]
        if th == "bwd" and item.phase == "BWD":  # issued by an autograd node's backward
            node = ("torch::autograd::AccumulateGrad" if item.frame == "grad_sync"
                    else BACKWARD_COMM_NODE[item.collective])
            w.cpu_op(f"autograd::engine::evaluate_function: {node}", i0 - 0.5, l1 + 1.95, th,
                     **{"Sequence number": item.seq_op, "Fwd thread id": 1})
            w.cpu_op(node, i0 - 0.3, l1 + 1.9, th)
        w.cpu_op(outer, i0, l1 + 1.8, th)
        if item.kind != "coll":
            members = members_of(item)
            me = members.index(w.rank)
            peer = (peer_of(item) if peer_of is not None and peer_of(item) is not None
                    else (me + item.peer) % len(members))
            note = f"{note} {me}{'->' if item.kind == 'send' else '<-'}{peer}"
        w.cpu_op("record_param_comms", i0 + 1.0, l1 + 1.5, th, **comm_args_now())
        w.cpu_op(note, i0 + 3.0, l1 + 1.0, th, cat="user_annotation")
        return w.ext
    shapes = {}
    if item.shapes:  # record_shapes on the op that launches the kernel
        shapes = dict(zip(("Input Dims", "Input type", "Concrete Inputs"),
                          map(json.loads, item.shapes)))
    if th == "bwd" and item.op in BACKWARD_NODES:
        node, inner = BACKWARD_NODES[item.op]
        w.cpu_op(f"autograd::engine::evaluate_function: {node}", i0, l1 + 1.5, th,
                 **{"Sequence number": item.seq_op, "Fwd thread id": 1})
        w.cpu_op(node, i0 + 0.5, l1 + 1.2, th,
                 **{"Sequence number": item.seq_op, "Fwd thread id": 1})
        w.cpu_op(inner, i0 + 1.5, l1 + 0.5, th, **shapes)
        return w.ext
    outer, inner = FORWARD_OPS[item.op]
    t = w.cpu_op(outer, i0, l1 + 1.5, th, **{"Sequence number": item.seq_op,
                                            "Fwd thread id": 0})
    if th == "main" and item.seq_op >= 0:  # a forward op (of the graph backward runs)
        forward_op_ts.setdefault(item.seq_op, t)
    w.cpu_op(inner, i0 + 1.5, l1 + 0.5, th, **shapes)
    return w.ext


# nn.Module frame names (Megatron's classes) and their padding (µs) before the first op's
# issue and after the last launch: the launching ops end up to 1.8 µs after their launch
# and the next op is issued >= 2 µs after it, so the frames hold their ops whole and do
# not overlap the next block's
MODULES = {"layer": ("TransformerLayer", (0.05, 1.9)), "attention": ("SelfAttention",
                                                                  (0.03, 1.85)),
           "mlp": ("MLP", (0.03, 1.85))}


def _frames_and_spans(w: RankWriter, program: list[Item], tl, base: int, with_stack: bool,
                      root: int) -> None:
    """Spans around groups of items: schedule frames, checkpoint recompute, optimizer."""
    groups: dict[tuple, list[int]] = {}
    recomputed = {(p.layer, p.mb, p.chunk) for p in program if p.phase == "RECOMPUTE"}
    for k, item in enumerate(program):
        if item.frame in ("forward_step", "recv_forward", "send_forward", "recv_backward",
                          "send_backward", "grad_sync", "finalize_model_grads",
                          "optimizer_step"):
            key = (item.frame, item.mb, item.chunk, item.thread, k if item.frame
                   in ("grad_sync", "recv_forward", "send_forward", "recv_backward",
                       "send_backward") else 0)
            groups.setdefault(key, []).append(base + k)
        if item.phase in ("BWD", "RECOMPUTE") and item.kind not in ("send", "recv"):
            groups.setdefault(("backward_step", item.mb, item.chunk, "main", 0),
                              []).append(base + k)
        if item.phase == "RECOMPUTE" or (item.phase == "BWD" and item.thread == "bwd"
                                         and (item.layer, item.mb, item.chunk) in recomputed):
            groups.setdefault(("checkpoint", item.mb, item.chunk, "bwd", item.layer),
                              []).append(base + k)
        if item.phase == "RECOMPUTE":
            groups.setdefault(("recompute", item.mb, item.chunk, "bwd", item.layer),
                              []).append(base + k)
        if item.module and item.phase in ("FWD", "RECOMPUTE"):  # nn.Module frames
            groups.setdefault(("layer", item.mb, item.chunk, item.thread, item.layer),
                              []).append(base + k)
            groups.setdefault((item.module, item.mb, item.chunk, item.thread, item.layer),
                              []).append(base + k)
    for (frame, mb, chunk, thread, layer), idxs in groups.items():
        t0 = min(tl.issue[i] for i in idxs)
        t1 = max(tl.launch_end[i] for i in idxs)
        if frame == "checkpoint":
            w.cpu_op("autograd::engine::evaluate_function: CheckpointFunctionBackward",
                     t0 - 4.0, t1 + 4.0, "bwd", **{"Sequence number": -1, "Fwd thread id": 1})
            w.cpu_op("CheckpointFunctionBackward", t0 - 3.5, t1 + 3.5, "bwd",
                     **{"Sequence number": -1, "Fwd thread id": 1})
            if with_stack:
                w.frame(FRAMES["checkpoint"], t0 - 3.0, t1 + 3.0, "bwd", 0)
            continue
        if frame == "optimizer_step":  # inside the ops before and after it (nested)
            w.cpu_op("Optimizer.step#FusedAdam.step", t0 - 0.1, t1 + 1.9, "main",
                     cat="user_annotation")
        if not with_stack:
            continue
        if frame in MODULES:  # with_modules: the layer, then its block, inside it
            name, (before, after) = MODULES[frame]
            w.frame(f"nn.Module: {name}_{layer}", t0 - before, t1 + after, thread, root)
            continue
        # consecutive ops are >= 2 µs apart on the CPU (see simulate._issue): a 1 µs pad
        # keeps frames of one thread from overlapping, as real python frames never do
        w.frame(FRAMES[frame], t0 - 1.0, t1 + 1.0, thread, root)


def write_trace(fh, w: RankWriter, header: dict, devices: int, trace_name: str,
                span: tuple[int, int]) -> None:
    """Kineto's file: header keys, traceEvents (CPU, GPU, flows, metadata), footer."""
    fh.write("\n{\n")
    for key, value in header.items():
        fh.write(f'  "{key}": {json.dumps(value)},\n')
    fh.write('  "traceEvents": [\n')
    events = [t for _, t in sorted(w.cpu, key=lambda e: e[0])]
    events += [t for _, t in sorted(w.gpu, key=lambda e: e[0])]
    events += w.flows
    events += _metadata(w, devices, span)
    fh.write(",\n".join(events))
    fh.write(f'\n  ],\n  "traceName": {json.dumps(trace_name)},\n  "displayTimeUnit": '
             f'"ms",\n  "baseTimeNanoseconds": {BASE_TIME_NS}\n}}\n')


def _metadata(w: RankWriter, devices: int, span: tuple[int, int]) -> list[str]:
    out = []

    def meta(name, pid, tid, args) -> None:
        out.append(f'  {{\n    "name": "{name}", "ph": "M", "ts": {fmt_ts(span[0])}, '
                   f'"pid": {pid}, "tid": {tid},\n    "args": {json.dumps(args)}\n  }}')

    meta("process_name", w.pid, 0, {"name": "python3"})
    meta("process_labels", w.pid, 0, {"labels": "CPU"})
    meta("thread_name", w.pid, w.tid["main"], {"name": f"thread {w.tid['main']} (python3)"})
    meta("thread_name", w.pid, w.tid["bwd"], {"name": f"thread {w.tid['bwd']} (pt_autograd_0)"})
    for d in range(devices):
        meta("process_name", d, 0, {"name": "python3"})
        meta("process_labels", d, 0, {"labels": f"GPU {d}"})
    for stream in sorted(STREAMS.values()):
        meta("thread_name", w.rank % devices, stream, {"name": f"stream {stream}"})
    out.append(f'  {{\n    "ph": "X", "cat": "Trace", "ts": {fmt_ts(span[0])}, "dur": '
               f'{fmt_dur(span[1] - span[0])},\n    "pid": "Spans", "tid": "PyTorch '
               f'Profiler",\n    "name": "PyTorch Profiler (0)",\n    "args": {{\n      '
               f'"Op count": 0\n    }}\n  }}')
    out.append(f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",'
               f'\n    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": '
               f'{fmt_ts(span[0])}\n  }}')
    return out
