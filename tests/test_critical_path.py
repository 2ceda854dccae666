"""``traceviz critical-path``: HTA's numbers on its own test traces, the longest path
recomputed independently with networkx, and the job's path on a synthesized job with a
slow rank (the synthesizer's ground truth), with what-if re-timing."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import networkx as nx
import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import REFERENCE, shared

from traceviz.analysis.critical_path import job as J
from traceviz.analysis.critical_path import rank_graph as R
from traceviz.analysis.critical_path.graph import longest_path
from traceviz.analysis.host_device import rank_events
from traceviz.cli import main
from traceviz.commands import critical_path as command
from traceviz.ingest.build import parse_trace
from traceviz.synth import SynthConfig, synthesize

CASES = {"critical_path_cuda_event_sync": "hta/critical_path/cuda_event_sync/"
                                          "event_sync_trace.json.gz",
         "ns_resolution_trace": "hta/ns_resolution_trace/"
                                "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"}
LABELS = {"pct_cpu_bound": "cpu_bound", "pct_gpu_compute_bound": "gpu_compute_bound",
          "pct_gpu_kernel_kernel_overhead": "gpu_kernel_kernel_overhead",
          "pct_gpu_kernel_launch_overhead": "gpu_kernel_launch_overhead"}
STRAGGLER = 3


def _reference() -> list[dict]:
    path = REFERENCE / "hta" / "rounded" / "critical_path_summary.csv"
    if not path.exists():
        pytest.skip("../shared/reference is absent")
    return list(csv.DictReader(path.open()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_equals_hta_critical_path_analysis(case):
    ref = next(r for r in _reference() if r["case"] == case)
    trace = shared(CASES[case])
    result = command.run(trace, annotation=ref["annotation"],
                         instance=int(ref["instance_id"]), hta_compat=True)
    assert result.value.nodes == int(ref["critical_path_nodes"])
    assert result.value.total_ns == int(ref["critical_path_total_us"]) * 1000
    for column, label in LABELS.items():
        want = float(ref[column]) if ref[column] else 0.0
        assert result.value.bound_by[label] == pytest.approx(want, abs=5e-4), label


def test_cli_writes_the_path_and_summary(tmp_path):
    trace = shared(CASES["ns_resolution_trace"])
    out = tmp_path / "cp"
    r = CliRunner().invoke(main, ["critical-path", str(trace), "--instance", "1",
                                  "--hta-compat", "-o", str(out)])
    assert r.exit_code == 0, r.output
    path = pq.read_table(out / "critical_path.parquet")
    assert path.num_rows == 2437  # edges between the 2438 nodes
    assert int(np.sum(path["weight_ns"])) == 95_735_000
    with (out / "critical_path_summary.csv").open() as f:
        rows = {r["bound_by"]: r for r in csv.DictReader(f)}
    assert float(rows["gpu_compute_bound"]["pct"]) == pytest.approx(97.866, abs=5e-4)
    assert (out / "critical_path.png").stat().st_size > 10_000


def _nx_longest(graph) -> list[int]:
    """networkx's own dag_longest_path on the same edges, added in the same order."""
    g = nx.DiGraph()
    for s, d, w in zip(graph.src.tolist(), graph.dst.tolist(),
                       np.maximum(graph.weight, 0).tolist()):
        g.add_edge(s, d, weight=w)
    return nx.dag_longest_path(g, weight="weight")


@pytest.mark.parametrize("case,instance", [("ns_resolution_trace", 0),
                                           ("ns_resolution_trace", 2),
                                           ("critical_path_cuda_event_sync", 0)])
def test_longest_path_equals_networkx_in_exact_ns(case, instance):
    parsed = parse_trace(shared(CASES[case]), cpu=True)
    ev = rank_events(parsed.activities, parsed.cpu)
    rg = R.build(ev, R.window(ev, "ProfilerStep", instance))
    nodes, ok = longest_path(rg.graph)
    assert ok
    assert nodes.tolist() == _nx_longest(rg.graph)


def test_unknown_annotation_is_a_one_line_error():
    trace = shared(CASES["critical_path_cuda_event_sync"])
    r = CliRunner().invoke(main, ["critical-path", str(trace), "--annotation", "nope#"])
    assert r.exit_code != 0 and "no annotation named like 'nope#'" in r.output
    assert "Traceback" not in r.output


