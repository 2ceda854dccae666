"""What every rank of one pipeline stage does in one iteration, in CPU issue order.

The program of a stage is a list of :class:`Item` (one GPU activity each) built from the
pipeline schedule (1F1B or Megatron's interleaved 1F1B) and a transformer layer model:
sequence-parallel TP all-gather / reduce-scatter around attention and MLP, a CP ring
exchange, MoE all-to-all on the expert group, recompute of the forward in backward, DP
reduce-scatter of gradient buckets launched by backward hooks of the last micro-batch,
then gradient finalization and the (distributed) optimizer step. The iteration starts by
zeroing the gradient buffers (memsets on the main thread, before the first micro-batch);
on the last virtual stage each backward step begins on the main thread (loss scaling and
the root gradient) before the autograd thread takes over; a checkpointed layer's
backward launches an ``aten::add`` of its own once its nested backward has begun.

Each item carries its ground truth: phase (FWD / BWD / RECOMPUTE / OPTIMIZER / OTHER),
micro-batch, model chunk and parallel group. All ranks of a stage run the same program;
their timings differ (see :mod:`.simulate`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .config import SynthConfig
from .schedule import stage_order as megatron_order

PEAK_TFLOPS = 989.5  # dense BF16 of the device the traces name (H100 SXM)
# streams (Kineto stream ids) per lane
STREAMS = {"compute": 7, "tp": 20, "cp": 24, "ep": 28, "dp": 32, "edp": 36, "mp": 40,
           "emb": 44, "pp_fs": 48, "pp_fr": 52, "pp_bs": 56, "pp_br": 60}
# group token (topology) -> our comm_group label and Megatron's group_desc
GROUPS = {
    "tp": ("TP", "TENSOR_MODEL_PARALLEL_GROUP"),
    "cp": ("CP", "CONTEXT_PARALLEL_GROUP"),
    "ep": ("EP", "EXPERT_MODEL_PARALLEL_GROUP"),
    "dp-cp": ("DP", "DATA_PARALLEL_GROUP_WITH_CP"),
    "edp": ("EDP", "EXPERT_DATA_PARALLEL_GROUP"),
    "tp-pp": ("OTHER", "MODEL_PARALLEL_GROUP"),
    "emb": ("EMB", "EMBEDDING_GROUP"),
    "pp": ("PP", "PIPELINE_MODEL_PARALLEL_GROUP"),
}
LANE_OF_GROUP = {"tp": "tp", "cp": "cp", "ep": "ep", "dp-cp": "dp", "edp": "edp",
                 "tp-pp": "mp", "emb": "emb"}


@dataclass(slots=True)
class Item:
    """One GPU activity of a stage's program."""

    kind: str            # comp | coll | send | recv | mem | sync (a host synchronize:
    #                      no GPU activity; lane "all" or the stream it waits for)
    lane: str            # key of STREAMS
    name: str            # kernel name
    op: str              # CPU op that launches it (template key in emit.py)
    thread: str          # main | bwd (the CPU thread that issues it)
    dur: float = 0.0     # µs of GPU work (comp / mem)
    group: str = ""      # group token of a collective / "pp" for P2P
    collective: str = ""  # Collective name arg (allreduce, _allgather_base, ...)
    in_nelems: int = 0
    out_nelems: int = 0
    phase: str = "OTHER"
    mb: int = -1
    chunk: int = 0
    frame: str = ""      # python frame context (forward_step, backward_step, ...)
    layer: int = -1
    key: tuple = ()      # P2P transfer key shared by sender and receiver
    peer: int = 0        # P2P: +1 next stage, -1 previous stage (virtual-stage wise)
    dtype: str = "BFloat16"
    seq_op: int = -1     # autograd sequence number (links backward ops to forward ops)
    shapes: tuple = ()   # (Input Dims, Input type, Concrete Inputs) of the launching op
    flops: float = 0.0   # FLOPs of that op (truth), 0 when not a GEMM / attention
    module: str = ""     # the layer's sub-module it belongs to: attention | mlp


