"""Op timelines (per-op timers of every rank and step): reading every format, the
re-simulation that gives back the measured steps, and the diagnosis checked against the
synthesizer re-run with one cause removed (the counterfactual), not against itself."""
from __future__ import annotations

import gzip

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from traceviz.analysis.timeline.data import OpTimeline
from traceviz.analysis.timeline.diagnosis import diagnose_timeline
from traceviz.analysis.timeline.flatten import flatten
from traceviz.analysis.timeline.graph import Layout, step_graph
from traceviz.analysis.timeline.layout import complete_layout
from traceviz.analysis.timeline.simulate import simulate
from traceviz.cli import main
from traceviz.errors import TraceVizError
from traceviz.ingest import op_timeline as ingest
from traceviz.synth.op_timeline import TimelineConfig, simulate_steps

from helpers import write_timer_dumps

SMALL = TimelineConfig(pp=4, dp=2, tp=2, microbatches=6, steps=3, seq_cv=0.2)


def _diag(cfg: TimelineConfig, **kw):
    table, truth = simulate_steps(cfg)
    return diagnose_timeline(OpTimeline.of(table), **kw), truth


def _true_saving(cfg: TimelineConfig, cause: str, truth: np.ndarray, since: int = 0
                 ) -> float:
    """What removing ``cause`` saves per step (from step index ``since``), by re-running
    the synthesizer."""
    _, without = simulate_steps(cfg.without(cause))
    return float((truth - without)[since:].mean())


# ---- re-simulation ----------------------------------------------------------------------

@pytest.mark.parametrize("cfg", [
    SMALL,
    TimelineConfig(pp=3, dp=3, microbatches=5, steps=2, transfer_given=True, seed=4),
    TimelineConfig(pp=1, dp=4, microbatches=3, steps=2, seed=2),
    TimelineConfig(pp=6, dp=1, microbatches=2, steps=2, seed=5),  # fewer micro-batches than stages
])
def test_measured_steps_simulate_back_exactly(cfg):
    """Every op's re-simulated end is its measured end, and each step's time the
    synthesizer's: the dependencies (pairs in order, groups by occurrence) are the
    synthesizer's schedule."""
    table, truth = simulate_steps(cfg)
    tl = complete_layout(OpTimeline.of(table))
    flat = flatten(tl)
    layout = Layout(flat.timeline)
    for step, lo, hi in flat.steps:
        g = step_graph(flat, layout, lo, hi, has_p2p=cfg.pp > 1)
        assert g.uncoupled == 0
        sim = simulate(g)
        # given transfers are rounded to ns apart from the starts and ends
        slack = 3 if cfg.transfer_given else 0
        assert np.abs(sim.end - g.end).max() <= slack
        assert abs(sim.step_ns - truth[step]) <= slack


def test_nested_timers_are_cut_into_pieces():
    """batch-generator inside forward-compute: the outer op's exclusive time is its
    duration less the inner one's, and the pieces cover each rank's time once."""
    table, _ = simulate_steps(SMALL)
    tl = complete_layout(OpTimeline.of(table))
    flat = flatten(tl)
    fwd = tl.names.index("forward-compute")
    bg = tl.names.index("batch-generator")
    excl = flat.exclusive(np.arange(len(tl)))
    # the pieces of every step add up to the exclusive times
    for _, lo, hi in flat.steps:
        row, _, dur = flat.pieces(lo, hi)
        assert np.array_equal(np.bincount(row - lo, weights=dur, minlength=hi - lo),
                              excl[lo:hi])
    # plain Python: each forward-compute minus the batch-generator starting with it
    for i in np.flatnonzero(tl.op == fwd)[:50]:
        inner = [j for j in np.flatnonzero((tl.op == bg) & (tl.rank == tl.rank[i])
                                           & (tl.step == tl.step[i]))
                 if tl.start[j] >= tl.start[i]
                 and tl.start[j] + tl.dur[j] <= tl.start[i] + tl.dur[i]]
        assert excl[i] == tl.dur[i] - sum(int(tl.dur[j]) for j in inner)
    assert flat.nested == int((tl.op == bg).sum())