@pytest.fixture(scope="module")
def slow_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("cp_job")
    synthesize(SynthConfig(tp=2, pp=2, dp=2, microbatches=4, layers=2, seed=3,
                           straggler_rank=STRAGGLER, straggler_factor=1.5), root / "job")
    return root / "job" / "iteration_10"


def test_job_path_runs_through_the_slow_rank(slow_job):
    result = command.run(slow_job)
    by_rank = dict(zip(result.value.by_rank["rank"].to_pylist(),
                       result.value.by_rank["ns"].to_pylist()))
    # the slow rank holds more of the path than any other rank
    assert max(by_rank, key=by_rank.get) == STRAGGLER
    cats = result.tables["critical_path_by_category"]
    assert sum(cats["pct"].to_pylist()) == pytest.approx(100.0)
    path = result.tables["critical_path"]
    # the parts add up to the path's span on the common clock
    span = int(np.max(path["to_ns"])) - int(np.min(path["from_ns"]))
    assert result.value.span_ns == span
    assert int(np.sum(path["own_ns"])) + int(np.sum(path["wait_ns"])) == span
    # consecutive edges meet: each starts where the previous one ended
    assert np.array_equal(path["from_ns"].to_numpy()[1:], path["to_ns"].to_numpy()[:-1])
    # on the path, slack is 0
    assert int(np.max(path["slack_ns"])) == 0
    # each rank's pipeline stage (pp 2: ranks 0-3 stage 0, 4-7 stage 1 in Megatron's order)
    stage = dict(zip(path["rank"].to_pylist(), path["stage"].to_pylist()))
    assert all(s == (0 if r < 4 else 1) for r, s in stage.items())


def test_what_if(slow_job):
    result = command.run(slow_job, what_if=("COMP=1", "COMP=0.5", f"rank:{STRAGGLER}=0.5",
                                            "COMM:TP=0"))
    rows = {r["what_if"]: r for r in result.tables["critical_path_what_if"].to_pylist()}
    assert rows["COMP=1"]["iteration_ns"] == rows["COMP=1"]["baseline_ns"]
    assert rows["COMP=0.5"]["iteration_ns"] < rows["COMP=0.5"]["baseline_ns"]
    assert rows[f"rank:{STRAGGLER}=0.5"]["change_pct"] < 0
    assert rows["all together"]["iteration_ns"] <= rows["COMP=0.5"]["iteration_ns"]
    base = rows["COMP=1"]["baseline_ns"]
    assert rows["COMM:TP=0"]["iteration_ns"] <= base


def test_retime_with_unit_factors_reproduces_the_measured_times(slow_job):
    # directly: the graph re-timed with its own times equals the measured node times
    # wherever the measured time is explained (wait >= 0)
    from traceviz.analysis.diagnose.waits import job_comm
    from traceviz.ingest.tables import rank_files, tables_folder
    from traceviz.table.io import read_table
    tables = [(r, read_table(g), read_table(c))
              for r, g, c in rank_files(tables_folder(slow_job, cpu=True))]
    jc = job_comm({r: gpu for r, gpu, _ in tables})
    ranks, infos = [], []
    for _, gpu, cpu in tables:
        ev = rank_events(gpu, cpu)
        ranks.append(R.build(ev, R.window(ev, "ProfilerStep", 0)))
        infos.append(J.kernel_info(gpu, J.call_rows(jc, ev.rank, gpu.num_rows)))
    jg = J.join(ranks, infos, {})
    t = J.measure(jg, jg.own)
    again = J.retime(jg, t, jg.own)
    assert (t.binding >= 0).sum() > 0.9 * jg.graph.n_nodes - len(ranks) * 50
    assert np.array_equal(again.ts, t.ts)


def test_bad_what_if_is_a_usage_error(slow_job):
    r = CliRunner().invoke(main, ["critical-path", str(slow_job), "--what-if", "GPU=2"])
    assert r.exit_code == 2 and "unknown target 'GPU'" in r.output


