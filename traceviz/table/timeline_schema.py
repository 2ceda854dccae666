"""The op timeline: one row per timed op per rank and training step, as lightweight
per-op timers (Megatron-LM's, CUDA events around the loop's phases) record them on every
rank over many steps. Written by the synthesizer and traceviz's Megatron recorder, read by
:mod:`traceviz.ingest.op_timeline` (parquet, CSV, JSON lines or a Chrome trace of timer
events).

Columns (times int64 ns; every rank of one step on one clock, e.g. since the step began):

* ``rank`` global rank; ``step`` the training step (iteration); ``op`` the timer's name
  (Megatron's, :data:`MEGATRON_OPS`; others kept as they are and classed as other);
  ``start_ns``, ``duration_ns`` (>= 0);
* optional: ``stage`` (pipeline stage), ``dp_rank``, ``tp_rank`` (constant per rank),
  ``microbatch`` (-1 or empty: none), ``chunk`` (model chunk under interleaving, 0
  without), ``transfer_ns`` (the part of a communication op after its last peer arrived;
  <= ``duration_ns``).
"""
from __future__ import annotations

import pyarrow as pa

REQUIRED = ("rank", "step", "op", "start_ns", "duration_ns")
OPTIONAL = ("stage", "dp_rank", "tp_rank", "microbatch", "chunk", "transfer_ns")
COLUMNS = REQUIRED + OPTIONAL

OP_TIMELINE_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("step", pa.int32()), ("op", pa.string()),
    ("start_ns", pa.int64()), ("duration_ns", pa.int64()),
    ("stage", pa.int32()), ("dp_rank", pa.int32()), ("tp_rank", pa.int32()),
    ("microbatch", pa.int32()), ("chunk", pa.int32()), ("transfer_ns", pa.int64())])

# Megatron-LM's timer names (megatron/core/pipeline_parallel/schedules.py and
# p2p_communication.py, megatron/core/distributed, megatron/training/training.py,
# pretrain_gpt.py)
FORWARD, BACKWARD = "forward-compute", "backward-compute"
DATA = "batch-generator"
P2P_NEXT = ("forward-send", "backward-recv", "forward-send-backward-recv")
P2P_PREV = ("forward-recv", "backward-send", "backward-send-forward-recv")
P2P_BOTH = ("forward-send-forward-recv", "backward-send-backward-recv",
            "forward-backward-send-forward-backward-recv")
DP_OPS = ("grads-reduce-scatter", "params-all-gather", "all-grads-sync",
          "grads-all-reduce")
EMBEDDING_OPS = ("embedding-grads-all-reduce",)  # the first and last stage's
PIPELINE_GROUP_OPS = ("conditional-embedder-grads-all-reduce",)  # every stage's
TP_OPS = ("non-tensor-parallel-grads-all-reduce", "layernorm-grads-all-reduce")
OPTIMIZER_OPS = ("optimizer", "optimizer-copy-to-main-grad", "optimizer-clip-main-grad",
                 "optimizer-count-zeros", "optimizer-inner-step",
                 "optimizer-copy-main-to-model-params", "optimizer-unscale-and-check-inf")
# timers around other timers only (the loop, the schedule): their parts are timed
WRAPPERS = ("forward-backward", "interval-time", "train-step", "iteration-time")
MEGATRON_OPS = ((FORWARD, BACKWARD, DATA) + P2P_NEXT + P2P_PREV + P2P_BOTH + DP_OPS
                + EMBEDDING_OPS + PIPELINE_GROUP_OPS + TP_OPS + OPTIMIZER_OPS + WRAPPERS)
