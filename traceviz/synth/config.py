"""The knobs of a synthesized Megatron-like job."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import UsageError
from ..topology.layout import Layout

LAYOUTS = ("patch", "megatron", "torchtitan")
SCHEDULES = ("1f1b", "interleaved")


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
    straggler_rank: int | None = None  # this rank's compute runs slower
    straggler_factor: float = 1.3
    hidden: int = 4096
    seq_len: int = 4096
    micro_batch_size: int = 1
    tp_gbps: float = 300.0
    dp_gbps: float = 40.0
    pp_gbps: float = 40.0
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
        if self.layers % (self.pp * self.vpp):
            raise UsageError(f"layers ({self.layers}) must be divisible by pp*vpp "
                             f"({self.pp * self.vpp})")
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

    def to_dict(self) -> dict:
        return asdict(self)
