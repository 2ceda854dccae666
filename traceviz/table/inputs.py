"""The files one command reads, so that none of them is written over: an output named
like an input (``parse a.json.gz -o a.json.gz``) would destroy it. Standard library
only (the command line imports it before anything heavy)."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

# the files a command reads, while :func:`guarding_inputs` is on: (device, inode) -> the
# modification time (ns) it had when read. A file replaced during the command (a table
# parsed again) frees its inode for a new file, which is not an input: the time tells
_inputs: dict[tuple[int, int], int] | None = None


@contextlib.contextmanager
def guarding_inputs() -> Iterator[None]:
    """While it lasts (one command), :func:`is_input` knows every file
    :func:`note_input` named."""
    global _inputs
    before, _inputs = _inputs, {}
    try:
        yield
    finally:
        _inputs = before


def note_input(path: str | os.PathLike) -> None:
    """Name a file this command reads (a trace, a table, a topology or config file)."""
    if _inputs is None:
        return
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(path)
        _inputs[(st.st_dev, st.st_ino)] = st.st_mtime_ns


def is_input(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a file this command reads (the same file by any name, as it
    was when read)."""
    if not _inputs:
        return False
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return _inputs.get((st.st_dev, st.st_ino)) == st.st_mtime_ns
