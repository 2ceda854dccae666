"""traceviz pipeline on synthesized 1F1B and interleaved jobs: bars and bubbles equal the
ground truth, the ideal simulation matches a uniform job, a slow stage is named."""
from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from test_batch_aggregate import PP_DP
from test_breakdown_cli import union_length
from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize


def _truth_bars(root, ranks) -> dict[int, list[tuple[int, int]]]:
    """Per rank, (start, end) of each forward / backward step from the ground truth."""
    steps: dict[tuple, list[int]] = {}
    for k in pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist():
        if (k["rank"] in ranks and k["phase"] in ("FWD", "BWD", "RECOMPUTE")
                and k["microbatch"] >= 0 and k["kind"] in ("COMP", "COMM")
                and not (k["kind"] == "COMM" and k["comm_group"] in PP_DP)):
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
    makespan = max(e for b in bars.values() for _, e in b) - min(
        s for b in bars.values() for s, _ in b)
    for s in stages:
        busy = union_length(bars[s["rank"]])
        assert s["busy_ns"] == busy
        assert s["makespan_ns"] == makespan
        want = 100.0 * (makespan - busy) / makespan
        assert abs(s["bubble_pct"] - want) <= 0.1 * want / 100 + 1e-9
        assert s["forward_steps"] == s["backward_steps"] == cfg.microbatches * cfg.vpp
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
    st = pq.read_table(tmp_path / "ps" / "pipeline_stages.parquet").to_pylist()
    assert [s["critical"] for s in st] == [False, False, True, False]
