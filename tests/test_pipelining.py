"""PyTorch-native pipelines (torch.distributed.pipelining, TorchTitan): the stages and
their order found from the traces' own sends / receives without a topology, the framework
named and advice in its terms, and a rank's extra work found, its saving checked against
the same job re-run without it (the counterfactual)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize
from traceviz.topology.p2p import RankTraffic, pipelines

PIPELINING = dict(tp=1, pp=4, dp=1, layers=8, microbatches=8, framework="pipelining",
                  layout="torchtitan", with_stack=False)
MEGATRON_FLAG = re.compile(r"--(global-batch-size|micro-batch-size|num-layers-per-virtual|"
                           r"overlap-p2p|decoder-|account-for|tp-comm-overlap|cuda-graph)")


def _run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _truth(job: Path) -> tuple[dict, list[dict]]:
    return (json.loads((job / "ground_truth" / "ground_truth.json").read_text()),
            pq.read_table(job / "ground_truth" / "kernels.parquet").to_pylist())


def _iteration_ns(job: Path) -> int:
    """The truth's iteration: the first rank's step start to the last rank's step end."""
    truth, _ = _truth(job)
    steps = [r["steps"][0] for r in truth["ranks"].values()]
    return max(e for _, e in steps) - min(s for s, _ in steps)


@pytest.fixture(scope="module")
def pipelined(tmp_path_factory, module_folder):
    """A 4-stage torch.distributed.pipelining job (Schedule1F1B-like, one rank per stage,
    every send / receive on the default group, no topology file) whose rank 2 runs an
    extra 2 ms kernel after every forward, diagnosed; and the same job without it."""
    root = tmp_path_factory.mktemp("pipelining")
    job = synthesize(SynthConfig(**PIPELINING, extra_kernel_rank=2), root / "job")
    clean = synthesize(SynthConfig(**PIPELINING), root / "clean")
    from traceviz.commands import diagnose

    return job, clean, diagnose.run(job)


def test_stages_found_from_the_sends_without_a_topology(pipelined):
    """No topology file and only the default group in pg_config: the stages and their
    order are the truth's, every send / receive is PP, and the bubble is measured."""
    job, _, result = pipelined
    truth, kernels = _truth(job)
    header = json.loads(next((job / "profile_trace").rglob("rank0_trace.json")).read_text()
                        )["distributedInfo"]
    assert [pg["pg_desc"] for pg in header["pg_config"]] == ["default_pg"]
    assert not list(job.rglob("unique_parallel_groups*"))
    diag = result.value.diagnosis
    stage_of = {k["rank"]: k["stage"] for k in kernels}
    assert diag.pipelines == [sorted(stage_of, key=stage_of.get)]
    calls = result.tables["comm_calls"].to_pylist()
    p2p = [c for c in calls if c["kind"] in ("Send", "Recv", "SendRecv")]
    truth_p2p = [k for k in kernels if k["p2p"]]
    assert p2p and {c["group"] for c in p2p} == {"PP"}
    assert {k["comm_group"] for k in truth_p2p} == {"PP"}
    totals = result.tables["ledger_totals"].to_pylist()[0]
    assert totals["bubble_ns"] > 0 and totals.get("transfer_other_ns", 0) in (0, None)


def test_framework_named_and_advice_in_its_terms(pipelined):
    """The framework is named, and no advice asks for a Megatron-LM argument."""
    _, _, result = pipelined
    assert "framework: torch.distributed.pipelining" in "\n".join(result.notes)
    advice = result.tables["advice"].to_pylist()
    assert advice
    for row in advice:
        assert not MEGATRON_FLAG.search(row["action"]), row["action"]
    bubble = next(r for r in advice if r["what_if"].startswith("microbatches="))
    assert "n_microbatches" in bubble["action"]


