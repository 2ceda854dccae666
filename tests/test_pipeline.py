"""traceviz pipeline on synthesized 1F1B and interleaved jobs: bars and bubbles equal the
ground truth, the ideal simulation matches a uniform job, a slow stage is named."""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import STEP_PHASES, union_length

from traceviz.analysis.schedule import simulate
from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize
from traceviz.topology.schedule import stage_order


def _truth_bars(root, ranks) -> dict[int, list[tuple[int, int]]]:
    """Per rank, (start, end) of each forward / backward step from the ground truth."""
    steps: dict[tuple, list[int]] = {}
    for k in pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist():
        if (k["rank"] in ranks and k["phase"] in STEP_PHASES and k["microbatch"] >= 0
                and not k["p2p"]):  # the step's window (README "Definitions")
            key = (k["rank"], k["phase"] == "FWD", k["microbatch"], k["chunk"])
            s = steps.setdefault(key, [k["ts"], k["ts"] + k["dur"]])
            s[0], s[1] = min(s[0], k["ts"]), max(s[1], k["ts"] + k["dur"])
    out: dict[int, list[tuple[int, int]]] = {}
    for (rank, *_), (a, b) in steps.items():
        out.setdefault(rank, []).append((a, b))
    return out


@pytest.mark.parametrize("cfg", [
    SynthConfig(tp=1, pp=4, dp=1, microbatches=8, layers=8, with_stack=False),
    SynthConfig(tp=1, pp=2, dp=1, vpp=2, schedule="interleaved", microbatches=4, layers=8,
                with_stack=False),
], ids=["1f1b", "interleaved"])
def test_bubbles_match_ground_truth(tmp_path, cfg):
    synthesize(cfg, tmp_path / "job")
    out = tmp_path / "pp"
    result = CliRunner().invoke(main, ["pipeline", str(tmp_path / "job"), "--vpp",
                                       str(cfg.vpp), "-o", str(out)])
    assert result.exit_code == 0, result.output
    stages = pq.read_table(out / "pipeline_stages.parquet").to_pylist()
    ranks = [s["rank"] for s in stages]
    bars = _truth_bars(tmp_path / "job", ranks)
    diagnosed = CliRunner().invoke(main, ["diagnose", str(tmp_path / "job"), "--no-advice",
                                          "-o", str(tmp_path / "d")])
    assert diagnosed.exit_code == 0, diagnosed.output
    ledger = {(r["rank"], r["iteration"]): r
              for r in pq.read_table(tmp_path / "d" / "ledger.parquet").to_pylist()}
    truth = json.loads((tmp_path / "job" / "ground_truth" / "ground_truth.json").read_text())
    makespan = max(e for b in bars.values() for _, e in b) - min(
        s for b in bars.values() for s, _ in b)
    for s in stages:
        busy = union_length(bars[s["rank"]])
        assert s["busy_ns"] == busy
        assert s["makespan_ns"] == makespan
        want = 100.0 * (makespan - busy) / makespan
        assert abs(s["schedule_idle_pct"] - want) <= 0.1 * want / 100 + 1e-9
        assert s["forward_steps"] == s["backward_steps"] == cfg.microbatches * cfg.vpp
        # warm-up / steady / cool-down as Megatron's schedule runs them
        warm = len(stage_order(len(stages), cfg.microbatches, s["stage"], cfg.vpp)) - 2 * (
            s["steady_pairs"])
        total = cfg.microbatches * cfg.vpp
        P, p, v = len(stages), s["stage"], cfg.vpp
        want_warm = (min(P - p - 1, total) if v == 1
                     else min((P - p - 1) * 2 + (v - 1) * P, total))
        assert s["warmup_steps"] == want_warm
        assert s["cooldown_steps"] == want_warm
        assert warm == 2 * want_warm
        # the whole ProfilerStep, DP / optimizer tail included
        a, b = truth["ranks"][str(s["rank"])]["steps"][0]
        assert s["iteration_ns"] == b - a
        assert s["outside_steps_pct"] == pytest.approx(100 * (b - a - busy) / (b - a),
                                                       rel=1e-12)
        # the bubble is the ledger's, as diagnose writes it
        row = ledger[(s["rank"], 10)]
        assert s["iteration_bubble_pct"] == pytest.approx(
            100 * row["bubble_ns"] / row["span_ns"], rel=1e-12)
    assert (out / "pipeline_group0_iter10.png").read_bytes()[:4] == b"\x89PNG"
    page = (out / "pipeline_group0_iter10.html").read_text()
    assert "<svg" in page and "micro-batch 0" in page and "<script" not in page


