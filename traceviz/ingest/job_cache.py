"""Results of a job's analyses kept beside its tables, so that the commands that need
them reuse what the first computed: the diagnosis (``diagnose``, reused by ``report``,
``html``, ``pipeline``, ``critical-path`` and ``aggregate``), the op model (``ops``,
reused by ``report`` and ``html``), the report, the breakdown, the step windows and the
process groups the tables' footers state (``layout``).

Each result is a folder ``.traceviz-cache/<name>`` inside the folder of rank tables:
its tables (parquet) and ``entry.json`` (its other fields, the **key** and a digest of
each table and of itself). The key names what the result was computed from: every
table of the folder (name, size, modification time and a digest of its Parquet footer,
which changes with its content), the topology file (path, size, time), the options and
a digest of traceviz's own code. An entry whose key differs is ignored and replaced.

The cache is a folder that anyone may have written, so it is read as hostile input:

* ``.traceviz-cache`` and its entries are opened without following links: a link is
  refused (one note; results are then neither read nor written there), so no run
  reads, replaces or deletes anything outside the cache;
* only regular files under a size cap are read (a FIFO or ``/dev/zero`` is refused);
* an entry is used only when its digests hold: keyed with a secret of the user's
  (:func:`_secret`), they show that this user's traceviz wrote its fields as they are
  and its tables with them (an edited, damaged or forged entry, or a reader racing a
  writer, never pairs one entry's key with another's tables); table names are plain
  words (no path);
  anything that fails to load is a **miss** (recomputed and overwritten, with a note),
  never an error;
* an entry is written to a temporary folder renamed into place; the entry it replaces
  is removed file by file through a handle of its folder opened without following
  links, only the files an entry holds (``entry.json``, tables), never a whole tree;
  leftovers of runs that died are cleaned the same way;
* nothing is written where the folder is read-only (the next command recomputes).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import secrets
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..analysis.advice import ADVICE_SCHEMA
from ..analysis.diagnose.diagnosis import Diagnosis
from ..analysis.diagnose.extra_work import ExtraKernel
from ..analysis.diagnose.stages import StageBalance
from ..analysis.diagnose.stragglers import PeerSpeed
from ..analysis.ops_summary import OpModel
from ..errors import CacheNote
from ..topology.framework import Framework
from .outputs import CACHE

FOLDER = CACHE
MAX_ENTRY_BYTES = 256 << 20   # entry.json: fields (a report) of a few MB at 4,096 ranks
MAX_TABLE_BYTES = 8 << 30     # one kept table
_FOOTER_BYTES = 64 << 10      # of a table's end digested into the key
_TMP, _OLD = ".tmp-", ".old-"  # leftovers: <prefix><pid>-<name>...


class _Miss(Exception):
    """A kept entry that cannot be used (message: why)."""


_noted: set[str] = set()


def _note(text: str) -> None:
    if text not in _noted:
        _noted.add(text)
        warnings.warn(text, CacheNote, stacklevel=3)


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of traceviz's own code (every .py and .toml of the package): a result
    kept by other code is not this code's."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.blake2b(digest_size=16)
    for p in sorted(root.rglob("*")):
        if p.suffix in (".py", ".toml") and p.is_file():
            h.update(os.fspath(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


@functools.lru_cache(maxsize=65536)
def _footer_digest(path: Path, size: int, mtime_ns: int, ctime_ns: int, inode: int
                   ) -> str | None:
    """A digest of the last bytes of the table ``path`` (its Parquet footer: row groups,
    statistics, metadata), None where it cannot be read; read once per version of the
    file in a process (a rewrite changes its ctime, which no one can set back)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, size - _FOOTER_BYTES))
            return hashlib.blake2b(f.read(_FOOTER_BYTES), digest_size=16).hexdigest()
    except OSError:
        return None


def key_of(folder: Path, topology: str | os.PathLike | None, options: dict) -> dict:
    """What a result of ``folder`` is computed from (see the module doc)."""
    files = []
    for p in sorted(folder.glob("*.parquet")):
        st = p.stat()
        files.append([p.name, st.st_size, st.st_mtime_ns, _footer_digest(
            p, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)])
    topo = None
    if topology is not None:
        try:
            st = Path(topology).stat()
            topo = [os.fspath(Path(topology).resolve()), st.st_size, st.st_mtime_ns]
        except OSError:
            topo = [os.fspath(topology), None, None]
    return {"code": code_digest(), "files": files, "topology": topo,
            "options": {k: (list(v) if isinstance(v, tuple) else v)
                        for k, v in sorted(options.items())}}


