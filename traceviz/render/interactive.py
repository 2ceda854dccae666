"""Interactive figures of the HTML page (plotly): the job timeline of micro-batch step
windows on synced clocks, one row per rank ordered by pipeline group and stage, zoomable,
with every step's numbers on hover. Beyond :data:`BAR_ROWS` ranks the job is a heatmap
(a pixel row per rank: the share of each time bin its GPU spends in micro-batch steps, so
bubbles and late ranks show as pale) over a drill-down: the step bars of one pipeline
group, chosen from a menu or by a click on a rank's row. plotly's JavaScript is embedded
in the page once, so the page needs no network and no server."""
from __future__ import annotations

import json

import numpy as np

from ..analysis.coverage import busy_grid
from .words import clock_words

PHASE_COLORS = {"Forward": "#4c72b0", "Backward": "#dd8452"}
CONFIG = {"displaylogo": False, "responsive": True, "scrollZoom": False}
BAR_ROWS = 64  # up to this many ranks the job timeline draws each rank's bars
BINS = 400  # time bins of the heatmap


def row_order(ranks: list[int], stages: list[dict], by_stage: bool = False
              ) -> dict[int, str]:
    """Per rank its row label, ordered by (pipeline group, stage) for the ranks in a PP
    group of the pipeline view's ``stages`` rows (``by_stage``: by (stage, group), every
    stage a block), then the others by rank."""
    placed = {s["rank"]: ((s["stage"], s["pp_group"]) if by_stage else
                          (s["pp_group"], s["stage"])) for s in stages}
    order = sorted(ranks, key=lambda r: (r not in placed, placed.get(r, (0, 0)), r))
    if by_stage:
        return {r: (f"stage {placed[r][0]} · PP{placed[r][1]} · rank {r}" if r in placed
                    else f"rank {r}") for r in order}
    return {r: (f"PP{placed[r][0]} stage {placed[r][1]} · rank {r}" if r in placed
                else f"rank {r}") for r in order}


def _steps(rows: list[dict], labels: dict[int, str], t0: int, visible: bool = True,
           group: str | None = None) -> list:
    """The Forward / Backward bars of ``rows`` (one trace per phase present)."""
    import plotly.graph_objects as go

    traces = []
    for phase, color in PHASE_COLORS.items():
        mine = [r for r in rows if r["phase"] == phase]
        if not mine:
            continue
        traces.append(go.Bar(
            orientation="h", name=phase, marker_color=color, marker_line_width=0,
            visible=visible, legendgroup=phase, showlegend=group is None or visible,
            meta=group,
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
                           "idle in the step %{customdata[6]:.3f} ms, P2P %{customdata[7]:.3f} ms "
                           "(waiting on the schedule %{customdata[10]}), recompute "
                           "%{customdata[8]}<extra></extra>")))
    return traces


def _axis_title(n: int, clocks: str) -> str:
    return f"ms from the first step ({clock_words(n, clocks)})"


def job_timeline(rows: list[dict], stages: list[dict], title: str, clocks: str = "shifted"):
    """A plotly figure: per rank (rows of :func:`row_order`, first on top) a bar per
    micro-batch step window (``microbatches`` rows: start_ns on synced clocks,
    wall_clock_ns), x in ms from the earliest step; hover: phase, micro-batch, chunk,
    wall clock, compute, communication (and its waiting), overlap, idle, P2P (and its
    waiting on the schedule before the step) (ms; n/a where unknown)."""
    import plotly.graph_objects as go

    labels = row_order(sorted({r["rank"] for r in rows}), stages)
    fig = go.Figure(data=_steps(rows, labels, min(r["start_ns"] for r in rows)))
    n = len(labels)
    fig.update_layout(
        title=dict(text=title, x=0.01, font_size=14), barmode="overlay", bargap=0.15,
        height=min(760, 140 + 18 * n), margin=dict(l=10, r=10, t=40, b=40),
        legend=dict(orientation="h", y=1.0, x=0.45, xanchor="left", yanchor="bottom"),
        xaxis=dict(title=_axis_title(n, clocks), showgrid=True),
        yaxis=dict(categoryorder="array", categoryarray=list(labels.values())[::-1],
                   automargin=True, tickfont_size=10 if n <= 64 else 8,
                   showticklabels=n <= 128))
    return fig


