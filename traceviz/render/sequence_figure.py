"""Figure of ``traceviz sequences``: occurrences of the most frequent kernel sequences."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..analysis.diff import short_name
from .figures import new_figure, no_data


def label(pattern: str, width: int = 110) -> str:
    """A pattern with HTA's short names: ``op: kernel > kernel > ...``, cut to ``width``."""
    op, *kernels = pattern.split("|")
    text = f"{short_name(op)}: " + " > ".join(short_name(k) for k in kernels)
    return text if len(text) <= width else text[:width - 3] + "..."


def draw(table: pa.Table, top_k: int = 5):
    """Horizontal bars: count of each of the ``top_k`` sequences, GPU time annotated."""
    rows = table.slice(0, top_k).to_pylist()[::-1]
    if not rows:
        return no_data("Which kernel sequences repeat most?",
                       "no kernel sequence found under the chosen operator")
    fig = new_figure((10, 0.6 * max(len(rows), 1) + 1.2), layout="constrained")
    ax = fig.subplots()
    y = np.arange(len(rows))
    ax.barh(y, [r["count"] for r in rows])
    for i, r in enumerate(rows):
        ax.annotate(f" {r['gpu_time_ns'] / 1e6:.3f} ms GPU", (r["count"], i), va="center",
                    fontsize="x-small")
    ax.set_yticks(y, [label(r["pattern"], 70) for r in rows], fontsize="x-small")
    ax.set_xlabel("occurrences")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title("Which kernel sequences repeat most?", fontsize="small")
    return fig
