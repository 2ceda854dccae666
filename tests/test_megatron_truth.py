"""Megatron truth on the command line: a backward step's window holds the DP
reduce-scatters its hooks launched (and their wait for a slow rank), interleaving is found
without --vpp, stale tables are parsed again or refused, outputs go where -o says, and
clocks that nothing links are not called synced."""
from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import out_dir, union_length

from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize
from traceviz.synth.emit import TS_OFFSET_NS


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_last_backward_holds_its_dp_reduce_scatters(tmp_path):
    """With a slow DP peer, the DP reduce-scatters in the last backward wait inside the
    step: its window, comm_dp_ns and overlap_dp_ns are the truth's, and the wait shows."""
    cfg = SynthConfig(tp=1, pp=2, dp=2, microbatches=4, layers=4, with_stack=False,
                      straggler_rank=1, straggler_factor=1.6)
    synthesize(cfg, tmp_path / "job")
    assert _run("aggregate", tmp_path / "job", "--no-figures").exit_code == 0
    rows = pq.read_table(out_dir(tmp_path / "job") / "iteration_10" /
                         "microbatches.parquet").to_pylist()
    kernels = pq.read_table(tmp_path / "job" / "ground_truth" / "kernels.parquet").to_pylist()
    skew = json.loads((tmp_path / "job" / "ground_truth" / "ground_truth.json")
                      .read_text())["skew_ns"]
    last = cfg.microbatches - 1
    for rank in range(cfg.world):
        step = [k for k in kernels if k["rank"] == rank and k["microbatch"] == last
                and k["phase"] in ("BWD", "RECOMPUTE") and not k["p2p"]]
        dp = [(k["ts"], k["ts"] + k["dur"]) for k in step if k["comm_group"] == "DP"]
        comp = [(k["ts"], k["ts"] + k["dur"]) for k in step if k["kind"] == "COMP"]
        assert dp, "the last backward launches the DP reduce-scatters"
        row = next(r for r in rows if r["rank"] == rank and r["phase"] == "Backward"
                   and r["microbatch"] == last)
        assert row["comm_dp_ns"] == union_length(dp)
        assert row["overlap_dp_ns"] == union_length(dp) + union_length(comp) - union_length(
            dp + comp)
        end = max(e for _, e in dp) + TS_OFFSET_NS - skew[rank]
        assert row["start_ns"] + row["wall_clock_ns"] >= end  # the window reaches them
        assert row["comm_ns"] >= row["comm_dp_ns"] > 0  # totals hold every group


def test_interleaving_found_and_stale_tables(tmp_path):
    """No --vpp: the interleaved schedule is found; tables parsed with another vpp are
    parsed again by batch, and refused with one line when only tables are given."""
    cfg = SynthConfig(tp=1, pp=2, dp=1, vpp=2, schedule="interleaved", layers=8,
                      microbatches=4, with_stack=False)
    job = tmp_path / "job"
    synthesize(cfg, job)
    tables = out_dir(job) / "iteration_10"
    assert _run("batch", job, "-q", "-j", "1", "--vpp", "1").exit_code == 0
    meta = json.loads(pq.read_schema(tables / "rank_0000.parquet").metadata[b"traceviz"])
    assert meta["classification"]["vpp"] == 1 and meta["parse_options"]["vpp"] == 1
    result = _run("batch", job, "-q", "-j", "1")
    assert result.exit_code == 0, result.output
    assert "2 parsed" in result.output and "parsed again" in result.output
    meta = json.loads(pq.read_schema(tables / "rank_0000.parquet").metadata[b"traceviz"])
    assert meta["classification"]["vpp"] == 2
    assert "interleaved 1F1B, 2 model chunks" in \
        meta["classification"]["microbatch_evidence"]["schedule"]
    assert "0 parsed, 2 up to date" in _run("batch", job, "-q").output
    result = _run("pipeline", job, "-o", tmp_path / "pp")
    assert result.exit_code == 0, result.output
    stages = pq.read_table(tmp_path / "pp" / "pipeline_stages.parquet").to_pylist()
    assert [s["forward_steps"] for s in stages] == [cfg.microbatches * cfg.vpp] * cfg.pp
    assert all(s["ideal_schedule_idle_pct"] == s["ideal_schedule_idle_pct"] for s in stages)  # not NaN
    refused = _run("pipeline", tables, "--vpp", "3", "-o", tmp_path / "pp3")
    assert refused.exit_code == 1
    assert "parsed with vpp 2, not 3" in refused.output and "Traceback" not in refused.output