def test_perfetto_tracks_mark_the_path(slow_job, tmp_path):
    import gzip
    import json

    from traceviz.render.perfetto import PATH_PID

    out = tmp_path / "cp"
    r = CliRunner().invoke(main, ["critical-path", str(slow_job), "-o", str(out)])
    assert r.exit_code == 0, r.output
    path = pq.read_table(out / "critical_path.parquet").to_pydict()
    events = json.load(gzip.open(out / "critical_path_trace.json.gz"))["traceEvents"]
    mine = [e for e in events if e.get("pid") == PATH_PID]
    slices = [e for e in mine if e["ph"] == "X"]
    assert len(slices) == len(path["step"])
    # each slice sits on its rank's thread, at the edge's time (µs, 3 decimals)
    for e, rank, start in zip(slices, path["rank"], path["from_ns"]):
        assert e["tid"] == rank + 1 and round(e["ts"] * 1000) == start
    jumps = sum(a != b for a, b in zip(path["rank"], path["from_rank"]))
    assert jumps > 0
    assert sum(e["ph"] == "s" for e in mine) == sum(e["ph"] == "f" for e in mine) == jumps
    # the ranks' own tracks are in the same file (the job's export)
    assert any(e.get("name") == "process_name" and "traceviz rank" in e["args"]["name"]
               for e in events)
    # running again over the same output folder finds the same tables (the export in
    # traceviz-out is not taken for a rank's trace)
    again = CliRunner().invoke(main, ["critical-path", str(slow_job), "-o", str(out)])
    assert again.exit_code == 0, again.output


def test_pipeline_pairs_are_joined_through_their_peers(tmp_path):
    """pp 4: the PP group has four ranks, so a send / receive's peer is the global rank
    PyTorch writes (a send's Dst Rank, a receive's Src Rank); every pair is joined, the
    path walks the stages and the slow stage holds most of it."""
    synthesize(SynthConfig(tp=1, pp=4, dp=1, microbatches=4, layers=4, seed=1,
                           straggler_rank=2, straggler_factor=1.5), tmp_path / "job")
    result = command.run(tmp_path / "job" / "iteration_10")
    assert not any("could not be paired" in n for n in result.notes), result.notes
    # 3 stage boundaries x 4 micro-batches x (activation + gradient) x 2 ends
    assert "pipeline sends / receives: 48 of 48 joined" in " ".join(result.notes)
    assert set(result.value.hops) == {0, 1, 2, 3}
    by_rank = dict(zip(result.value.by_rank["rank"].to_pylist(),
                       result.value.by_rank["ns"].to_pylist()))
    assert max(by_rank, key=by_rank.get) == 2
    cats = {r["category"]: r["ns"] for r in
            result.tables["critical_path_by_category"].to_pylist()}
    assert cats["comm: PP"] > 0


def test_notebook_api_gives_the_command_tables(slow_job):
    import traceviz

    nb = traceviz.Job(slow_job).critical_path(what_if=("COMP=0.5",))
    cli = command.run(slow_job, what_if=("COMP=0.5",))
    for name in ("critical_path", "critical_path_by_rank", "critical_path_what_if"):
        assert nb.tables()[name].equals(cli.tables[name]), name
    assert nb.by_category.equals(cli.tables["critical_path_by_category"])
    assert nb.what_if is not None and nb.what_if.num_rows == 1


def test_iteration_picks_exactly_that_profiler_step():
    """--iteration 10 of a trace with steps 101..: no such step (HTA's substring match
    would take ProfilerStep#101); --iteration 102 is the second step."""
    trace = shared(CASES["ns_resolution_trace"])
    r = CliRunner().invoke(main, ["critical-path", str(trace), "--iteration", "10"])
    assert r.exit_code == 1 and "no ProfilerStep#10 in the trace (its steps: " \
        "ProfilerStep#101, ProfilerStep#102" in r.output
    assert command.run(trace, iteration=102).value.by_category.equals(
        command.run(trace, annotation="ProfilerStep", instance=1).value.by_category)
    assert command.run(trace, iteration=102, hta_compat=True).value.nodes == \
        command.run(trace, annotation="ProfilerStep", instance=1,
                    hta_compat=True).value.nodes


HTA_RUNS = list(csv.DictReader((Path(__file__).parent / "data" /
                                "hta_critical_path.csv").open()))


@pytest.mark.parametrize("ref", HTA_RUNS, ids=[r["path"] for r in HTA_RUNS])
def test_hta_compat_equals_hta_on_every_real_trace(ref):
    """HTA 0.6.1's path on each real trace it analyses (its own run, tests/data), node
    for node and µs for µs: a CUDA graph's kernels are one launch's (HTA keeps the
    last), a device's stream 0 (ROCm) is no CPU call stack."""
    result = command.run(shared(ref["path"]), annotation=ref["annotation"],
                         instance=int(ref["instance"]), hta_compat=True)
    assert result.value.nodes == int(ref["nodes"])
    assert result.value.total_ns == int(ref["total_us"]) * 1000