def _shapes(dims: list, concrete: list[str], dtype: str = "c10::BFloat16") -> tuple:
    """record_shapes' (Input Dims, Input type, Concrete Inputs) texts: tensors of
    ``dtype``, other inputs Scalars."""
    types = [dtype if d else "Scalar" for d in dims]
    return (json.dumps(dims), json.dumps(types), json.dumps(concrete))


def _mm(m: int, k: int, n: int) -> tuple:
    """aten::mm of A[m,k] B[k,n]: its shapes and 2mkn FLOPs."""
    return _shapes([[m, k], [k, n]], ["", ""]), 2.0 * m * k * n


def stage_order(cfg: SynthConfig, p: int) -> list[tuple[str, int, int]]:
    """(``F``/``B``, micro-batch, chunk) in the order stage ``p`` runs them."""
    return megatron_order(cfg.pp, cfg.microbatches, p, cfg.vpp)


_GEMM = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1"
         "_execute_segment_k_off_kernel__5x_cublas")
_GEMM_NT = ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1"
            "_execute_segment_k_off_kernel__5x_cublas")
_LN = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
       "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, "
       "float*, float*, c10::BFloat16*)")
_LN_BWD = ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized"
           "<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, "
           "float const*, c10::BFloat16 const*, c10::BFloat16*, int)")
_ATTN = ("void flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
         "cutlass::bfloat16_t>, true, false, false, false, true, true, false>(flash::"
         "Flash_fwd_params)")
_ATTN_BWD = ("void flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_"
             "traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, "
             "false, false, false, false, true, false>(flash::Flash_bwd_params)")
_ELT = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::"
        "BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor"
        "<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<c10::BFloat16, "
        "c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> >, "
        "std::array<char*, 3ul>)")
_GELU = ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl"
         "(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
         "{lambda()#4}::operator()() const::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> "
         ">(int, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)"
         "::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(c10::"
         "BFloat16)#1}, std::array<char*, 2ul>)")
_FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<c10::"
         "BFloat16>, std::array<char*, 1ul> >(int, at::native::FillFunctor<c10::BFloat16>, "
         "std::array<char*, 1ul>)")
_ADAM = ("void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, "
         "int>, float, float, float, float, float, float, adamMode_t, float>(long, int volatile"
         "*, TensorListMetadata<4>, AdamFunctor<float, float, int>, float, float, float, "
         "float, float, float, adamMode_t, float)")
_NCCL_ARGS = "(ncclDevKernelArgsStorage<4096ul>)"
NCCL_KERNEL = {
    "_allgather_base": "ncclDevKernel_AllGather_RING_LL" + _NCCL_ARGS,
    "_reduce_scatter_base": "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL" + _NCCL_ARGS,
    "allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL" + _NCCL_ARGS,
    "all_to_allv": "ncclDevKernel_SendRecv" + _NCCL_ARGS,
    "send": "ncclDevKernel_SendRecv" + _NCCL_ARGS,
    "recv": "ncclDevKernel_SendRecv" + _NCCL_ARGS,
}