def test_aggregate_writes_where_o_says(tmp_path):
    synthesize(SynthConfig(tp=1, pp=2, dp=1, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    result = _run("aggregate", tmp_path / "job", "-o", tmp_path / "other", "--no-figures")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "other" / "iteration_10" / "microbatches.parquet").exists()
    assert not (out_dir(tmp_path / "job")).exists()


def test_report_json_output_is_json(tmp_path):
    synthesize(SynthConfig(tp=2, pp=1, dp=1, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    out = tmp_path / "r.json"
    result = _run("report", tmp_path / "job" / "iteration_10", "--json", "-o", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["configuration"]["gpus"] == 2
    assert (tmp_path / "r.txt").read_text().startswith("=" * 80)


def test_unlinked_clocks_are_not_called_synced(tmp_path):
    """Two single-GPU runs in one folder: no collective links their clocks."""
    for rank in (0, 1):
        synthesize(SynthConfig(tp=1, pp=1, dp=1, microbatches=2, layers=2, with_stack=False,
                               seed=rank), tmp_path / f"run{rank}")
        trace = next((tmp_path / f"run{rank}").rglob("rank_0000*.json"))
        text = trace.read_text().replace('"rank": 0,', f'"rank": {rank},', 1)
        (tmp_path / "job").mkdir(exist_ok=True)
        (tmp_path / "job" / f"rank_{rank:04d}.json").write_text(text)
    result = _run("aggregate", tmp_path / "job", "--no-figures")
    assert result.exit_code == 0, result.output
    assert "clocks not synced" in result.output and "clock offsets" not in result.output
    offsets = pq.read_table(out_dir(tmp_path / "job") / "microbatches.parquet")
    assert offsets.num_rows > 0
    csv = (out_dir(tmp_path / "job") / "clock_offsets.csv").read_text().splitlines()
    assert csv[0].startswith('"rank","synced","offset_ns"')
    assert all(",false,," in line for line in csv[1:])


@pytest.mark.parametrize("layout", ["patch", "torchtitan"])
def test_pipeline_iteration_in_its_own_folder(tmp_path, layout):
    """One folder per profiled iteration: --iteration picks the folder that has it."""
    root = tmp_path / "job"
    root.mkdir()
    for first in (10, 20):
        synthesize(SynthConfig(tp=1, pp=2, dp=1, microbatches=2, layers=2, with_stack=False,
                               layout=layout, first_iteration=first), tmp_path / str(first))
        for folder in (tmp_path / str(first)).rglob("iteration_*"):
            folder.rename(root / folder.name)
    result = _run("pipeline", root, "--iteration", 20, "-o", tmp_path / "pp")
    assert result.exit_code == 0, result.output
    assert "ProfilerStep 20" in result.output
    missing = _run("pipeline", root, "--iteration", 30, "-o", tmp_path / "pp30")
    assert missing.exit_code == 1 and "no ProfilerStep 30" in missing.output


def test_aggregate_writes_each_profiled_iteration_in_its_folder(tmp_path):
    """Two profiled iterations: one result, each folder's tables and figures in that
    folder (paths under the folders' common parent), the clocks line of each."""
    root = tmp_path / "job"
    root.mkdir()
    for first in (10, 20):
        synthesize(SynthConfig(tp=1, pp=2, dp=1, microbatches=2, layers=2, with_stack=False,
                               first_iteration=first), tmp_path / str(first))
        for folder in (tmp_path / str(first)).glob("iteration_*"):
            folder.rename(root / folder.name)
    result = _run("aggregate", root, "-o", tmp_path / "out")
    assert result.exit_code == 0, result.output
    for it in (10, 20):
        folder = tmp_path / "out" / f"iteration_{it}"
        rows = pq.read_table(folder / "microbatches.parquet").to_pylist()
        assert {r["iteration"] for r in rows} == {it} and {r["rank"] for r in rows} == {0, 1}
        assert (folder / "clock_offsets.csv").exists()
        assert (folder / "rank_0001" / "overlapping_timeline.png").exists()
        # one clock (the synthesizer skews none here): not shifted, and said so
        assert f"iteration_{it}: 2 ranks; one clock (the ranks' own)" in result.output
    assert "clocks: the ranks' own, not shifted" in result.output
    assert not (tmp_path / "out" / "microbatches.parquet").exists()
