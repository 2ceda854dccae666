"""Reading PyTorch's NCCL Flight Recorder dumps (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0;
written on a timeout to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + the rank, or by
``torch._C._distributed_c10d._dump_nccl_trace``): one file per rank, a pickle or JSON of
plain containers (format versions 2.x: ``version``, ``pg_config``, ``pg_status``,
``entries``).

A pickle is read with an unpickler that builds plain containers only (dicts, lists,
tuples, strings, numbers, booleans, None) and refuses any class or function a pickle may
name: a dump from elsewhere can make no code run. A file larger than
:data:`MAX_DUMP_BYTES` is refused unread. The rank is the number the file's name ends
with (``nccl_trace_rank_3``), else the dump's own ``rank`` where it states one.
"""
from __future__ import annotations

import io
import json
import os
import pickle
import re
from pathlib import Path
from typing import Any

from ..analysis.hang import Dump, Entry, Group
from ..errors import TraceVizError
from ..table.inputs import note_input

MAX_DUMP_BYTES = 256 << 20
VERSIONS = re.compile(r"^2\.\d+$")  # the dump layouts read here
_RANK_IN_NAME = re.compile(r"(\d+)(\.(json|pkl|pickle))?$")


class _PlainUnpickler(pickle.Unpickler):
    """Builds plain containers only: every global a pickle names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"it names {module}.{name}, and only plain data "
                                     "(dicts, lists, strings, numbers) is read")


def dump_files(folder: str | os.PathLike) -> list[Path]:
    """The dump files of ``folder`` (every regular file whose name ends with a number,
    optionally .json / .pkl), by rank; a file is taken as it is."""
    root = Path(folder)
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise TraceVizError(f"{root}: no such file or folder")
    files = [p for p in sorted(root.iterdir()) if p.is_file() and _RANK_IN_NAME.search(p.name)]
    if not files:
        raise TraceVizError(f"{root}: no Flight Recorder dump (one file per rank, its name "
                            "ending with the rank, as TORCH_NCCL_DEBUG_INFO_TEMP_FILE writes "
                            "them) in this folder")
    return files


def read_dump(path: str | os.PathLike) -> Dump:
    """One rank's dump; a :class:`TraceVizError` of one line naming the file where it is
    not one (damaged, another format or version, too large)."""
    path = Path(path)
    note_input(path)
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise TraceVizError(f"{path}: {size:,} bytes, more than a Flight Recorder dump "
                                f"holds ({MAX_DUMP_BYTES:,} at most): not read")
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read: {exc.strerror or exc}") from None
    doc = _decode(path, raw)
    if not isinstance(doc, dict) or "entries" not in doc:
        raise TraceVizError(f"{path}: not a Flight Recorder dump (no 'entries')")
    version = str(doc.get("version"))
    if not VERSIONS.match(version):
        raise TraceVizError(f"{path}: Flight Recorder format {version!r}: traceviz reads "
                            "formats 2.x (PyTorch 2.5 and newer); dump it again with this "
                            "PyTorch or read it with torch's fr_trace")
    try:
        return _dump(path, version, doc)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise TraceVizError(f"{path}: a malformed Flight Recorder dump ({type(exc).__name__}: "
                            f"{exc}); the file may be cut or edited") from None


def _decode(path: Path, raw: bytes) -> Any:
    """The dump's content: JSON where it starts like JSON, else a pickle of plain data."""
    text = raw.lstrip()[:1]
    if text in (b"{", b"["):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise TraceVizError(f"{path}: not valid JSON ({exc})") from None
    stream = io.BytesIO(raw)
    try:
        return _PlainUnpickler(stream).load()
    except (EOFError, pickle.UnpicklingError) as exc:
        if isinstance(exc, EOFError) or "truncated" in str(exc):
            raise TraceVizError(f"{path}: the pickle ends early at byte {len(raw):,} (a cut "
                                "dump: the rank died while writing it?)") from None
        raise TraceVizError(f"{path}: not a readable Flight Recorder pickle at byte "
                            f"{stream.tell():,}: {exc}") from None
    except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
            MemoryError, RecursionError) as exc:
        raise TraceVizError(f"{path}: not a readable Flight Recorder pickle at byte "
                            f"{stream.tell():,}: {exc}") from None


