"""Slow links judged against other kinds of group on the same link: a data-parallel
network uniformly slower than the NVLink its node's TP groups reach is named (every DP
group alike, so DP peers alone say nothing), with the ratio the ground truth's
transfers give; the same job at normal speed (the counterfactual) has no slow link."""
from __future__ import annotations

import statistics

import pyarrow.parquet as pq
import pytest

from traceviz.synth import SynthConfig, synthesize

JOB = dict(tp=2, pp=1, dp=4, layers=4, microbatches=2, with_stack=False, hidden=8192)
# nccl-tests' bus bandwidth factor of each collective over n ranks
FACTOR = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n,
          "ReduceScatter": lambda n: (n - 1) / n}


def _truth_busbw(job) -> dict[str, float]:
    """Per parallel group, the median bus bandwidth (GB/s) of its >= 1 MiB collective
    kernels in the ground truth: bytes x factor over the transfer after the last member
    arrived."""
    rows = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pylist()
    out: dict[str, list[float]] = {}
    for k in rows:
        size = max(k["msg_in_bytes"] or 0, k["msg_out_bytes"] or 0)
        if k["kind"] != "COMM" or k["p2p"] or size < 1 << 20 or k["collective"] not in FACTOR:
            continue
        bus = size * FACTOR[k["collective"]](k["group_size"])
        out.setdefault(k["comm_group"], []).append(bus / k["transfer_ns"])
    return {g: statistics.median(v) for g, v in out.items()}


@pytest.mark.parametrize("scale", [3.0, 1.0])
def test_a_uniformly_slow_dp_network_is_named(tmp_path, scale):
    from traceviz.commands import diagnose

    job = synthesize(SynthConfig(**JOB, dp_comm_scale=scale), tmp_path / "job")
    links = diagnose.run(job).tables["links"].to_pylist()
    dp = [r for r in links if r["group"] == "DP"]
    assert dp and all(r["link"] == "intra-node" for r in dp)
    truth = _truth_busbw(job)
    if scale == 1.0:  # the counterfactual: nothing slow
        assert not any(r["slow"] for r in links)
        return
    assert truth["DP"] / truth["TP"] < 0.5
    assert {tuple(r["ranks"]) for r in dp if r["slow"]} == {(0, 2, 4, 6), (1, 3, 5, 7)}
    for r in dp:
        assert r["against"] == "TP on the same link"
        assert r["ratio"] == pytest.approx(truth["DP"] / truth["TP"], rel=0.05)
    assert not any(r["slow"] for r in links if r["group"] == "TP")


def test_the_slow_dp_network_is_one_finding_with_its_counterfactual_saving(tmp_path):
    """The slow DP network is one finding (not one per group) whose what-if runs every
    DP transfer at TP's bandwidth; its saving is within 10 % of the same job re-run with
    a normal DP network."""
    from helpers import true_iteration

    from traceviz.commands import diagnose

    cfg = SynthConfig(**JOB, dp_comm_scale=3.0)
    base = true_iteration(cfg, tmp_path / "slow")
    rows = diagnose.run(tmp_path / "slow").tables["advice"].to_pylist()
    (row,) = [r for r in rows if "network" in r["finding"]]
    assert row["finding"].startswith("every DP group (2) reaches about")
    assert row["what_if"].startswith("COMM:DP=")
    truth = base - true_iteration(SynthConfig(**JOB), tmp_path / "normal")
    assert truth > 0
    assert row["saving_ns"] == pytest.approx(truth, rel=0.10)
