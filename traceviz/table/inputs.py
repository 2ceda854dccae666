"""The files one command reads, so that none of them is written over: an output named
like an input (``parse a.json.gz -o a.json.gz``) would destroy it. Standard library
only (the command line imports it before anything heavy)."""
from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator

from ..errors import TraceVizError

# the files a command reads, while :func:`guarding_inputs` is on: (device, inode) -> the
# modification time (ns) it had when read. A file replaced during the command (a table
# parsed again) frees its inode for a new file, which is not an input: the time tells
_inputs: dict[tuple[int, int], int] | None = None
# the existing files a command was told to write (-o): (device, inode) -> modification
# time (ns), as for the inputs: a file replaced meanwhile is another file
_outputs: dict[tuple[int, int], int] = {}


@contextlib.contextmanager
def guarding_inputs() -> Iterator[None]:
    """While it lasts (one command), :func:`is_input` knows every file
    :func:`note_input` named."""
    global _inputs, _outputs
    before, _inputs = (_inputs, _outputs), {}
    _outputs = {}
    try:
        yield
    finally:
        _inputs, _outputs = before


def note_input(path: str | os.PathLike) -> None:
    """Name a file this command reads (a trace, a table, a topology or config file);
    refused (:func:`input_refused`) when it is a file the command was told to write
    (:func:`note_output`): before the work, not when the output is written."""
    if _inputs is None:
        return
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(path)
        key = (st.st_dev, st.st_ino)
        _inputs[key] = st.st_mtime_ns  # first: a caller that reads on past the refusal
        if _outputs.get(key) == st.st_mtime_ns:  # (a rank left out) still cannot write it
            raise input_refused(path)


def note_output(path: str | os.PathLike) -> None:
    """Name an existing file this command was told to write (its ``-o``): an input of
    the same file (by any name) is then refused as soon as it is named."""
    if _inputs is None:
        return
    with contextlib.suppress(OSError, ValueError):
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return  # a folder, or nothing yet: never an input
        if _inputs.get((st.st_dev, st.st_ino)) == st.st_mtime_ns:
            raise input_refused(path)
        _outputs[(st.st_dev, st.st_ino)] = st.st_mtime_ns


def input_refused(dest: str | os.PathLike) -> TraceVizError:
    """The error of an output that is one of the command's inputs."""
    return TraceVizError(f"{os.fspath(dest)}: is an input of this command; writing the "
                         "output there would destroy it: name another output (-o)")


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
