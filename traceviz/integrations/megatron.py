"""Megatron-LM integration without a patch: the topology file and a profiler hook.

* :func:`save_parallel_groups` writes ``unique_parallel_groups_<YYYYmmdd_HHMMSS>.txt``
  (the Megatron-TraceViz patch's format) into a log folder: every rank contributes its
  groups (one ``all_gather_object``), rank 0 checks they form a Megatron layout and
  writes the file. Call it on every rank after Megatron's ``initialize_model_parallel``.
* :func:`trace_handler` is an ``on_trace_ready`` callback for ``torch.profiler.profile``
  that writes ``<log_dir>/iteration_<N>/rank_<rrrr>_iter_<N>.pt.trace.json[.gz]`` (N: the
  ProfilerStep number of the last recorded step, plus ``first_iteration``).

torch (and Megatron) are imported only when these functions run, so traceviz itself
never needs them.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Callable

from ..errors import TraceVizError

# Megatron parallel_state getter -> group description (as Kineto's pg_config names it)
MEGATRON_GETTERS = (
    ("get_tensor_model_parallel_group", "TENSOR_MODEL_PARALLEL_GROUP"),
    ("get_pipeline_model_parallel_group", "PIPELINE_MODEL_PARALLEL_GROUP"),
    ("get_data_parallel_group", "DATA_PARALLEL_GROUP"),
    ("get_context_parallel_group", "CONTEXT_PARALLEL_GROUP"),
    ("get_expert_model_parallel_group", "EXPERT_MODEL_PARALLEL_GROUP"),
    ("get_expert_tensor_parallel_group", "EXPERT_TENSOR_PARALLEL_GROUP"),
)


def _megatron_groups() -> dict[str, list[int]]:
    """This rank's groups from Megatron's ``parallel_state`` (must be initialized)."""
    import torch.distributed as dist

    try:
        from megatron.core import parallel_state as ps
    except ImportError:
        raise TraceVizError("save_parallel_groups: megatron.core is not importable; pass "
                            "groups={description: ranks or ProcessGroup}") from None
    if not ps.model_parallel_is_initialized():
        raise TraceVizError("save_parallel_groups: call it after Megatron's "
                            "initialize_model_parallel")
    out = {}
    for getter, desc in MEGATRON_GETTERS:
        try:
            group = getattr(ps, getter)()
        except (AttributeError, AssertionError, RuntimeError):
            continue  # not created in this configuration
        if group is not None:
            out[desc] = list(dist.get_process_group_ranks(group))
    return out


def _as_ranks(group) -> list[int]:
    if isinstance(group, (list, tuple)):
        return [int(r) for r in group]
    import torch.distributed as dist

    return list(dist.get_process_group_ranks(group))


def layout_file_text(per_rank: list[dict[str, list[int]]], world: int,
                     global_batch_size: int | str = "N/A",
                     timestamp: dt.datetime | None = None) -> str:
    """The topology file for the groups every rank reported (``per_rank[r]``: rank r's
    ``{group description: member ranks}``)."""
    from ..topology.derive import layout_from_groups
    from ..topology.groups_file import GroupsFile, render

    observed: dict[str, set[tuple[int, ...]]] = {}
    for groups in per_rank:
        for desc, ranks in groups.items():
            observed.setdefault(desc, set()).add(tuple(ranks))
    layout = layout_from_groups(observed, world, "save_parallel_groups")
    return render(GroupsFile.from_layout(layout, global_batch_size, timestamp))


def save_parallel_groups(log_dir: str | os.PathLike, groups: dict | None = None,
                         global_batch_size: int | str = "N/A") -> Path | None:
    """Write the topology file into ``log_dir`` (see the module doc); returns its path
    on rank 0, None elsewhere. ``groups``: this rank's ``{description: ProcessGroup or
    member ranks}`` (default: read from Megatron's parallel_state). Collective: every
    rank must call it."""
    import torch.distributed as dist

    mine = ({desc: _as_ranks(g) for desc, g in groups.items()} if groups is not None
            else _megatron_groups())
    if dist.is_available() and dist.is_initialized():
        world, rank = dist.get_world_size(), dist.get_rank()
        gathered: list = [None] * world
        dist.all_gather_object(gathered, mine)
    else:
        world, rank, gathered = 1, 0, [mine]
    if rank != 0:
        return None
    now = dt.datetime.now()
    text = layout_file_text(gathered, world, global_batch_size, now)
    from ..table.io import atomic_path
    from ..topology.groups_file import default_name

    path = Path(log_dir) / default_name(now)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text)
    return path


def trace_path(log_dir: str | os.PathLike, rank: int, iteration: int, gz: bool = True) -> Path:
    """``<log_dir>/iteration_<N>/rank_<rrrr>_iter_<N>.pt.trace.json[.gz]``."""
    name = f"rank_{rank:04d}_iter_{iteration}.pt.trace.json" + (".gz" if gz else "")
    return Path(log_dir) / f"iteration_{iteration}" / name


def trace_handler(log_dir: str | os.PathLike, rank: int | None = None, gz: bool = True,
                  first_iteration: int = 0) -> Callable:
    """An ``on_trace_ready`` callback writing the traceviz layout (see the module doc).
    ``rank`` defaults to the global rank (0 without torch.distributed)."""
    def handler(prof) -> None:
        import torch.distributed as dist

        r = rank if rank is not None else (
            dist.get_rank() if dist.is_available() and dist.is_initialized() else 0)
        # on_trace_ready runs inside the step() that ends the active window: the
        # recorded ProfilerStep is the one before the current step number
        path = trace_path(log_dir, r, first_iteration + prof.step_num - 1, gz)
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))

    return handler
