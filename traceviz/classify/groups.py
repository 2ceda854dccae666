"""The parallel group (TP / CP / EP / ETP / DP / EDP / PP / OTHER) of each communication.

Evidence, in order: the collective's Process Group Description (Megatron's group_desc,
recorded by PyTorch >= 2.4) matched against the ``comm_group`` patterns (a specific
description matching none is OTHER); where the description is absent or generic
(``undefined``, ``default_pg``), its ranks matched against the job topology (when one is
known: ``--topology``, the topology file or the traces' pg_config; a rank set that is
several groups is the pipeline group for sends / receives and the embedding group for
other collectives); a send / receive on another group (the default one: interleaved
Megatron's, ``torch.distributed.pipelining``'s) between ranks of one pipeline group of
the layout is PP; then the kernel's name where a library states its group in it
(``comm_group_by_kernel``: DeepEP is expert parallelism); else OTHER.
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet

import numpy as np

from ..table.schema import GROUPS
from ..topology.layout import Layout
from .patterns import Patterns

# when one rank set is several Megatron groups (e.g. DP == DP-with-CP when cp = 1), the
# first description in this order names it
DESC_PRIORITY = ("TENSOR_MODEL_PARALLEL_GROUP", "CONTEXT_PARALLEL_GROUP",
                 "EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_PARALLEL_GROUP",
                 "DATA_PARALLEL_GROUP_WITH_CP", "DATA_PARALLEL_GROUP",
                 "EXPERT_DATA_PARALLEL_GROUP", "PIPELINE_MODEL_PARALLEL_GROUP",
                 "EMBEDDING_GROUP", "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP")


def group_of_desc(desc: str | None, patterns: Patterns) -> str | None:
    if not desc:
        return None
    return next((g for g, p in patterns.comm_groups if p.search(desc)), None)


def descs_by_ranks(layout: Layout) -> dict[frozenset, list[str]]:
    """The Megatron group descriptions of every rank set of the layout, by priority (one
    rank set can be several groups: DP == DP-with-CP when cp = 1, the embedding group ==
    the pipeline group when pp = 2)."""
    groups = layout.groups()
    out: dict[frozenset, list[str]] = {}
    for desc in dict.fromkeys(DESC_PRIORITY + tuple(sorted(groups))):
        for g in groups.get(desc, []):
            out.setdefault(frozenset(g), []).append(desc)
    return out


def desc_of(descs: list[str], p2p: bool) -> str:
    """The description a collective on a rank set with these ``descs`` has: the first,
    but the pipeline group carries Megatron's send / receive and the embedding groups
    its all-reduces, so those pick each other out."""
    pipeline, embedding = "PIPELINE_MODEL_PARALLEL_GROUP", ("EMBEDDING_GROUP",
                                                              "POSITION_EMBEDDING_GROUP")
    if p2p and pipeline in descs:
        return pipeline
    if not p2p:
        descs = [d for d in descs if d != pipeline
                 or not any(e in descs for e in embedding)] or descs
    return descs[0]


def comm_groups(is_comm: np.ndarray, desc_codes: np.ndarray, descs: list[str],
                rank_lists: dict[int, list[int] | None], patterns: Patterns,
                layout: Layout | None, p2p: AbstractSet[int] = frozenset(),
                by_kernel: np.ndarray | None = None,
                in_pipeline: AbstractSet[int] = frozenset()
                ) -> tuple[np.ndarray, dict[str, int]]:
    """Index into GROUPS per row (int8; -1 for non-COMM rows) and counts per evidence.

    ``desc_codes`` index ``descs`` (-1 unknown); ``rank_lists`` maps a row to its group's
    member list (absent or None: unknown); ``p2p``: the rows that are sends / receives;
    ``by_kernel``: per row the group its kernel name states (-1 none), the last resort;
    ``in_pipeline``: the send / receive rows between ranks of one pipeline group of the
    layout (PP where nothing before says otherwise).
    """
    out = np.full(is_comm.shape[0], -1, dtype=np.int8)
    other = GROUPS.index("OTHER")
    by_desc = np.array([GROUPS.index(g) if (g := group_of_desc(d, patterns)) else
                        -1 if patterns.generic_pg_desc.search(d) else other
                        for d in descs] + [-1], dtype=np.int32)
    rows = np.flatnonzero(is_comm)
    out[rows] = by_desc[desc_codes[rows]]
    evidence = {"process group description": int((out[rows] >= 0).sum())}
    todo = rows[out[rows] < 0]
    by_ranks = 0
    if layout is not None and todo.size:
        known = descs_by_ranks(layout)
        cache: dict[tuple, int] = {}
        for i in todo.tolist():
            ranks = rank_lists.get(i)
            if ranks is None:
                continue
            key = (tuple(ranks), i in p2p)
            if key not in cache:
                found = known.get(frozenset(ranks))
                g = group_of_desc(desc_of(found, key[1]), patterns) if found else None
                cache[key] = GROUPS.index(g) if g else -1
            out[i] = cache[key]
            by_ranks += out[i] >= 0
    evidence["group ranks against the topology"] = int(by_ranks)
    piped = np.array(sorted(in_pipeline), dtype=np.int64)
    piped = piped[out[piped] < 0] if piped.size else piped
    out[piped] = GROUPS.index("PP")
    evidence["send / receive within one pipeline"] = int(piped.size)
    if by_kernel is not None:
        todo = rows[out[rows] < 0]
        out[todo] = by_kernel[todo]
        evidence["kernel name"] = int((by_kernel[todo] >= 0).sum())
    rest = rows[out[rows] < 0]
    out[rest] = GROUPS.index("OTHER")
    evidence["none (OTHER)"] = int(rest.size)
    return out, evidence
