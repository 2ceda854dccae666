"""What each timed op is (Megatron-LM's timer names, :mod:`traceviz.table.timeline_schema`):
its class (compute, data loading, pipeline / DP / TP / embedding communication, optimizer,
other, a wrapper around other timers) and, for a pipeline transfer, which neighbour it
talks to. Communication ops wait for their peers (:mod:`.graph`); the others run alone.
"""
from __future__ import annotations

from ...table import timeline_schema as S

COMPUTE, DATA, P2P, DP, TP, EMB, PPG, OPT, OTHER, WRAPPER = range(10)
COMMUNICATION = (P2P, DP, TP, EMB, PPG)
NONE, NEXT, PREV, BOTH = 0, 1, 2, 3  # the pipeline neighbours a transfer talks to

_CLASSES = {S.FORWARD: COMPUTE, S.BACKWARD: COMPUTE, S.DATA: DATA}
_CLASSES.update({n: P2P for n in S.P2P_NEXT + S.P2P_PREV + S.P2P_BOTH})
_CLASSES.update({n: DP for n in S.DP_OPS})
_CLASSES.update({n: TP for n in S.TP_OPS})
_CLASSES.update({n: EMB for n in S.EMBEDDING_OPS})
_CLASSES.update({n: PPG for n in S.PIPELINE_GROUP_OPS})
_CLASSES.update({n: OPT for n in S.OPTIMIZER_OPS})
_CLASSES.update({n: WRAPPER for n in S.WRAPPERS})
_SIDES = {**{n: NEXT for n in S.P2P_NEXT}, **{n: PREV for n in S.P2P_PREV},
          **{n: BOTH for n in S.P2P_BOTH}}


def op_class(name: str) -> int:
    """The class of a timer named ``name`` (:data:`OTHER` for names not Megatron's)."""
    return _CLASSES.get(name, OTHER)


def side(name: str) -> int:
    """The pipeline neighbours a transfer named ``name`` talks to (:data:`NONE` for the
    other ops)."""
    return _SIDES.get(name, NONE)