def _base(folder: Path, create: bool) -> Path | None:
    """The cache folder of ``folder`` when it is a real folder (made, with ``create``,
    where missing and the folder writable); None otherwise (a link: noted)."""
    base = folder / FOLDER
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        if not create:
            return None
        try:
            base.mkdir()
        except OSError:
            return None
        return base
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        _note(f"{base} is a link: traceviz neither reads nor writes kept results through "
              "it (remove the link to keep them again)")
        return None
    return base if stat.S_ISDIR(st.st_mode) else None


def _read(path: Path, cap: int) -> bytes:
    """The bytes of the regular file ``path`` (not a link, at most ``cap``)."""
    return _read_stat(path, cap)[0]


def _read_stat(path: Path, cap: int) -> tuple[bytes, os.stat_result]:
    """The bytes of the regular file ``path`` (opened without following a link or
    blocking on a FIFO; at most ``cap``) and its status; :class:`_Miss` otherwise
    (FileNotFoundError where it does not exist)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _Miss(f"{path.name}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Miss(f"{path.name} is not a regular file")
        if st.st_size > cap:
            raise _Miss(f"{path.name} holds {st.st_size:,} bytes, more than {cap:,}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(cap + 1)
    finally:
        os.close(fd)
    if len(raw) > cap:
        raise _Miss(f"{path.name} holds more than {cap:,} bytes")
    return raw, st


def _digest(raw: bytes) -> str:
    """A digest of ``raw`` keyed with this user's secret (:func:`_secret`)."""
    return hashlib.blake2b(raw, digest_size=16, key=_secret()).hexdigest()


@functools.lru_cache(maxsize=1)
def _secret() -> bytes:
    """This user's key of the kept results' digests: 32 random bytes in
    ``$XDG_CACHE_HOME/traceviz/cache-key`` (``~/.cache``; made once, readable by the
    user alone), so that only what this user's traceviz wrote passes; where it cannot be
    kept, one for this process (results are then reused within it only)."""
    folder = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "traceviz"
    path = folder / "cache-key"
    for _ in range(2):
        try:
            raw, st = _read_stat(path, 32)
            if st.st_uid == os.getuid() and not st.st_mode & 0o077 and len(raw) == 32:
                return raw
            break  # not one this user made: use none of it
        except _Miss:
            break
        except FileNotFoundError:
            try:  # made whole under another name, then linked: a reader sees all or none
                folder.mkdir(parents=True, exist_ok=True, mode=0o700)
                tmp = folder / f".cache-key-{os.getpid()}"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    os.write(fd, secrets.token_bytes(32))
                finally:
                    os.close(fd)
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass  # another process made it first: read that one
                finally:
                    os.unlink(tmp)
            except OSError:
                break
        except OSError:
            break
    return _PROCESS_KEY


_PROCESS_KEY = secrets.token_bytes(32)
_TABLE_NAME = re.compile(r"[a-z_]{1,64}")


def load(folder: Path, name: str, key: dict) -> tuple[dict[str, pa.Table], dict] | None:
    """The tables and fields of the entry ``name`` of ``folder`` for ``key``; None where
    there is none, it has another key, or it cannot be used (then noted: see the module
    doc)."""
    base = _base(folder, create=False)
    if base is None:
        return None
    where = base / name
    try:
        st = os.lstat(where)
    except OSError:
        return None
    try:
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise _Miss("it is a link or not a folder")
        head, _, body = _read(where / "entry.json", MAX_ENTRY_BYTES).partition(b"\n")
        if head != _digest(body).encode():
            raise _Miss("entry.json is not what traceviz wrote (edited or damaged)")
        entry = json.loads(body)
        if not isinstance(entry, dict):
            raise _Miss("entry.json is not what traceviz writes")
        if entry.get("key") != key:
            return None
        tables = entry.get("tables")
        if not isinstance(tables, dict) or not isinstance(entry.get("fields"), dict):
            raise _Miss("entry.json is not what traceviz writes")
        out = {}
        for t, digest in tables.items():
            if not isinstance(t, str) or not _TABLE_NAME.fullmatch(t):
                raise _Miss("entry.json names a table traceviz does not write")
            raw = _read(where / f"{t}.parquet", MAX_TABLE_BYTES)
            if _digest(raw) != digest:
                raise _Miss(f"{t}.parquet is not the table written with it")
            out[t] = pq.read_table(pa.BufferReader(_arrow_owned(raw)))
        return out, entry["fields"]
    except (_Miss, OSError, ValueError, RecursionError, pa.ArrowException) as exc:
        miss(where, exc)
        return None


