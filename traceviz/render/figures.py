"""Figures drawn on demand: a command's result holds :class:`Figure` objects (what to
draw, with its data); nothing is drawn until it is saved as PNG or embedded in a page.
Drawing uses matplotlib's object API (no pyplot state), Agg backend."""
from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path

from ..table.io import atomic_path, cannot_write, discard, make_readable
from ..table.scratch import release, temp_file_for

DPI = 110


def new_figure(figsize: tuple[float, float], **kwargs):
    """A matplotlib figure (``layout`` etc. passed on), not registered with pyplot."""
    from matplotlib.figure import Figure as MplFigure

    return MplFigure(figsize=figsize, **kwargs)


def swatch(color, **kwargs):
    """A legend handle: a filled rectangle of ``color``."""
    from matplotlib.patches import Rectangle

    return Rectangle((0, 0), 1, 1, facecolor=color, **kwargs)


def ms_text(v: float) -> str:
    """A time in ms, three significant digits below 10 ms (never 1.2e+04 ms)."""
    return f"{v:,.1f} ms" if v >= 10 else f"{v:.3g} ms"


def no_data(title: str, reason: str):
    """A figure that says there is nothing to draw and why, instead of empty axes."""
    fig = new_figure((8, 1.6))
    fig.text(0.02, 0.75, title, fontsize="large")
    fig.text(0.02, 0.3, f"no data: {reason}", fontsize="medium", color="#555555")
    return fig


class Figure:
    """``draw(*args, **kwargs)`` -> a matplotlib figure, called when the figure is saved."""

    def __init__(self, draw: Callable, *args, **kwargs) -> None:
        self._draw, self._args, self._kwargs = draw, args, kwargs

    def figure(self):
        return self._draw(*self._args, **self._kwargs)

    def save(self, path: str | os.PathLike) -> Path:
        """Write the PNG atomically; returns the path."""
        fig = self.figure()
        with atomic_path(path) as tmp:
            _savefig(fig, tmp)
        return Path(path)

    def save_temp(self, path: str | os.PathLike) -> str:
        """Draw the PNG into a temporary file next to ``path`` (what a worker process
        does: the caller puts it in place, :func:`~traceviz.table.io.place`); the
        temporary file is removed when drawing fails."""
        tmp = temp_file_for(os.fspath(path))
        try:
            _savefig(self.figure(), tmp)
            make_readable(tmp)
        except BaseException as exc:
            discard(tmp)
            if isinstance(exc, OSError):
                raise cannot_write(path, exc) from None
            raise
        release(tmp)  # the caller adopts it
        return tmp

    def png(self) -> bytes:
        """The PNG bytes."""
        buf = io.BytesIO()
        _savefig(self.figure(), buf)
        return buf.getvalue()


def _savefig(fig, target) -> None:
    """PNG at :data:`DPI`; a figure laid out by matplotlib's constrained layout already
    fits its canvas, others are cropped to what they draw (a second drawing pass)."""
    tight = {} if fig.get_layout_engine() is not None else {"bbox_inches": "tight"}
    with warnings.catch_warnings():
        # a name holding control characters (a hostile trace) draws as boxes: matplotlib's
        # warning would print those characters to the terminal
        warnings.filterwarnings("ignore", message="Glyph .* missing from font")
        fig.savefig(target, format="png", dpi=DPI, **tight)
