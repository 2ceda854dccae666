"""Temporary files and folders, named after the host and process that own them, so that
a run removes what a killed one (SIGKILL, the OOM killer) left behind: spill folders in
the temporary directory and the hidden temporary files of atomic writes next to their
targets. Files of live processes, and of other hosts (shared filesystems), are kept.

SIGTERM (``timeout``, Slurm, Kubernetes) is handled by :func:`exit_on_sigterm`: the
process removes every temporary file and folder it holds and exits 143 at once (an
exception raised from a signal handler can land in a finalizer, where Python drops it).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import re
import secrets
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

SPILL_PREFIX = "traceviz-spill-"
_HOST = re.sub(r"[^A-Za-z0-9]", "_", socket.gethostname())[:40] or "host"
_OWNER = re.compile(r"^(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-")
_swept_spills = False
_held: set[str] = set()  # this process's temporary files and folders
_lock = threading.RLock()  # held while a temporary file or folder is named and made


def _owner() -> str:
    return f"{_HOST}-{os.getpid()}-"


def _dead(name: str) -> bool:
    """Whether ``name`` (after its prefix) belongs to a process of this host that is gone
    (or a zombie nobody reaps, as in containers without an init)."""
    m = _OWNER.match(name)
    if not m or m["host"] != _HOST:
        return False
    pid = int(m["pid"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def remove_dead_spills() -> None:
    """Remove the spill folders of dead traceviz processes of this host (once per
    process; every command starts with it)."""
    global _swept_spills
    if _swept_spills:
        return
    _swept_spills = True
    with contextlib.suppress(OSError):
        for old in Path(tempfile.gettempdir()).glob(SPILL_PREFIX + "*"):
            if old.is_dir() and _dead(old.name[len(SPILL_PREFIX):]):
                shutil.rmtree(old, ignore_errors=True)


def spill_folder() -> str:
    """A new private spill folder in the temporary directory (after
    :func:`remove_dead_spills`)."""
    remove_dead_spills()
    return _made(os.path.join(tempfile.gettempdir(), SPILL_PREFIX + _owner()), "",
                 lambda path: os.mkdir(path, 0o700))


def temp_file_for(dest: str) -> str:
    """A new hidden temporary file next to ``dest`` (``.<name>.<host>-<pid>-XXXX.tmp``);
    those of ``dest`` left by dead processes are removed first."""
    folder, name = os.path.split(os.path.abspath(dest))
    prefix = f".{name}."
    with contextlib.suppress(OSError):
        for old in os.listdir(folder):
            if old.startswith(prefix) and old.endswith(".tmp") and _dead(old[len(prefix):]):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(folder, old))
    return _made(os.path.join(folder, prefix + _owner()), ".tmp", lambda path: os.close(
        os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)))


def _made(stem: str, suffix: str, make: Callable[[str], None]) -> str:
    """A new path ``stem`` + random letters + ``suffix``, held (:data:`_held`) before
    ``make`` creates it: a SIGTERM in between removes nothing there and the process
    ends before it is made; in another thread, the handler waits for it (the lock)."""
    while True:
        path = f"{stem}{secrets.token_hex(4)}{suffix}"
        with _lock:
            _held.add(path)
            try:
                make(path)
                return path
            except FileExistsError:
                _held.discard(path)


def adopt(path: str) -> None:
    """This process holds ``path`` now (a temporary file another process wrote for it)."""
    _held.add(path)


def release(path: str) -> None:
    """``path`` (from :func:`spill_folder` / :func:`temp_file_for`) is gone or renamed."""
    _held.discard(path)


def remove_held() -> None:
    """Remove every temporary file and folder this process holds (a SIGTERM may come
    while other threads still write into a spill folder, or make one: :func:`_made`)."""
    with _lock:
        held = list(_held)
    for path in held:
        if os.path.isdir(path):
            # renamed first: a scanner thread still spilling cannot add a file to it
            # behind rmtree's back (which left the emptied folder in place)
            doomed = path + ".removing"
            try:
                os.rename(path, doomed)
            except OSError:
                doomed = path
            shutil.rmtree(doomed, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        _held.discard(path)


def exit_on_sigterm(message: str | None = "traceviz: error: terminated (SIGTERM); its "
                    "temporary files were removed, nothing half-written was left") -> None:
    """On SIGTERM: pass it on to this process's children (batch workers, which do the
    same), remove what :func:`remove_held` removes, print ``message`` (None: nothing) and
    exit with status 143 (128 + SIGTERM), at once."""
    import multiprocessing
    import signal
    import sys

    def handler(_signum, _frame):  # the signal module calls it with these
        for child in multiprocessing.active_children():
            with contextlib.suppress(Exception):
                child.terminate()
        remove_held()
        if message:
            with contextlib.suppress(Exception):
                sys.stderr.write(message + "\n")
                sys.stderr.flush()
        os._exit(128 + signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


_stdin_copies: list[str] = []  # the spill folders holding a copy of stdin


def stdin_copy(stream) -> Path:
    """What ``stream`` (a command's stdin) holds, copied in 1 MiB pieces into a new spill
    folder as ``stdin.pt.trace.json`` (``.gz`` / ``.zst`` as its first bytes say), so
    that a command that reads a trace by path reads it; removed by
    :func:`remove_stdin_copies` (or, killed, by the next run)."""
    folder = spill_folder()
    if not _stdin_copies:  # also when the command never runs (click refuses its options)
        atexit.register(remove_stdin_copies)
    _stdin_copies.append(folder)
    head = stream.read(4)
    suffix = (".json.gz" if head[:2] == b"\x1f\x8b" else
              ".json.zst" if head == b"\x28\xb5\x2f\xfd" else ".json")
    path = Path(folder) / f"stdin.pt.trace{suffix}"
    with open(path, "wb") as fh:
        fh.write(head)
        shutil.copyfileobj(stream, fh, 1 << 20)
    return path


def remove_stdin_copies() -> None:
    """Remove the copies of stdin this process made (:func:`stdin_copy`)."""
    while _stdin_copies:
        folder = _stdin_copies.pop()
        shutil.rmtree(folder, ignore_errors=True)
        _held.discard(folder)