def _arrow_owned(raw: bytes) -> pa.Buffer:
    """``raw`` copied into memory Arrow owns. A table read from a buffer over Python
    bytes leaves the dataset's file source holding them, released on one of Arrow's
    threads: at the interpreter's exit that thread waits for the GIL, is ended, and
    the process aborts ("terminate called without an active exception": 4 runs in 40
    of a script that read a kept result)."""
    buf = pa.allocate_buffer(len(raw))
    memoryview(buf).cast("B")[:] = raw
    return buf


def miss(where: Path, why: Exception | str) -> None:
    """Note that the kept result ``where`` cannot be used (it is recomputed)."""
    _note(f"kept result {where} not used ({str(why)[:200]}): recomputed")


def store(folder: Path, name: str, key: dict, tables: dict[str, pa.Table | None],
          fields: dict) -> None:
    """Keep ``tables`` (None ones left out) and ``fields`` (JSON-able) as the entry
    ``name`` of ``folder`` for ``key``; nothing where the folder cannot be written (see
    the module doc)."""
    base = _base(folder, create=True)
    if base is None:
        return
    _clean_leftovers(base)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP}{os.getpid()}-{name}.", dir=base))
    except OSError:
        return
    try:
        digests = {}
        for t, table in tables.items():
            if table is not None:  # written from memory: its digest is of what is written
                sink = pa.BufferOutputStream()
                pq.write_table(table, sink)
                raw = sink.getvalue().to_pybytes()
                (tmp / f"{t}.parquet").write_bytes(raw)
                digests[t] = _digest(raw)
        body = json.dumps({"key": key, "tables": digests, "fields": fields}).encode()
        (tmp / "entry.json").write_bytes(_digest(body).encode() + b"\n" + body)
        final = base / name
        old = Path(tempfile.mkdtemp(prefix=f"{_OLD}{os.getpid()}-{name}.", dir=base))
        try:
            for k in range(8):  # another writer may put its entry in place meanwhile
                _set_aside(final, old / str(k))
                try:
                    os.rename(tmp, final)
                    break
                except OSError:
                    continue
        finally:
            _remove_entry(old, depth=1)
    except OSError:
        pass
    finally:
        _remove_entry(tmp)


def _set_aside(final: Path, aside: Path) -> None:
    """Move the entry ``final`` (if any) to ``aside``; a link or file there is unlinked
    (not what it points to)."""
    try:
        st = os.lstat(final)
    except FileNotFoundError:
        return
    try:
        if stat.S_ISDIR(st.st_mode):
            os.rename(final, aside)
        else:
            os.unlink(final)
    except FileNotFoundError:  # another writer moved it first
        pass


_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _remove_entry(path: Path, depth: int = 0, parent: int | None = None) -> None:
    """Remove the entry folder ``path``: its regular files that an entry holds
    (``entry.json``, ``*.parquet``), with ``depth`` 1 also the entry folders inside it
    (a replaced entry's holder), then the folder where that empties it; nothing else.
    The folder is opened without following a link and its files are removed through
    that handle, so a folder swapped for a link meanwhile loses nothing outside;
    ``parent``: a handle ``path`` is relative to."""
    try:
        fd = os.open(path, _DIR, dir_fd=parent)
    except OSError:
        return  # gone, not a folder, or a link: left alone
    try:
        with os.scandir(fd) as items:
            for item in items:
                if item.is_file(follow_symlinks=False) and (
                        item.name == "entry.json" or item.name.endswith(".parquet")):
                    os.unlink(item.name, dir_fd=fd)
                elif depth and item.is_dir(follow_symlinks=False):
                    _remove_entry(Path(item.name), depth - 1, fd)
    except OSError:
        pass
    finally:
        os.close(fd)
    try:
        os.rmdir(path, dir_fd=parent)
    except OSError:
        pass


