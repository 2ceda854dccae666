"""The notebook API (traceviz.Job) gives the command line's numbers: every table equals
the one the CLI wrote for the same job, the report equals its JSON, the collectives
agree with the report's per-rank counts, and a second profiled iteration is found by
its number."""
from __future__ import annotations

import json
import math
import shutil

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import out_dir, union_length

import traceviz
from traceviz.analysis.report import report_json
from traceviz.cli import main
from traceviz.errors import TraceVizError
from traceviz.synth import SynthConfig, synthesize

CFG = SynthConfig(tp=2, pp=2, dp=2, microbatches=4, layers=4, skew_us=120.0,
                  gpus_per_node=4, with_stack=False)


@pytest.fixture(scope="module")
def _cli_job(tmp_path_factory):
    """A job analysed by the CLI: (job folder, CLI output folder)."""
    root = tmp_path_factory.mktemp("job")
    job, out = root / "job", root / "cli"
    synthesize(CFG, job)
    runner = CliRunner()
    for args in (["batch", str(job), "-q"], ["breakdown", str(job), "-o", str(out / "brk")],
                 ["aggregate", str(job)], ["pipeline", str(job), "-o", str(out / "pipe")],
                 ["report", str(job), "-o", str(out / "report.txt")]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, (args, result.output)
    return job, out


@pytest.fixture
def cli_job(_cli_job, module_folder, monkeypatch):
    """``_cli_job``, from the folder its commands ran in (where its default outputs are,
    so ``traceviz.Job`` finds them)."""
    monkeypatch.chdir(module_folder)
    return _cli_job


def _rows(table) -> list[dict]:
    """Rows with NaN as None (NaN != NaN would fail any comparison)."""
    return [{k: None if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
            for r in table.to_pylist()]


def _equal(a, b) -> None:
    assert a.schema.remove_metadata() == b.schema.remove_metadata()
    assert _rows(a) == _rows(b)


def test_tables_equal_the_cli(cli_job):
    job_dir, out = cli_job
    job = traceviz.Job(job_dir)
    assert job.ranks == list(range(CFG.world))
    assert job.folder.resolve() == out_dir(job_dir) / "iteration_10"
    cli = pq.read_table(out / "brk" / "temporal_breakdown.parquet")
    whole = pc.is_null(cli["iteration"])
    _equal(job.temporal_breakdown(), cli.filter(pc.invert(whole)))
    _equal(job.temporal_breakdown(whole_trace=True), cli.filter(whole))
    for name, get in (("kernel_type_breakdown", job.kernel_type_breakdown),
                      ("top_kernels", job.top_kernels),
                      ("idle_time_breakdown", job.idle_time),
                      ("launch_stats", job.launch_stats)):
        _equal(get(), pq.read_table(out / "brk" / f"{name}.parquet"))
    for name, get in (("microbatches", job.microbatches),
                      ("category_spans", job.category_spans)):
        _equal(get(), pq.read_table(job.folder / f"{name}.parquet"))
    _equal(job.pipeline(), pq.read_table(out / "pipe" / "pipeline_stages.parquet"))
    _equal(job.pipeline_gaps(), pq.read_table(out / "pipe" / "pipeline_gaps.parquet"))
    offsets = job.clock_offsets()
    assert offsets.column("rank").to_pylist() == job.ranks
    # the report is a typed record; its JSON is report.json's
    assert report_json(job.report()) == json.loads((out / "report.json").read_text())


def test_overlap_and_collectives_agree_with_the_report(cli_job):
    job = traceviz.Job(cli_job[0])
    rep = job.report()
    overlap = {r["rank"]: r for r in job.overlap().to_pylist()}
    for r in rep["overlap"]["per_rank"]:
        assert overlap[r["rank"]]["overlap_ns"] == round(r["overlap_ms"] * 1e6)
        assert overlap[r["rank"]]["comm_ns"] == round(r["comm_ms"] * 1e6)
    calls = job.collectives()
    for r in rep["network"]["per_rank"]:
        mine = calls.filter(pc.equal(calls["rank"], r["rank"]))
        assert mine.num_rows == r["operations"]
        assert pc.sum(pc.fill_null(mine["bytes"], 0)).as_py() == r["bytes"]


def test_overlap_is_the_union_definition(cli_job):
    """Overlap per rank recomputed from the rank's table in plain Python."""
    job = traceviz.Job(cli_job[0])
    for row in job.overlap().to_pylist():
        t = job.table(row["rank"], ("ts", "dur", "kind")).to_pylist()
        comp = [(k["ts"], k["ts"] + k["dur"]) for k in t if k["kind"] == "COMP"]
        comm = [(k["ts"], k["ts"] + k["dur"]) for k in t if k["kind"] == "COMM"]
        both = union_length(comp) + union_length(comm) - union_length(comp + comm)
        assert (row["comp_ns"], row["comm_ns"], row["overlap_ns"]) == (
            union_length(comp), union_length(comm), both)
        assert row["overlap_pct"] == pytest.approx(100 * both / union_length(comm))


def test_figures_on_request(cli_job):
    figures = traceviz.Job(cli_job[0]).figures()
    assert {"temporal_breakdown.png", "idle_time_breakdown.png"} <= set(figures)
    # the group the diagnosis points at (a straggler's, else the chain of waits')
    assert sum(name.startswith("pipeline_group") and name.endswith("_iter10.png")
               for name in figures) == 1
    assert any(name.startswith("PP_group_0/") for name in figures)
    assert figures["temporal_breakdown.png"].png().startswith(b"\x89PNG\r\n\x1a\n")


def test_to_pandas(cli_job):
    df = traceviz.Job(cli_job[0]).microbatches().to_pandas()
    assert len(df) == CFG.world * CFG.microbatches * 2


def test_iteration_picks_its_folder(tmp_path):
    """A job with two profiled iterations (one folder each): the first by default, the
    other by its number; a number never profiled is a one-line error."""
    root = tmp_path / "job"
    synthesize(SynthConfig(tp=1, pp=2, dp=1, microbatches=2, layers=2), root)
    synthesize(SynthConfig(tp=1, pp=2, dp=1, microbatches=2, layers=2, first_iteration=20),
               tmp_path / "other")
    shutil.move(tmp_path / "other" / "iteration_20", root / "iteration_20")
    assert traceviz.Job(root).folder.name == "iteration_10"
    job = traceviz.Job(root, iteration=20)
    assert job.folder.name == "iteration_20"
    assert set(job.microbatches().column("iteration").to_pylist()) == {20}
    with pytest.raises(TraceVizError, match="no profiled iteration 30"):
        traceviz.Job(root, iteration=30).folder
    with pytest.raises(TraceVizError, match="no such file"):
        traceviz.Job(tmp_path / "absent")


def test_a_sum_over_iterations_counts_each_rank_once(cli_job):
    """temporal_breakdown() holds the iterations (and the time outside them), which
    partition each rank's trace: their sums are the whole-trace rows, not twice them."""
    job = traceviz.Job(cli_job[0])
    per = job.temporal_breakdown().to_pandas().groupby("rank")[
        ["compute_ns", "comm_ns", "idle_ns", "kernel_time_ns"]].sum()
    whole = job.temporal_breakdown(whole_trace=True).to_pandas().set_index("rank")
    assert (per == whole[per.columns]).all().all()


def test_results_are_kept_and_a_report_copy_is_the_callers(cli_job, monkeypatch):
    """report() and collectives() are computed once per arguments; changing a returned
    report leaves the kept one alone."""
    import traceviz.job.job as job_module

    job = traceviz.Job(cli_job[0])
    calls = []
    real = job_module.make_report
    monkeypatch.setattr(job_module, "make_report",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    first = job.report()
    first["throughput"] = None
    assert job.report()["throughput"] is not None and len(calls) == 1
    job.report(seq_len=4096)
    assert len(calls) == 2
    assert job.collectives() is job.collectives()


def test_failed_ranks_are_listed_never_dropped_silently(cli_job, tmp_path):
    """A rank whose table is damaged: the job warns, lists it in job.failed with why,
    and its analyses cover the other ranks."""
    src = out_dir(cli_job[0]) / "iteration_10"
    folder = tmp_path / "tables"
    shutil.copytree(src, folder)
    (folder / "rank_0003.parquet").write_bytes(b"PAR1 not a table")
    job = traceviz.Job(folder)
    with pytest.warns(UserWarning, match="1 rank\\(s\\) .* could not be read"):
        assert job.ranks == [r for r in range(CFG.world) if r != 3]
    assert len(job.failed) == 1 and "rank_0003.parquet" in job.failed[0]
    assert sorted(job.overlap().column("rank").to_pylist()) == job.ranks


def test_api_errors_are_the_packages_own(cli_job):
    """A bad argument is a traceviz error (a TraceVizError subclass), not a CLI one."""
    job = traceviz.Job(cli_job[0])
    with pytest.raises(TraceVizError, match="what-if"):
        job.critical_path(what_if=("COMM:XX=0.5",))
    with pytest.raises(TraceVizError, match="no rank 99"):
        job.table(99)


def test_tables_have_their_declared_schemas(cli_job):
    """Every table the API returns has the Arrow schema its analysis declares (names,
    order and types), so a notebook can rely on them."""
    import pyarrow as pa

    from traceviz.analysis.idle import IDLE_SCHEMA
    from traceviz.analysis.kernels import TOP_KERNELS_SCHEMA
    from traceviz.analysis.launch import LAUNCH_SCHEMA
    from traceviz.analysis.microbatches import MICROBATCH_SCHEMA, SPANS_SCHEMA
    from traceviz.analysis.pipeline import STAGES_SCHEMA
    from traceviz.analysis.temporal import KERNEL_TYPE_SCHEMA, TEMPORAL_SCHEMA

    job = traceviz.Job(cli_job[0])
    for got, want in ((job.temporal_breakdown(), TEMPORAL_SCHEMA),
                      (job.temporal_breakdown(whole_trace=True), TEMPORAL_SCHEMA),
                      (job.kernel_type_breakdown(), KERNEL_TYPE_SCHEMA),
                      (job.top_kernels(), TOP_KERNELS_SCHEMA),
                      (job.idle_time(), IDLE_SCHEMA), (job.launch_stats(), LAUNCH_SCHEMA),
                      (job.microbatches(), MICROBATCH_SCHEMA),
                      (job.category_spans(), SPANS_SCHEMA),
                      (job.pipeline(), STAGES_SCHEMA.append(pa.field("pp_group", pa.int32())))):
        assert got.schema.remove_metadata() == want
        assert got.num_rows > 0