def test_stages_and_dp_ranks_inferred_from_the_transfers():
    """Without stage / dp_rank / tp_rank columns the stages come from the transfers'
    order and the DP ranks from global order: the same as the columns said (tp 1)."""
    cfg = TimelineConfig(pp=4, dp=3, microbatches=6, steps=2, seed=1)
    table, _ = simulate_steps(cfg)
    known = complete_layout(OpTimeline.of(table))
    bare = table.drop_columns(["stage", "dp_rank", "tp_rank"])
    for c in ("stage", "dp_rank", "tp_rank"):
        bare = bare.append_column(c, pa.nulls(bare.num_rows, pa.int32()))
    tl = complete_layout(OpTimeline.of(bare))
    assert np.array_equal(tl.stage, known.stage)
    assert np.array_equal(tl.dp, known.dp)
    assert any("stages inferred (4)" in n for n in tl.notes)
    # the diagnosis on the inferred layout is the diagnosis on the given one
    a = diagnose_timeline(OpTimeline.of(table)).steps
    b = diagnose_timeline(OpTimeline.of(bare)).steps
    assert a.equals(b)


def test_interleaved_stages_are_asked_for_not_guessed():
    """Under interleaving every rank receives: no stage can be told apart: an error that
    asks for the column."""
    rows = [{"rank": r, "step": 0, "op": op, "start_ns": 10 * k, "duration_ns": 5}
            for r in range(4) for k, op in enumerate(
                ["forward-recv", "forward-compute", "forward-send"])]
    with pytest.raises(TraceVizError, match="give the stage column"):
        complete_layout(OpTimeline.of(pa.Table.from_pylist(rows)))


# ---- the diagnosis against the counterfactual ------------------------------------------

def _advice(diag, prefix):
    return [a for a in diag.advice if a.what_if.startswith(prefix)]


def test_slow_worker_found_with_its_onset_and_its_saving_is_the_rerun():
    cfg = TimelineConfig(pp=4, dp=8, microbatches=8, steps=20, slow_rank=29, slow_from=8,
                         gpu_sigma=0.01, op_noise=0.01)
    diag, truth = _diag(cfg)
    strag = diag.stragglers_table.to_pylist()
    assert [(s["rank"], s["since_step"], s["persistent"]) for s in strag] == [(29, 8, True)]
    first = diag.advice[0]
    assert first.what_if.startswith("worker:") and first.target_rank == 29
    true = _true_saving(cfg, "slow_rank", truth, since=8)
    assert abs(first.saving_ns - true) <= 0.01 * truth.mean()
    assert strag[0]["slowdown"] == pytest.approx(1.3, abs=0.05)
    # the heatmap holds it: slow from step 8, not before
    heat = diag.heat[strag[0]["worker"]]
    assert (heat[8:] > 1.15).all() and (heat[:8] < 1.05).all()


def test_one_slow_step_is_transient_not_a_straggler():
    cfg = TimelineConfig(pp=4, dp=8, microbatches=8, steps=12, slow_rank=9, slow_from=5,
                         slow_steps=1, slow_factor=1.5, seed=2)
    diag, _ = _diag(cfg)
    strag = diag.stragglers_table.to_pylist()
    assert [(s["rank"], s["since_step"], s["persistent"]) for s in strag] == [(9, 5, False)]
    assert not _advice(diag, "worker:")
    assert any("transient" in line for line in diag.summary)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_straggler_within_the_ordinary_spread(seed):
    """GPUs 1 % apart, ops 2 % noisy, uneven data: nobody is called slow."""
    cfg = TimelineConfig(pp=4, dp=16, microbatches=8, steps=10, gpu_sigma=0.01,
                         op_noise=0.02, seq_cv=0.1, seed=seed)
    diag, _ = _diag(cfg)
    assert not [s for s in diag.stragglers_table.to_pylist() if s["persistent"]]
    assert not _advice(diag, "worker:")