def test_extra_kernel_is_a_finding_with_its_counterfactual_saving(pipelined):
    """Rank 2's extra kernel: named with its launches and time (the truth's), the saving
    its what-if predicts within 5 % of the same job re-run without it, and no stage
    imbalance blamed for it (the stages hold equal layers)."""
    job, clean, result = pipelined
    _, kernels = _truth(job)
    spin = [k for k in kernels if k["name"] == "spin_kernel"]
    assert {k["rank"] for k in spin} == {2}
    extra = result.value.diagnosis.extra
    assert [(e.rank, e.name) for e in extra] == [(2, "spin_kernel")]
    e = extra[0]
    assert e.launches == len(spin) == 8 and e.per_step == 1 and e.phase == "FWD"
    assert e.ns == pytest.approx(sum(k["dur"] for k in spin), rel=1e-6)
    assert "rank 2 runs spin_kernel in every forward step" in e.text()
    row = next(r for r in result.tables["advice"].to_pylist() if r["target_rank"] == 2)
    assert row["what_if"] == "kernel@2:spin_kernel=0"
    truth_saving = _iteration_ns(job) - _iteration_ns(clean)
    assert truth_saving > 5e6
    assert row["saving_ns"] == pytest.approx(truth_saving, rel=0.05)
    assert not any("stage imbalance" in r["finding"]
                   for r in result.tables["advice"].to_pylist())


def test_pipeline_and_topology_without_a_topology_file(pipelined, tmp_path):
    """``pipeline`` draws the job and ``topology --from-traces`` writes its layout with no
    --topology (the one the sends / receives show)."""
    job, _, _ = pipelined
    shown = _run("pipeline", job, "-o", tmp_path / "pp")
    assert shown.exit_code == 0, shown.output
    assert "ranks [0, 1, 2, 3]" in shown.output
    topo = _run("topology", "--from-traces", job)
    assert topo.exit_code == 0, topo.output
    assert "PP Size: 4" in topo.output
    assert "PIPELINE PARALLEL (PP) GROUPS\n" + "-" * 50 + "\nGroup 1: [0, 1, 2, 3]\n" in topo.output


def test_torchtitan_mesh_groups(tmp_path):
    """TorchTitan's DeviceMesh groups (mesh_tp, mesh_pp): the layout from pg_config, each
    collective in the truth's group, the framework TorchTitan."""
    from traceviz.commands import diagnose
    from traceviz.ingest.topology import from_traces

    job = synthesize(SynthConfig(tp=2, pp=2, dp=1, layers=4, microbatches=4,
                                 framework="torchtitan", layout="torchtitan",
                                 with_stack=False), tmp_path / "job")
    layout = from_traces(job)
    assert (layout.tp, layout.pp, layout.world) == (2, 2, 4)
    _, kernels = _truth(job)
    result = diagnose.run(job)
    calls = result.tables["comm_calls"].to_pylist()
    assert {c["group"] for c in calls} == {k["comm_group"] for k in kernels
                                          if k["kind"] == "COMM"} == {"TP", "PP"}
    assert "framework: TorchTitan" in "\n".join(result.notes)


def test_extra_kernel_against_its_stage_peers(tmp_path):
    """With stage peers (tp 2), the extra kernel is compared with them: found on its
    rank alone, and that rank is not called a straggler (its other kernels run at its
    peers' speed)."""
    from traceviz.commands import diagnose

    job = synthesize(SynthConfig(tp=2, pp=2, dp=1, layers=4, microbatches=4,
                                 with_stack=False, extra_kernel_rank=1,
                                 extra_kernel_us=1500.0), tmp_path / "job")
    result = diagnose.run(job)
    extra = result.value.diagnosis.extra
    assert [(e.rank, e.name) for e in extra] == [(1, "spin_kernel")]
    assert extra[0].compared == "the other ranks of its stage"
    assert 1 not in result.tables["stragglers"]["rank"].to_pylist()
    assert "framework: Megatron-LM" in "\n".join(result.notes)


# ---- the rules of topology.p2p ---------------------------------------------------------

def _traffic(forward: list[tuple[int, int]], first_send: set[int] = frozenset(),
             directed: bool = True) -> dict[int, RankTraffic]:
    out: dict[int, RankTraffic] = {}
    for a, b in forward:
        out.setdefault(a, RankTraffic()).peers.add(b)
        out.setdefault(b, RankTraffic()).peers.add(a)
        if directed:
            out[a].forward_to.add(b)
            out[b].forward_from.add(a)
    for r, t in out.items():
        t.first_is_send = r in first_send
    return out