def test_ideal_matches_a_uniform_job_and_names_the_slow_stage(tmp_path):
    uniform = SynthConfig(tp=1, pp=4, dp=1, microbatches=8, layers=8, with_stack=False,
                          jitter=0.0)
    synthesize(uniform, tmp_path / "u")
    assert CliRunner().invoke(main, ["pipeline", str(tmp_path / "u"), "-o",
                                     str(tmp_path / "pu")]).exit_code == 0
    st = pq.read_table(tmp_path / "pu" / "pipeline_stages.parquet").to_pylist()
    # the synthesizer runs the same schedule with blocking P2P: the ideal makespan is
    # the measured one (to rounding of the median step times)
    assert st[0]["ideal_makespan_ns"] == pytest.approx(st[0]["makespan_ns"], rel=1e-4)

    slow = SynthConfig(tp=1, pp=4, dp=1, microbatches=8, layers=8, with_stack=False,
                       straggler_rank=2, straggler_factor=1.5)
    synthesize(slow, tmp_path / "s")
    result = CliRunner().invoke(main, ["pipeline", str(tmp_path / "s"), "-o",
                                       str(tmp_path / "ps")])
    assert "critical stage 2 (rank 2)" in result.output
    gaps = [line for line in result.output.splitlines() if "largest gap" in line]
    # rank 2 is alone on its stage, but stages 0 and 1 run the same kernels: its slow
    # GPU (the truth: 1.5x) is named as what stretches the stage
    assert "stage 2 (rank 2)" in gaps[0] and "straggler rank 2 (1.4" in gaps[0]
    table = pq.read_table(tmp_path / "ps" / "pipeline_gaps.parquet").to_pylist()
    assert [f"  largest gap: {g['ns'] / 1e6:.3f} ms: {g['what']}" for g in table] == gaps
    assert table[0]["kind"] == "straggler" and table[0]["stage"] == 2
    assert all(g["pp_group"] == 0 for g in table)
    st = pq.read_table(tmp_path / "ps" / "pipeline_stages.parquet").to_pylist()
    assert [s["critical"] for s in st] == [False, False, True, False]