@pytest.mark.parametrize("cause,cfg,prefix", [
    ("seq_cv", TimelineConfig(pp=4, dp=8, microbatches=8, steps=10, seq_cv=0.2), "balance"),
    ("last_stage_extra", TimelineConfig(pp=4, dp=4, microbatches=8, steps=6,
                                        last_stage_extra=0.4), "stages="),
    ("slow_dp_factor", TimelineConfig(pp=4, dp=4, tp=2, microbatches=8, steps=6,
                                      slow_dp_factor=3.0, slow_dp_stage=3), "dp-group:3"),
    ("data_spike_ms", TimelineConfig(pp=4, dp=4, microbatches=8, steps=10,
                                     data_spike_ms=20.0), "data"),
])
def test_each_cause_saving_is_what_removing_it_saves(cause, cfg, prefix):
    """Each cause alone, on top of the natural spread: it is the first advice and its
    predicted saving is the re-run's within 1 % of the step."""
    diag, truth = _diag(cfg)
    first = diag.advice[0]
    assert first.what_if.startswith(prefix), [a.what_if for a in diag.advice]
    true = _true_saving(cfg, cause, truth)
    assert true > 0.01 * truth.mean()
    assert abs(first.saving_ns - true) <= 0.01 * truth.mean()


def test_stage_split_from_the_layer_count():
    """With --num-layers the heavy last stage gets Megatron's split, re-timed; without,
    the even stages' saving, conditional, asking for the count."""
    cfg = TimelineConfig(pp=4, dp=2, microbatches=8, steps=4, last_stage_extra=0.5,
                         gpu_sigma=0.0, op_noise=0.0)
    without, _ = _diag(cfg)
    even = _advice(without, "stages=even")[0]
    assert even.standing == "conditional" and "--num-layers" in even.action
    split, _ = _diag(cfg, num_layers=16)
    a = _advice(split, "stages=")[0]
    assert "--decoder-last-pipeline-num-layers" in a.action or "account-for" in a.action
    assert 0 < a.saving_ns <= even.saving_ns


def test_ranking_follows_the_true_costs():
    """Several causes at once: the ranked advice's order is the order of what removing
    each saves in re-runs (those more than 1 % of the step apart); the stages' advice
    is conditional without the layer count (after the ranked ones, as in the trace
    diagnosis) and its saving is the even stages' re-run."""
    cfg = TimelineConfig(pp=4, dp=8, microbatches=8, steps=20, slow_rank=29, slow_from=8,
                         seq_cv=0.15, data_spike_ms=15, last_stage_extra=0.2)
    diag, truth = _diag(cfg)
    spec = {"seq_cv": "balance", "data_spike_ms": "data", "slow_rank": "worker:",
            "last_stage_extra": "stages="}
    since = {"slow_rank": 8}
    true = {c: _true_saving(cfg, c, truth, since.get(c, 0)) for c in spec}
    order = [next(i for i, a in enumerate(diag.advice) if a.what_if.startswith(p))
             for p in spec.values()]
    even = _advice(diag, "stages=even")[0]
    assert even.standing == "conditional"
    assert abs(even.saving_ns - true["last_stage_extra"]) <= 0.01 * truth.mean()
    del spec["last_stage_extra"], order[-1]
    causes = list(spec)
    assert all(diag.advice[i].standing == "ranked" for i in order)
    for i in range(len(causes)):
        for j in range(len(causes)):
            if true[causes[i]] > true[causes[j]] + 0.01 * truth.mean():
                assert order[i] < order[j], (true, [a.what_if for a in diag.advice])


def test_ledger_parts_add_up_to_each_step():
    diag, truth = _diag(SMALL)
    from traceviz.analysis.timeline.ledger import PARTS
    for row in diag.ledger.to_pylist():
        assert sum(row[f"{p}_ns"] for p in PARTS) == row["step_ns"] == truth[row["step"]]
        assert all(row[f"{p}_ns"] >= 0 for p in PARTS)
    for s in diag.steps.to_pylist():
        assert s["slowdown"] >= 0.5 and s["ideal_ns"] > 0


# ---- reading ------------------------------------------------------------------------------

