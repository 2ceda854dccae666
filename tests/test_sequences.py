"""traceviz sequences: frequent kernel sequences equal a plain-Python recomputation from
the raw trace events (outermost matching op per call stack, kernels by launch)."""
from __future__ import annotations

import gzip
import json
from collections import Counter

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import needs_shared, shared

from traceviz.analysis.sequences import frequent_sequences
from traceviz.cli import main
from traceviz.ingest.tables import gpu_and_cpu
from traceviz.synth import SynthConfig, synthesize

RUNTIME = ("cuda_runtime", "cuda_driver")


def _truth(path, operator: str, min_len: int) -> Counter:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rb") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X"]
    ops = [e for e in events if e.get("cat") not in RUNTIME + ("kernel", "gpu_memcpy",
                                                                "gpu_memset")
           and "dur" in e and operator in e["name"] and e.get("cat") != "Trace"]

    def span(e):
        return round(float(e["ts"]) * 1000), round((float(e["ts"]) + float(e["dur"])) * 1000)

    roots = [o for o in ops if not any(
        p is not o and p["tid"] == o["tid"] and span(p)[0] <= span(o)[0]
        and span(o)[1] <= span(p)[1] and span(p) != span(o) for p in ops)]
    launch = {e["args"]["correlation"]: e for e in events if e.get("cat") in RUNTIME
              and "correlation" in e.get("args", {})}
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    found = Counter()
    for r in roots:
        lo, hi = span(r)
        mine = sorted((k for k in kernels if k["args"].get("correlation") in launch
                       and launch[k["args"]["correlation"]]["tid"] == r["tid"]
                       and lo <= span(launch[k["args"]["correlation"]])[0] <= hi),
                      key=lambda k: span(k)[0])
        if len(mine) >= min_len:
            found["|".join([r["name"]] + [k["name"] for k in mine])] += 1
    return found


@needs_shared
@pytest.mark.parametrize("operator,min_len", [("autograd::engine", 3), ("Optimizer", 3),
                                              ("aten::", 2)])
def test_real_trace_against_raw_events(operator, min_len):
    path = shared("hta/trace_filter/sampled_rank-0.json.gz")
    gpu, cpu = gpu_and_cpu(path, None)
    table = frequent_sequences(gpu, cpu, operator, min_len).to_pylist()
    want = _truth(path, operator, min_len)
    assert {r["pattern"]: r["count"] for r in table} == dict(want)
    assert [r["count"] for r in table] == sorted((r["count"] for r in table), reverse=True)


def test_synth_job_cli(tmp_path):
    synthesize(SynthConfig(tp=2, pp=1, dp=1, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    trace = next((tmp_path / "job").rglob("rank_0000*.json"))
    result = CliRunner().invoke(main, ["sequences", str(trace), "--op", "evaluate_function",
                                       "--min-len", "1", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    rows = pq.read_table(tmp_path / "out" / "frequent_sequences.parquet").to_pylist()
    assert {r["pattern"]: r["count"] for r in rows} == dict(
        _truth(trace, "evaluate_function", 1))
    # two micro-batches x two layers: every backward op of a layer repeats
    assert rows[0]["count"] >= 4
    assert (tmp_path / "out" / "frequent_sequences.png").exists()


def test_empty_operator_is_an_error(tmp_path):
    synthesize(SynthConfig(tp=1, pp=1, dp=1, microbatches=1, layers=1), tmp_path / "job")
    trace = next((tmp_path / "job").rglob("rank_0000*.json"))
    result = CliRunner().invoke(main, ["sequences", str(trace), "--op", ""])
    assert result.exit_code == 1 and "non-empty" in result.output
