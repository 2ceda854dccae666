"""A job's analyses computed once and kept beside its tables (``.traceviz-cache``): what
the other commands reuse is what they would have computed themselves, a changed table
or option recomputes it, and a damaged or unwritable cache costs a recomputation, never
an error or a wrong number."""
from __future__ import annotations

import json
import os
import shutil

import pyarrow as pa
import pytest
from click.testing import CliRunner

from traceviz.analysis.aggregation import aggregation_of
from traceviz.analysis.diagnose.waits import comm_part
from traceviz.analysis.activities import Options
from traceviz.analysis.breakdown import READ_COLUMNS, READ_OPTIONAL, breakdown_of, breakdown_part
from traceviz.analysis.diagnose.diagnosis import diagnose as diagnose_tables
from traceviz.cli import main
from traceviz.commands import diagnose, pipeline
from traceviz.job.report import make_report
from traceviz.ingest import job_cache
from traceviz.job import products
from traceviz.ingest.tables import input_files, rank_tables
from traceviz.synth import SynthConfig, synthesize


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A 16-rank job (tp2 pp4 dp2, rank 5 slower), parsed with its CPU tables."""
    root = tmp_path_factory.mktemp("cache")
    job = synthesize(SynthConfig(tp=2, pp=4, dp=2, layers=8, microbatches=4,
                                 straggler_rank=5, with_stack=False, skew_us=100.0),
                     root / "job")
    assert CliRunner().invoke(main, ["batch", str(job), "-o", str(root / "tables"), "-q",
                                     "--cpu"]).exit_code == 0
    return root / "tables" / "iteration_10"


def fresh(folder):
    shutil.rmtree(folder / job_cache.FOLDER, ignore_errors=True)


def kept_key(entry) -> dict:
    """The key an ``entry.json`` was kept for (its first line is its digest)."""
    return json.loads(entry.read_bytes().partition(b"\n")[2])["key"]


def frame(table: pa.Table):
    return table.to_pandas()


def test_diagnose_keeps_what_the_others_reuse(folder):
    fresh(folder)
    first = diagnose.run(folder).value
    kept = sorted(p.name for p in (folder / job_cache.FOLDER).iterdir())
    # nothing half-written left beside them
    assert kept == ["diagnosis", "layout", "op_model", "step_windows"]  # no leftovers
    again = diagnose.run(folder).value
    for name in ("ledger", "comm_calls", "ledger_waits", "totals", "links", "chain"):
        assert frame(getattr(first.diagnosis, name)).equals(
            frame(getattr(again.diagnosis, name))), name
    assert frame(first.advice_table).equals(frame(again.advice_table))
    assert first.diagnosis.summary() == again.diagnosis.summary()


def test_reused_results_equal_computed_ones(folder):
    """The breakdown with the kept diagnosis's split, the step windows from its clocks
    and the pipeline view from only the drawn ranks equal those computed from scratch."""
    diagnose.run(folder)
    diag = products.cached_diagnosis(folder)
    assert diag is not None
    files = input_files([folder])

    def loaded():
        return (breakdown_part(t, Options(), r)
                for r, _, t in rank_tables(files, READ_COLUMNS, [], READ_OPTIONAL))

    with_kept, computed = breakdown_of(loaded(), diag=diag), breakdown_of(loaded())
    for name, table in with_kept.tables().items():
        assert frame(table).equals(frame(computed.tables()[name])), name
    steps, clocks = products.step_windows(folder, folder)
    agg, *_ = products.aggregation(folder, folder)
    assert clocks in ("shifted", "own clocks") and frame(steps).equals(frame(agg.microbatches))
    # the diagnosis of the tables themselves (no cache involved) is the kept one
    tables = {r: t for r, _, t in rank_tables(files, products.DIAGNOSIS_COLUMNS, [])}
    direct = diagnose_tables(tables, products._pipelines(folder, folder, None, tables))
    assert frame(direct.ledger).equals(frame(diag.ledger))
    views = pipeline.run(folder).tables
    fresh(folder)  # no diagnosis kept: the view computed over every rank
    assert frame(views["pipeline_stages"]).equals(
        frame(pipeline.run(folder).tables["pipeline_stages"]))


def test_the_kept_layout_is_the_derived_one(folder):
    """The process groups kept beside the tables are those their footers state."""
    from traceviz.ingest import topology

    fresh(folder)
    topology._DERIVED.clear()
    derived = topology.from_traces(folder)  # read from every footer, then kept
    assert (folder / job_cache.FOLDER / "layout" / "entry.json").exists()
    topology._DERIVED.clear()
    calls = []
    real = topology.observed_of
    topology.observed_of = lambda paths: calls.append(paths) or real(paths)
    try:
        kept = topology.from_traces(folder)
    finally:
        topology.observed_of = real
    assert not calls  # no footer read again
    assert kept.groups() == derived.groups() and kept.world == derived.world
    assert kept.groups()["PIPELINE_MODEL_PARALLEL_GROUP"] == [
        [0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_a_changed_table_or_option_recomputes(folder):
    fresh(folder)
    diagnose.run(folder)
    entry = folder / job_cache.FOLDER / "diagnosis" / "entry.json"
    before = kept_key(entry)
    # another option is another key: kept apart, the default one untouched
    diagnose.run(folder, num_layers=8)
    assert kept_key(entry)["options"]["num_layers"] == 8
    diagnose.run(folder)
    assert kept_key(entry) == before
    # a table parsed again (here: touched) invalidates what was computed from it
    table = sorted(folder.glob("rank_*[0-9].parquet"))[0]
    st = table.stat()
    os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert products.cached_diagnosis(folder) is None
    diagnose.run(folder)
    assert kept_key(entry) != before
    assert products.cached_diagnosis(folder) is not None


def test_a_damaged_cache_is_recomputed(folder):
    diagnose.run(folder)
    want = frame(diagnose.run(folder).value.diagnosis.ledger)
    entry = folder / job_cache.FOLDER / "diagnosis"
    (entry / "ledger.parquet").write_bytes(b"not parquet")
    assert products.cached_diagnosis(folder) is None
    assert frame(diagnose.run(folder).value.diagnosis.ledger).equals(want)
    (entry / "entry.json").write_text("{")
    assert frame(diagnose.run(folder).value.diagnosis.ledger).equals(want)


def test_an_unwritable_cache_is_no_error(folder, tmp_path):
    """Where the cache cannot be written (here its place is taken by a file), the job is
    analysed all the same and nothing is left behind."""
    copy = tmp_path / "blocked"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(job_cache.FOLDER))
    (copy / job_cache.FOLDER).write_text("a file, not a folder")
    res = diagnose.run(copy)
    assert res.value.diagnosis.ledger.num_rows == 16
    assert (copy / job_cache.FOLDER).read_text() == "a file, not a folder"
    assert sorted(p.name for p in copy.iterdir() if not p.name.endswith(".parquet")) == [
        job_cache.FOLDER]


def test_report_is_kept_and_equal(folder):
    fresh(folder)
    first = make_report(folder)
    assert (folder / job_cache.FOLDER / "report").is_dir()
    # the kept report reads back as the typed record it was (its totals of their schema)
    assert make_report(folder) == first
    # another option: computed for it
    other = make_report(folder, overrides={"global_batch_size": 4, "seq_len": 4096})
    assert other["configuration"]["global_batch_size"] == 4
    assert make_report(folder) == first


def test_aggregation_with_a_kept_diagnosis(folder):
    """aggregate reuses the kept diagnosis for the ranks its figures show."""
    diagnose.run(folder)
    diag = products.cached_diagnosis(folder)
    files = input_files([folder])
    from traceviz.analysis.aggregation import READ_COLUMNS as AGG

    def tables():
        return [comm_part(t, r) for r, _, t in rank_tables(files, AGG, [])]

    a = aggregation_of(tables(), diag=diag)
    b = aggregation_of(tables())
    assert a.diagnosis is diag
    assert frame(a.microbatches).equals(frame(b.microbatches))
    assert a.diagnosis.stragglers["rank"].to_pylist() == \
        b.diagnosis.stragglers["rank"].to_pylist() == [5]


def test_one_html_run_computes_the_diagnosis_once(folder, tmp_path, monkeypatch):
    """``traceviz html`` (report, breakdown, pipeline, step windows, op model) on a job
    with nothing kept: the diagnosis is computed once, the rest reuse it."""
    fresh(folder)
    calls = []
    real = products._diagnosis
    monkeypatch.setattr(products, "_diagnosis",
                        lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    res = CliRunner().invoke(main, ["html", str(folder), "-o", str(tmp_path / "p.html")])
    assert res.exit_code == 0, res.output
    assert len(calls) == 1
    assert "straggler" in (tmp_path / "p.html").read_text()


def test_job_diagnose_is_what_the_command_writes(folder, tmp_path):
    """``Job(...).diagnose()``: typed records equal to the CSV / parquet files of
    ``traceviz diagnose``; the straggler's advice names its rank."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from traceviz import Job
    from traceviz.analysis.advice import Advice
    from traceviz.analysis.diagnose.stragglers import Straggler

    fresh(folder)
    out = tmp_path / "diag"
    res = CliRunner().invoke(main, ["diagnose", str(folder), "-o", str(out)])
    assert res.exit_code == 0, res.output
    typed = Job(folder).diagnose()
    assert all(isinstance(a, Advice) for a in typed.advice)
    assert [s.rank for s in typed.stragglers] == [5]
    assert isinstance(typed.stragglers[0], Straggler)
    fix = [a for a in typed.advice if a.what_if == "straggler:5=fix"]
    assert len(fix) == 1 and fix[0].target_rank == 5 and fix[0].saving_ns > 0
    assert typed.stragglers[0].cost_ns == fix[0].saving_ns
    for name, table in typed.tables().items():
        written = pq.read_table(out / f"{name}.parquet")
        assert frame(written).equals(frame(table)), name
    csv = pcsv.read_csv(out / "advice.csv").to_pylist()
    assert [r["what_if"] for r in csv] == [a.what_if for a in typed.advice]
    assert [r["saving_ns"] for r in csv] == [a.saving_ns for a in typed.advice]
    assert [r["target_rank"] for r in csv] == [a.target_rank for a in typed.advice]


def test_the_summary_survives_the_report(folder):
    """The typed summary a report keeps reads back equal from its JSON (its tables by
    value), and that JSON is what report.json holds."""
    from traceviz.analysis.diagnose.summary import Summary
    from traceviz.analysis.report import report_json
    from traceviz.job.report import make_report

    # the report's diagnosis is the one with advice (whichever test ran first)
    typed = products.diagnosis(folder, advice=True)[0].summary()
    rep = make_report(folder)
    assert report_json(rep)["diagnosis"] == json.loads(json.dumps(typed.to_json()))
    back = Summary.from_json(report_json(rep)["diagnosis"])
    assert back == rep["diagnosis"]
    assert back.causes == typed.causes and back.stragglers == typed.stragglers
    assert back.places == typed.places and back.chain_ranks == typed.chain_ranks
    assert back.totals.to_pylist() == typed.totals.to_pylist()
    assert [s.rank for s in back.stragglers] == [5]
