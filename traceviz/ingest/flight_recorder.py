"""Reading PyTorch's NCCL Flight Recorder dumps (``TORCH_NCCL_TRACE_BUFFER_SIZE`` > 0;
written on a timeout to ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` + the rank, or by
``torch._C._distributed_c10d._dump_nccl_trace``): one file per rank, a pickle or JSON of
plain containers (format versions 2.x: ``version``, ``pg_config``, ``pg_status``,
``entries``).

A dump from elsewhere is hostile input; reading one is bounded by its file:

* A file larger than :data:`MAX_DUMP_BYTES` is refused unread.
* A pickle is read by :func:`.plain_pickle.load_plain`: plain containers only (dicts,
  lists, tuples, strings, numbers, booleans, None), its opcodes checked before anything
  is built (no global, nothing that calls code, memo indices and lengths within the
  file, dict keys strings, a bounded number of values). A dump from elsewhere can make
  no code run.
* What is read from the containers is checked field by field (type and range: ranks
  below :data:`MAX_WORLD`, sequence numbers non-negative and below 2^62, texts capped)
  and capped: :data:`MAX_ENTRIES` entries, the first :data:`MAX_FRAMES` frames of each,
  and at most as many size numbers as the file has bytes (shared references never
  expand beyond that). A bad field fails the dump with one line naming the file, the
  entry and the field; the other dumps are read all the same.

The rank is the number the file's name ends with (``nccl_trace_rank_3``), else the
dump's own ``rank`` where it states one.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..analysis.hang import MAX_OP_NAME, Dump, Entry, Group
from ..errors import TraceVizError
from ..limits import MAX_WORLD
from ..table.inputs import note_input
from .plain_pickle import PickleRefused, load_plain

MAX_DUMP_BYTES = 64 << 20   # a ring buffer of 20,000 entries with their frames: ~30 MB
MAX_ENTRIES = 1 << 20      # far above any ring buffer (TORCH_NCCL_TRACE_BUFFER_SIZE)
MAX_FRAMES = 256           # the frames of one entry looked at for the user's frame
MAX_TEXT = 4096            # characters kept of a name, file or description
MAX_SEQ = 1 << 62          # sequence and record numbers are below this
MAX_DIM = 1 << 48          # a tensor dimension (distinct below 2^61: distinct hashes)
VERSIONS = re.compile(r"^2\.\d{1,4}$")  # the dump layouts read here
_RANK_IN_NAME = re.compile(r"(\d+)(\.(json|pkl|pickle))?$")


class _Bad(ValueError):
    """A field of a dump that is not what a Flight Recorder writes (message: where)."""


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


def read_dump(path: str | os.PathLike, world: int | None = None) -> Dump:
    """One rank's dump; a :class:`TraceVizError` of one line naming the file where it is
    not one (damaged, another format or version, too large, a field out of range: a rank
    at or above ``world`` where the job's size is given)."""
    path = Path(path)
    note_input(path)
    try:
        size = path.stat().st_size
        if size > MAX_DUMP_BYTES:
            raise TraceVizError(f"{path}: {size:,} bytes, more than a Flight Recorder dump "
                                f"holds ({MAX_DUMP_BYTES:,} at most): not read")
        with open(path, "rb") as f:
            raw = f.read(MAX_DUMP_BYTES + 1)
    except OSError as exc:
        raise TraceVizError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > MAX_DUMP_BYTES:
        raise TraceVizError(f"{path}: more than {MAX_DUMP_BYTES:,} bytes, more than a "
                            "Flight Recorder dump holds: not read")
    doc = _decode(path, raw)
    if not isinstance(doc, dict) or "entries" not in doc:
        raise TraceVizError(f"{path}: not a Flight Recorder dump (no 'entries')")
    version = doc.get("version")
    if not isinstance(version, str) or not VERSIONS.match(version):
        shown = _short(version)
        raise TraceVizError(f"{path}: Flight Recorder format {shown}: traceviz reads "
                            "formats 2.x (PyTorch 2.5 and newer); dump it again with this "
                            "PyTorch or read it with torch's fr_trace")
    try:
        return _Converter(path, len(raw), world or MAX_WORLD).dump(version, doc)
    except _Bad as exc:
        raise TraceVizError(f"{path}: {exc}; the file may be cut or edited (this dump is "
                            "left out)") from None


def _short(value: Any) -> str:
    """``value`` shown in a message: its repr for a short string or number, else its
    type (never the repr of a large or nested structure)."""
    if isinstance(value, float):
        return repr(value)  # inf, nan, 1e+30: short whatever the value
    if isinstance(value, int) and not isinstance(value, bool):
        return repr(value) if abs(value) < 10 ** 20 else \
            f"an integer of {value.bit_length():,} bits"
    if isinstance(value, str):
        return repr(value[:40] + ("..." if len(value) > 40 else ""))
    return "a " + type(value).__name__ if value is not None else "missing"


def _decode(path: Path, raw: bytes) -> Any:
    """The dump's content: JSON where it starts like JSON, else a pickle of plain data."""
    text = raw.lstrip()[:1]
    if text in (b"{", b"["):
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise TraceVizError(f"{path}: not valid JSON ({str(exc)[:200]})") from None
    try:
        return load_plain(raw)
    except PickleRefused as exc:
        if exc.cut:
            raise TraceVizError(f"{path}: the pickle ends early at byte {len(raw):,} (a cut "
                                "dump: the rank died while writing it?)") from None
        raise TraceVizError(f"{path}: not a readable Flight Recorder pickle at byte "
                            f"{exc.offset:,}: {exc}") from None
    except (EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            OverflowError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
        raise TraceVizError(f"{path}: not a readable Flight Recorder pickle: "
                            f"{str(exc)[:200]}") from None


def rank_of_name(path: Path) -> int | None:
    """The rank a dump file's name ends with (None: it ends with no number)."""
    m = _RANK_IN_NAME.search(path.name)
    if not m:
        return None
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 7 or int(digits) >= MAX_WORLD:
        raise _Bad(f"its name ends with {digits[:12]}{'...' if len(digits) > 12 else ''}, "
                   f"not a rank (ranks are below {MAX_WORLD:,})")
    return int(digits)


class _Converter:
    """A decoded dump's containers checked and converted to a :class:`Dump` (every
    field type- and range-checked; see the module doc); ``_Bad`` names what is wrong."""

    def __init__(self, path: Path, file_bytes: int, world: int):
        self.path = path
        self.budget = file_bytes + 1024  # entries, frames, size numbers: the file's bytes
        self.world = world
        self.texts: dict[str, str] = {}        # one string per distinct text
        self.by_id: dict[int, str] = {}        # the dump's strings (alive while converting)
        self.frames: dict[int, str] = {}       # the dump's frames lists: their user frame
        self.sizes: dict[tuple, tuple] = {}    # one tuple per distinct sizes

    def dump(self, version: str, doc: dict) -> Dump:
        groups: dict[str, Group] = {}
        config = doc.get("pg_config") or {}
        if not isinstance(config, dict):
            raise _Bad("'pg_config' is not a mapping")
        for name, pg in config.items():
            if not isinstance(pg, dict):
                raise _Bad(f"pg_config[{_short(name)}] is not a mapping")
            gname = self.text(name, "a pg_config name")
            groups[gname] = Group(gname, self.text(pg.get("desc") or "undefined",
                                                    f"pg_config[{gname}].desc"),
                                  self.ranks(pg.get("ranks"), f"pg_config[{gname}].ranks"))
        raw_entries = doc["entries"]
        if not isinstance(raw_entries, (list, tuple)):
            raise _Bad("'entries' is not a list")
        if len(raw_entries) > MAX_ENTRIES:
            raise _Bad(f"{len(raw_entries):,} entries, more than a Flight Recorder ring "
                       f"buffer holds ({MAX_ENTRIES:,} at most)")
        entries, pg_of_id = [], {}
        for i, e in enumerate(raw_entries):
            entry, pg_id = self.entry(i, e, groups)
            pg_of_id[pg_id] = entry.group
            entries.append(entry)
        status = {}
        pg_status = doc.get("pg_status") or {}
        if not isinstance(pg_status, dict):
            raise _Bad("'pg_status' is not a mapping")
        for pg_id, st in pg_status.items():
            name = pg_of_id.get(self.text(pg_id, "a pg_status key"))
            if name is not None and isinstance(st, dict):
                where = f"pg_status[{_short(pg_id)}]"
                enq, started, done = (
                    self.number(st.get(k, -1), f"{where}.{k}", lo=-1)
                    for k in ("last_enqueued_collective", "last_started_collective",
                              "last_completed_collective"))
                status[name] = (enq, started, done)
        return Dump(self.rank(doc), os.fspath(self.path), version, groups, tuple(entries),
                    status)

    def entry(self, i: int, e: Any, groups: dict[str, Group]) -> tuple[Entry, str]:
        """Entry ``i`` and its ``pg_id`` (as text); a group the config leaves out is
        added to ``groups`` as the entry names it."""
        where = f"entry {i}"
        if not isinstance(e, dict):
            raise _Bad(f"{where} is not a mapping")
        self.spend(1, where)
        pg = e.get("process_group") or ("", "")
        if not isinstance(pg, (list, tuple)) or not pg:
            raise _Bad(f"{where}: 'process_group' is not a (name, description) pair")
        name = self.text(pg[0], f"{where}.process_group")
        if name not in groups:  # a group the config leaves out: what the entry says
            groups[name] = Group(name, self.text(pg[1] if len(pg) > 1 else "undefined",
                                                 f"{where}.process_group"), ())
        op = self.text(e.get("profiling_name") or "", f"{where}.profiling_name")
        dtypes = e.get("input_dtypes") or ()
        if not isinstance(dtypes, (list, tuple)):
            raise _Bad(f"{where}: 'input_dtypes' is not a list of names")
        self.spend(len(dtypes), f"{where}.input_dtypes")
        return Entry(
            record_id=self.number(e.get("record_id"), f"{where}.record_id"), group=name,
            seq=self.number(e.get("collective_seq_id") or 0, f"{where}.collective_seq_id"),
            p2p_seq=self.number(e.get("p2p_seq_id") or 0, f"{where}.p2p_seq_id"),
            op=op.removeprefix("nccl:")[:MAX_OP_NAME],
            state=self.text(e.get("state"), f"{where}.state"),
            is_p2p=bool(e.get("is_p2p")),
            input_sizes=self.sizes_of(e.get("input_sizes"), f"{where}.input_sizes"),
            output_sizes=self.sizes_of(e.get("output_sizes"), f"{where}.output_sizes"),
            dtypes=self.interned(tuple(self.text(t, f"{where}.input_dtypes")
                                       for t in dtypes)),
            where=self.user_frame(e.get("frames"), where)), \
            self.text(e.get("pg_id"), f"{where}.pg_id")

    def user_frame(self, frames: Any, where: str) -> str:
        """``file:line function`` of the first of an entry's frames outside torch (else
        its last), of the first :data:`MAX_FRAMES`; "" without frames. A frames list
        shared by several entries is looked at once; each one looked at costs its
        frames from the dump's budget."""
        if not frames:
            return ""
        if not isinstance(frames, (list, tuple)):
            raise _Bad(f"{where}: 'frames' is not a list")
        known = self.frames.get(id(frames))
        if known is not None:
            return known
        looked = [f for f in frames[:MAX_FRAMES] if isinstance(f, dict)]
        self.spend(len(looked) + 1, f"{where}.frames")
        user = next((f for f in looked if "torch/" not in
                     self.text(f.get("filename", ""), f"{where}.frames")),
                    looked[-1] if looked else None)
        out = ""
        if user is not None:
            line = user.get("line")
            out = self.text(f"{self.text(user.get('filename'), f'{where}.frames')}:"
                            f"{self.number(line, f'{where}.frames.line', lo=-1) if line else ''}"
                            f" {self.text(user.get('name'), f'{where}.frames')}", where,
                            own=True)
        self.frames[id(frames)] = out
        return out

    def spend(self, count: int, what: str) -> None:
        """Take ``count`` from the dump's budget (numbers and frames: no more than the
        file's bytes, however its values share references)."""
        if count > self.budget:
            raise _Bad(f"{what}: more values than the file holds (shared references "
                       "repeated beyond the file's size)")
        self.budget -= count

    def text(self, value: Any, what: str, own: bool = False) -> str:
        """A string field (None: "None"; a number: its digits), at most
        :data:`MAX_TEXT` characters, lone surrogates (which UTF-8 cannot hold) replaced,
        one object per distinct text; a string of the dump is worked on once however
        often it is referenced (``own``: a string made here, not the dump's)."""
        if isinstance(value, str) and not own:
            known = self.by_id.get(id(value))
            if known is not None:
                return known
        if value is None or isinstance(value, bool):
            value = str(value)
        elif isinstance(value, int) and abs(value) < 1 << 63:
            value = str(value)
        elif not isinstance(value, str):
            raise _Bad(f"{what} is {_short(value)}, not a text")
        text = value[:MAX_TEXT]
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-8", "replace").decode("utf-8")
        text = self.texts.setdefault(text, text)
        if isinstance(value, str) and not own:
            self.by_id[id(value)] = text  # the dump holds ``value``: its id stays its own
        return text

    def number(self, value: Any, what: str, lo: int = 0, hi: int = MAX_SEQ) -> int:
        """An integer field in [lo, hi) (a decimal text is read as its number)."""
        if isinstance(value, str) and 0 < len(value) <= 20:
            try:
                value = int(value)
            except ValueError:
                pass
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value < hi:
            raise _Bad(f"{what} is {_short(value)}, not a number in [{lo}, {hi:,})")
        return value

    def ranks(self, value: Any, what: str) -> tuple[int, ...]:
        """A ``pg_config`` ranks value (``"[0, 1]"`` or a list) as distinct global ranks
        below the job's size, ascending (torch numbers a group's members in that order)."""
        if isinstance(value, str):
            if len(value) > 16 * MAX_WORLD:
                raise _Bad(f"{what} is a text of {len(value):,} characters")
            items: Any = re.findall(r"-?\d+", value)
        elif isinstance(value, (list, tuple)):
            items = value
        elif value is None:
            items = ()
        else:
            raise _Bad(f"{what} is {_short(value)}, not a list of ranks")
        if len(items) > self.world:
            raise _Bad(f"{what} lists {len(items):,} ranks, more than the job's "
                       f"{self.world:,}" + (" (--world)" if self.world < MAX_WORLD else ""))
        self.spend(len(items), what)
        out = tuple(sorted(self.number(r, what, hi=self.world) for r in items))
        if len(set(out)) != len(out):
            raise _Bad(f"{what} names a rank twice")
        return out

    def sizes_of(self, value: Any, what: str) -> tuple:
        """An entry's tensor sizes (a list of lists of dimensions), within the dump's
        budget of numbers."""
        if not value:
            return ()
        if not isinstance(value, (list, tuple)):
            raise _Bad(f"{what} is not a list of tensor sizes")
        self.spend(len(value), what)
        out = []
        for s in value:
            if not isinstance(s, (list, tuple)):
                raise _Bad(f"{what} is not a list of tensor sizes")
            self.spend(len(s), what)
            out.append(self.interned(tuple(self.number(x, what, hi=MAX_DIM) for x in s)))
        return self.interned(tuple(out))

    def interned(self, value: tuple) -> tuple:
        return self.sizes.setdefault(value, value)

    def rank(self, doc: dict) -> int:
        named = rank_of_name(self.path)
        if named is None:
            if "rank" not in doc:
                raise _Bad("no rank in the file's name or the dump")
            named = self.number(doc.get("rank"), "its 'rank'", hi=MAX_WORLD)
        if named >= self.world:
            raise _Bad(f"rank {named}, beyond the job's {self.world:,} ranks (--world)")
        return named


def read_dumps(folder: str | os.PathLike, world: int | None = None
               ) -> tuple[list[Dump], list[str]]:
    """Every rank's dump of ``folder``, and one line per file that could not be read (the
    others are read all the same); two dumps of one rank: the first is kept, the other
    named. ``world``: the job's ranks where known (a dump of a rank beyond is named)."""
    dumps: dict[int, Dump] = {}
    failed = []
    for path in dump_files(folder):
        try:
            d = read_dump(path, world)
        except TraceVizError as exc:
            failed.append(str(exc))
            continue
        if d.rank in dumps:
            failed.append(f"{path}: a second dump of rank {d.rank} (the first: "
                          f"{dumps[d.rank].source}): left out")
            continue
        dumps[d.rank] = d
    if not dumps:
        shown = failed[:5] + ([f"... and {len(failed) - 5} more"] if len(failed) > 5 else [])
        raise TraceVizError(f"{folder}: no Flight Recorder dump could be read: "
                            + "; ".join(shown))
    return [dumps[r] for r in sorted(dumps)], failed