class StageProgram:
    """Builds the item list of one stage."""

    def __init__(self, cfg: SynthConfig, p: int, extra_us: float = 0.0) -> None:
        """``extra_us`` > 0: a ``spin_kernel`` of that many µs after every forward step
        (a rank's own extra work)."""
        self.cfg = cfg
        self.p = p
        self.extra_us = extra_us
        self.items: list[Item] = []
        self.seq = 0  # autograd sequence numbers of forward ops

    # ---- helpers ---------------------------------------------------------------------
    def comp(self, name, op, frac, shaped: tuple = (), **kw) -> None:
        """``shaped``: (shapes, FLOPs) of the launching op: the kernel then takes its
        FLOPs at ``matmul_efficiency`` of the peak (``frac`` unused); the shapes are
        recorded when the kernel is not split (size multiplier 1)."""
        c = self.cfg
        mult = c.size_multiplier
        dur = c.fwd_compute_us * frac
        if shaped:  # a GEMM / attention takes its FLOPs at the chosen share of the peak
            dur = shaped[1] / (c.matmul_efficiency * PEAK_TFLOPS * 1e6)
        shapes, flops = shaped if shaped and mult == 1 else ((), 0.0)
        for _ in range(mult):
            self.items.append(Item("comp", "compute", name, op, dur=dur / mult,
                                   shapes=shapes, flops=flops, **kw))

    def coll(self, group, collective, in_n, out_n, **kw) -> None:
        if self._group_size(group) < 2:
            return
        self.items.append(Item("coll", LANE_OF_GROUP[group], NCCL_KERNEL[collective],
                               "collective", group=group, collective=collective,
                               in_nelems=in_n, out_nelems=out_n, **kw))

    def _group_size(self, group: str) -> int:
        c = self.cfg
        return {"tp": c.tp, "cp": c.cp, "ep": c.ep, "dp-cp": c.dp * c.cp,
                "edp": c.world // (c.tp * c.ep * c.pp), "tp-pp": c.tp * c.pp,
                "emb": 2 if c.pp > 1 else 1}[group]

    # ---- layers --------------------------------------------------------------------
    def gemms(self) -> dict[str, tuple[int, int, int]]:
        """(M, K, N) of each GEMM of a layer on one rank (tensor parallel, sequence
        parallel: the all-gathered tokens): QKV, attention projection, MLP fc1 / fc2."""
        c = self.cfg
        t, h = c.seq_len * c.micro_batch_size // c.cp, c.hidden
        return {"qkv": (t, h, 3 * h // c.tp), "proj": (t, h // c.tp, h),
                "fc1": (t, h, 4 * h // c.tp), "fc2": (t, 4 * h // c.tp, h)}

    def head_gemm(self) -> tuple[int, int, int]:
        """(M, K, N) of the output layer's GEMM on one rank: the all-gathered tokens by
        the hidden size by the rank's share of the vocabulary."""
        c = self.cfg
        return (c.seq_len * c.micro_batch_size // c.cp, c.hidden, max(1, c.vocab // c.tp))

    def logits_share(self) -> float:
        """The cross-entropy's time over the rank's logits (share of ``fwd_compute_us``):
        about four passes over them in BF16 at 3 TB/s, at least 0.05."""
        m, _, n = self.head_gemm()
        return max(0.05, m * n * 2 * 4 / 3e6 / self.cfg.fwd_compute_us)

    def attention_shape(self, backward: bool) -> tuple:
        """flash-attn's q / k / v [batch, seq, heads, 128] of one rank (heads split by
        TP, the sequence by CP) and its FLOPs: 4 B H S^2 D / 2 (causal), 2.5x backward."""
        c = self.cfg
        s, heads = c.seq_len // c.cp, max(1, c.hidden // 128 // c.tp)
        q = [c.micro_batch_size, s, heads, 128]
        flops = 4.0 * c.micro_batch_size * heads * s * s * 128 / 2
        if backward:  # dout, q, k, v, out, lse; causal is input 11
            dims = [q, q, q, q, q, [c.micro_batch_size, heads, s]]
            concrete = [""] * 6 + ["", "", "", "0.0", "0.088", "True"]
            return _shapes(dims + [[]] * 6, concrete), 2.5 * flops
        return _shapes([q, q, q, [], [], []], ["", "", "", "0.0", "0.088", "True"]), flops

    def layer_forward(self, layer: int, moe: bool, **kw) -> None:
        """A transformer layer: the attention block up to its residual add, then the
        MLP (or MoE) block; items tagged with their sub-module."""
        first = len(self.items)
        self._layer_forward(layer, moe, **kw)
        self._tag(first, "add", "attention", "mlp")

    def _tag(self, first: int, split_op: str, before: str, after: str) -> None:
        """Tag items from ``first`` on: ``before`` up to the first ``split_op``
        (included), ``after`` for the rest."""
        module = before
        for item in self.items[first:]:
            item.module = module
            if item.op == split_op:
                module = after

    def _layer_forward(self, layer: int, moe: bool, **kw) -> None:
        c = self.cfg
        tokens = c.seq_len * c.micro_batch_size // c.cp
        act = tokens * c.hidden
        shard = act // c.tp
        seq = self.next_seq
        g = self.gemms()
        self.comp(_LN, "layer_norm", 0.03, layer=layer, seq_op=seq(), **kw)
        self.coll("tp", "_allgather_base", shard, act, layer=layer, **kw)
        self.comp(_GEMM, "linear", 0.18, _mm(*g["qkv"]), layer=layer, seq_op=seq(), **kw)
        for step in range(c.cp - 1):
            self.coll("cp", "send", act // 4, act // 4, layer=layer, **kw)
        self.comp(_ATTN, "flash_attn", 0.25, self.attention_shape(False), layer=layer,
                  seq_op=seq(), **kw)
        self.comp(_GEMM, "linear", 0.12, _mm(*g["proj"]), layer=layer, seq_op=seq(), **kw)
        self.coll("tp", "_reduce_scatter_base", act, shard, layer=layer, **kw)
        self.comp(_ELT, "add", 0.02, layer=layer, seq_op=seq(), **kw)
        self.comp(_LN, "layer_norm", 0.03, layer=layer, seq_op=seq(), **kw)
        self.coll("tp", "_allgather_base", shard, act, layer=layer, **kw)
        if moe:
            self.comp(_GEMM_NT, "linear", 0.02, layer=layer, seq_op=seq(),
                      **kw)
            self.coll("ep", "all_to_allv", act, act, layer=layer, **kw)
            self.comp(_GEMM, "grouped_gemm", 0.15, layer=layer, seq_op=seq(),
                      **kw)
            self.comp(_GELU, "gelu", 0.03, layer=layer, seq_op=seq(), **kw)
            self.comp(_GEMM, "grouped_gemm", 0.14, layer=layer, seq_op=seq(), **kw)
            self.coll("ep", "all_to_allv", act, act, layer=layer, **kw)
        else:
            self.comp(_GEMM, "linear", 0.2, _mm(*g["fc1"]), layer=layer, seq_op=seq(), **kw)
            self.comp(_GELU, "gelu", 0.04, layer=layer, seq_op=seq(), **kw)
            self.comp(_GEMM, "linear", 0.18, _mm(*g["fc2"]), layer=layer, seq_op=seq(),
                      **kw)
        self.coll("tp", "_reduce_scatter_base", act, shard, layer=layer, **kw)
        self.comp(_ELT, "add", 0.02, layer=layer, seq_op=seq(), **kw)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def layer_backward(self, layer: int, moe: bool, fwd_seqs: list[int],
                       nested: bool = False, **kw) -> None:
        """Backward of a layer: the forward's kernels reversed, gemms split in dgrad and
        wgrad, collectives mirrored (AG <-> RS). ``nested``: it runs inside a checkpoint's
        backward, whose ``torch.autograd.backward`` launches an ``aten::add`` of its own
        (no autograd node) once the nested backward has begun. The MLP block's backward
        runs up to its layer norm's backward, then the attention block's."""
        first = len(self.items)
        self._layer_backward(layer, moe, fwd_seqs, nested, **kw)
        self._tag(first, "layer_norm_backward", "mlp", "attention")

    def _layer_backward(self, layer: int, moe: bool, fwd_seqs: list[int],
                        nested: bool = False, **kw) -> None:
        c = self.cfg
        b = c.bwd_factor
        act = c.seq_len * c.micro_batch_size // c.cp * c.hidden
        shard = act // c.tp
        seqs = iter(reversed(fwd_seqs))
        s = lambda: next(seqs, -1)  # noqa: E731

        g = self.gemms()

        def gemm_backward(share: float, which: str | None = None) -> None:
            """dgrad and wgrad GEMMs of one forward GEMM (one sequence number): for
            Y[M,N] = X[M,K] W[K,N], dX = dY[M,N] W^T[N,K] and dW = X^T[K,M] dY[M,N]."""
            sq = s()
            m, k, n = g[which] if which else (0, 0, 0)
            self.comp(_GEMM, "mm_backward", share * b, _mm(m, n, k) if which else (),
                      layer=layer, seq_op=sq, **kw)
            self.comp(_GEMM_NT, "mm_backward", share * b, _mm(k, m, n) if which else (),
                      layer=layer, seq_op=sq, **kw)

        self.comp(_ELT, "add_backward", 0.02 * b, layer=layer, seq_op=s(), **kw)
        if nested:
            self.comp(_ELT, "nested_add", 0.01, layer=layer, **kw)
        self.coll("tp", "_allgather_base", shard, act, layer=layer, **kw)
        if moe:
            self.coll("ep", "all_to_allv", act, act, layer=layer, **kw)
            gemm_backward(0.07)
            self.comp(_GELU, "gelu_backward", 0.03 * b, layer=layer, seq_op=s(), **kw)
            gemm_backward(0.075)
            self.coll("ep", "all_to_allv", act, act, layer=layer, **kw)
            self.comp(_GEMM_NT, "mm_backward", 0.02 * b, layer=layer,
                      seq_op=s(), **kw)
        else:
            gemm_backward(0.09, "fc2")
            self.comp(_GELU, "gelu_backward", 0.04 * b, layer=layer, seq_op=s(), **kw)
            gemm_backward(0.1, "fc1")
        self.coll("tp", "_reduce_scatter_base", act, shard, layer=layer, **kw)
        self.comp(_LN_BWD, "layer_norm_backward", 0.03 * b, layer=layer,
                  seq_op=s(), **kw)
        self.comp(_ELT, "add_backward", 0.02 * b, layer=layer, seq_op=s(), **kw)
        self.coll("tp", "_allgather_base", shard, act, layer=layer, **kw)
        gemm_backward(0.06, "proj")
        for step in range(c.cp - 1):
            self.coll("cp", "send", act // 4, act // 4, layer=layer, **kw)
        self.comp(_ATTN_BWD, "flash_attn_backward", 0.25 * b, self.attention_shape(True),
                  layer=layer, seq_op=s(), **kw)
        gemm_backward(0.09, "qkv")
        self.coll("tp", "_reduce_scatter_base", act, shard, layer=layer, **kw)
        self.comp(_LN_BWD, "layer_norm_backward", 0.03 * b, layer=layer,
                  seq_op=s(), **kw)

    # ---- micro-batch ops ---------------------------------------------------------------
    def chunk_layers(self, chunk: int) -> list[int]:
        c = self.cfg
        if c.vpp == 1:  # possibly uneven (Megatron's first / last stage counts)
            counts = c.stage_layers()
            first = sum(counts[:self.p])
            return list(range(first, first + counts[self.p]))
        per = c.layers_per_chunk
        first = (chunk * c.pp + self.p) * per  # virtual stage * layers per chunk
        return list(range(first, first + per))

    def is_moe(self, layer: int) -> bool:
        return bool(self.cfg.moe_every) and layer % self.cfg.moe_every == self.cfg.moe_every - 1

    def virtual_stage(self, chunk: int) -> int:
        return chunk * self.cfg.pp + self.p

    def forward(self, m: int, chunk: int) -> None:
        c = self.cfg
        vs = self.virtual_stage(chunk)
        kw: dict[str, Any] = dict(phase="FWD", mb=m, chunk=chunk)
        if vs > 0:
            self.p2p("recv", ("act", m, vs - 1), -1, frame="recv_forward", **kw)
        self.p2p_sync(frame="recv_forward", **kw)
        kw["frame"] = "forward_step"
        seqs: dict = {}
        if vs == 0:
            self.items.append(Item("mem", "compute", "Memcpy HtoD (Pageable -> Device)",
                                   "copy", dur=12.0, thread="main", **kw))
            if c.vocab:  # the embedding's lookup
                seqs["embedding"] = [self.next_seq()]
                self.comp(_ELT, "embedding", 0.02, thread="main",
                          seq_op=seqs["embedding"][0], **kw)
        for layer in self.chunk_layers(chunk):
            start = self.seq
            self.layer_forward(layer, self.is_moe(layer), thread="main", **kw)
            seqs[layer] = list(range(start + 1, self.seq + 1))
        self.fwd_seqs[(m, chunk)] = seqs
        if self.extra_us:
            self.items.append(Item("comp", "compute", "spin_kernel", "spin",
                                   dur=self.extra_us, thread="main", **kw))
        if vs == c.pp * c.vpp - 1 and c.vocab:  # the output layer: GEMM of its FLOPs
            seqs["head"] = [self.next_seq(), self.next_seq()]
            self.comp(_GEMM, "linear", 0.3, _mm(*self.head_gemm()), thread="main",
                      seq_op=seqs["head"][0], **kw)
            self.comp(_ELT, "cross_entropy", self.logits_share(), thread="main",
                      seq_op=seqs["head"][1], **kw)
        elif vs == c.pp * c.vpp - 1:
            self.comp(_GEMM, "linear", 0.3, thread="main", seq_op=self.next_seq(), **kw)
            self.comp(_ELT, "cross_entropy", 0.05, thread="main", seq_op=self.next_seq(),
                      **kw)
        else:
            kw["frame"] = "send_forward"
            self.p2p("send", ("act", m, vs), +1, **kw)

    def backward(self, m: int, chunk: int, last_mb: bool) -> None:
        c = self.cfg
        vs = self.virtual_stage(chunk)
        kw: dict[str, Any] = dict(phase="BWD", mb=m, chunk=chunk)
        if vs < c.pp * c.vpp - 1:
            self.p2p("recv", ("grad", m, vs + 1), +1, frame="recv_backward", **kw)
        self.p2p_sync(frame="recv_backward", **kw)
        kw["frame"] = "backward_step"
        seqs = self.fwd_seqs.pop((m, chunk))
        if vs == c.pp * c.vpp - 1:
            # Megatron's backward_step on the last stage, on the main thread: the loss
            # scaling (grad_scale_func, an op of the graph: its MulBackward0 is the first
            # node of the backward) and the root gradient (torch.ones_like)
            scale = self.next_seq()
            self.comp(_ELT, "mul", 0.004, thread="main", seq_op=scale, **kw)
            self.comp(_FILL, "ones_like", 0.002, thread="main", **kw)
            self.comp(_ELT, "mul_backward", 0.004, thread="bwd", seq_op=scale, **kw)
            if "head" in seqs:  # the loss's and the output layer's backward
                m_, k_, n_ = self.head_gemm()
                self.comp(_ELT, "cross_entropy_backward", self.logits_share(),
                          thread="bwd", seq_op=seqs["head"][1], **kw)
                self.comp(_GEMM, "mm_backward", 0.3, _mm(m_, n_, k_), thread="bwd",
                          seq_op=seqs["head"][0], **kw)
                self.comp(_GEMM_NT, "mm_backward", 0.3, _mm(k_, m_, n_), thread="bwd",
                          seq_op=seqs["head"][0], **kw)
        layers = list(reversed(self.chunk_layers(chunk)))
        for k, layer in enumerate(layers):
            if c.recompute:
                self.layer_forward(layer, self.is_moe(layer), thread="bwd", phase="RECOMPUTE",
                                   mb=m, chunk=chunk, frame="recompute")
            self.layer_backward(layer, self.is_moe(layer), seqs[layer], nested=c.recompute,
                                thread="bwd", **kw)
            if last_mb and (k % 2 == 1 or k == len(layers) - 1):  # a gradient bucket is done
                params = 12 * c.hidden * c.hidden // c.tp * (2 if k % 2 else 1)
                grads = params // (c.dp * c.cp) if c.dp * c.cp > 1 else params
                self.coll("dp-cp", "_reduce_scatter_base", params, grads, thread="bwd",
                          phase="BWD", mb=m, chunk=chunk, frame="grad_sync")
        if "embedding" in seqs:  # the embedding's gradient (a scatter-add of the tokens')
            self.comp(_ELT, "embedding_backward", 0.05, thread="bwd",
                      seq_op=seqs["embedding"][0], **kw)
        if vs > 0:
            kw["frame"] = "send_backward"
            self.p2p("send", ("grad", m, vs), -1, **kw)

    def p2p(self, kind: str, key: tuple, peer: int, **kw) -> None:
        if self.cfg.pp < 2:
            return
        c = self.cfg
        nelems = c.seq_len * c.micro_batch_size // c.cp * c.hidden // c.tp
        lane = {("send", "act"): "pp_fs", ("recv", "act"): "pp_fr",
                ("send", "grad"): "pp_bs", ("recv", "grad"): "pp_br"}[(kind, key[0])]
        self.items.append(Item(kind, lane, NCCL_KERNEL[kind], "p2p", thread="main",
                               group="pp", collective=kind, in_nelems=nelems,
                               out_nelems=nelems, key=key, peer=peer, **kw))
        self.pending_p2p = True

    def p2p_sync(self, **kw) -> None:
        """Megatron's batch_p2p_sync: torch.cuda.synchronize() after each batch of
        sends / receives; the batch is what the schedule issued since the last one (a
        step's receive with the previous step's send, as ``send_forward_recv_backward``
        batches them). Not with the interleaved schedule: Megatron overlaps its P2P
        there by default (overlap_p2p_comm), which turns batching off."""
        if self.cfg.p2p_sync and self.cfg.vpp == 1 and self.pending_p2p:
            self.items.append(Item("sync", "all", "cudaDeviceSynchronize", "sync",
                                   thread="main", **kw))
        self.pending_p2p = False

    def optimizer(self) -> None:
        c = self.cfg
        kw: dict[str, Any] = dict(thread="main", phase="OPTIMIZER", frame="finalize_model_grads")
        params = 12 * c.hidden * c.hidden // c.tp * max(
            sum(len(self.chunk_layers(ch)) for ch in range(c.vpp)), 1)
        if c.pp > 1 and self.p in (0, c.pp - 1) and c.framework == "megatron":
            self.coll("emb", "allreduce", c.hidden * 1024, c.hidden * 1024, **kw)
        if any(self.is_moe(layer) for ch in range(c.vpp) for layer in self.chunk_layers(ch)):
            self.coll("edp", "_reduce_scatter_base", params // 4, params // 8, **kw)
        if c.framework == "megatron":
            self.coll("tp-pp", "allreduce", 1, 1, dtype="Float", **kw)  # grad norm
        kw["frame"] = "optimizer_step"
        for _ in range(4):
            self.comp(_ADAM, "optimizer", 0.15, **kw)
        grads = params // (c.dp * c.cp) if c.dp * c.cp > 1 else params
        self.coll("dp-cp", "_allgather_base", grads, params, **kw)
        if c.loss_sync:  # the loss's .item(): a device-to-host copy, then a synchronize
            kw["frame"] = "report"
            self.items.append(Item("mem", "compute", "Memcpy DtoH (Device -> Pageable)",
                                   "item", dur=3.0, **kw))
            self.items.append(Item("sync", "compute", "cudaStreamSynchronize", "item",
                                   **kw))

    def build(self) -> list[Item]:
        self.fwd_seqs: dict = {}
        self.pending_p2p = False
        for _ in range(2):  # the iteration starts by zeroing the gradient buffers
            self.items.append(Item("mem", "compute", "Memset (Device)", "zero", dur=6.0,
                                   thread="main", frame="zero_grad"))
        for kind, m, chunk in stage_order(self.cfg, self.p):
            if kind == "F":
                self.forward(m, chunk)
            else:  # the last micro-batch's backward of a chunk triggers its gradient sync
                self.backward(m, chunk, m == self.cfg.microbatches - 1)
        self.p2p_sync(phase="BWD", frame="send_backward")  # the last step's sends
        self.optimizer()
        return self.items
