"""The knobs of a synthesized Megatron-like job."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import UsageError
from ..topology.layout import Layout

LAYOUTS = ("patch", "megatron", "torchtitan")
SCHEDULES = ("1f1b", "interleaved")
# megatron: Megatron-LM's process groups and python frames; pipelining: PyTorch's
# torch.distributed.pipelining with the sends / receives on the default process group
# and DeviceMesh groups (``mesh_tp``, ...) for the rest, no topology file; torchtitan:
# the same with the pipeline on the DeviceMesh's ``mesh_pp`` group
FRAMEWORKS = ("megatron", "pipelining", "torchtitan")
_LINK_GROUPS = ("tp", "cp", "ep", "dp-cp", "edp", "tp-pp", "emb", "pp")


@dataclass(frozen=True)
class SynthConfig:
    """A synthetic training job. Times are in microseconds of GPU work per layer.

    ``layers`` is the number of transformer layers of the whole model; each PP stage
    holds ``layers / (pp * vpp)`` layers per model chunk. ``moe_every`` > 0 makes every
    n-th layer a mixture-of-experts layer (needs ``ep`` > 1). ``skew_us`` is the largest
    clock offset of a node (``gpus_per_node`` ranks share one clock).
    """

    tp: int = 2
    pp: int = 4
    dp: int = 2
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    microbatches: int = 8
    layers: int = 8
    iterations: int = 1
    schedule: str = "1f1b"
    recompute: bool = False
    with_stack: bool = True
    pg_desc: bool = True  # False: PyTorch < 2.4 (no Process Group Description)
    moe_every: int = 0
    seed: int = 0
    skew_us: float = 0.0
    gpus_per_node: int = 8
    layout: str = "patch"
    gzip: bool = False
    truncate_rank: int | None = None  # write this rank's trace cut in the middle
    size_multiplier: int = 1          # repeat each layer's kernels to grow the traces
    first_iteration: int = 10
    # GPU time per layer and micro-batch (µs) of the kernels without a FLOP model
    # (norms, activations, ...), the GEMM / attention efficiency (their time is their
    # FLOPs at this share of the device's BF16 peak) and link speeds
    fwd_compute_us: float = 900.0
    matmul_efficiency: float = 0.6
    bwd_factor: float = 2.0
    jitter: float = 0.03               # relative per-rank variation of compute kernels
    # the ordinary spread between GPUs of one model: each rank's compute speed also
    # varies by a normal factor of this standard deviation (0.01-0.02 on real clusters),
    # and every compute kernel by its own normal factor of ``kernel_noise``
    gpu_sigma: float = 0.0
    kernel_noise: float = 0.0
    straggler_rank: int | None = None  # this rank's compute runs slower
    straggler_factor: float = 1.3
    # a slow network: every transfer of the ``slow_link_group`` group ("tp", "dp-cp",
    # "pp", "edp", ...: a token of program.GROUPS) that holds ``slow_link_rank`` takes
    # ``slow_link_factor`` times as long (a degraded NIC or switch port)
    slow_link_rank: int | None = None
    slow_link_group: str = "dp-cp"
    slow_link_factor: float = 3.0
    # the model's vocabulary: > 0 gives the last stage the output layer as GEMMs of
    # their FLOPs (2 x tokens x hidden x vocab / tp forward, twice that backward) and
    # the cross-entropy's backward, the first stage the embedding's backward; 0: a
    # light output layer (a fixed 0.3 of a layer's share, no backward)
    vocab: int = 0
    # Megatron's uneven split (--decoder-first / --decoder-last-pipeline-num-layers,
    # 1F1B only): the first / last stage holds that many layers, the others share the
    # rest evenly
    first_stage_layers: int | None = None
    last_stage_layers: int | None = None
    hidden: int = 4096
    seq_len: int = 4096
    micro_batch_size: int = 1
    tp_gbps: float = 300.0  # NVLink: every group inside a node, TP across nodes too
    dp_gbps: float = 40.0   # across nodes: DP / EP / CP collectives
    pp_gbps: float = 40.0   # across nodes: the pipeline's sends / receives
    # counterfactual knobs: every compute kernel's time, and every transfer's (all
    # groups; or the TP, DP (with EDP) or PP group's) multiplied
    compute_scale: float = 1.0
    comm_scale: float = 1.0
    tp_comm_scale: float = 1.0
    dp_comm_scale: float = 1.0
    pp_comm_scale: float = 1.0
    # the host waits for the GPU: Megatron's batch_p2p_sync (torch.cuda.synchronize()
    # after each batch of pipeline sends / receives; 1F1B only: the interleaved schedule
    # overlaps its P2P by default, unbatched), and the loss's .item() at the iteration's
    # end (a device-to-host copy and a stream synchronize)
    p2p_sync: bool = False
    loss_sync: bool = False
    # False: no synchronisation between steps, as in most training loops: the CPU starts
    # the next ProfilerStep once it has issued this one's work, ahead of the GPU, which
    # runs the steps back to back (each step's window on the GPU then differs from the
    # CPU's span); True: each step starts once the rank's GPU is idle
    step_sync: bool = True
    framework: str = "megatron"
    # this rank runs one more kernel (``spin_kernel``, extra_kernel_us long) after every
    # forward step: work its peers do not do
    extra_kernel_rank: int | None = None
    extra_kernel_us: float = 2000.0
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise UsageError(f"schedule must be one of {SCHEDULES}")
        if self.layout not in LAYOUTS:
            raise UsageError(f"layout must be one of {LAYOUTS}")
        if self.schedule == "1f1b" and self.vpp != 1:
            raise UsageError("vpp > 1 needs --schedule interleaved")
        if self.schedule == "interleaved":
            if self.vpp < 2:
                raise UsageError("the interleaved schedule needs vpp >= 2")
            if self.microbatches < self.pp:  # Megatron: microbatch_group_size_per_vp_stage
                raise UsageError("the interleaved schedule needs microbatches >= pp")
        uneven = self.first_stage_layers is not None or self.last_stage_layers is not None
        if uneven:
            if self.vpp != 1:
                raise UsageError("first_stage_layers / last_stage_layers need vpp 1")
            self.stage_layers()  # validates the split
        elif self.layers % (self.pp * self.vpp):
            raise UsageError(f"layers ({self.layers}) must be divisible by pp*vpp "
                             f"({self.pp * self.vpp})")
        if self.framework not in FRAMEWORKS:
            raise UsageError(f"framework must be one of {FRAMEWORKS}")
        if self.extra_kernel_rank is not None and not 0 <= self.extra_kernel_rank < self.world:
            raise UsageError(f"extra_kernel_rank must be a rank of the job (0..{self.world - 1})")
        if self.slow_link_group not in _LINK_GROUPS:
            raise UsageError(f"slow_link_group must be one of {_LINK_GROUPS}")
        if self.slow_link_rank is not None and not 0 <= self.slow_link_rank < self.world:
            raise UsageError(f"slow_link_rank must be a rank of the job (0..{self.world - 1})")
        if self.straggler_rank is not None and not 0 <= self.straggler_rank < self.world:
            raise UsageError(f"straggler_rank must be a rank of the job (0..{self.world - 1})")
        if min(self.gpu_sigma, self.kernel_noise, self.vocab) < 0:
            raise UsageError("gpu_sigma, kernel_noise and vocab must be >= 0")
        if self.moe_every and self.ep < 2:
            raise UsageError("moe_every needs ep >= 2")
        if self.microbatches < 1 or self.iterations < 1 or self.size_multiplier < 1:
            raise UsageError("microbatches, iterations and size_multiplier must be >= 1")
        self.layout_obj()  # validates the sizes

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def layout_obj(self) -> Layout:
        return Layout(world=self.world, tp=self.tp, pp=self.pp, cp=self.cp, ep=self.ep)

    @property
    def layers_per_chunk(self) -> int:
        return self.layers // (self.pp * self.vpp)

    def stage_layers(self) -> list[int]:
        """Layers per stage (per model chunk): even, or Megatron's uneven split (the
        first / last stage's count, the middle stages sharing the rest evenly)."""
        first, last = self.first_stage_layers, self.last_stage_layers
        if first is None and last is None:
            return [self.layers_per_chunk] * self.pp
        rest = self.layers - (first or 0) - (last or 0)
        left = self.pp - (first is not None) - (last is not None)
        if min(first or 1, last or 1) < 1 or rest < 0 or bool(rest) != bool(left) or (
                left and rest % left):
            raise UsageError(f"first_stage_layers / last_stage_layers: {self.layers} "
                             f"layers cannot be split so on {self.pp} stages (each count "
                             "at least 1, the middle stages sharing the rest evenly)")
        out = [rest // left if left else 0] * self.pp
        if first is not None:
            out[0] = first
        if last is not None:
            out[-1] = last
        return out

    def to_dict(self) -> dict:
        return asdict(self)