def test_recompute_p2p_and_optimizer_are_marked(tmp_path):
    cfg = SynthConfig(tp=1, pp=2, dp=1, microbatches=4, layers=4, recompute=True)
    synthesize(cfg, tmp_path / "job")
    out = tmp_path / "pp"
    result = CliRunner().invoke(main, ["pipeline", str(tmp_path / "job"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "pipeline_group0_iter10.html").read_text()
    truth = pq.read_table(tmp_path / "job" / "ground_truth" / "kernels.parquet").to_pylist()
    p2p = sum(1 for k in truth if k["p2p"] and k["rank"] in (0, 1) and k["iteration"] == 10)
    assert page.count(", P2P: ") == p2p
    assert page.count(", optimizer: ") == 2
    assert page.count("backward with recompute") == 2 * cfg.microbatches


@pytest.mark.parametrize("vpp", [1, 2])
def test_timer_dumps_render(tmp_path, vpp):
    """Dumps in PP-Schedule-Visualization's format (ms since each rank's start event),
    written here from a known schedule, give the same bars and bubbles."""
    pp, mbs = 4, 8
    fwd = np.array([1.0, 1.2, 1.0, 1.1]) * 1e6
    bwd = 2 * fwd
    steps = simulate(pp, mbs, fwd, bwd, 50_000, vpp)
    total = {p: max(s.end for s in steps) + 3_000_000 for p in range(pp)}
    folder = tmp_path / "pp_timer_logs"
    folder.mkdir()
    for r in (0, 1):  # two TPxCPxDP ranks: plot.py draws rank 0
        for p in range(pp):
            events = {}
            for s in steps:
                if s.stage == p:
                    name = "forward" if s.phase == "F" else "backward"
                    key = f"{name}-{s.chunk}-{s.microbatch}" if vpp > 1 else \
                        f"{name}-{s.microbatch}"
                    events[f"{key}-start"] = s.start / 1e6
                    events[f"{key}-end"] = s.end / 1e6
            events["total-execution-time"] = total[p] / 1e6
            g = p * 2 + r
            (folder / f"event_times_PP{pp}_VPP{vpp}_TPxCPxDP_rank_{r}_pp_rank_{p}_rank_{g}"
             ".json").write_text(json.dumps(events))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["pipeline", str(folder), "-o", str(out)])
    assert result.exit_code == 0, result.output
    st = pq.read_table(out / "pipeline_stages.parquet").to_pylist()
    assert [s["rank"] for s in st] == [0, 2, 4, 6]
    t0 = min(s.start for s in steps)
    makespan = max(s.end for s in steps) - t0
    for s in st:
        p = s["stage"]
        busy = mbs * vpp * (fwd[p] + bwd[p])
        assert s["busy_ns"] == pytest.approx(busy, abs=mbs * vpp * 2)  # ms -> ns rounding
        assert s["makespan_ns"] == pytest.approx(makespan, abs=2)
        assert s["schedule_idle_pct"] == pytest.approx(100 * (makespan - busy) / makespan,
                                                       abs=1e-4)
        assert s["outside_steps_pct"] == pytest.approx(
            100 * (total[p] - busy) / total[p], abs=1e-4)
        assert s["iteration_bubble_pct"] is None  # timer dumps have no time ledger
        assert s["forward_steps"] == s["backward_steps"] == mbs * vpp
    # the ideal re-simulation of an ideal schedule is itself
    assert st[0]["ideal_makespan_ns"] == pytest.approx(st[0]["makespan_ns"], rel=1e-6)
    assert (out / "pipeline_timers_group0.png").read_bytes()[:4] == b"\x89PNG"
    assert "micro-batch 7" in (out / "pipeline_timers_group0.html").read_text()


def test_optimizer_band_is_the_step_after_the_micro_batches():
    """On the real Megatron 1F1B job the gradient buffers are zeroed (aten::fill_,
    optimizer work) at the iteration's start: the optimizer band is the step after the
    last micro-batch's compute, not the whole iteration."""
    from helpers import shared

    from traceviz.analysis.activities import activities
    from traceviz.analysis.pipeline import stage_marks
    from traceviz.ingest.tables import rank_tables, tables_folder
    from traceviz.table.schema import COMP, OPTIMIZER

    folder = tables_folder(shared("gpu/megatron_1f1b/iteration_5"))
    for _, _, table in rank_tables(sorted(folder.glob("rank_*[0-9].parquet")), None, []):
        acts = activities(table)
        it = 5
        in_it = acts.iteration == it
        opt = in_it & (acts.phase == OPTIMIZER)
        zeroing = int(acts.ts[opt].min())  # optimizer work before any micro-batch
        first_mb = int(acts.ts[in_it & (acts.microbatch >= 0)].min())
        assert zeroing < first_mb
        band = [m for m in stage_marks(acts, it) if m[0] == "optimizer"]
        assert len(band) == 1
        _, start, end = band[0]
        last_compute = int(acts.ts[in_it & (acts.microbatch >= 0) & (acts.kind == COMP)].max())
        assert start >= last_compute > zeroing
        assert end == int(acts.end[opt].max())