def test_a_cycle_is_broken_and_named_not_refused(tmp_path):
    """Two copies back to back on one thread, the later one written first in the trace:
    at 2 µs the walk along the thread runs first copy end -> second copy start, while
    the runtime-lock chain runs second copy start -> first copy end (HTA's graph has the
    same cycle and refuses the window). The edge running back is removed, the events
    named, and the path is over the rest (hand-computed: the copies' 2 + 5 µs on the
    device, the 2 µs gap between them, launched at 0 and 2 µs)."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 100}]
    for corr, (ts, dur, at, length) in enumerate([(2, 3, 10, 5), (0, 2, 6, 2)], start=1):
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1,
                    "tid": 1, "ts": ts, "dur": dur, "args": {"correlation": corr}},
                   {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
                    "pid": 0, "tid": 7, "ts": at, "dur": length,
                    "args": {"correlation": corr, "stream": 7, "device": 0}}]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    for hta in (False, True):
        result = command.run(trace, hta_compat=hta)
        note = next(n for n in result.notes if "had a cycle" in n)
        # the trace states no rank: rank 0, as every command names it
        assert "rank 0 'cudaMemcpyAsync' end at 0.002 ms -> rank 0 'cudaMemcpyAsync' start " \
            "at 0.002 ms" in note and "1 edge(s)" in note
    assert result.value.total_ns == 9_000  # HTA's weights: 7 µs copies + 2 µs gap
    got = command.run(trace).value
    # the iteration is the ledger's: the step from 0 to its end at 100 µs (the copies
    # are launched at 0 and the last ends at 15 µs: the path; nothing runs after it)
    assert got.iteration_ns == 100_000
    assert dict(zip(got.by_category["category"].to_pylist(),
                    got.by_category["ns"].to_pylist())) == \
        {"memory": 7_000, "launch": 6_000, "kernel_kernel": 2_000, "after the path": 85_000}


def test_acyclic_drops_only_the_edges_running_back_inside_cycles():
    from traceviz.analysis.critical_path.graph import Graph, acyclic, topo

    ts = np.array([0, 10, 20, 30, 40, 50], np.int64)
    src = np.array([0, 1, 2, 3, 2, 4, 5], np.int64)
    dst = np.array([1, 2, 1, 0, 3, 5, 4], np.int64)
    n = ts.size
    z = np.zeros(src.size, np.int64)
    g = Graph(ts, np.arange(n), np.ones(n, bool), np.zeros(n, np.int64), src, dst,
              z.astype(np.int8), z, z - 1)
    keep = acyclic(g)
    # 2 -> 1 and 3 -> 0 close the cycle 0 1 2 3, 5 -> 4 the cycle 4 5
    assert keep.tolist() == [True, True, False, False, True, True, False]
    assert topo(n, src[keep], dst[keep])[1]
    assert acyclic(g.subset(keep)).all()


def test_strongly_connected_components_equal_networkx():
    from traceviz.analysis.critical_path.graph import _components

    for seed in range(200):
        rnd = np.random.default_rng(seed)
        n, m = int(rnd.integers(1, 30)), int(rnd.integers(0, 60))
        src, dst = rnd.integers(0, n, m), rnd.integers(0, n, m)
        comp = _components(n, src.astype(np.int64), dst.astype(np.int64))
        g = nx.DiGraph()
        g.add_nodes_from(range(n))
        g.add_edges_from(zip(src.tolist(), dst.tolist()))
        got: dict = {}
        for v, c in enumerate(comp.tolist()):
            got.setdefault(c, set()).add(v)
        assert {frozenset(c) for c in got.values()} == \
            {frozenset(c) for c in nx.strongly_connected_components(g)}, seed


def test_without_clock_sync_the_iteration_is_the_graphs_own(tmp_path):
    """With --no-clock-sync the graph is on each rank's own clock: the ledger's window
    (on synced clocks) is not laid over it (it was: the demo job's unsynced iteration
    came out as the synced one, 145.334 ms); the iteration is the span of the points the
    graph joins, and its parts add up to it."""
    from traceviz.demo import DEMO

    synthesize(DEMO, tmp_path / "job")
    got = command.run(tmp_path / "job" / "iteration_10", clock_sync=False).value
    synced = command.run(tmp_path / "job" / "iteration_10").value
    parts = dict(zip(got.by_category["category"].to_pylist(),
                     got.by_category["ns"].to_pylist()))
    assert sum(parts.values()) == got.iteration_ns
    # the nodes' clocks are 250 µs apart: the unsynced iteration is longer
    assert got.iteration_ns > synced.iteration_ns
