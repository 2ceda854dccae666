"""A job's parallel layout, from whichever source states it: a topology file given or
found next to the traces (``unique_parallel_groups_*.txt``), else the process groups the
traces (or parsed tables) record in ``distributedInfo.pg_config``."""
from __future__ import annotations

import os
from pathlib import Path

from ..errors import TraceVizError, UsageError
from ..table.inputs import note_input
from ..table.schema import file_metadata
from ..topology import groups_file
from ..topology.derive import layout_from_groups, observed_groups
from ..topology.layout import Layout, agreed_world

TOPOLOGY_GLOB = "unique_parallel_groups*.txt"


def from_file(path: str | os.PathLike) -> Layout:
    """The layout a topology file states (:func:`~traceviz.topology.groups_file.from_file`),
    the file noted as an input of the command; a size it states that no job has is an
    error naming the file."""
    note_input(path)
    try:
        return groups_file.from_file(path)
    except UsageError as exc:
        raise TraceVizError(f"{path}: {exc}") from None


def find_topology_file(folder: str | os.PathLike) -> Path | None:
    """The newest ``unique_parallel_groups*.txt`` in ``folder`` or one of its parents."""
    folder = Path(folder).resolve()
    for where in (folder, *folder.parents):
        files = sorted(where.glob(TOPOLOGY_GLOB))
        if files:
            return files[-1]  # names carry a sortable timestamp: the newest
    return None


def pg_configs_of(paths: list[Path]) -> tuple[list[list[dict]], int]:
    """(pg_config of each trace or readable parsed table, the world size they agree on:
    :func:`~traceviz.topology.layout.agreed_world`)."""
    from ..parsing.header import read_header

    configs, stated = [], []
    for path in paths:
        if path.suffix == ".parquet":
            try:
                info = file_metadata(path).get("distributed", {})
            except (OSError, ValueError):  # damaged: the loaders name it
                continue
        else:
            header = read_header(path) or {}
            info = header.get("distributedInfo") or {}
        configs.append(info.get("pg_config") or [])
        stated.append(info.get("world_size"))
    return configs, agreed_world(stated, "traces")[0]


_DERIVED: dict[tuple, Layout] = {}  # layouts derived in this process, by their files


def from_traces(root: str | os.PathLike) -> Layout:
    """Layout derived from the ``pg_config`` of every trace (or parsed table) under root
    (once per version of those files in a process: a command asks for it several
    times, and a job's hundreds of headers take seconds to read)."""
    from .discover import find_traces

    from .outputs import in_cache

    root = Path(root)
    paths = [t.path for t in find_traces(root)]
    if root.is_dir():  # the tables, not the analyses' results kept beside them
        paths += [p for p in sorted(root.rglob("*.parquet")) if not in_cache(p)]
    if not paths:
        raise TraceVizError(f"{root}: no traces or parsed tables found")
    key = (os.fspath(root.resolve()),) + tuple(
        (os.fspath(p), st.st_size, st.st_mtime_ns) for p in paths
        if (st := os.stat(p)) is not None)
    if key in _DERIVED:
        return _DERIVED[key]
    configs, world = pg_configs_of(paths)
    if not world:
        raise TraceVizError(f"{root}: the traces state no world size (distributedInfo)")
    layout = layout_from_groups(observed_groups(configs), world, str(root))
    if len(_DERIVED) >= 8:
        _DERIVED.clear()
    _DERIVED[key] = layout
    return layout


def job_layout(root: Path, folder: Path, topology: str | os.PathLike | None
               ) -> tuple[Layout | None, str | None]:
    """(layout, None) of the job whose tables are in ``folder``: ``topology`` when given,
    else a topology file in ``folder`` / ``root`` or a parent, else the traces'
    pg_config (``root``'s own when it is one trace: other traces in its folder may be
    another job's); (None, why) when none states it."""
    if topology:
        return from_file(topology), None
    found = find_topology_file(folder) or find_topology_file(root)
    if found:
        return from_file(found), None
    try:
        return from_traces(root if Path(root).is_file() else folder), None
    except TraceVizError as exc:
        return None, f"no topology ({exc})"
