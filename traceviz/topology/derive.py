"""Derive a job's layout from the process groups its traces record.

Every rank's trace header holds ``distributedInfo.pg_config``: the process groups that
rank belongs to, with Megatron's ``group_desc`` and the member ranks. The union over
ranks gives the group sizes (tp = size of TENSOR_MODEL_PARALLEL_GROUP, ...); the layout
is accepted only if every observed group is one Megatron would build (the default order
``tp-cp-ep-dp-pp`` or the alternative ``tp-cp-ep-pp-dp``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..errors import TraceVizError, UsageError
from .layout import DEFAULT_ORDER, Layout

ORDERS = (DEFAULT_ORDER, "tp-cp-ep-pp-dp")
_SIZE_OF = {"tp": "TENSOR_MODEL_PARALLEL_GROUP", "pp": "PIPELINE_MODEL_PARALLEL_GROUP",
            "cp": "CONTEXT_PARALLEL_GROUP", "ep": "EXPERT_MODEL_PARALLEL_GROUP",
            "expert_tp": "EXPERT_TENSOR_PARALLEL_GROUP", "dp": "DATA_PARALLEL_GROUP"}


# DeviceMesh's descriptions (``mesh_<dim name>``, TorchTitan's dims): a pipeline
# group's members in its mesh order are the stages in order
MESH_PP = "mesh_pp"
MESH_SIZE = {"tp": "mesh_tp", "cp": "mesh_cp", "ep": "mesh_ep"}


def mesh_sizes(groups: Mapping[str, set[tuple[int, ...]]]) -> dict[str, int]:
    """tp / cp / ep as the DeviceMesh groups among ``groups`` state them (absent: not
    stated)."""
    return {k: len(next(iter(groups[d]))) for k, d in MESH_SIZE.items() if groups.get(d)}


def observed_groups(pg_configs: Iterable[list[dict]]) -> dict[str, set[tuple[int, ...]]]:
    """``group_desc -> {member tuples}`` over the ``pg_config`` lists of many ranks."""
    out: dict[str, set[tuple[int, ...]]] = {}
    seen: set[tuple] = set()  # (description, members as stated): each group once
    for config in pg_configs:
        for pg in config or []:
            if not isinstance(pg, dict) or not isinstance(pg.get("ranks"), list):
                continue
            desc = str(pg.get("pg_desc") or "")
            stated = (desc, tuple(pg["ranks"]))  # every rank of a group states it
            if stated in seen:
                continue
            seen.add(stated)
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
    if ("tp" not in sizes or "pp" not in sizes) and groups.get(MESH_PP):
        return layout_of([list(g) for g in sorted(groups[MESH_PP])], world,
                         mesh_sizes(groups))
    if sizes and ("tp" not in sizes or "pp" not in sizes):
        # Megatron's groups of one rank are not in pg_config: that size is 1
        sizes.setdefault("tp", 1)
        sizes.setdefault("pp", 1)
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


def layout_of(found: list[list[int]], world: int, sizes: Mapping[str, int]) -> Layout:
    """The layout whose pipeline groups are ``found`` (each in stage order), with the
    other sizes the traces state (``sizes``: tp, cp, ep from the DeviceMesh groups; 1
    where not stated); a one-line error where no layout builds them."""
    pp = len(found[0])
    if world % pp:
        raise TraceVizError(f"pipelines of {pp} stages do not divide the {world} ranks")
    want = {tuple(p) for p in found}
    tp, cp, ep = (int(sizes.get(k, 1)) for k in ("tp", "cp", "ep"))
    tried = []
    for order in ORDERS:
        try:
            layout = Layout(world=world, tp=tp, pp=pp, cp=cp, ep=ep, order=order)
        except UsageError as exc:  # sizes that do not divide the world
            tried.append(f"{order}: {exc}")
            continue
        if {tuple(g) for g in layout.generator("dense", "pp")} == want:
            return layout
        tried.append(f"{order}: other groups")
    shown = ", ".join(str(p) for p in found[:4]) + (", ..." if len(found) > 4 else "")
    raise TraceVizError(f"the pipelines the sends / receives show ({shown}) match no "
                        f"layout with tp={tp} cp={cp} ep={ep} ({'; '.join(tried)}); "
                        "pass --topology")
