"""Text for a value measured on every rank: each rank while they are few, a summary at
scale. The summary is min / median / max naming their ranks, the median and range per
group (a pipeline stage) and the outliers: ranks further than :data:`MADS` scaled median
absolute deviations, 5 % of the median and the metric's own tolerance from their
group's median. Unknown values
(None, NaN) are left out of every statistic and counted as n/a."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

LISTED = 16  # up to this many ranks, a text lists each rank
MADS = 3.5  # an outlier lies this many scaled MADs from its group's median
SHOWN = 5  # outliers named on a line; the rest counted


def _known(ranks: Sequence[int], values: Sequence) -> tuple[np.ndarray, np.ndarray]:
    keep = [(r, float(v)) for r, v in zip(ranks, values)
            if v is not None and math.isfinite(float(v))]
    return (np.array([r for r, _ in keep], dtype=np.int64),
            np.array([v for _, v in keep], dtype=np.float64))


def _outliers(ranks: np.ndarray, values: np.ndarray,
              atol: float) -> list[tuple[int, float, float]]:
    """(rank, value, distance from the median in scaled MADs) of ``values``' outliers,
    furthest first."""
    if values.size < 3:
        return []
    med = float(np.median(values))
    mad = 1.4826 * float(np.median(np.abs(values - med)))
    limit = max(MADS * mad, 0.05 * abs(med), atol, 1e-12)
    far = np.flatnonzero(np.abs(values - med) > limit)
    scale = mad if mad > 0 else limit / MADS
    out = [(int(ranks[i]), float(values[i]), abs(float(values[i]) - med) / scale)
           for i in far.tolist()]
    return sorted(out, key=lambda o: -o[2])


def spread_lines(name: str, ranks: Sequence[int], values: Sequence,
                 fmt: Callable[[float], str], groups: dict[int, str] | None = None,
                 group_kind: str = "pp stage", atol: float = 0.0) -> list[str]:
    """Lines summarizing ``values`` (one per rank of ``ranks``) under ``name``: the
    range, the median per group of ``groups`` (rank -> label; shown when 2 to
    :data:`LISTED` groups) and the outliers, compared with their own group's median
    (``atol``: a difference in the values' unit too small to name, e.g. 1 percentage
    point)."""
    r, v = _known(ranks, values)
    missing = len(ranks) - r.size
    na = f"; n/a on {missing} rank(s)" if missing else ""
    if not r.size:
        return [f"{name}: n/a on every rank"]
    lo, hi = int(np.argmin(v)), int(np.argmax(v))
    lines = [f"{name}: min {fmt(v[lo])} (rank {r[lo]}), median {fmt(float(np.median(v)))}, "
             f"max {fmt(v[hi])} (rank {r[hi]}){na}"]
    label = np.array([(groups or {}).get(int(x), "") for x in r.tolist()], dtype=object)
    names = sorted(set(label.tolist()), key=lambda g: (len(g), g))
    by_group = groups is not None and 1 < len(names) <= LISTED
    if by_group:
        lines.append(f"  by {group_kind}: " + "; ".join(
            f"{g}: {fmt(float(np.median(v[label == g])))} "
            f"({fmt(float(v[label == g].min()))} to {fmt(float(v[label == g].max()))})"
            for g in names))
    far = []
    for g in (names if by_group else [None]):
        sel = label == g if g is not None else np.ones(r.size, dtype=bool)
        far += _outliers(r[sel], v[sel], atol)
    far.sort(key=lambda o: -o[2])
    if far:
        versus = f"their {group_kind}'s median" if by_group else "the median"
        more = f", and {len(far) - SHOWN} more" if len(far) > SHOWN else ""
        lines.append(f"  outliers (over {MADS} MADs from {versus}): " + ", ".join(
            f"rank {rank} {fmt(value)}" for rank, value, _ in far[:SHOWN]) + more)
    return lines

