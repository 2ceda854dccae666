"""What a rank's intervals cover, for the figures that draw it (the renderers draw these
results; they compute no intervals): each category's union per rank with the gaps below
a pixel closed, the share of each time bin inside a rank's step windows, and the lane
each slice of a track takes so that no two slices of a lane overlap.

Times are ns; shares are in [0, 1]."""
from __future__ import annotations

import numpy as np

from ..intervals import lanes, union
from .microbatches import CATEGORIES, RankCategories


def coalesce(s: np.ndarray, e: np.ndarray, gap: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint sorted intervals (``s``, ``e``) with every gap of at most ``gap`` ns
    closed."""
    if s.size < 2:
        return s, e
    cut = np.flatnonzero(s[1:] - e[:-1] > gap)
    return s[np.r_[0, cut + 1]], e[np.r_[cut, s.size - 1]]


def category_spans(ranks: list[RankCategories], categories: tuple[str, ...] | None,
                   gap: int) -> list[dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per rank, category name -> the union of that category's intervals (starts, ends),
    gaps up to ``gap`` ns closed; ``categories`` None: every one of
    :data:`~traceviz.analysis.microbatches.CATEGORIES`."""
    wanted = {CATEGORIES.index(c) for c in (categories or CATEGORIES)}
    out = []
    for ra in ranks:
        rows = {}
        for c in sorted(set(np.unique(ra.category).tolist()) & wanted):
            on = ra.category == c
            rows[CATEGORIES[c]] = coalesce(*union(ra.ts[on], ra.end[on]), gap)
        out.append(rows)
    return out


def busy_grid(rows: list[dict], ranks: list[int], bins: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """(``bins`` + 1 edges in ns from the earliest step, shares): ``shares[i, b]`` is the
    fraction of time bin ``b`` that rank ``ranks[i]`` spends inside the union of its
    step windows (``rows``: rank, start_ns, wall_clock_ns each; in [0, 1])."""
    t0 = min(r["start_ns"] for r in rows)
    t1 = max(r["start_ns"] + r["wall_clock_ns"] for r in rows)
    edges = np.linspace(0.0, float(max(t1 - t0, 1)), bins + 1)
    windows: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        windows.setdefault(r["rank"], []).append(
            (r["start_ns"] - t0, r["start_ns"] - t0 + r["wall_clock_ns"]))
    share = np.zeros((len(ranks), bins))
    for i, rank in enumerate(ranks):
        if rank not in windows:
            continue
        starts, stops = union(*np.array(windows[rank], dtype=np.int64).T)
        # time covered before each edge, differenced per bin
        covered = np.clip(edges[:, None] - starts[None, :], 0, (stops - starts)[None, :])
        share[i] = np.diff(covered.sum(axis=1)) / np.diff(edges)
    return edges, np.clip(share, 0.0, 1.0)


def track_lanes(track: np.ndarray, ts: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per slice, its lane within its ``track`` (0 first): slices of one track and lane
    never overlap."""
    lane = np.zeros(track.shape[0], dtype=np.int64)
    for t in np.unique(track).tolist():
        sel = np.flatnonzero(track == t)
        lane[sel] = lanes(ts[sel], end[sel])
    return lane
