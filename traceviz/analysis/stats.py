"""Summary statistics of a sample, as pandas' ``describe()`` (HTA's summaries use it)."""
from __future__ import annotations

import numpy as np

STATS = ("count", "mean", "std", "min", "25%", "50%", "75%", "max")


def describe(values: np.ndarray) -> dict[str, float]:
    """count, mean, sample std (ddof 1), min, linear-interpolated quartiles, max; NaN
    where undefined (std of one value, everything of none)."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return {"count": 0.0, **{k: float("nan") for k in STATS[1:]}}
    q = np.percentile(v, [0, 25, 50, 75, 100])
    return {"count": float(v.size), "mean": float(v.mean()),
            "std": float(v.std(ddof=1)) if v.size > 1 else float("nan"),
            "min": float(q[0]), "25%": float(q[1]), "50%": float(q[2]), "75%": float(q[3]),
            "max": float(q[4])}
