"""``traceviz hang`` on 16-rank Megatron MoE hangs (TP, PP, EP and ETP groups, Flight
Recorder format 2.9, two faulty ranks) of each kind of fault, synthesized with their
truth (:mod:`traceviz.synth.hang_dumps`): the causes are the two faulty ranks and no
rank downstream of them; sends and receives named by ranks in their group pair up and
all-to-all sizes that differ per rank are no mismatch; the first line is the verdict."""
from __future__ import annotations

import re

import pytest

from traceviz.commands import hang as command
from traceviz.synth.hang_dumps import hang_dumps, write_dumps

MOE = dict(world=16, tp=2, pp=2, ep=2, steps=3, stop_step=2, version="2.9")


def _run(tmp_path, as_json=False, **faults):
    dumps, truth = hang_dumps(**MOE, **faults)
    result = command.run(write_dumps(tmp_path / "dumps", dumps, as_json=as_json))
    return result, result.value, truth


@pytest.mark.parametrize("faults, kind", [
    (dict(stopped=(9, 14)), "stopped before"),
    (dict(stopped=(), gpu_fault=(9, 14), timing=True), "never started"),
    (dict(stopped=(9,), gpu_fault=(14,), timing=True), "stopped before"),
])
def test_two_faulty_ranks_are_the_causes(tmp_path, faults, kind):
    result, h, truth = _run(tmp_path, as_json="timing" in faults, **faults)
    assert h.causes == truth.causes == (9, 14)
    assert h.mismatches == () and h.deadlock == () and h.suspects == ()
    first = result.lines[0]
    assert first.startswith("hang: rank") and kind in first
    assert first.endswith("; every other rank waits on them")
    assert "EXPERT_MODEL_PARALLEL_GROUP all_to_all" in first
    rows = {r["rank"]: r for r in result.tables["hang"].to_pylist()}
    assert {r for r, row in rows.items() if row["cause"]} == {9, 14}
    for r, (desc, op) in truth.waiting.items():
        assert (rows[r]["group_desc"], rows[r]["op"]) == (desc, op), r
    # the groups the dumps state, EP and ETP included, with their members
    descs = {row["desc"] for row in result.tables["hang_groups"].to_pylist()}
    assert {"EXPERT_MODEL_PARALLEL_GROUP", "EXPERT_TENSOR_PARALLEL_GROUP"} <= descs


def test_a_gpu_fault_without_start_times_names_the_stalled_ops(tmp_path):
    """Without TORCH_NCCL_ENABLE_TIMING every op not completed is ``scheduled``: the
    dumps cannot tell whose GPU never started the op both members entered; the verdict
    says which ops stall and how to tell, and blames no rank."""
    result, h, truth = _run(tmp_path, stopped=(), gpu_fault=(9, 14))
    assert h.causes == () and h.mismatches == ()
    first = result.lines[0]
    assert first.startswith("hang: ranks ") and "TORCH_NCCL_ENABLE_TIMING=1" in first
    named = {int(x) for x in re.findall(r"\d+", first.split(" are all in ")[0])}
    assert {9, 14} <= named and len(named) == 4  # each faulty rank and its peer
    assert not any(line.startswith("no hang found") for line in result.lines)