def job_heatmap(rows: list[dict], stages: list[dict], title: str, clocks: str = "shifted"):
    """A plotly heatmap of the job at scale: a row per rank (:func:`row_order` by stage:
    each stage a block of its pipeline groups, first on top), :data:`BINS` time bins,
    colour = the share of the bin in micro-batch steps (:func:`busy_grid`); hover: the
    rank's place, the time, the share. Returns (figure, rank -> row label)."""
    import plotly.graph_objects as go

    labels = row_order(sorted({r["rank"] for r in rows}), stages, by_stage=True)
    stage_of = {s["rank"]: s["stage"] for s in stages}
    firsts: dict[str, str] = {}
    for rank, label in labels.items():  # a tick at each stage's first row
        if rank in stage_of:
            firsts.setdefault(f"stage {stage_of[rank]}", label)
    ranks = list(labels)
    edges, share = busy_grid(rows, ranks, BINS)
    mids = (edges[:-1] + edges[1:]) / 2e6
    fig = go.Figure(go.Heatmap(
        z=np.round(100 * share, 1), x=np.round(mids, 4), y=list(labels.values()),
        zmin=0, zmax=100, colorscale=[[0, "#ffffff"], [0.5, "#9db8e0"], [1, "#1f3b57"]],
        colorbar=dict(title="% in steps", thickness=12),
        hovertemplate="<b>%{y}</b><br>%{x:.3f} ms: %{z:.0f} % in micro-batch steps"
                      "<extra></extra>"))
    n = len(labels)
    fig.update_layout(
        title=dict(text=f"{title}: the share of each time bin a rank spends in its steps "
                   "(pale: idle or waiting)", x=0.01, font_size=14),
        height=min(900, max(420, 160 + n)),
        margin=dict(l=10, r=10, t=40, b=40),
        xaxis=dict(title=_axis_title(n, clocks)),
        yaxis=dict(autorange="reversed", automargin=True, tickvals=list(firsts.values()),
                   ticktext=list(firsts), tickfont_size=10,
                   title=f"{n} ranks by stage (hover: the rank; click: its group)"))
    return fig, labels


def group_drilldown(rows: list[dict], stages: list[dict], focus: int | None,
                    clocks: str = "shifted"):
    """The step bars of one pipeline group at a time: every group's traces, the one
    holding ``focus`` (a straggler, or the first group) visible, a menu choosing the
    group. Returns (figure, {rank: menu index}) for the heatmap's click hook."""
    import plotly.graph_objects as go

    groups: dict[int, list[dict]] = {}
    for s in stages:
        groups.setdefault(s["pp_group"], []).append(s)
    by_rank: dict[int, list[dict]] = {}
    for r in rows:
        by_rank.setdefault(r["rank"], []).append(r)
    t0 = min(r["start_ns"] for r in rows)
    order = sorted(groups)
    first = next((g for g in order if any(s["rank"] == focus for s in groups[g])), order[0])
    traces: list = []  # every group's, the figure made once (adding them one by one
    spans, index = [], {}  # copies the figure's data each time: quadratic in groups)
    for k, g in enumerate(order):
        members = sorted(groups[g], key=lambda s: s["stage"])
        mine = [r for s in members for r in by_rank.get(s["rank"], [])]
        before = len(traces)
        traces += _steps(mine, row_order([s["rank"] for s in members], members), t0,
                         visible=g == first, group=str(g))
        spans.append((before, len(traces)))
        index.update({s["rank"]: k for s in members})
    fig = go.Figure(data=traces)
    total = len(traces)
    buttons = [dict(label=f"PP group {g}", method="update",
                    args=[{"visible": [a <= i < b for i in range(total)],
                           "showlegend": [a <= i < b for i in range(total)]}])
               for g, (a, b) in zip(order, spans)]
    fig.update_layout(
        title=dict(text="Steps of one pipeline group (choose it, or click a row above)",
                   x=0.01, font_size=14),
        barmode="overlay", bargap=0.15, height=140 + 18 * max(len(v) for v in groups.values()),
        margin=dict(l=10, r=10, t=70, b=40),
        updatemenus=[dict(buttons=buttons, active=order.index(first), x=0.99, xanchor="right",
                          y=1.12, yanchor="bottom")],
        legend=dict(orientation="h", y=1.0, x=0.3, xanchor="left", yanchor="bottom"),
        xaxis=dict(title=_axis_title(2, clocks), showgrid=True),
        yaxis=dict(autorange="reversed", automargin=True, tickfont_size=10))
    return fig, index


def click_hook(heatmap_id: str, drill_id: str, index: dict[int, int],
               labels: dict[int, str]) -> str:
    """A script: a click on a rank's row of the heatmap shows its pipeline group in the
    drill-down (the menu's own button, pressed)."""
    by_label = {labels[r]: k for r, k in index.items() if r in labels}
    return ("<script>(function(){var h=document.getElementById(" + json.dumps(heatmap_id)
            + "),d=document.getElementById(" + json.dumps(drill_id) + "),at="
            + json.dumps(by_label) + ";if(!h||!d||!h.on)return;"
            "h.on('plotly_click',function(e){var k=at[e.points[0].y];if(k===undefined)"
            "return;var b=d.layout.updatemenus[0].buttons[k];"
            "Plotly.update(d,b.args[0],{'updatemenus[0].active':k});"
            "d.scrollIntoView({behavior:'smooth',block:'nearest'});});})();</script>")


def _ms(ns: int | None) -> str:
    """A duration for a hover (ms, three decimals), n/a when unknown."""
    return "n/a" if ns is None else f"{ns / 1e6:.3f} ms"


def to_html(fig, div_id: str, include_js: bool) -> str:
    """The figure as a ``<div>`` (with plotly's JavaScript inline when ``include_js``:
    once per page)."""
    import plotly.io as pio

    return pio.to_html(fig, include_plotlyjs=include_js, full_html=False, div_id=div_id,
                       config=CONFIG)
