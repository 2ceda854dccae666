"""Derive a job's layout from the process groups its traces record.

Every rank's trace header holds ``distributedInfo.pg_config``: the process groups that
rank belongs to, with Megatron's ``group_desc`` and the member ranks. The union over
ranks gives the group sizes (tp = size of TENSOR_MODEL_PARALLEL_GROUP, ...); the layout
is accepted only if every observed group is one Megatron would build (the default order
``tp-cp-ep-dp-pp`` or the alternative ``tp-cp-ep-pp-dp``).
"""
from __future__ import annotations

from collections.abc import Iterable

from ..errors import TraceVizError
from .layout import DEFAULT_ORDER, Layout

ORDERS = (DEFAULT_ORDER, "tp-cp-ep-pp-dp")
_SIZE_OF = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
            "cp": "CONTEXT_PARALLEL_GROUP", "ep": "EXPERT_MODEL_PARALLEL_GROUP",
            "expert_tp": "EXPERT_TENSOR_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP"}


def observed_groups(pg_configs: Iterable[list[dict]]) -> dict[str, set[tuple[int, ...]]]:
    """``group_desc -> {member tuples}`` over the ``pg_config`` lists of many ranks."""
    out: dict[str, set[tuple[int, ...]]] = {}
    for config in pg_configs:
        for pg in config or []:
            if not isinstance(pg, dict) or not isinstance(pg.get("ranks"), list):
                continue
            desc = str(pg.get("pg_desc") or "")
            out.setdefault(desc, set()).add(tuple(int(r) for r in pg["ranks"]))
    return out


def layout_from_groups(groups: dict[str, set[tuple[int, ...]]], world: int,
                       source: str = "traces") -> Layout:
    """The layout whose Megatron groups contain every observed group."""
    sizes = {}
    for key, desc in _SIZE_OF.items():
        members = groups.get(desc)
        if members:
            lengths = {len(g) for g in members}
            if len(lengths) != 1:
                raise TraceVizError(f"{source}: {desc} groups have different sizes "
                                    f"{sorted(lengths)}")
            sizes[key] = lengths.pop()
    if "tp" not in sizes or "pp" not in sizes:
        known = sorted(d for d in groups if d) or ["none"]
        raise TraceVizError(
            f"{source}: pg_config has no Megatron TENSOR/PIPELINE_MODEL_PARALLEL_GROUP "
            f"descriptions (found: {', '.join(known[:6])})",
        ) from None
    errors = []
    for order in ORDERS:
        layout = Layout(world=world, tp=sizes["tp"], pp=sizes["pp"], cp=sizes.get("cp", 1),
                        ep=sizes.get("ep", 1), expert_tp=sizes.get("expert_tp"), order=order)
        built = {desc: {tuple(g) for g in gs} for desc, gs in layout.groups().items()}
        wrong = [desc for desc, seen in groups.items() if desc in built and not seen <= built[desc]]
        if not wrong:
            return layout
        errors.append(f"order {order}: {', '.join(sorted(wrong))} differ")
    raise TraceVizError(f"{source}: the recorded groups match no Megatron layout with "
                        f"tp={sizes['tp']} pp={sizes['pp']} cp={sizes.get('cp', 1)} "
                        f"ep={sizes.get('ep', 1)} ({'; '.join(errors)})")
