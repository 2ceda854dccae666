"""The files of the pipeline views (``traceviz pipeline``, and the HTML page's pipeline
section): per PP group a figure, a page, its rows of the stage and gap tables, summary
lines."""
from __future__ import annotations

from ..analysis.pipeline import GroupView, PipelineViews
from .figures import Figure
from .pipeline_figure import Mark, draw, gap_text, gaps_html, page, stages_html
from ..table.result import Drawing, Result


def _add_view(res: Result, g: GroupView, title: str, stem: str) -> None:
    """One group's figure, page and summary lines into ``res``."""
    view, group = g.view, g.ranks
    stage = {r: p for p, r in enumerate(group)}
    rel = [Mark(stage[r], kind, a - view.origin, b - view.origin) for r, kind, a, b in g.marks
           if r in stage]
    panels = [("measured", view.measured)] + (
        [(f"ideal (median step times, P2P {view.p2p_ns / 1e3:.0f} µs)", view.ideal)]
        if view.ideal else [])
    res.figures[f"{stem}.png"] = Figure(draw, panels, group, title, rel)
    res.texts[f"{stem}.html"] = page(panels, group, title,
                                     stages_html(view.stages) + gaps_html(view.gaps), rel)
    st = view.stages.to_pylist()
    crit = next(s for s in st if s["critical"])
    res.lines.append(f"{title}: makespan {st[0]['makespan_ns'] / 1e6:.2f} ms measured, "
                     f"{st[0]['ideal_makespan_ns'] / 1e6:.2f} ms ideal; critical stage "
                     f"{crit['stage']} (rank {crit['rank']})")
    for s in st:
        bubble = ("n/a (no time ledger)" if s["iteration_bubble_pct"] is None
                  else f"{s['iteration_bubble_pct']:.1f} %")
        res.lines.append(
            f"  stage {s['stage']} rank {s['rank']}: bubble {bubble} of its iteration; idle "
            f"in the F/B schedule {s['schedule_idle_pct']:.1f} % (ideal "
            f"{s['ideal_schedule_idle_pct']:.1f} %, analytic "
            f"{s['analytic_schedule_idle_pct']:.1f} %); warm-up {s['warmup_steps']}, steady "
            f"{s['steady_pairs']} pairs, cool-down {s['cooldown_steps']}")
    res.lines += [f"  largest gap: {gap_text(gap)}" for gap in view.gaps]


def first_figure(result: Result) -> Drawing | None:
    """The figure of the first group :func:`views_result` drew (None: none)."""
    names = sorted(n for n in result.figures if n.startswith("pipeline_"))
    return result.figures[names[0]] if names else None


def views_result(views: PipelineViews) -> Result:
    """The files and lines of ``views``: per group a figure, a page, its rows of the
    stage and gap tables and summary lines."""
    res = Result(tables={"pipeline_stages": views.stages, "pipeline_gaps": views.gaps},
                 notes=list(views.notes), value=[g.view for g in views.groups])
    for g in views.groups:
        if g.iteration is None:
            _add_view(res, g, f"PP group of TPxCPxDP rank {g.index} (ranks {g.ranks}), from "
                      "timer dumps", f"pipeline_timers_group{g.index}")
        else:
            _add_view(res, g, f"PP group {g.index} (ranks {g.ranks}), ProfilerStep "
                      f"{g.iteration}", f"pipeline_group{g.index}_iter{g.iteration}")
    return res