def _write_all(table: pa.Table, tmp_path):
    """The table as parquet, CSV, gzipped JSON lines and a Chrome trace."""
    out = {}
    out["parquet"] = tmp_path / "t.parquet"
    pq.write_table(table, out["parquet"])
    from pyarrow import csv
    out["csv"] = tmp_path / "t.csv"
    csv.write_csv(table, out["csv"])
    out["jsonl"] = tmp_path / "t.jsonl.gz"
    with gzip.open(out["jsonl"], "wb") as f:
        for row in table.to_pylist():
            f.write(orjson.dumps({k: v for k, v in row.items() if v is not None}) + b"\n")
    events = [{"name": r["op"], "ph": "X", "pid": r["rank"], "tid": 0,
               "ts": r["start_ns"] / 1000, "dur": r["duration_ns"] / 1000,
               "args": {k: r[k] for k in ("step", "stage", "dp_rank", "tp_rank",
                                          "microbatch", "chunk") if r[k] is not None}}
              for r in table.to_pylist()]
    out["chrome"] = tmp_path / "t.json"
    out["chrome"].write_bytes(orjson.dumps({"traceEvents": [
        {"name": "process_name", "ph": "M", "pid": 0}] + events}))
    return out


def test_every_format_reads_the_same_rows(tmp_path):
    table, _ = simulate_steps(TimelineConfig(pp=2, dp=2, microbatches=2, steps=2))
    files = _write_all(table, tmp_path)
    want = OpTimeline.of(table)
    for kind, path in files.items():
        assert ingest.is_op_timeline(path), kind
        tl = ingest.read_op_timeline(path)
        assert tl.names == want.names and np.array_equal(tl.op, want.op), kind
        for col in ("rank", "step", "start", "dur", "microbatch", "chunk"):
            assert np.array_equal(getattr(tl, col), getattr(want, col)), (kind, col)
        assert np.array_equal(tl.stage, want.stage), kind
    assert any("not timer events" in n for n in ingest.read_op_timeline(
        files["chrome"]).notes)
    # the same events as begin / end pairs (nested ones too) read the same; each step's
    # on a thread of its own (the steps' clocks overlap)
    doc = orjson.loads(files["chrome"].read_bytes())
    pairs = []
    for ev in doc["traceEvents"][1:]:
        tid = ev["args"]["step"]
        b = {k: v for k, v in ev.items() if k != "dur"} | {"ph": "B", "tid": tid}
        pairs.append((ev["pid"], tid, ev["ts"], -ev["dur"], 0, b))
        pairs.append((ev["pid"], tid, ev["ts"] + ev["dur"], 0, 1,
                      {"ph": "E", "pid": ev["pid"], "tid": tid, "ts": ev["ts"] + ev["dur"]}))
    # ends before begins at one time; the longer begin first (its end comes later)
    pairs.sort(key=lambda p: (p[0], p[1], p[2], -p[4], p[3]))
    be = tmp_path / "be.json"
    be.write_bytes(orjson.dumps({"traceEvents": [p[5] for p in pairs]}))
    tl = ingest.read_op_timeline(be)
    for col in ("rank", "step", "start", "dur", "microbatch"):
        assert np.array_equal(getattr(tl, col), getattr(want, col)), col


def test_a_folder_split_per_rank_and_step(tmp_path):
    table, _ = simulate_steps(TimelineConfig(pp=2, dp=2, microbatches=2, steps=3))
    folder = tmp_path / "timers"
    for r in range(4):
        for s in range(3):
            part = table.filter(pc.and_(pc.equal(table["rank"], r), pc.equal(table["step"], s)))
            sub = folder / f"step{s}"
            sub.mkdir(parents=True, exist_ok=True)
            pq.write_table(part, sub / f"rank{r}.parquet")
    (folder / "README.txt").write_text("not a timeline")
    got = ingest.read_op_timeline(folder)
    assert len(got) == table.num_rows and "12 op timeline files" in got.notes[0]
    a = diagnose_timeline(got).steps
    b = diagnose_timeline(OpTimeline.of(table)).steps
    assert a.equals(b)


def test_a_profiler_trace_is_not_an_op_timeline():
    from tests.helpers import SHARED  # the real traces
    traces = sorted((SHARED / "traces" / "gpu").rglob("*.json*"))[:3]
    assert traces
    for t in traces:
        assert not ingest.is_op_timeline(t), t


