"""Interactive figures of the HTML page (plotly): the job timeline of micro-batch step
windows on synced clocks, one row per rank ordered by pipeline group and stage, zoomable,
with every step's numbers on hover. plotly's JavaScript is embedded in the page once, so
the page needs no network and no server."""
from __future__ import annotations

PHASE_COLORS = {"Forward": "#4c72b0", "Backward": "#dd8452"}
CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": False}


def row_order(ranks: list[int], stages: list[dict]) -> dict[int, str]:
    """Per rank its row label, ordered by (pipeline group, stage) for the ranks in a PP
    group of the pipeline view's ``stages`` rows, then the others by rank."""
    placed = {s["rank"]: (s["pp_group"], s["stage"]) for s in stages}
    order = sorted(ranks, key=lambda r: (r not in placed, placed.get(r, (0, 0)), r))
    return {r: (f"PP{placed[r][0]} stage {placed[r][1]} · rank {r}" if r in placed
                else f"rank {r}") for r in order}


def job_timeline(rows: list[dict], stages: list[dict], title: str, synced: bool = True):
    """A plotly figure: per rank (rows of :func:`row_order`, first on top) a bar per
    micro-batch step window (``microbatches`` rows: start_ns on synced clocks,
    wall_clock_ns), x in ms from the earliest step; hover: phase, micro-batch, chunk,
    wall clock, compute, communication (and its waiting), overlap, idle, P2P (and its
    waiting: the bubble before the step) (ms; n/a where unknown)."""
    import plotly.graph_objects as go

    labels = row_order(sorted({r["rank"] for r in rows}), stages)
    t0 = min(r["start_ns"] for r in rows)
    fig = go.Figure()
    for phase, color in PHASE_COLORS.items():
        mine = [r for r in rows if r["phase"] == phase]
        if not mine:
            continue
        fig.add_trace(go.Bar(
            orientation="h", name=phase, marker_color=color, marker_line_width=0,
            y=[labels[r["rank"]] for r in mine],
            base=[(r["start_ns"] - t0) / 1e6 for r in mine],
            x=[r["wall_clock_ns"] / 1e6 for r in mine],
            customdata=[[r["microbatch"], r["chunk"], r["iteration"],
                         r["comp_ns"] / 1e6, r["comm_ns"] / 1e6, r["overlap_ns"] / 1e6,
                         r["idle_ns"] / 1e6, r["p2p_ns"] / 1e6,
                         "yes" if r["recompute_ns"] else "no", _ms(r.get("comm_wait_ns")),
                         _ms(r.get("p2p_wait_ns"))] for r in mine],
            hovertemplate=(f"<b>%{{y}}</b><br>{phase} micro-batch %{{customdata[0]}}"
                           " chunk %{customdata[1]}, iteration %{customdata[2]}<br>"
                           "start %{base:.3f} ms, wall clock %{x:.3f} ms<br>"
                           "compute %{customdata[3]:.3f} ms, comm %{customdata[4]:.3f} ms "
                           "(waiting %{customdata[9]}), overlap %{customdata[5]:.3f} ms<br>"
                           "idle %{customdata[6]:.3f} ms, P2P %{customdata[7]:.3f} ms "
                           "(waiting: the bubble %{customdata[10]}), recompute "
                           "%{customdata[8]}<extra></extra>")))
    n = len(labels)
    fig.update_layout(
        title=dict(text=title, x=0.01, font_size=14), barmode="overlay", bargap=0.15,
        height=min(760, 140 + 18 * n), margin=dict(l=10, r=10, t=40, b=40),
        legend=dict(orientation="h", y=1.0, x=0.45, xanchor="left", yanchor="bottom"),
        xaxis=dict(title="ms from the first step (" + ("the rank's own clock" if n == 1
                                                      else "clock-synced" if synced
                                                      else "each rank's own clock") + ")",
                   showgrid=True),
        yaxis=dict(categoryorder="array", categoryarray=list(labels.values())[::-1],
                   automargin=True, tickfont_size=10 if n <= 64 else 8,
                   showticklabels=n <= 128))
    return fig


def _ms(ns: int | None) -> str:
    """A duration for a hover (ms, three decimals), n/a when unknown."""
    return "n/a" if ns is None else f"{ns / 1e6:.3f} ms"


def to_html(fig, div_id: str, include_js: bool) -> str:
    """The figure as a ``<div>`` (with plotly's JavaScript inline when ``include_js``:
    once per page)."""
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=include_js, full_html=False, div_id=div_id,
                       config=CONFIG)
