"""The topology of one job, from whichever source states it, and its JSON form."""
from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq

from ..errors import TraceVizError
from .from_traces import layout_from_groups, observed_groups
from .groups_file import parse
from .layout import Layout


def from_file(path: str | os.PathLike) -> Layout:
    """Layout stated by a ``unique_parallel_groups_*.txt`` file."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read topology file: {exc.strerror}") from None
    return parse(text, str(path)).layout()


def pg_configs_of(paths: list[Path]) -> tuple[list[list[dict]], int]:
    """(pg_config of each trace or parsed table, largest world size stated)."""
    from ..parse.header import read_header

    configs, world = [], 0
    for path in paths:
        if path.suffix == ".parquet":
            import json

            meta = pq.read_schema(path).metadata or {}
            info = json.loads(meta.get(b"traceviz", b"{}")).get("distributed", {})
        else:
            header = read_header(path) or {}
            info = header.get("distributedInfo") or {}
        configs.append(info.get("pg_config") or [])
        if isinstance(info.get("world_size"), int):
            world = max(world, info["world_size"])
    return configs, world


def from_traces(root: str | os.PathLike) -> Layout:
    """Layout derived from the ``pg_config`` of every trace (or parsed table) under root."""
    from ..discover import find_traces

    root = Path(root)
    paths = [t.path for t in find_traces(root)]
    if root.is_dir():
        paths += sorted(root.rglob("*.parquet"))
    if not paths:
        raise TraceVizError(f"{root}: no traces or parsed tables found")
    configs, world = pg_configs_of(paths)
    if not world:
        raise TraceVizError(f"{root}: the traces state no world size (distributedInfo)")
    return layout_from_groups(observed_groups(configs), world, str(root))


def to_json(layout: Layout) -> dict:
    """The layout as JSON: sizes, every group by group_desc, per-rank coordinates."""
    return {
        "config": {"world_size": layout.world, "tp": layout.tp, "pp": layout.pp,
                   "cp": layout.cp, "ep": layout.ep, "expert_tp": layout.etp,
                   "order": layout.order, "dp": layout.dp, "expert_dp": layout.edp},
        "groups_by_group_desc": layout.groups(),
        "model_replicas": {str(k): v for k, v in layout.model_replicas().items()},
        "per_rank": [{"rank": r, **layout.coordinates(r)} for r in range(layout.world)],
    }