@pytest.mark.parametrize("text,match", [
    ("rank,step,op,start_ns\n0,0,forward-compute,1\n", "no column duration_ns"),
    ("rank,step,op,start_ns,duration_ns\n0,0,forward-compute,1,2\n0,0,x,abc,3\n",
     r"row 2, column start_ns: 'abc' is not a number"),
    ("rank,step,op,start_ns,duration_ns\n0,0,forward-compute,1,-2\n",
     "row 1, column duration_ns: is negative"),
    ("rank,step,op,start_ns,duration_ns\n0,0,forward-compute,1,2.5\n",
     "row 1, column duration_ns: 2.5 is not an integer"),
    ("rank,step,op,start_ns,duration_ns,transfer_ns\n0,0,forward-send,1,2,3\n",
     "row 1, column transfer_ns: is not within"),
    ("rank,step,op,start_ns,duration_ns\n0,,forward-compute,1,2\n",
     "row 1, column step: is empty"),
    ("rank,step,op,start_ns,duration_ns,stage\n0,0,a,1,2,0\n0,1,a,5,2,1\n",
     "rank 0: its rows give stage 0 and 1"),
    ("rank,step,op,start_ns,duration_ns\n0,0,forward-compute,1,99999999999999999999\n",
     "row 1, column duration_ns"),
    # hostile: an index far beyond any job would size the per-stage / per-DP tables
    ("rank,step,op,start_ns,duration_ns,stage\n0,0,a,1,2,2000000000\n",
     "stage 2000000000: at most 65,535"),
    ("rank,step,op,start_ns,duration_ns,dp_rank\n0,0,a,1,2,7000000\n1,0,a,1,2,0\n",
     "dp_rank 7000000: at most 1,048,575"),
    ("rank,step,op,start_ns,duration_ns,chunk\n0,0,a,1,2,30000\n",
     "model chunks per stage are fewer than 1024"),
    ("rank,step,op,start_ns,duration_ns,microbatch\n0,0,a,1,2,40000\n",
     "micro-batch 40000"),
])
def test_bad_values_name_file_row_and_column(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceVizError, match=match) as err:
        diagnose_timeline(ingest.read_op_timeline(path))
    assert str(path) in str(err.value)


def test_a_large_chrome_trace_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps({"traceEvents": [
        {"name": "a", "ph": "X", "pid": 0, "ts": 0, "dur": 1, "args": {"step": 0}}] * 50}))
    monkeypatch.setattr(ingest, "MAX_JSON_BYTES", 1000)
    with pytest.raises(TraceVizError, match="stream"):
        ingest.read_op_timeline(path)


def _slow_job_file(tmp_path):
    """A 16-rank timeline (rank 13 slow from step 3) as parquet."""
    path = tmp_path / "timers.parquet"
    pq.write_table(simulate_steps(TimelineConfig(pp=4, dp=4, microbatches=6, steps=8,
                                                 slow_rank=13, slow_from=3))[0], path)
    return path


