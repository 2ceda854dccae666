"""``traceviz diagnose``: wait / transfer per communication kernel, the ledger, stragglers.

Checked three ways: a 4-rank job built by hand whose every number is worked out in the
comments (no synthesizer involved); the synthesizer's ground truth (its simulation knows
when each member of a call arrived); an independent plain-Python ledger over the truth.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from handjob import K, Rank, write_job

from traceviz.analysis.diagnose.ledger import PARTS
from traceviz.cli import main
from traceviz.commands import diagnose as command
from traceviz.synth import SynthConfig, synthesize
from traceviz.synth.emit import TS_OFFSET_NS

US = 1000  # ns per µs
TP = "TENSOR_MODEL_PARALLEL_GROUP"
PP = "PIPELINE_MODEL_PARALLEL_GROUP"
MP = "MODEL_PARALLEL_GROUP"


def hand_job(folder, skew_node1: float = 37.0):
    """4 ranks, stage 0 = ranks 0, 1 (TP pair, pg 1), stage 1 = ranks 2, 3 (pg 2);
    pipelines [0, 2] (pg 3) and [1, 3] (pg 4); a model-parallel all-reduce (pg 5) of all
    four at the end. Ranks 2 and 3 sit on a node whose clock is ``skew_node1`` µs ahead.
    Every kernel was launched at 10 µs (the CPU ran ahead) but the ones noted."""
    pgc = [{"pg_name": "3", "pg_desc": PP, "ranks": [0, 2]},
           {"pg_name": "4", "pg_desc": PP, "ranks": [1, 3]}]
    step = [(10, 0.0, 1000.0)]

    def tp(a, b, pg, group):
        return K(a, b, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 20, "allreduce", group,
                 pg, TP, seq=0, launch_end=10)

    def p2p(a, b, kind, pg, group, peer):
        return K(a, b, "ncclDevKernel_SendRecv", 24, kind, group, pg, PP, peer=peer,
                 launch_end=10)

    def mp(a, b):
        return K(a, b, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 28, "allreduce",
                 [0, 1, 2, 3], "5", MP, seq=0, launch_end=10)

    def gemm(a, b):
        return K(a, b, launch_end=10)

    ranks = [
        # rank 0: gemm; TP all-reduce from 300, rank 1 arrives at 350 (wait 50, transfer
        # 70); send to rank 2 (which posted its receive at 200: no wait, transfer 100);
        # gemm; MP all-reduce from 800, rank 3 arrives last at 860 (wait 60, transfer 40)
        Rank(0, 4, [gemm(100, 300), tp(300, 420, "1", [0, 1]),
                    p2p(420, 520, "send", "3", [0, 2], 2), gemm(520, 600), mp(800, 900)],
             step, pg_config=pgc),
        Rank(1, 4, [gemm(100, 350), tp(350, 420, "1", [0, 1]),
                    p2p(430, 520, "send", "4", [1, 3], 3), gemm(520, 620), mp(810, 900)],
             step, pg_config=pgc),
        Rank(2, 4, [p2p(200, 520, "recv", "3", [0, 2], 0), gemm(530, 700),
                    tp(700, 760, "2", [2, 3]), mp(850, 900)], step, skew_node1, pgc),
        Rank(3, 4, [p2p(200, 520, "recv", "4", [1, 3], 1), gemm(530, 740),
                    tp(740, 760, "2", [2, 3]), mp(860, 900)], step, skew_node1, pgc),
    ]
    return write_job(folder, ranks)


# the ledger of each rank, worked out by hand (µs; window [0, 1000): the ProfilerStep)
HAND_LEDGER = {
    # compute 200 + 80; TP transfer 70; PP transfer 100; MP transfer 40 (OTHER); waits for
    # rank 1 (TP, same stage) 50 and rank 3 (stage 1 of another pipeline: the schedule,
    # a bubble) 60; gaps: [0, 100) 10 µs before the first launch returned then 90 idle,
    # [600, 800) idle, [900, 1000) no work left: the CPU's
    0: {"compute": 280, "transfer_tp": 70, "transfer_pp": 100, "transfer_other": 40,
        "wait_rank": 50, "bubble": 60, "cpu_bound": 110, "idle": 290},
    # rank 1 arrives last at the TP all-reduce; its MP wait (50) is for rank 3, the next
    # stage of its own pipeline: a bubble
    1: {"compute": 350, "transfer_tp": 70, "transfer_pp": 90, "transfer_other": 40,
        "bubble": 50, "cpu_bound": 110, "idle": 290},
    # rank 2 waits 220 in its receive for rank 0 (bubble), 40 for rank 3 at the TP
    # all-reduce and 10 for rank 3 at the MP one (its own stage, of another pipeline:
    # wait_rank)
    2: {"compute": 170, "transfer_tp": 20, "transfer_pp": 100, "transfer_other": 40,
        "bubble": 220, "wait_rank": 50, "cpu_bound": 110, "idle": 290},
    3: {"compute": 210, "transfer_tp": 20, "transfer_pp": 90, "transfer_other": 40,
        "bubble": 230, "cpu_bound": 110, "idle": 300},
}
# (rank, start µs) -> (wait, transfer, waited for) of each communication kernel
HAND_CALLS = {(0, 300): (50, 70, 1), (0, 420): (0, 100, None), (0, 800): (60, 40, 3),
              (1, 350): (0, 70, None), (1, 430): (0, 90, None), (1, 810): (50, 40, 3),
              (2, 200): (220, 100, 0), (2, 700): (40, 20, 3), (2, 850): (10, 40, 3),
              (3, 200): (230, 90, 1), (3, 740): (0, 20, None), (3, 860): (0, 40, None)}


def test_hand_job_waits_and_ledger(tmp_path):
    job = hand_job(tmp_path / "job")
    res = command.run(job)
    diag = res.value.diagnosis
    assert diag.synced
    calls = diag.comm_calls.to_pylist()
    assert len(calls) == len(HAND_CALLS)
    t0 = min(c["start_ns"] for c in calls if c["rank"] == 0) - 300 * US
    for c in calls:
        start = round((c["start_ns"] - t0) / US)
        wait, transfer, who = HAND_CALLS[(c["rank"], start)]
        assert (c["wait_ns"], c["transfer_ns"], c["waited_for_rank"]) == (
            wait * US, transfer * US, who), c
        assert c["wait_ns"] + c["transfer_ns"] == c["end_ns"] - c["start_ns"]
    kinds = {(c["rank"], round((c["start_ns"] - t0) / US)): c["kind"] for c in calls}
    assert kinds[(0, 420)] == "Send" and kinds[(2, 200)] == "Recv"
    assert {c["peer_rank"] for c in calls if c["rank"] == 2 and c["kind"] == "Recv"} == {0}
    for row in diag.ledger.to_pylist():
        want = HAND_LEDGER[row["rank"]]
        assert row["span_ns"] == 1000 * US
        got = {p: row[f"{p}_ns"] // US for p in PARTS if row[f"{p}_ns"]}
        assert got == want, row["rank"]
        assert sum(row[f"{p}_ns"] for p in PARTS) == row["span_ns"]
    # who waited for whom, exposed
    waits = {(w["rank"], w["part"], w["waited_for_rank"]): w["exposed_ns"] // US
             for w in diag.ledger_waits.to_pylist()}
    assert waits[(2, "bubble", 0)] == 220 and waits[(0, "wait_rank", 1)] == 50
    assert waits[(0, "bubble", 3)] == 60 and waits[(1, "bubble", 3)] == 50


def test_one_rank_alone_has_no_waits(tmp_path):
    """One rank: no call has all its members, so every split is unknown (null, never 0)
    and the kernels' time is comm_unsplit in the ledger."""
    job = hand_job(tmp_path / "job")
    res = command.run(job / "rank_0000.json")
    diag = res.value.diagnosis
    assert diag.comm_calls["wait_ns"].null_count == diag.comm_calls.num_rows == 3
    assert diag.comm_calls["transfer_ns"].null_count == 3
    row = diag.ledger.to_pylist()[0]
    got = {p: row[f"{p}_ns"] // US for p in PARTS if row[f"{p}_ns"]}
    assert got == {"compute": 280, "comm_unsplit": 320, "cpu_bound": 110, "idle": 290}
    assert "n/a" in " ".join(res.notes)


def test_cli_writes_the_tables(tmp_path):
    job = hand_job(tmp_path / "job")
    out = tmp_path / "diag"
    r = CliRunner().invoke(main, ["diagnose", str(job), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "pipeline bubble" in r.output
    for name in ("comm_calls", "ledger", "ledger_waits", "stragglers", "peer_speed"):
        assert (out / f"{name}.csv").exists() and (out / f"{name}.parquet").exists()
    header = (out / "ledger.csv").read_text().splitlines()[0].replace('"', "").split(",")
    assert header == (["rank", "iteration", "start_ns", "span_ns"]
                      + [f"{p}_ns" for p in PARTS] + ["cpu_start_ns", "cpu_span_ns"])
    assert (out / "comm_calls.csv").read_text().splitlines()[0].replace('"', "").startswith(
        "rank,iteration,group,kind,process_group,phase,start_ns,end_ns,wait_ns,transfer_ns,"
        "waited_for_rank")


# ---- synthesized jobs: the simulation's truth -------------------------------------------
@pytest.fixture(scope="module")
def straggler_job(tmp_path_factory):
    """16 ranks (tp2 pp4 dp2), no python stacks, clocks skewed per node, rank 5 1.3x
    slower; diagnosed."""
    root = tmp_path_factory.mktemp("straggler")
    cfg = SynthConfig(tp=2, pp=4, dp=2, microbatches=8, skew_us=300.0, straggler_rank=5,
                      with_stack=False, layers=8, seed=3)
    job = synthesize(cfg, root / "job")
    tables = root / "tables"
    assert CliRunner().invoke(main, ["batch", str(job), "-o", str(tables),
                                     "-q"]).exit_code == 0
    return job, command.run(tables / "iteration_10").value.diagnosis


@pytest.fixture(scope="module", params=["interleaved-cp-moe", "stacks-no-skew",
                                        "cpu-ahead-skewed"])
def other_job(request, tmp_path_factory):
    """Other shapes: interleaved (vpp 2) with context and expert parallelism, no process
    group descriptions, a slow rank 9; 1F1B with python stacks and one clock; and three
    iterations with no synchronisation between them (the CPU runs ahead, the GPU runs
    the steps back to back), skewed clocks and a slow rank 6."""
    root = tmp_path_factory.mktemp(request.param)
    cfg = {"interleaved-cp-moe": SynthConfig(
               tp=2, pp=2, dp=2, cp=2, ep=2, moe_every=2, vpp=2, schedule="interleaved",
               microbatches=4, layers=8, skew_us=200.0, gpus_per_node=4, pg_desc=False,
               straggler_rank=9, seed=5),
           "stacks-no-skew": SynthConfig(tp=2, pp=4, dp=1, microbatches=6, layers=8, seed=7),
           "cpu-ahead-skewed": SynthConfig(
               tp=2, pp=2, dp=2, microbatches=4, layers=4, iterations=3, step_sync=False,
               skew_us=150.0, gpus_per_node=2, straggler_rank=6, with_stack=False,
               seed=11)}[request.param]
    job = synthesize(cfg, root / "job")
    tables = root / "tables"
    assert CliRunner().invoke(main, ["batch", str(job), "-o", str(tables),
                                     "-q"]).exit_code == 0
    return job, command.run(tables / "iteration_10").value.diagnosis


def test_waits_equal_the_truth(straggler_job):
    _waits_equal_the_truth(*straggler_job)


def test_waits_equal_the_truth_other_shapes(other_job):
    job, diag = other_job
    _waits_equal_the_truth(job, diag)
    led = diag.ledger.to_pandas()
    parts = [f"{p}_ns" for p in PARTS]
    assert (led[parts].sum(axis=1) == led.span_ns).all() and (led[parts] >= 0).all().all()
    cfg = json.loads((job / "ground_truth" / "ground_truth.json").read_text())["config"]
    assert [s["rank"] for s in diag.stragglers.to_pylist()] == (
        [cfg["straggler_rank"]] if cfg["straggler_rank"] is not None else [])


def _waits_equal_the_truth(job, diag):
    truth = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pandas()
    truth = truth[truth.kind == "COMM"]
    cc = diag.comm_calls.to_pandas()
    assert cc.wait_ns.notna().all()
    for r in sorted(truth["rank"].unique()):
        mine, want = cc[cc["rank"] == r], truth[truth["rank"] == r]
        assert len(mine) == len(want)
        for col in ("wait_ns", "transfer_ns"):
            assert abs(mine[col].sum() - want[col].sum()) <= 0.01 * want[col].sum(), (r, col)
    # kernel by kernel (both sorted by start): the same split and the same waited-for rank
    # where one member arrived strictly last
    for r in (0, 4, 12) if len(truth["rank"].unique()) > 12 else (0, 3):
        mine = cc[cc["rank"] == r].sort_values("start_ns")
        want = want_sorted = truth[truth["rank"] == r].sort_values("ts")
        np.testing.assert_array_equal(mine.wait_ns.to_numpy(), want.wait_ns.to_numpy())
        who = want_sorted.waited_for_rank.to_numpy()
        known = ~np.isnan(who.astype(float))
        np.testing.assert_array_equal(mine.waited_for_rank.to_numpy()[known], who[known])


def test_ledger_adds_up_and_matches_an_independent_ledger(straggler_job):
    job, diag = straggler_job
    led = diag.ledger.to_pandas()
    parts = [f"{p}_ns" for p in PARTS]
    assert (led[parts].sum(axis=1) == led.span_ns).all()
    assert (led[parts] >= 0).all().all()
    truth = pq.read_table(job / "ground_truth" / "kernels.parquet").to_pylist()
    meta = json.loads((job / "ground_truth" / "ground_truth.json").read_text())
    # the clocks were synced exactly: the offsets are the synthesizer's skews
    assert {r: diag.offsets[r] for r in range(16)} == dict(enumerate(meta["skew_ns"]))
    for r in (0, 5, 9, 15):
        row = led[led["rank"] == r].iloc[0]
        want = reference_ledger([k for k in truth if k["rank"] == r], meta, r,
                                int(row.start_ns) + diag.offsets[r] - TS_OFFSET_NS,
                                int(row.span_ns))
        for p in ("compute", "memory", "bubble", "wait_rank", "grad_sync", "transfer_tp",
                  "transfer_pp", "transfer_dp"):
            assert row[f"{p}_ns"] == want[p], (r, p, row[f"{p}_ns"], want[p])


def reference_ledger(kernels: list[dict], meta: dict, rank: int, start: int, span: int
                     ) -> dict:
    """The ledger of one rank from the synthesizer's truth, in plain Python over the
    elementary segments between kernel endpoints (own clock): each segment goes to the
    first part that holds (README, "Who waits for whom")."""
    stage = {int(r): v["stage"] for r, v in meta["ranks"].items()}
    ivs = []  # (start, end, part)
    for k in kernels:
        a, b = k["ts"], k["ts"] + k["dur"]
        if k["kind"] == "COMP":
            ivs.append((a, b, "compute"))
        elif k["kind"] == "MEM":
            ivs.append((a, b, "memory"))
        else:
            w = a + k["wait_ns"]
            grad = k["comm_group"] in ("DP", "EDP") and k["collective"] in (
                "ReduceScatter", "AllReduce")
            ivs.append((w, b, "grad_sync" if grad else f"transfer_{k['comm_group'].lower()}"))
            who = k["waited_for_rank"]
            # a member on another stage (of any pipeline) arrived last: the schedule
            other_stage = who is not None and stage[who] != stage[rank]
            ivs.append((a, w, "bubble" if k["comm_group"] == "PP" or other_stage
                        else "wait_rank"))
    order = ["compute", "memory"] + [f"transfer_{g}" for g in (
        "tp", "cp", "ep", "etp", "dp", "edp", "pp", "emb", "pos_emb", "other")] + [
        "grad_sync", "bubble", "wait_rank"]
    cuts = sorted({start, start + span} | {x for a, b, _ in ivs for x in (a, b)
                                           if start <= x <= start + span})
    out = dict.fromkeys(order, 0)
    for lo, hi in zip(cuts, cuts[1:]):
        open_parts = {p for a, b, p in ivs if a <= lo and b >= hi and b > a}
        for p in order:
            if p in open_parts:
                out[p] += hi - lo
                break
    return out


def test_the_slow_rank_is_the_first_straggler(straggler_job):
    _, diag = straggler_job
    strag = diag.stragglers.to_pylist()
    assert [s["rank"] for s in strag] == [5]  # its TP partner waits, but is not slow
    s = strag[0]
    assert 1.2 < s["slowdown"] < 1.4 and s["units_slower"] == s["units"] > 16
    assert s["p_value"] < 1e-4 and (s["node"], s["local_gpu"]) == (0, 5)
    speed = {r["rank"]: r for r in diag.speed.table.to_pylist()}
    assert speed[4]["waited_on_ns"] < speed[5]["waited_on_ns"]
    assert diag.chain_ranks()[0] == 5


def test_the_slow_rank_is_first_at_128_ranks(tmp_path):
    """128 ranks (tp2 pp4 dp16), rank 77 1.3x slower: first in stragglers.csv, its cost
    within 25 % of the loss a re-run of the same job without it shows (the
    synthesizer's counterfactual), and the ledger adds up on every rank."""
    def job(straggler):
        cfg = SynthConfig(tp=2, pp=4, dp=16, microbatches=4, layers=4, skew_us=300.0,
                          with_stack=False, straggler_rank=straggler)
        root = synthesize(cfg, tmp_path / f"job{straggler}")
        spans = [s for v in json.loads((root / "ground_truth" / "ground_truth.json")
                                       .read_text())["ranks"].values() for s in v["steps"]]
        return root, max(b for _, b in spans) - min(a for a, _ in spans)

    slow, slow_ns = job(77)
    _, healthy_ns = job(None)
    out = tmp_path / "diag"
    r = CliRunner().invoke(main, ["diagnose", str(slow), "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = pq.read_table(out / "stragglers.parquet").to_pylist()
    assert rows and rows[0]["rank"] == 77 and (rows[0]["node"], rows[0]["local_gpu"]) == (9, 5)
    assert rows[0]["cost_ns"] == pytest.approx(slow_ns - healthy_ns, rel=0.25)
    led = pq.read_table(out / "ledger.parquet").to_pandas()
    assert len(led) == 128
    assert (led[[f"{p}_ns" for p in PARTS]].sum(axis=1) == led.span_ns).all()


@pytest.mark.parametrize("strip", ["layout", "layout-and-peers"])
def test_without_a_layout(straggler_job, tmp_path, strip):
    """Tables that state no pipeline (no pg_config, no stage): the pipelines are the ranks
    the sends and receives link, and the ledger is the same; without peers either, the
    slow rank is still found among the ranks that launch the same kernels."""
    import glob

    import traceviz
    from traceviz.analysis.diagnose.diagnosis import diagnose

    job, want = straggler_job
    tables = {}
    folder = job.parent / "tables" / "iteration_10"
    for f in sorted(glob.glob(str(folder / "rank_*[0-9].parquet"))):
        t = traceviz.load(f)
        meta = traceviz.metadata(t)
        meta["pg_config"], meta["distributed"]["pg_config"] = [], []
        meta["classification"] = {k: v for k, v in meta["classification"].items()
                                  if k not in ("stage", "pp")}
        if strip == "layout-and-peers":
            t = t.drop_columns(["src_rank", "dst_rank", "group_ranks"])
        tables[meta["rank"]] = t.replace_schema_metadata({b"traceviz": json.dumps(meta)})
    got = diagnose(tables)
    assert [s["rank"] for s in got.stragglers.to_pylist()] == [5]
    stages = {s["rank"]: s["stage"] for s in got.speed.table.to_pylist()}
    # tp2 pp4 dp2: stage = rank // 4, ordered by the forward sends; unknown without peers
    assert stages == {r: (r // 4 if strip == "layout" else None) for r in range(16)}
    if strip == "layout":
        assert any("pipelines found from the send / receive peers" in n for n in got.notes)
        assert got.ledger.equals(want.ledger)
