"""Which training framework wrote a job's traces, from what they state: the process
groups' descriptions (``pg_config``) and whether the job has pipelines.

* **Megatron-LM**: a group described as one of Megatron's (``TENSOR_MODEL_PARALLEL_GROUP``,
  ``PIPELINE_MODEL_PARALLEL_GROUP``, ...).
* **TorchTitan**: DeviceMesh groups (``mesh_tp``, ``mesh_pp``, ``mesh_dp_shard``, ...).
* **torch.distributed.pipelining**: pipelines (found from the sends / receives) whose
  ranks describe the default group and no other: PyTorch's own pipeline schedules
  (groups described ``undefined``, as PyTorch < 2.4 and DeepSpeed write them, or none
  at all, say nothing: unknown).
* **unknown** otherwise: advice in plain words.

Advice names a framework's own options only for that framework.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

# Megatron's group_desc strings: TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP_WITH_CP,
# HIERARCHICAL_CONTEXT_PARALLEL_GROUP, INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP, ...
MEGATRON_DESC = re.compile(
    r"^(HIERARCHICAL_|INTRA_(PARTIAL_)?|INTER_(PARTIAL_)?)?(TENSOR|PIPELINE|DATA|CONTEXT|"
    r"EXPERT|EMBEDDING|POSITION_EMBEDDING|MODEL|DISTRIBUTED_OPTIMIZER|HYBRID_DP_CP)"
    r"[A-Z_]*_GROUP(_WITH_CP)?$")
MEGATRON, TORCHTITAN, PIPELINING, UNKNOWN = ("Megatron-LM", "TorchTitan",
                                             "torch.distributed.pipelining", "unknown")
NAMES = (MEGATRON, TORCHTITAN, PIPELINING, UNKNOWN)


@dataclass(frozen=True)
class Framework:
    """The framework (one of :data:`NAMES`) and what in the traces says so."""

    name: str
    evidence: str

    def text(self) -> str:
        return f"framework: {self.name} ({self.evidence})"


def framework_of(descs: Iterable[str], pipelined: bool) -> Framework:
    """The framework of a job whose ranks' ``pg_config`` describe their groups with
    ``descs``; ``pipelined``: the job has pipelines."""
    seen = {d for d in descs if d}
    megatron = sorted(d for d in seen if MEGATRON_DESC.match(d))
    if megatron:
        return Framework(MEGATRON, "Megatron-LM's process groups: "
                         + ", ".join(megatron[:3]) + (", ..." if len(megatron) > 3 else ""))
    mesh = sorted(d for d in seen if d.startswith("mesh_"))
    if mesh:
        return Framework(TORCHTITAN, "DeviceMesh process groups: "
                         + ", ".join(mesh[:4]) + (", ..." if len(mesh) > 4 else ""))
    if pipelined and seen == {"default_pg"}:
        return Framework(PIPELINING, "pipeline sends / receives with no process group "
                         "described but the default one")
    return Framework(UNKNOWN, "no process group says")
