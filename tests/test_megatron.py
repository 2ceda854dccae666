"""Megatron integration: the patch is a well-formed git patch (and applies where a
Megatron-LM checkout is given), the topology writer reproduces Megatron's own groups,
and traceviz.megatron on 2 gloo processes with torch CPU writes a topology file and
trace layout that traceviz reads back."""
from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from helpers import REFERENCE, ROOT

from traceviz.cli import main
from traceviz.integrations.megatron import layout_file_text
from traceviz.topology.groups_file import parse_text

PATCH = ROOT / "patch" / "enable_traceviz.patch"
PATCHED_FILES = {"megatron/training/traceviz_profiling.py",
                 "megatron/training/traceviz_timeline.py",
                 "megatron/training/training.py"}
DENSE = ("TENSOR_MODEL_PARALLEL_GROUP", "PIPELINE_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP",
         "CONTEXT_PARALLEL_GROUP", "EXPERT_MODEL_PARALLEL_GROUP",
         "EXPERT_TENSOR_PARALLEL_GROUP")


def test_patch_is_a_well_formed_git_patch():
    text = PATCH.read_text()
    assert re.match(r"From [0-9a-f]{40} ", text), "git format-patch header"
    assert re.search(r"^Subject: \[PATCH\] ", text, re.M)
    touched = set(re.findall(r"^diff --git a/(\S+) b/\1$", text, re.M))
    assert touched == PATCHED_FILES
    # every hunk's line counts match its body (the "-- " signature trailer ends the last)
    diff = text.rsplit("\n-- \n", 1)[0] + "\n"
    for m in re.finditer(r"^@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@.*\n((?:[ +\-\\].*\n)*)",
                         diff, re.M):
        old = int(m.group(1) or 1)
        new = int(m.group(2) or 1)
        body = [line for line in m.group(3).splitlines() if not line.startswith("\\")]
        assert sum(line[0] in " -" for line in body) == old
        assert sum(line[0] in " +" for line in body) == new
    named = re.search(r"Megatron-LM commit\s+([0-9a-f]{40})",
                      (ROOT / "patch" / "README.md").read_text())
    assert named, "patch/README.md names the Megatron-LM commit"


def test_patch_applies_to_megatron_checkout():
    checkout = os.environ.get("MEGATRON_LM_DIR")
    if not checkout:
        pytest.skip("MEGATRON_LM_DIR is not set (point it at a Megatron-LM checkout at the "
                    "commit patch/README.md names to check that the patch applies)")
    result = subprocess.run(["git", "apply", "--check", str(PATCH)], cwd=checkout,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", ["tp2_pp2_dp2_world8", "tp2_cp2_pp2_dp2_world16",
                                  "tp2_ep2_pp2_dp4_world16", "tp2_pp2_dp4_world16"])
def test_topology_writer_equals_megatron_groups(name):
    path = REFERENCE / "megatron_groups" / f"{name}.json"
    if not path.exists():
        pytest.skip(f"{path} is absent (../shared is only in the development checkout)")
    ref = json.loads(path.read_text())
    world = ref["config"]["world_size"]
    by_desc = ref["groups_by_group_desc"]
    per_rank = [{d: next(g for g in by_desc[d] if r in g) for d in DENSE if d in by_desc}
                for r in range(world)]
    f = parse_text(layout_file_text(per_rank, world, 64))
    assert f.groups["tp"] == sorted(by_desc["TENSOR_MODEL_PARALLEL_GROUP"])
    assert f.groups["pp"] == sorted(by_desc["PIPELINE_MODEL_PARALLEL_GROUP"])
    assert f.groups["dp"] == sorted(by_desc["DATA_PARALLEL_GROUP"])
    if ref["config"]["ep"] > 1:
        assert f.groups["ep"] == sorted(by_desc["EXPERT_MODEL_PARALLEL_GROUP"])
    assert (int(f.tp), int(f.pp), int(f.cp), int(f.ep)) == tuple(
        ref["config"][k] for k in ("tp", "pp", "cp", "ep"))


WORKER = textwrap.dedent("""
    import sys, torch, torch.distributed as dist
    from traceviz.integrations.megatron import save_parallel_groups, trace_handler
    rank, init, log_dir = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    tp = dist.new_group([0, 1])              # tp 2, pp 1, dp 1
    pp = [dist.new_group([0]), dist.new_group([1])][rank]
    dp = [dist.new_group([0]), dist.new_group([1])][rank]
    save_parallel_groups(log_dir, {"TENSOR_MODEL_PARALLEL_GROUP": tp,
                                   "PIPELINE_MODEL_PARALLEL_GROUP": pp,
                                   "DATA_PARALLEL_GROUP": dp}, global_batch_size=4)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=1, repeat=1)
    x = torch.ones(64, 64)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=sched, on_trace_ready=trace_handler(log_dir),
                                record_shapes=True, with_stack=True) as prof:
        for _ in range(5):
            y = x @ x
            dist.all_reduce(y, group=tp)
            prof.step()
    dist.barrier()
    dist.destroy_process_group()
""")


