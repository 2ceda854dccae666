"""Figure of ``traceviz diff``: the names whose total time changed most, per device."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from .figures import new_figure, no_data

TOP = 15  # names shown per device


def draw(table: pa.Table, control: str = "control", test: str = "test"):
    """Per device, horizontal bars of control and test total time (ms) for the ``TOP``
    names with the largest absolute change, each labelled with its counts; names whose
    time and count are the same in both are not drawn (two equal traces: "no data")."""
    title = "Which names changed most in total time?"
    everything = table.to_pylist()
    if not everything:
        return no_data(title, "no names in either trace's selection")
    rows = [r for r in everything if r["diff_duration_ns"] != 0
            or r["control_counts"] != r["test_counts"]]
    devices = [d for d in ("GPU", "CPU") if any(r["device"] == d for r in rows)]
    if not devices:
        return no_data(title, f"all {len(everything)} names have the same count and total "
                              "time in both")
    fig = new_figure((7 * max(len(devices), 1), 6), layout="constrained")
    axes = fig.subplots(1, max(len(devices), 1), squeeze=False)
    for ax, device in zip(axes[0], devices):
        mine = sorted((r for r in rows if r["device"] == device),
                      key=lambda r: -abs(r["diff_duration_ns"]))[:TOP][::-1]
        y = np.arange(len(mine))
        ax.barh(y - 0.2, [r["control_total_duration_ns"] / 1e6 for r in mine], 0.4,
                label=control)
        ax.barh(y + 0.2, [r["test_total_duration_ns"] / 1e6 for r in mine], 0.4, label=test)
        ax.set_yticks(y, [(r["name"] if len(r["name"]) <= 40 else r["name"][:37] + "...")
                          + f"  [{r['control_counts']}→{r['test_counts']}]" for r in mine],
                      fontsize="x-small")
        ax.set_xlabel("total time (ms)")
        ax.set_title(f"{device}: largest changes in total time", fontsize="small")
        ax.legend(fontsize="small", loc="lower right")
    return fig
