"""What each piece of advice asks for, in the terms of the job's framework
(:mod:`traceviz.topology.framework`): Megatron-LM's arguments for Megatron jobs,
PyTorch's pipeline schedules and TorchTitan's options for PyTorch-native jobs, plain words
where the framework is unknown. A framework's options are named only for its jobs."""
from __future__ import annotations

from dataclasses import dataclass

from ..topology.framework import MEGATRON, PIPELINING, TORCHTITAN


@dataclass(frozen=True)
class Terms:
    """The actions of :mod:`.advice` for one framework (``{...}`` fields are filled in)."""

    more_microbatches: str
    interleave_unknown: str   # the layers per stage are not known
    interleave: str           # {chunks}: model chunks per rank; {per_layer}: layers each
    split_unknown: str        # a stage imbalance, the layers not known
    split_none: str           # {layers} on {pp} stages: no whole-layer split evens them
    split: str                # {options}: how to ask for the split
    overlap: dict[str, str]   # exposed communication of a group: what overlaps it
    cpu_bound: str
    dp_off: tuple[str, str, str]  # grads in the backward, sharded, params in the forward
    dp_tune: str
    tp_with_sp: str  # exposed TP communication where sequence parallelism is on
    tp_tune: str     # exposed TP communication where its overlap is on


_PLAIN_OVERLAP = {
    "TP": "overlap the tensor-parallel all-gathers / reduce-scatters with the GEMMs "
          "(split the GEMMs: communication-overlapped tensor parallelism)",
    "EP": "overlap the MoE dispatch / combine all-to-alls with compute",
    "PP": "a pipeline schedule that overlaps its sends / receives with compute "
          "(interleaved or zero-bubble)",
    "CP": "context parallelism that overlaps its ring exchange with attention",
}
_SCHEDULES = ("ScheduleInterleaved1F1B, or the zero-bubble ScheduleInterleavedZeroBubble / "
              "ScheduleZBVZeroBubble")

MEGATRON_TERMS = Terms(
    more_microbatches="more micro-batches per iteration: raise --global-batch-size or lower "
    "--micro-batch-size (the bubble is about (pp - 1) / (m + pp - 1) of the schedule)",
    interleave_unknown="interleave the stages: --num-layers-per-virtual-pipeline-stage so "
    "that each rank holds 2 model chunks; needs at least 2 layers per stage, which the "
    "trace does not show: give --num-layers to check",
    interleave="interleave the stages: --num-layers-per-virtual-pipeline-stage {per_layer} "
    "so that each rank holds {chunks} model chunks",
    split_unknown="even out the stages with Megatron's split options "
    "(--decoder-last-pipeline-num-layers / --decoder-first-pipeline-num-layers, "
    "--account-for-loss-in-pipeline-split / --account-for-embedding-in-pipeline-split): "
    "the trace does not show the layers per stage; give --num-layers to choose the split "
    "(the saving is that of perfectly even stages, an upper bound)",
    split_none="no split of whole layers Megatron allows evens the stages out with "
    "{layers} layers on {pp} stages (--decoder-first / --decoder-last-pipeline-num-layers "
    "and --account-for-embedding / loss-in-pipeline-split tried): more layers per stage "
    "(fewer pipeline stages) would let them; the saving is that of perfectly even stages, "
    "an upper bound",
    split="even out the stages: {options}",
    overlap={
        "TP": "--tp-comm-overlap (with --sequence-parallel): split the GEMMs and overlap "
              "their all-gathers / reduce-scatters",
        "EP": "--overlap-moe-expert-parallel-comm: overlap the MoE dispatch / combine "
              "all-to-alls with compute",
        "PP": "the interleaved schedule with --overlap-p2p-communication: overlap the "
              "pipeline sends / receives with compute",
        "CP": "context parallelism that overlaps its ring exchange with attention "
              "(--cp-comm-type p2p)"},
    cpu_bound="CUDA graphs (--cuda-graph-impl transformer_engine or local) and fused "
    "kernels: fewer launches",
    dp_off=("--overlap-grad-reduce (reduce gradients bucket by bucket during the backward)",
            "--use-distributed-optimizer (reduce-scatter gradients, all-gather parameters: "
            "half the all-reduce's traffic on each side of the step)",
            "--overlap-param-gather (gather parameters during the forward)"),
    dp_tune="larger buckets hide more (Megatron --ddp-bucket-size, PyTorch DDP "
    "bucket_cap_mb), as does starting the last bucket earlier; check the DP network's "
    "bandwidth",
    tp_with_sp="--tp-comm-overlap: split the GEMMs and overlap their all-gathers / "
    "reduce-scatters (sequence parallelism is on already)",
    tp_tune="the overlap's splits and method per GEMM (--tp-comm-overlap-cfg) decide how "
    "much is hidden; check the TP links' bandwidth")

