"""One name, one number: every command run on the real H200 jobs of ../shared/traces/gpu,
and each number shown under one name (iteration time, the clock verdict, bubble, MFU and
its n/a reason, a rank's label) read back from the text, the CSV, the JSON and the HTML
it is in, and compared."""
import csv
import html
import json
import re

import pytest
from click.testing import CliRunner
from helpers import shared

from traceviz.cli import main

JOBS = ["gpu/megatron_1f1b", "gpu/megatron_moe", "gpu/tp_dp",
        "gpu/single_gpt/single_gpt.json.gz"]


def _run(*args) -> str:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, (args, result.output)
    return result.output


def _csv(path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module", params=JOBS)
def outputs(request, module_folder):
    """Every command's outputs of one real job, in the module's folder."""
    job = shared(request.param)
    out = module_folder / request.param.replace("/", "_")
    got = {"job": job, "out": out,
           "diagnose": _run("diagnose", job, "-o", out / "d"),
           "report": _run("report", job, "-o", out / "r" / "report.txt"),
           "ops": _run("ops", job, "-o", out / "ops"),
           "breakdown": _run("breakdown", job, "-o", out / "b"),
           "critical_path": _run("critical-path", job, "-o", out / "cp")}
    _run("html", job, "-o", out / "page.html")
    got["page"] = (out / "page.html").read_text()
    got["report_text"] = (out / "r" / "report.txt").read_text()
    got["report_json"] = json.loads((out / "r" / "report.json").read_text())
    pipe = CliRunner().invoke(main, ["pipeline", str(job), "-o", str(out / "p")])
    got["pipeline"] = pipe.output if pipe.exit_code == 0 else None
    return got


def _head(text: str) -> re.Match:
    """The ledger's first line: iteration, ranks, clock verdict, iteration time."""
    found = re.search(r"ProfilerStep#(\d+), (\d+) rank\(s\), (.+?): ([\d,.]+) ms from the "
                      r"first rank's start", text)
    assert found, text[:400]
    return found


def test_iteration_time(outputs):
    """diagnose's span from the first rank's start to the last one's end = the report's
    iteration time (text and JSON) = the page's."""
    it, _, _, ms = _head(outputs["diagnose"]).groups()
    rows = outputs["report_json"]["throughput"]["iterations"]
    mine = next(r for r in rows if r["iteration"] == int(it))
    assert f"{mine['time_ms']:.2f}" == ms.replace(",", "")
    if len(rows) == 1:
        assert f"Time per Iteration: {mine['time_ms']:,.2f} ms" in outputs["report_text"]
        assert f"iteration time<b>{mine['time_ms']:,.2f} ms" in outputs["page"]


def test_critical_path_iteration(outputs):
    """The critical path's iteration is diagnose's (the ledger's window of the step: on
    tp_dp, where the CPU runs an iteration ahead, it was 2105 ms against 1061.80 ms),
    and its parts add up to it (the path, the time before and after it)."""
    it, _, _, ms = _head(outputs["diagnose"]).groups()
    found = re.search(r"critical path of (?:ProfilerStep#(\d+) across \d+ ranks|rank \d+, "
                      r"ProfilerStep#(\d+)).*?: ([\d.]+) ms", outputs["critical_path"])
    assert found, outputs["critical_path"][:300]
    assert int(found.group(1) or found.group(2)) == int(it)
    assert f"{float(found.group(3)):.2f}" == ms.replace(",", "")
    parts = _csv(outputs["out"] / "cp" / "critical_path_by_category.csv")
    assert sum(int(r["ns"]) for r in parts) / 1e6 == pytest.approx(float(found.group(3)),
                                                                  abs=1e-3)
    assert sum(float(r["pct"]) for r in parts) == pytest.approx(100.0)


def test_clock_verdict(outputs):
    """The clock verdict diagnose gives is the report's (its collectives' heading and its
    ledger) and the page's, word for word."""
    _, ranks, verdict, _ = _head(outputs["diagnose"]).groups()
    assert _head(outputs["report_text"]).group(3) == verdict
    assert html.escape(verdict) in outputs["page"]
    if int(ranks) > 1:
        assert f"6. CROSS-RANK COLLECTIVES: {verdict}" in outputs["report_text"]
    else:
        assert verdict == "one rank (its own clock)"


def test_bubble(outputs):
    """The bubble is the ledger's: ledger_totals.csv, diagnose's text, the report's JSON
    and the page; pipeline_stages.csv's iteration_bubble_pct is each stage rank's."""
    out = outputs["out"]
    totals = _csv(out / "d" / "ledger_totals.csv")
    ledger = {(int(r["rank"]), int(r["iteration"])): r for r in _csv(out / "d" / "ledger.csv")}
    kept = outputs["report_json"]["diagnosis"]["totals"]
    for row, again in zip(totals, kept):
        pct = float(row["bubble_pct"])
        assert again["bubble_pct"] == pytest.approx(pct, rel=1e-12, abs=1e-12)
        if pct >= 0.05:
            said = f"pipeline bubble {pct:.1f} %"
            assert said in outputs["diagnose"] and said in outputs["report_text"]
            assert said in outputs["page"]
    if outputs["pipeline"] is None:
        return
    for s in _csv(out / "p" / "pipeline_stages.csv"):
        row = ledger[(int(s["rank"]), int(totals[0]["iteration"]))]
        want = 100 * int(row["bubble_ns"]) / int(row["span_ns"])
        assert float(s["iteration_bubble_pct"]) == pytest.approx(want, rel=1e-9)
        assert f"rank {s['rank']}: bubble {want:.1f} % of its iteration" in outputs["pipeline"]


def test_mfu_and_its_reason(outputs):
    """One MFU: the report's (JSON, text) is the page's and, from the traced ops, the op
    model's; where it is n/a, one reason, the same in the report and the page."""
    mfu = outputs["report_json"]["throughput"]["mfu"]
    page = outputs["page"]
    if mfu["mfu_pct"] is None:
        assert mfu["why"] and f"n/a: {mfu['why']}" in outputs["report_text"]
        assert html.escape(mfu["why"], quote=True) in page
        return
    assert f"MFU: {mfu['mfu_pct']:.2f}%" in outputs["report_text"]
    shown = f"{mfu['mfu_pct']:,.2f} %" if mfu["mfu_pct"] >= 1 else f"{mfu['mfu_pct']:.3g} %"
    assert f"traced ops&#x27; FLOPs</small><b>{shown}" in page or \
        f"config FLOPs</small><b>{shown}" in page
    if mfu["source"] == "trace":
        ops = re.search(r"MFU ([\d.]+) %", outputs["ops"])
        assert ops and float(ops.group(1)) == pytest.approx(mfu["mfu_pct"], rel=5e-3)


def test_rank_labels(outputs):
    """A rank is called by one number: breakdown's, diagnose's ledger and parse's."""
    out = outputs["out"]
    ledger_ranks = sorted({int(r["rank"]) for r in _csv(out / "d" / "ledger.csv")})
    said = sorted(int(r) for r in re.findall(r"^rank (\d+): \d+ profiled steps?,",
                                             outputs["breakdown"], re.M))
    assert said == ledger_ranks
    job = outputs["job"]
    one = job if job.is_file() else sorted(job.rglob("*.json.gz"))[0]
    parsed = _run("parse", one, "-o", out / "one.parquet")
    rank = int(re.search(r"^rank (\d+)", parsed, re.M).group(1))
    assert rank in ledger_ranks


def test_breakdown_steps_are_the_ledgers(outputs):
    """breakdown's per-step time is the ledger's iteration window (its span: on
    single_gpt HTA's per-step kernel time summed to 337 ms for three 61 ms steps, its
    zeroing memsets running as soon as the CPU reached the step), and the steps and the
    time outside them partition each rank's whole trace."""
    ledger = {(int(r["rank"]), int(r["iteration"])): int(r["span_ns"])
              for r in _csv(outputs["out"] / "d" / "ledger.csv")}
    rows = _csv(outputs["out"] / "b" / "temporal_breakdown.csv")
    steps = {(int(r["rank"]), int(r["iteration"])): int(r["kernel_time_ns"])
             for r in rows if r["iteration"] not in ("", "-1")}
    assert steps == ledger
    for rank in {k[0] for k in steps}:
        mine = [r for r in rows if int(r["rank"]) == rank]
        whole = next(r for r in mine if r["iteration"] == "")
        for col in ("kernel_time_ns", "compute_ns", "non_compute_ns", "idle_ns", "comm_ns"):
            assert sum(int(r[col]) for r in mine if r["iteration"] != "") == int(whole[col])
    said = re.search(r"^rank \d+: (\d+) profiled steps?, ([\d.]+) ms in their iteration "
                     r"windows", outputs["breakdown"], re.M)
    first = min(k[0] for k in steps)
    assert int(said.group(1)) == sum(1 for k in steps if k[0] == first)
    assert float(said.group(2)) == pytest.approx(
        sum(v for k, v in steps.items() if k[0] == first) / 1e6, abs=1e-3)


def test_idle_is_the_ledgers(outputs):
    """'idle' is the ledger's part (diagnose = the report's ledger); breakdown's
    no-kernel time is named HTA's idle, never plain idle."""
    first = re.compile(r"ProfilerStep#\d+, .*?\n(.*?)\n", re.S)
    ledger = first.search(outputs["diagnose"]).group(1)
    assert ledger == first.search(outputs["report_text"]).group(1)
    idle = re.search(r"\| idle ([\d.]+) %", ledger)
    rows = [r for r in _csv(outputs["out"] / "d" / "ledger_totals.csv")
            if r["iteration"] == _head(outputs["diagnose"]).group(1)]
    assert rows
    if idle:
        assert float(idle.group(1)) == pytest.approx(float(rows[0]["idle_pct"]), abs=0.05)
    plain = [m.start() for m in re.finditer(r"\bidle\b", outputs["breakdown"])
             if outputs["breakdown"][max(m.start() - 6, 0):m.start()] != "HTA's "]
    assert not plain, outputs["breakdown"]
