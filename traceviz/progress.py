"""Progress bars on stderr (tqdm) for loops a user waits on: shown only while a terminal
watches and the loop has more than a few items, so pipes, logs and tests see nothing."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def _size() -> dict:
    """tqdm's size options for stderr: its own width where the terminal states one, else
    80 x 24 (a terminal that states 0 x 0, a bare pty, would get no bar at all)."""
    try:
        size = os.get_terminal_size(sys.stderr.fileno())
        if size.columns > 0 and size.lines > 0:
            return {"dynamic_ncols": True}
    except OSError:
        pass
    return {"ncols": 80, "nrows": 24}


def byte_bar(total_bytes: int, what: str, disable: bool):
    """A bar counting bytes (``update(n)``) that stays on screen when done."""
    from tqdm import tqdm

    return tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024, desc=what,
                disable=disable, leave=True, **_size())


def progress(items: Iterable[T], what: str, total: int | None = None) -> Iterable[T]:
    """``items`` with a progress bar named ``what`` on stderr while it is a terminal and
    there are at least 4 items (``total``, else ``len(items)`` when it has one); plain
    ``items`` otherwise."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    if not sys.stderr.isatty() or (total is not None and total < 4):
        return items
    from tqdm import tqdm

    return tqdm(items, desc=what, total=total, unit="", leave=False, **_size())