def test_gloo_two_processes(tmp_path):
    pytest.importorskip("torch", reason="torch (CPU) is in the test extra: "
                        "pip install '.[test]'")
    log_dir = tmp_path / "tb"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    init = f"file://{tmp_path / 'rendezvous'}"
    procs = [subprocess.Popen([sys.executable, str(script), str(r), init, str(log_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    topo = sorted(log_dir.glob("unique_parallel_groups_*.txt"))
    assert len(topo) == 1
    result = CliRunner().invoke(main, ["topology", "--from-file", str(topo[0]), "--json"])
    assert result.exit_code == 0, result.output
    cfg = json.loads(result.output)["config"]
    assert (cfg["world_size"], cfg["tp"], cfg["pp"]) == (2, 2, 1)
    # wait 1 + warmup 1: the recorded step is ProfilerStep#2, named in the layout
    traces = sorted(p.relative_to(log_dir).as_posix() for p in log_dir.rglob("*.gz"))
    assert traces == ["iteration_2/rank_0000_iter_2.pt.trace.json.gz",
                      "iteration_2/rank_0001_iter_2.pt.trace.json.gz"]
    doc = json.loads(gzip.decompress((log_dir / traces[1]).read_bytes()))
    steps = {e["name"] for e in doc["traceEvents"] if e.get("name", "").startswith("Profiler")}
    assert steps == {"ProfilerStep#2"}
    assert doc["distributedInfo"]["rank"] == 1
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["batch", str(log_dir), "-o", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads(next(out.rglob("batch_summary.json")).read_text())
    assert sorted(r["rank"] for r in summary["outcomes"] if r["status"] == "parsed") == [0, 1]
    assert summary["topology"] == str(topo[0])  # batch finds the file the hook wrote


def _patched_module(tmp_path):
    """The patch's new traceviz_profiling.py, extracted from the patch and imported."""
    text = PATCH.read_text()
    body = text.split("+++ b/megatron/training/traceviz_profiling.py\n", 1)[1]
    body = body.split("\ndiff --git", 1)[0].split("\n", 1)[1]  # drop the @@ line
    source = "\n".join(line[1:] for line in body.splitlines() if line.startswith("+"))
    path = tmp_path / "traceviz_profiling.py"
    path.write_text(source + "\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("traceviz_profiling_patch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MEGATRON_LOOP = textwrap.dedent("""
    import importlib.util, json, sys, types, warnings
    import torch, torch.distributed as dist
    spec = importlib.util.spec_from_file_location("tp", sys.argv[1])
    tp = importlib.util.module_from_spec(spec); spec.loader.exec_module(tp)
    log_dir, start, end = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[5], rank=0, world_size=1)
    args = types.SimpleNamespace(profile_step_start=start, profile_step_end=end,
                                 tensorboard_dir=log_dir)
    iteration = 0
    def trace_handler(p):  # as the patched train() does
        tp.export_trace(p, args.tensorboard_dir, iteration)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = torch.profiler.profile(schedule=tp.schedule(args, iteration),
                                      on_trace_ready=trace_handler, record_shapes=True,
                                      with_stack=tp.with_stack(),
                                      activities=[torch.profiler.ProfilerActivity.CPU])
    prof.start()
    x = torch.ones(32, 32)
    while iteration < 30:                  # Megatron's loop: prof.step() at the top,
        prof.step()                        # iteration += 1 after the step, prof.stop()
        (x @ x).sum()                      # at --profile-step-end
        iteration += 1
        if iteration == args.profile_step_end:
            prof.stop()
    print(json.dumps([str(w.message) for w in caught]))
""")


@pytest.mark.parametrize("env,start,end,want", [
    ({"PROFILER_WAIT_STEPS": "3", "PROFILER_WARMUP_STEPS": "1"}, 10, 25, [4]),
    ({"PROFILER_WAIT_STEPS": "2", "PROFILER_WARMUP_STEPS": "1",
      "PROFILER_ACTIVE_STEPS": "2"}, 10, 25, [3, 4]),
    ({}, 3, 5, [3, 4]),                                   # Megatron's own window
    ({"PROFILER_WAIT_STEPS": "10", "PROFILER_WARMUP_STEPS": "3"}, 10, 12, [10, 11]),
], ids=["wait3-warmup1", "active2", "step-start-end", "too-early"])
def test_patched_schedule_writes_one_trace(tmp_path, env, start, end, want):
    """The patch's schedule in Megatron's loop: exactly one trace (repeat=1), named by
    the last recorded logged iteration, holding the right ProfilerSteps. A PROFILER_*
    window past --profile-step-end would record nothing (and the steps after Megatron's
    prof.stop() would restart a profiler mid-cycle, which crashes torch 2.13): it warns
    and keeps Megatron's --profile-step-start/end window."""
    pytest.importorskip("torch", reason="torch (CPU) is in the test extra")
    module = tmp_path / "tp.py"
    _patched_module(tmp_path)  # checks the extraction
    module.write_text((tmp_path / "traceviz_profiling.py").read_text())
    script = tmp_path / "loop.py"
    script.write_text(MEGATRON_LOOP)
    log_dir = tmp_path / "tb"
    result = subprocess.run([sys.executable, str(script), str(module), str(log_dir),
                             str(start), str(end), str(tmp_path / "rdv")],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, **env})
    assert result.returncode == 0, result.stderr[-3000:]
    warned = json.loads(result.stdout.strip().splitlines()[-1])
    traces = sorted(log_dir.rglob("*.pt.trace.json.gz"))
    too_early = [w for w in warned if "no trace would be written" in w]
    assert len(too_early) == (1 if end == 12 else 0)
    assert [t.relative_to(log_dir).as_posix() for t in traces] == [
        f"iteration_{want[-1]}/rank_0000_iter_{want[-1]}.pt.trace.json.gz"]
    doc = json.loads(gzip.decompress(traces[0].read_bytes()))
    steps = sorted(int(e["name"].split("#")[1]) for e in doc["traceEvents"]
                   if e.get("name", "").startswith("ProfilerStep#"))
    assert steps == want