def test_order_follows_the_forward_sends_not_the_ranks():
    found, how = pipelines(_traffic([(3, 1), (1, 0), (0, 2)]))
    assert found == [[3, 1, 0, 2]] and "forward" in how


def test_two_pipelines_and_a_ring():
    found, _ = pipelines(_traffic([(0, 2), (2, 4), (1, 3), (3, 5)]))
    assert found == [[0, 2, 4], [1, 3, 5]]
    ring, _ = pipelines(_traffic([(0, 1), (1, 2), (2, 3), (3, 0)]))  # looped interleaving
    assert ring == [[0, 1, 2, 3]]


def test_direction_from_the_first_transfer_without_phases():
    """No forward phase: the stage whose first transfer is a send comes first."""
    found, how = pipelines(_traffic([(0, 1), (1, 2)], first_send={2}, directed=False))
    assert found == [[2, 1, 0]] and "first transfer" in how


def test_not_a_pipeline():
    assert pipelines(_traffic([(0, 1), (0, 2), (0, 3)]))[0] == []  # a hub
    uneven, why = pipelines(_traffic([(0, 1), (2, 3), (3, 4)]))
    assert uneven == [] and "different lengths" in why
    assert pipelines({0: RankTraffic(), 1: RankTraffic()})[0] == []


def _drop_first_launch(trace: Path, kernel: str) -> None:
    """``trace`` without the launch of its first ``kernel`` (its runtime call and flow):
    as if that kernel had been launched before the profiler started."""
    doc = json.loads(trace.read_text())
    events = doc["traceEvents"]
    first = min((e for e in events if e.get("cat") == "kernel" and kernel in e["name"]),
                key=lambda e: e["ts"])
    corr = first["args"]["correlation"]
    doc["traceEvents"] = [e for e in events if not (
        (e.get("cat") == "cuda_runtime" and (e.get("args") or {}).get("correlation") == corr)
        or (e.get("cat") == "ac2g" and e.get("id") == corr))]
    trace.write_text(json.dumps(doc))


def test_sends_launched_before_the_trace_are_said_once(tmp_path):
    """The first send of stage 0 and the receive it feeds on stage 1, their launches
    before the trace: one plain note counts them; every other send / receive is paired
    and no warning is printed."""
    from traceviz.commands import diagnose

    job = synthesize(SynthConfig(**PIPELINING), tmp_path / "job")
    for rank in (0, 1):
        _drop_first_launch(next(job.rglob(f"rank{rank}_trace.json")), "SendRecv")
    notes = "\n".join(diagnose.run(job).notes)
    assert ("2 send / receive kernel(s) were launched before the trace began (their "
            "launch is not in it, so no peer can be known): left unpaired") in notes
    _, kernels = _truth(job)
    launched = sum(1 for k in kernels if k["p2p"]) - 2
    assert f"pipeline sends / receives: {launched} of {launched} joined" in notes
    assert "WARNING" not in notes


@pytest.mark.parametrize("slow", [1, None])
def test_a_slow_gpu_alone_on_its_stage_is_compared_with_equal_stages(tmp_path, slow):
    """One rank per stage: a slower GPU on stage 1 is compared with the stages running
    the same kernels the same number of times (0 and 2; the last, with the loss, is
    not) and called a straggler at the truth's slowdown; the same job without it (the
    counterfactual) has none."""
    from traceviz.commands import diagnose

    job = synthesize(SynthConfig(**PIPELINING, straggler_rank=slow, straggler_factor=1.3),
                     tmp_path / "job")
    result = diagnose.run(job)
    speed = {r["rank"]: r for r in result.tables["peer_speed"].to_pylist()}
    assert speed[3]["slowdown"] is None and {speed[r]["peers"] for r in (0, 1, 2)} == {2}
    found = result.tables["stragglers"].to_pylist()
    if slow is None:
        assert found == []
        return
    assert [r["rank"] for r in found] == [1]
    assert found[0]["slowdown"] == pytest.approx(1.3, rel=0.03)