PYTORCH_TERMS = Terms(
    more_microbatches="more micro-batches per iteration: a larger n_microbatches for the "
    "pipeline schedule (TorchTitan: a smaller --parallelism.pipeline_parallel_microbatch_"
    "size) (the bubble is about (pp - 1) / (m + pp - 1) of the schedule)",
    interleave_unknown="an interleaved schedule (" + _SCHEDULES + ") with 2 stages per "
    "rank; needs at least 2 layers per stage, which the trace does not show: give "
    "--num-layers to check",
    interleave="an interleaved schedule (" + _SCHEDULES + ") with {chunks} stages per rank "
    "of {per_layer} layer(s) each",
    split_unknown="even out the stages: move layers from the heavy stage to the others "
    "where the model is cut into stages (TorchTitan: --parallelism.pipeline_parallel_"
    "split_points); the trace does not show the layers per stage (the saving is that of "
    "perfectly even stages, an upper bound)",
    split_none="no split of whole layers evens the stages out with {layers} layers on "
    "{pp} stages: more layers per stage (fewer pipeline stages) would let them; the saving "
    "is that of perfectly even stages, an upper bound",
    split="even out the stages: cut the model at other layers (TorchTitan: --parallelism."
    "pipeline_parallel_split_points)",
    overlap={**_PLAIN_OVERLAP,
             "TP": "asynchronous tensor parallelism (TorchTitan: --parallelism.enable_"
                   "async_tensor_parallel, with torch.compile)",
             "PP": "a schedule that overlaps its sends / receives with compute: "
                   + _SCHEDULES},
    cpu_bound="CUDA graphs (torch.compile mode='reduce-overhead') and fused kernels "
    "(torch.compile): fewer launches",
    dp_off=("gradient reduction during the backward (DDP's buckets; FSDP2 reduce-"
            "scatters per module as the backward reaches it)",
            "sharded data parallelism (FSDP2 fully_shard: reduce-scatter gradients, "
            "all-gather parameters)",
            "parameter all-gathers ahead of use during the forward (FSDP2 prefetching)"),
    dp_tune="larger buckets hide more (DDP bucket_cap_mb; FSDP2: wrap larger modules), "
    "as does starting the last bucket earlier; check the DP network's bandwidth",
    tp_with_sp="asynchronous tensor parallelism (TorchTitan: --parallelism.enable_async_"
    "tensor_parallel, with torch.compile; sequence parallelism is on already)",
    tp_tune="check that the GEMMs are large enough to hide their collectives, and the TP "
    "links' bandwidth")

PLAIN_TERMS = Terms(
    more_microbatches="more micro-batches per iteration (the bubble is about (pp - 1) / "
    "(m + pp - 1) of the schedule)",
    interleave_unknown="an interleaved pipeline schedule with 2 model chunks per rank; "
    "needs at least 2 layers per stage, which the trace does not show: give --num-layers "
    "to check",
    interleave="an interleaved pipeline schedule with {chunks} model chunks per rank of "
    "{per_layer} layer(s) each",
    split_unknown=PYTORCH_TERMS.split_unknown.split(" (TorchTitan")[0]
    + "; the trace does not show the layers per stage (the saving is that of perfectly "
    "even stages, an upper bound)",
    split_none=PYTORCH_TERMS.split_none,
    split="even out the stages: cut the model at other layers",
    overlap=dict(_PLAIN_OVERLAP),
    cpu_bound="CUDA graphs and fused kernels: fewer launches",
    dp_off=("gradient reduction during the backward, bucket by bucket",
            "sharded data parallelism (reduce-scatter gradients, all-gather parameters)",
            "parameter all-gathers during the forward"),
    dp_tune="larger gradient buckets hide more, as does starting the last bucket "
    "earlier; check the DP network's bandwidth",
    tp_with_sp=_PLAIN_OVERLAP["TP"] + " (sequence parallelism is on already)",
    tp_tune="check that the GEMMs are large enough to hide their collectives, and the TP "
    "links' bandwidth")


def terms_for(framework: str) -> Terms:
    """The terms of ``framework`` (a :data:`~traceviz.topology.framework.NAMES` name)."""
    if framework == MEGATRON:
        return MEGATRON_TERMS
    if framework in (PIPELINING, TORCHTITAN):
        return PYTORCH_TERMS
    return PLAIN_TERMS