def test_diagnose_cli_on_an_op_timeline(tmp_path):
    path = _slow_job_file(tmp_path)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["diagnose", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "rank 13 (stage 3, DP 1)" in result.output and "since step 3" in result.output
    for name in ("op_steps", "op_ledger", "op_stragglers", "op_attribution",
                 "op_worker_steps", "advice"):
        assert (out / f"{name}.parquet").exists(), name
    for png in ("op_slowdown.png", "op_heatmap.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    text = (out / "diagnosis.txt").read_text()
    assert "evidence for 1:" in text and "step 3:" in text
    adv = pq.read_table(out / "advice.parquet").to_pylist()
    assert adv[0]["target_rank"] == 13 and adv[0]["model"] == "re-simulated op timeline"


def test_timer_dumps_diagnose(tmp_path):
    """PP-Schedule-Visualization's dumps (compute only): the stages from the files, the
    pipeline's order from the micro-batches; a heavy stage found."""
    folder = write_timer_dumps(tmp_path / "pp_timer_logs", [1.0, 1.0, 1.0, 1.6], 6)
    assert ingest.is_op_timeline(folder)
    diag = diagnose_timeline(ingest.read_op_timeline(folder))
    assert any("timer dumps" in n for n in diag.notes)
    stage = _advice(diag, "stages=even")
    assert stage and "the last stage computes 1.60x" in stage[0].finding


def test_html_page_of_an_op_timeline(tmp_path):
    path = _slow_job_file(tmp_path)
    out = tmp_path / "page.html"
    result = CliRunner().invoke(main, ["html", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    for section in ("Diagnosis", "Steps", "Workers", "Ledger", "Notes"):
        assert f">{section}</h2>" in text
    assert "rank 13 (stage 3, DP 1) computes" in text and text.count("<img") == 2


def test_pipeline_and_report_on_an_op_timeline(tmp_path):
    """pipeline draws a step's schedule from the timers (its micro-batches' forward /
    backward compute, as measured); report says in one line what reads a timeline."""
    cfg = TimelineConfig(pp=4, dp=2, microbatches=6, steps=3)
    table, _ = simulate_steps(cfg)
    path = tmp_path / "timers.parquet"
    pq.write_table(table, path)
    out = tmp_path / "pipe"
    result = CliRunner().invoke(main, ["pipeline", str(path), "--iteration", "1",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    st = pq.read_table(out / "pipeline_stages.parquet").to_pylist()
    assert [s["rank"] for s in st] == [0, 2, 4, 6]  # DP rank 0's pipeline, by stage
    step1 = table.filter(pc.equal(table["step"], 1))
    for s in st:
        assert s["forward_steps"] == s["backward_steps"] == 6
        mine = step1.filter(pc.and_(pc.equal(step1["rank"], s["rank"]),
                                    pc.is_in(step1["op"], pa.array(["forward-compute",
                                                                    "backward-compute"]))))
        assert s["busy_ns"] == pc.sum(mine["duration_ns"]).as_py()
    result = CliRunner().invoke(main, ["report", str(path)])
    assert result.exit_code != 0 and "an op timeline" in result.output
    assert "Traceback" not in result.output


def test_transfers_that_do_not_line_up_run_alone_and_are_named():
    """A rank's extra receive (a link with more transfers on one side): that link's
    transfers run alone with their measured time, a note says so, nothing hangs."""
    cfg = TimelineConfig(pp=2, dp=1, microbatches=3, steps=2)
    table, _ = simulate_steps(cfg)
    extra = pa.Table.from_pylist([{"rank": 1, "step": 0, "op": "forward-recv",
                                   "start_ns": 10**9, "duration_ns": 1000, "stage": 1,
                                   "dp_rank": 0, "tp_rank": 0, "microbatch": -1,
                                   "chunk": 0, "transfer_ns": None}],
                                 schema=table.schema)
    diag = diagnose_timeline(OpTimeline.of(pa.concat_tables([table, extra])))
    assert any("did not line up" in n for n in diag.notes)
    assert len(diag.steps) == 2


def test_hostile_sizes_are_refused(tmp_path, monkeypatch):
    """A JSON lines row of a megabyte, more steps than one diagnosis takes, a worker x
    step table beyond its bound: one line each, nothing allocated for them."""
    path = tmp_path / "long.jsonl"
    path.write_text('{"rank": 0, "step": 0, "op": "' + "x" * (ingest.MAX_LINE + 10)
                    + '", "start_ns": 0, "duration_ns": 1}\n')
    with pytest.raises(TraceVizError, match="line 1 is longer than"):
        ingest.read_op_timeline(path)
    from traceviz.analysis.timeline import data, model
    monkeypatch.setattr(data, "MAX_STEPS", 5)
    rows = [{"rank": 0, "step": s, "op": "forward-compute", "start_ns": 0,
             "duration_ns": 1} for s in range(6)]
    with pytest.raises(TraceVizError, match="6 steps, more than 5"):
        OpTimeline.of(pa.Table.from_pylist(rows))
    monkeypatch.setattr(model, "MAX_WORKER_STEPS", 4)
    with pytest.raises(TraceVizError, match="1 workers x 5 steps"):
        diagnose_timeline(OpTimeline.of(pa.Table.from_pylist(rows[:5])))


def test_timers_without_compute_say_workers_are_not_assessed():
    """Megatron's level-1 timers (no forward / backward compute): the steps are still
    re-simulated and diagnosed; nobody is said to be within the spread."""
    table, _ = simulate_steps(TimelineConfig(pp=4, dp=2, microbatches=4, steps=4,
                                             slow_rank=3, slow_from=1))
    level1 = table.filter(pc.is_in(table["op"], pa.array([
        "all-grads-sync", "optimizer", "params-all-gather", "embedding-grads-all-reduce"])))
    diag = diagnose_timeline(OpTimeline.of(level1))
    assert any("slow workers: not assessed" in line for line in diag.summary)
    assert not any("ordinary spread" in line for line in diag.summary)
    assert len(diag.steps) == 4


def test_transfers_paired_into_a_circle_run_alone():
    """Two stages under interleaving (a ring): each rank sends before it receives, so
    pairing in order makes each transfer wait on the other's successor. The step is
    still diagnosed: its transfers run alone, a note says why."""
    rows = []
    for rank, ops in ((0, ["forward-compute", "forward-send", "forward-recv",
                           "forward-compute"]),
                      (1, ["forward-compute", "forward-send", "forward-recv",
                           "forward-compute"])):
        for k, op in enumerate(ops):
            rows.append({"rank": rank, "step": 0, "op": op, "start_ns": 100 * k,
                         "duration_ns": 50, "stage": rank, "dp_rank": 0, "tp_rank": 0,
                         "microbatch": 0, "chunk": k // 2})
    diag = diagnose_timeline(OpTimeline.of(pa.Table.from_pylist(rows)))
    assert any("wait on each other in a circle" in n for n in diag.notes)
    assert diag.steps.to_pylist()[0]["time_ns"] == 350


def test_part_of_a_job_is_diagnosed():
    """The timers of two stages of four (a part of the job's files): diagnosed as they
    are, the missing stages' transfers alone, no stage balance claimed."""
    table, _ = simulate_steps(TimelineConfig(pp=4, dp=2, microbatches=4, steps=3))
    part = table.filter(pc.is_in(table["stage"], pa.array([1, 2], pa.int32())))
    diag = diagnose_timeline(OpTimeline.of(part))
    assert len(diag.steps) == 3
    assert not _advice(diag, "stages=")
    assert any("did not line up" in n for n in diag.notes)


def test_epoch_clocks_and_huge_integers(tmp_path):
    """Starts in epoch ns (above 2^53) read and diagnose as any other clock; integers
    beyond int64 (a uint64 parquet column, a JSON number of 2^64 - 1) are one line each."""
    table, _ = simulate_steps(TimelineConfig(pp=2, dp=2, microbatches=3, steps=2))
    epoch = table.set_column(table.schema.get_field_index("start_ns"), "start_ns",
                             pc.add(table["start_ns"], 1_700_000_000_000_000_000))
    path = tmp_path / "epoch.parquet"
    pq.write_table(epoch, path)
    a = diagnose_timeline(ingest.read_op_timeline(path)).steps
    b = diagnose_timeline(OpTimeline.of(table)).steps
    assert a.equals(b)
    big = pa.table({"rank": pa.array([0], pa.uint64()), "step": [0], "op": ["x"],
                    "start_ns": pa.array([1 << 63], pa.uint64()), "duration_ns": [1]})
    pq.write_table(big, tmp_path / "big.parquet")
    with pytest.raises(TraceVizError, match="row 1, column start_ns: does not fit int64"):
        ingest.read_op_timeline(tmp_path / "big.parquet")
    (tmp_path / "big.jsonl").write_text(
        '{"rank": 18446744073709551615, "step": 0, "op": "x", "start_ns": 0, '
        '"duration_ns": 1}\n')
    with pytest.raises(TraceVizError, match="column rank"):
        ingest.read_op_timeline(tmp_path / "big.jsonl")


def test_two_ranks_in_one_place_are_asked_apart():
    """TP peers without a tp_rank column share a stage and DP rank: their pipeline
    neighbours would be one rank, so the columns that tell them apart are asked for."""
    table, _ = simulate_steps(TimelineConfig(pp=2, dp=1, tp=2, microbatches=2, steps=1))
    bare = table.set_column(table.schema.get_field_index("tp_rank"), "tp_rank",
                            pa.nulls(table.num_rows, pa.int32()))
    with pytest.raises(TraceVizError, match="same stage, DP and TP rank.*tp_rank"):
        diagnose_timeline(OpTimeline.of(bare))


def test_a_worker_that_recovers_is_fixed_only_while_slow():
    """Slow in steps 5-10 of 16: found with both ends, its saving the re-run's over those
    steps (not spread over steps it was not slow in)."""
    cfg = TimelineConfig(pp=4, dp=4, microbatches=8, steps=16, slow_rank=13, slow_from=5,
                         slow_steps=6, gpu_sigma=0.01, op_noise=0.01)
    diag, truth = _diag(cfg)
    strag = [s for s in diag.stragglers_table.to_pylist() if s["persistent"]]
    assert [(s["rank"], s["since_step"], s["slow_steps"]) for s in strag] == [(13, 5, 6)]
    a = _advice(diag, "worker:")[0]
    assert "from step 5 to step 10" in a.finding and a.what_if.endswith("@5-10")
    _, without = simulate_steps(cfg.without("slow_rank"))
    true = float((truth - without)[5:11].mean())
    assert abs(a.saving_ns - true) <= 0.01 * truth[5:11].mean()


def test_synth_timeline_cli_then_diagnose(tmp_path):
    """The README's try-it: the synthesized slow rank is what diagnose names, with the
    step it started; a file named otherwise is refused in one line."""
    path = tmp_path / "timers.parquet"
    result = CliRunner().invoke(main, ["synth-timeline", str(path), "--pp", "4", "--dp",
                                       "8", "--steps", "20", "--slow-rank", "29",
                                       "--slow-from", "8"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(main, ["diagnose", str(path), "-o", str(tmp_path / "d")])
    assert result.exit_code == 0, result.output
    assert "slow workers: rank 29 (stage 3, DP 5)" in result.output
    assert "since step 8" in result.output
    bad = CliRunner().invoke(main, ["synth-timeline", str(tmp_path / "timers.txt")])
    assert bad.exit_code != 0 and "name it .parquet" in bad.output


def test_collectives_of_one_rank_are_not_communication():
    """Data parallelism 1: the gradients' sync has no peer: no DP transfer in the
    ledger, no overlap advice, nothing said not to line up."""
    diag, _ = _diag(TimelineConfig(pp=4, dp=1, microbatches=4, steps=4))
    rows = diag.ledger.to_pylist()
    assert all(r["transfer_dp_ns"] == 0 for r in rows)
    assert any(r["other_ns"] > 0 for r in rows)
    assert not _advice(diag, "overlap=DP")
    assert not any("did not line up" in n for n in diag.notes)


def test_wording_names_what_the_timers_show():
    """A slow DP group's advice names TP ranks only where the timers give them; one slow
    worker of one rank is "rank N", not "ranks N"."""
    from traceviz.render.timeline_text import timeline_text

    cfg = TimelineConfig(pp=4, dp=4, microbatches=8, steps=6, slow_dp_factor=3.0,
                         slow_dp_stage=3)
    table, _ = simulate_steps(cfg)
    without_tp = diagnose_timeline(OpTimeline.of(table.drop_columns(["tp_rank"])))
    finding = _advice(without_tp, "dp-group:3")[0].finding
    assert "stage 3's DP group" in finding and "TP" not in finding
    given = TimelineConfig(pp=4, dp=4, tp=2, microbatches=8, steps=6, slow_dp_factor=3.0,
                           slow_dp_stage=3)
    with_tp, _ = _diag(given)
    assert "(TP rank" in _advice(with_tp, "dp-group:3")[0].finding
    slow, _ = _diag(TimelineConfig(pp=4, dp=8, microbatches=8, steps=12, slow_rank=9,
                                   slow_from=5))
    text = timeline_text(slow)
    assert "  rank 9 (stage" in text and "ranks 9 " not in text