def _rank(path: Path, doc: dict) -> int:
    m = _RANK_IN_NAME.search(path.name)
    if m:
        return int(m.group(1))
    if isinstance(doc.get("rank"), int):
        return int(doc["rank"])
    raise TraceVizError(f"{path}: no rank in the file's name or the dump")


def _ranks(text: Any) -> tuple[int, ...]:
    """A ``pg_config`` ranks value (``"[0, 1]"`` or a list) as global ranks."""
    if isinstance(text, (list, tuple)):
        return tuple(int(r) for r in text)
    return tuple(int(x) for x in re.findall(r"-?\d+", str(text)))


def _dump(path: Path, version: str, doc: dict) -> Dump:
    groups = {}
    for name, pg in (doc.get("pg_config") or {}).items():
        groups[str(name)] = Group(str(name), str(pg.get("desc") or "undefined"),
                                  _ranks(pg.get("ranks")))
    entries, pg_of_id = [], {}
    for e in doc["entries"]:
        pg = e.get("process_group") or ("", "")
        name = str(pg[0])
        pg_of_id[str(e.get("pg_id"))] = name
        if name not in groups:  # a group the config leaves out: what the entry says
            groups[name] = Group(name, str(pg[1] if len(pg) > 1 else "undefined"), ())
        frames = e.get("frames") or []
        user = next((f for f in frames if "torch/" not in str(f.get("filename", ""))),
                    frames[-1] if frames else None)
        entries.append(Entry(
            record_id=int(e["record_id"]), group=name,
            seq=int(e.get("collective_seq_id") or 0), p2p_seq=int(e.get("p2p_seq_id") or 0),
            op=str(e.get("profiling_name") or "").removeprefix("nccl:"),
            state=str(e.get("state")), is_p2p=bool(e.get("is_p2p")),
            input_sizes=_sizes(e.get("input_sizes")), output_sizes=_sizes(e.get("output_sizes")),
            dtypes=tuple(str(t) for t in e.get("input_dtypes") or ()),
            where=(f"{user.get('filename')}:{user.get('line')} {user.get('name')}"
                   if user else "")))
    status = {}
    for pg_id, st in (doc.get("pg_status") or {}).items():
        name = pg_of_id.get(str(pg_id))
        if name is not None and isinstance(st, dict):
            status[name] = (int(st.get("last_enqueued_collective", -1)),
                            int(st.get("last_started_collective", -1)),
                            int(st.get("last_completed_collective", -1)))
    return Dump(_rank(path, doc), os.fspath(path), version, groups, tuple(entries), status)


def _sizes(value: Any) -> tuple:
    return tuple(tuple(int(x) for x in s) for s in value or ())


def read_dumps(folder: str | os.PathLike) -> tuple[list[Dump], list[str]]:
    """Every rank's dump of ``folder``, and one line per file that could not be read (the
    others are read all the same); two dumps of one rank: the first is kept, the other
    named."""
    dumps: dict[int, Dump] = {}
    failed = []
    for path in dump_files(folder):
        try:
            d = read_dump(path)
        except TraceVizError as exc:
            failed.append(str(exc))
            continue
        if d.rank in dumps:
            failed.append(f"{path}: a second dump of rank {d.rank} (the first: "
                          f"{dumps[d.rank].source}): left out")
            continue
        dumps[d.rank] = d
    if not dumps:
        raise TraceVizError(f"{folder}: no Flight Recorder dump could be read: "
                            + "; ".join(failed))
    return [dumps[r] for r in sorted(dumps)], failed
