"""A job's parallel layout, from whichever source states it: a topology file given or
found next to the traces (``unique_parallel_groups_*.txt``), else the process groups the
traces (or parsed tables) record in ``distributedInfo.pg_config``."""
from __future__ import annotations

import functools
import os
from pathlib import Path

from ..errors import TraceVizError, UsageError
from ..table.inputs import note_input
from ..table.schema import file_metadata, group_ranks
from ..topology import groups_file
from ..topology.derive import layout_from_groups, layout_of, mesh_sizes, observed_groups
from ..topology.p2p import RankTraffic
from ..topology.layout import Layout, agreed_world

TOPOLOGY_GLOB = "unique_parallel_groups*.txt"


def from_file(path: str | os.PathLike) -> Layout:
    """The layout a topology file states (:func:`~traceviz.topology.groups_file.from_file`),
    the file noted as an input of the command; a size it states that no job has is an
    error naming the file."""
    note_input(path)
    try:
        st = os.stat(path)
    except OSError:  # said as reading it says it
        return _layout_of.__wrapped__(os.fspath(path), 0, 0)
    return _layout_of(os.path.abspath(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _layout_of(path: str, mtime_ns: int, size: int) -> Layout:
    """The layout of one version of a topology file (read once: a batch worker parses
    many traces of one job, and the file lists every group of it, O(world))."""
    try:
        return groups_file.from_file(path)
    except UsageError as exc:
        raise TraceVizError(f"{path}: {exc}") from None


def find_topology_file(folder: str | os.PathLike) -> Path | None:
    """The newest ``unique_parallel_groups*.txt`` in ``folder`` or one of its parents
    (one a user or Megatron wrote before the one traceviz derived, :data:`DERIVED_NAME`)."""
    folder = Path(folder).resolve()
    for where in (folder, *folder.parents):
        files = sorted(where.glob(TOPOLOGY_GLOB))
        stated = [f for f in files if f.name != DERIVED_NAME]
        if files:
            return (stated or files)[-1]  # names carry a sortable timestamp: the newest
    return None


def observed_of(paths: list[Path]) -> tuple[dict[str, set[tuple[int, ...]]], int]:
    """(the process groups the ``pg_config`` of each trace or readable parsed table
    states, the world size they agree on: :func:`~traceviz.topology.layout.agreed_world`).
    One file's config is held at a time: each states every group of a job of n ranks,
    O(n), and all of them at once would be O(n^2)."""
    from ..parse.header import read_header

    stated: list = []
    whole: set = set()  # the groups of every rank seen: each once, not once per file

    def configs():
        for path in paths:
            if path.suffix == ".parquet":
                try:
                    meta = file_metadata(path)
                except (OSError, ValueError):  # damaged: the loaders name it
                    continue
                info = meta.get("distributed") or {}
                config = meta.get("pg_config") or info.get("pg_config") or []
            else:
                info = (read_header(path) or {}).get("distributedInfo") or {}
                config = info.get("pg_config") or []
            world = info.get("world_size")
            stated.append(world)
            out = []
            for pg in config if isinstance(config, list) else []:
                if isinstance(pg, dict) and pg.get("all_ranks") is True:
                    if (pg.get("pg_desc"), world) in whole:
                        continue
                    whole.add((pg.get("pg_desc"), world))
                    pg = pg | {"ranks": group_ranks(pg, world)}
                out.append(pg)
            yield out

    groups = observed_groups(configs())
    return groups, agreed_world(stated, "traces")[0]


_DERIVED: dict[tuple, Layout] = {}  # layouts derived in this process, by their files


def from_traces(root: str | os.PathLike) -> Layout:
    """Layout derived from the ``pg_config`` of every trace (or parsed table) under root
    (once per version of those files in a process: a command asks for it several
    times, and a job's hundreds of headers take seconds to read)."""
    from .discover import find_traces

    from .outputs import job_files

    root = Path(root)
    paths = [t.path for t in find_traces(root)]
    if root.is_dir():  # the tables, not the analyses' results kept beside them, nor the
        # CPU / allocator tables beside a rank's table (they state its groups again)
        paths += [p for p in job_files(root, ".parquet") if not _beside_its_table(p)]
    if not paths:
        raise TraceVizError(f"{root}: no traces or parsed tables found")
    key = (os.fspath(root.resolve()),) + tuple(
        (os.fspath(p), st.st_size, st.st_mtime_ns) for p in paths
        if (st := os.stat(p)) is not None)
    if key in _DERIVED:
        return _DERIVED[key]
    groups, world = _observed(root, paths)
    layout = layout_from_groups(groups, world, str(root))
    if len(_DERIVED) >= 8:
        _DERIVED.clear()
    _DERIVED[key] = layout
    return layout


def _beside_its_table(path: Path) -> bool:
    """Whether ``path`` is a CPU or allocator table next to its rank's activity table."""
    for suffix in (".cpu.parquet", ".memory.parquet"):
        if path.name.endswith(suffix):
            return path.with_name(path.name[:-len(suffix)] + ".parquet").exists()
    return False


def _observed(root: Path, paths: list[Path]) -> tuple[dict[str, set[tuple[int, ...]]], int]:
    """(the process groups ``paths`` state, their world size); for a folder of tables
    kept beside them (:mod:`.job_cache`: every footer read once, not once per command)."""
    from . import job_cache

    tables = root.is_dir() and all(p.parent == root and p.suffix == ".parquet"
                                   for p in paths)
    key = job_cache.key_of(root, None, {}) if tables else None
    found = job_cache.load(root, "layout", key) if key is not None else None
    if found is not None:
        fields = found[1]
        return ({name: {tuple(g) for g in groups} for name, groups in
                 fields["groups"].items()}, int(fields["world"]))
    groups, world = observed_of(paths)
    if not world:
        raise TraceVizError(f"{root}: the traces state no world size (distributedInfo)")
    if key is not None:
        job_cache.store(root, "layout", key, {}, {
            "groups": {name: sorted(map(list, g)) for name, g in groups.items()},
            "world": world})
    return groups, world


def pipeline_groups(layout: Layout | None, top_rank: int) -> list[list[int]] | None:
    """The PP groups of ``layout`` when it covers the ranks up to ``top_rank`` (None: no
    layout, or one of a smaller job)."""
    if layout is None or layout.world < top_rank + 1:
        return None
    return layout.groups().get("PIPELINE_MODEL_PARALLEL_GROUP")


def job_layout(root: Path, folder: Path, topology: str | os.PathLike | None
               ) -> tuple[Layout | None, str | None]:
    """(layout, None) of the job whose tables are in ``folder``: ``topology`` when given,
    else a topology file beside the traces (``root`` or a parent) or the tables
    (``folder`` or a parent), else the traces' pg_config (``root``'s own when it is one
    trace: other traces in its folder may be another job's), else the layout the
    sends / receives showed (:func:`derive_file`, in the job's output folder); (None,
    why) when none states it."""
    if topology:
        return from_file(topology), None
    found = find_topology_file(root) or find_topology_file(folder)
    if found:
        return from_file(found), None
    try:
        return from_traces(root if Path(root).is_file() else folder), None
    except TraceVizError as exc:
        why = f"no topology ({exc})"
    from .outputs import job_dir

    derived = job_dir(root) / DERIVED_NAME
    if derived.is_file() and not derived.is_symlink():
        return from_file(derived), None
    return None, why


# the layout traceviz found from a job's sends / receives, kept beside its tables (in
# the batch's output folder, never beside the traces): found there by
# :func:`find_topology_file` as a topology file is
DERIVED_NAME = "unique_parallel_groups_from_sends.txt"
DERIVED_STAMP = "derived by traceviz from the traces' sends / receives"
_TRAFFIC_COLUMNS = ("kind", "collective", "comm_group", "phase", "ts", "iteration",
                    "src_rank", "dst_rank")


def is_derived(path: Path | None) -> bool:
    """Whether a topology file is the one traceviz derived from the sends / receives."""
    return path is not None and path.name == DERIVED_NAME


def traffic_of(files: list[Path]) -> dict[int, RankTraffic]:
    """Each rank's sends / receives on the pipeline's or an unknown group (OTHER: the
    default group's), from its table (:class:`~traceviz.topology.p2p.RankTraffic`); {}
    where a table cannot be read or states no rank, or two state one (not one job's: the
    commands that read them say so). The batch's own tables, read before it parses them
    again: not inputs of the command."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from .tables import file_rank

    out: dict[int, RankTraffic] = {}
    for path in files:
        rank = file_rank(path)
        if rank is None or rank in out:
            return {}
        try:
            table = pq.read_table(path, columns=list(_TRAFFIC_COLUMNS))
        except (OSError, pa.ArrowInvalid, KeyError):
            return {}
        mask = pc.and_(pc.and_(pc.equal(table["kind"].cast(pa.string()), "COMM"),
                               pc.equal(table["collective"].cast(pa.string()), "SendRecv")),
                       pc.is_in(table["comm_group"].cast(pa.string()),
                                value_set=pa.array(["PP", "OTHER"])))
        rows = table.filter(pc.fill_null(mask, False)).select(
            ["ts", "phase", "iteration", "src_rank", "dst_rank"]).sort_by("ts").to_pydict()
        t = RankTraffic()
        first_it = min((i for i in rows["iteration"] if i is not None and i >= 0),
                       default=None)
        for src, dst, phase, it in zip(rows["src_rank"], rows["dst_rank"], rows["phase"],
                                       rows["iteration"]):
            src, dst = set(src or ()), set(dst or ())
            t.peers |= src | dst
            if phase == "FWD":
                # a block that also receives belongs to the step after it: its receive
                # is that forward's input, its send the previous step's gradient
                t.forward_from |= src
                if not src:
                    t.forward_to |= dst
            if t.first_is_send is None and it == first_it and (src or dst):
                t.first_is_send = bool(dst) and not src
        out[rank] = t
    return out


def derive_file(out: Path, folder: Path) -> bool:
    """Write (or remove) ``out``/:data:`DERIVED_NAME`: the layout of the pipelines the
    sends / receives of the tables in ``folder`` show (:mod:`~traceviz.topology.p2p`),
    where the traces state no layout. Returns whether the file changed (the tables are
    then parsed again with it)."""
    from ..topology.groups_file import GroupsFile, render
    from ..topology.p2p import pipelines
    from .tables import is_activity_table

    path = out / DERIVED_NAME
    before = path.read_text() if path.is_file() and not path.is_symlink() else None
    files = [p for p in sorted(folder.glob("*.parquet")) if is_activity_table(p)]
    text = None
    traffic = traffic_of(files) if len(files) > 1 else {}
    if traffic:
        found, how = pipelines(traffic)
        if found and len(found[0]) > 1:
            groups, world = observed_of(files)
            world = world or max(r for p in found for r in p) + 1
            try:
                layout = layout_of(found, world, mesh_sizes(groups))
            except TraceVizError:
                layout = None
            if layout is not None:
                text = render(GroupsFile.from_layout(layout, timestamp=f"{DERIVED_STAMP} "
                                                     f"({how})"))
    if text == before:
        return False
    if text is None:
        path.unlink(missing_ok=True)
    else:
        from ..table.io import atomic_path

        with atomic_path(path) as tmp, open(tmp, "w") as fh:
            fh.write(text)
    return True


def from_traces_or_sends(root: str | os.PathLike) -> Layout:
    """The layout the traces under ``root`` state (:func:`from_traces`), else the one
    their sends / receives show (the traces parsed: :func:`.tables.ensure_tables`)."""
    try:
        return from_traces(root)
    except TraceVizError as exc:
        stated = str(exc)
    from .tables import ensure_tables

    for folder in ensure_tables(Path(root)):
        found = find_topology_file(folder)
        if found is not None:
            return from_file(found)
    raise TraceVizError(f"{stated}; and the sends / receives show no pipeline")
