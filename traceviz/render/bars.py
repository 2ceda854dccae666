"""Horizontal bars drawn as one matplotlib collection: what ``broken_barh`` draws, without
its per-bar Python work; one collection for many rows' bars, not one per row (each added
collection re-scales the axes over every bar drawn before: hundreds of ranks' rows drew
in tens of seconds)."""
from __future__ import annotations

from typing import Any

import numpy as np


def rectangles(x0: np.ndarray, x1: np.ndarray, y0: Any, y1: Any) -> np.ndarray:
    """Corners (n, 4, 2) of the bars from ``x0`` to ``x1`` between ``y0`` and ``y1``
    (each a number or one per bar), in the order matplotlib's ``broken_barh`` makes
    them."""
    x0, x1 = np.asarray(x0, float), np.asarray(x1, float)
    y0, y1 = np.broadcast_to(np.asarray(y0, float), x0.shape), \
        np.broadcast_to(np.asarray(y1, float), x0.shape)
    return np.stack([np.stack([x0, y0], 1), np.stack([x0, y1], 1),
                     np.stack([x1, y1], 1), np.stack([x1, y0], 1)], axis=1)


def add_bars(ax, corners: Any, **style) -> Any:
    """One collection of the bars ``corners`` (:func:`rectangles`, an (n, 4, 2) array:
    matplotlib's fast path, though its stubs ask for a sequence) added to ``ax``, its
    limits taken into the axes' data limits as ``broken_barh``'s are; ``style``:
    matplotlib's PolyCollection keywords (facecolors, label, zorder, ...)."""
    from matplotlib.collections import PolyCollection

    return ax.add_collection(PolyCollection(corners, **style))