def _clean_leftovers(base: Path) -> None:
    """The temporary and replaced entries of runs that are no longer running (the pid
    their name starts with), removed as :func:`_remove_entry` does."""
    try:
        names = [n for n in os.listdir(base) if n.startswith((_TMP, _OLD))]
    except OSError:
        return
    for name in names:
        pid = name[len(_TMP):].split("-", 1)[0]
        if not (pid.isdigit() and _alive(int(pid))):
            _remove_entry(base / name, depth=1)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def load_diagnosis(folder: Path, key: dict, advice: bool
                   ) -> tuple[Diagnosis, pa.Table | None, list[str]] | None:
    """The kept diagnosis for ``key`` (with its advice when ``advice``) and the ranks it
    left out; None where there is none (or none with advice, when asked)."""
    found = load(folder, "diagnosis", key)
    if found is None:
        return None
    t, d = found
    if advice and "advice" not in t:
        return None
    if "advice" in t and not t["advice"].schema.equals(ADVICE_SCHEMA):
        return None  # kept by another version of the advice
    try:
        b = d["balance"]
        balance = (StageBalance(**{**b, "ranks": {int(k): v for k, v in b["ranks"].items()}})
                   if b else None)
        diag = Diagnosis(
            ranks=d["ranks"], synced=d["synced"],
            offsets={int(k): v for k, v in d["offsets"].items()},
            comm_calls=t["comm_calls"], ledger=t["ledger"], ledger_waits=t["ledger_waits"],
            totals=t["totals"], speed=PeerSpeed(t["peer_speed"]), chain=t["chain"],
            notes=d["notes"], pipelines=d["pipelines"], stages_ordered=d["stages_ordered"],
            clocks=d["clocks"], links=t["links"], balance=balance,
            framework=Framework(**d["framework"]),
            extra=[ExtraKernel(**e) for e in d["extra"]])
    except Exception as exc:  # noqa: BLE001 - any field not as written: a miss
        miss(folder / FOLDER / "diagnosis", exc)
        return None
    return diag, t.get("advice"), list(d.get("failed") or [])


def store_diagnosis(folder: Path, key: dict, diag: Diagnosis, advice: pa.Table | None,
                    failed: list[str]) -> None:
    """Keep ``diag`` (its ``advice``, the ranks it left out) for ``key``."""
    balance: dict[str, Any] | None = None
    if diag.balance is not None:
        balance = dataclasses.asdict(diag.balance)
        balance["ranks"] = {str(k): v for k, v in diag.balance.ranks.items()}
    store(folder, "diagnosis", key, {
        "comm_calls": diag.comm_calls, "ledger": diag.ledger,
        "ledger_waits": diag.ledger_waits, "totals": diag.totals,
        "peer_speed": diag.speed.table, "chain": diag.chain, "links": diag.links,
        "advice": advice}, {
        "ranks": diag.ranks, "synced": diag.synced,
        "offsets": {str(k): int(v) for k, v in diag.offsets.items()},
        "notes": diag.notes, "pipelines": diag.pipelines,
        "stages_ordered": diag.stages_ordered, "clocks": diag.clocks,
        "balance": balance, "framework": dataclasses.asdict(diag.framework),
        "extra": [dataclasses.asdict(e) for e in diag.extra],
        "failed": failed})


_OP_TABLES = ("calls", "by_shape", "by_microbatch", "not_modelled", "by_module",
              "iterations")


def load_op_model(folder: Path, key: dict) -> OpModel | None:
    """The kept op model for ``key``, None where there is none."""
    found = load(folder, "op_model", key)
    if found is None:
        return None
    t, d = found
    try:
        return OpModel(ranks=tuple(d["ranks"]), **{n: t[n] for n in _OP_TABLES},
                       **{k: v for k, v in d.items() if k != "ranks"})
    except Exception as exc:  # noqa: BLE001 - any field not as written: a miss
        miss(folder / FOLDER / "op_model", exc)
        return None


def store_op_model(folder: Path, key: dict, model: OpModel) -> None:
    """Keep ``model`` for ``key``."""
    fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)
              if f.name not in _OP_TABLES}
    fields["ranks"] = list(model.ranks)
    store(folder, "op_model", key, {n: getattr(model, n) for n in _OP_TABLES}, fields)
