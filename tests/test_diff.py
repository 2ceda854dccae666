"""traceviz diff: HTA's trace_diff_compare.csv reproduced, short names as HTA's
shorten_name, and a synthesized pair of jobs whose kernel counts are known."""
from __future__ import annotations

import csv
from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import REFERENCE, TRACES, needs_shared

from traceviz.analysis.diff import compare, short_name
from traceviz.cli import main
from traceviz.commands.diff import load_side
from traceviz.synth import SynthConfig, synthesize

PAIRS = {"trace_diff": ("trace_diff/control", "trace_diff/test"),
         "trace_compare": ("trace_compare/base", "trace_compare/test")}


@needs_shared
@pytest.mark.parametrize("pair", PAIRS)
def test_matches_hta_trace_diff(pair):
    with open(REFERENCE / "hta" / "rounded" / "trace_diff_compare.csv", newline="") as fh:
        want = {(r["device"], r["short_name"]): r for r in csv.DictReader(fh)
                if r["pair"] == pair}
    control, test = (load_side(TRACES / "hta" / p, label) for p, label in
                     zip(PAIRS[pair], ("control", "test")))
    got = {(r["device"], r["name"]): r
           for r in compare(control, test, hta_compat=True).to_pylist()}
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        assert (g["control_counts"], g["test_counts"], g["diff_counts"]) == tuple(
            int(float(w[k])) for k in ("control_counts", "test_counts", "diff_counts")), key
        # these traces have whole-µs timestamps: HTA's durations are exact
        assert (g["control_total_duration_ns"], g["test_total_duration_ns"],
                g["diff_duration_ns"]) == tuple(
            round(float(w[k]) * 1000) for k in ("control_total_duration",
                                                "test_total_duration", "diff_duration")), key
        assert g["counts_change_categories"] == w["counts_change_categories"]
    assert control.iterations == [int(next(iter(want.values()))["control_iteration"])]


@pytest.mark.parametrize("name,short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
     "at::detail::Array<char*, 1>)", "at::native::vectorized_elementwise_kernel"),
    ("Memcpy HtoD (Pinned -> Device)", "Memcpy HtoD (Pinned -> Device)"),
    ("aten::mm", "aten::mm"),
    # no '<' or '(': unchanged, spaces included
    ("autograd::engine::evaluate_function: AddmmBackward0",
     "autograd::engine::evaluate_function: AddmmBackward0"),
    ("void f<int>(x) const", "const"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",
     "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ("std::vector<int> foo(bar<baz>)", "foo"),
])
def test_short_name(name, short):
    assert short_name(name) == short_name(name, hta_compat=True) == short


@pytest.mark.parametrize("name,ours,hta", [
    ("<built-in method to of Tensor object at 0x7f>", "<built-in method to of Tensor object "
     "at 0x7f>", ""),
    ("void at::native::(anonymous namespace)::reduce_kernel<512, 1>(float*)",
     "at::native::(anonymous namespace)::reduce_kernel", "at::native::::reduce_kernel"),
    ("(x)", "(x)", ""),
])
def test_short_name_keeps_what_hta_loses(name, ours, hta):
    assert (short_name(name), short_name(name, hta_compat=True)) == (ours, hta)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    for label, mb in (("a", 2), ("b", 4)):
        synthesize(SynthConfig(tp=1, pp=1, dp=2, microbatches=mb, layers=2, iterations=2,
                               with_stack=False), root / label)
    return root


def _truth_counts(root, rank: int) -> tuple[Counter, Counter, int]:
    truth = [t for t in pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist()
             if t["rank"] == rank]
    first = min(t["iteration"] for t in truth)
    mine = [t for t in truth if t["iteration"] == first]
    return (Counter(t["name"] for t in mine),
            Counter({n: sum(t["dur"] for t in mine if t["name"] == n)
                     for n in {t["name"] for t in mine}}), first)


def test_synth_pair_against_ground_truth(pair, tmp_path):
    out = tmp_path / "diff"
    result = CliRunner().invoke(main, ["diff", str(pair / "a"), str(pair / "b"), "-o",
                                       str(out), "--full-names", "--test-rank", "1"])
    assert result.exit_code == 0, result.output
    assert {"trace_diff.csv", "trace_diff.parquet", "trace_diff.png"} <= {
        p.name for p in out.iterdir()}
    rows = {r["name"]: r for r in pq.read_table(out / "trace_diff.parquet").to_pylist()
            if r["device"] == "GPU"}
    ca, da, _ = _truth_counts(pair / "a", 0)
    cb, db, _ = _truth_counts(pair / "b", 1)
    assert rows.keys() == ca.keys() | cb.keys()
    for name, r in rows.items():
        assert (r["control_counts"], r["test_counts"]) == (ca[name], cb[name])
        assert (r["control_total_duration_ns"], r["test_total_duration_ns"]) == (
            da[name], db[name])
        assert r["change"] == ("added" if not ca[name] else "deleted" if not cb[name] else
                               "increased" if cb[name] > ca[name] else
                               "decreased" if cb[name] < ca[name] else "unchanged")
    # twice the micro-batches: every per-micro-batch kernel runs twice as often
    assert any(r["test_counts"] == 2 * r["control_counts"] > 0 for r in rows.values())
    assert "GPU:" in result.output and "CPU:" in result.output


def test_missing_iteration_is_a_clear_error(pair):
    result = CliRunner().invoke(main, ["diff", str(pair / "a"), str(pair / "b"),
                                       "--control-iterations", "999"])
    assert result.exit_code == 1
    assert "no ProfilerStep [999]" in result.output and "Traceback" not in result.output


def test_the_figure_draws_only_what_changed(pair):
    """The figure's bars are names whose count or time changed (the synthesized pair's
    two ranks differ); a trace against itself draws "no data", not unchanged names."""
    from traceviz.commands.diff import run

    def texts(fig) -> list[str]:
        return [t.get_text() for t in fig.texts] + [
            t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]

    changed = run(pair / "a", pair / "b", test_rank=1, full_names=True)
    rows = changed.tables["trace_diff"].to_pylist()
    moved = {r["name"] for r in rows if r["diff_duration_ns"] != 0
             or r["control_counts"] != r["test_counts"]}
    assert moved
    labels = texts(changed.figures["trace_diff.png"].figure())
    drawn = {label.split("  [")[0] for label in labels if "  [" in label}
    assert drawn and all(name in moved or name.endswith("...") for name in drawn)
    same = run(pair / "a", pair / "a")
    said = texts(same.figures["trace_diff.png"].figure())
    assert any(s.startswith("no data: all ") and "same count and total time" in s
               for s in said), said
