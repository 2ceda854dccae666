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
from traceviz.analysis.breakdown import READ_COLUMNS, READ_OPTIONAL, breakdown_of
from traceviz.analysis.diagnose.diagnosis import diagnose as diagnose_tables
from traceviz.cli import main
from traceviz.commands import diagnose, pipeline
from traceviz.commands.report import make_report
from traceviz.ingest import analyses, job_cache
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


def frame(table: pa.Table):
    return table.to_pandas()


def test_diagnose_keeps_what_the_others_reuse(folder):
    fresh(folder)
    first = diagnose.run(folder).data
    kept = sorted(p.name for p in (folder / job_cache.FOLDER).iterdir())
    assert kept == ["diagnosis", "op_model"]  # nothing half-written left beside them
    again = diagnose.run(folder).data
    for name in ("ledger", "comm_calls", "ledger_waits", "totals", "links", "chain"):
        assert frame(getattr(first["diagnosis"], name)).equals(
            frame(getattr(again["diagnosis"], name))), name
    assert frame(first["advice"]).equals(frame(again["advice"]))
    assert first["diagnosis"].summary() == again["diagnosis"].summary()


def test_reused_results_equal_computed_ones(folder):
    """The breakdown with the kept diagnosis's split, the step windows from its clocks
    and the pipeline view from only the drawn ranks equal those computed from scratch."""
    diagnose.run(folder)
    diag = analyses.cached_diagnosis(folder)
    assert diag is not None
    files = input_files([folder])

    def loaded():
        return ((r, t) for r, _, t in rank_tables(files, READ_COLUMNS, [], READ_OPTIONAL))

    with_kept, computed = breakdown_of(loaded(), diag=diag), breakdown_of(loaded())
    for name, table in with_kept.tables().items():
        assert frame(table).equals(frame(computed.tables()[name])), name
    steps, synced = analyses.step_windows(folder, folder)
    agg, *_ = analyses.aggregation(folder, folder)
    assert synced and frame(steps).equals(frame(agg.microbatches))
    # the diagnosis of the tables themselves (no cache involved) is the kept one
    tables = {r: t for r, _, t in rank_tables(files, analyses.DIAGNOSIS_COLUMNS, [])}
    direct = diagnose_tables(tables, analyses._pipelines(folder, folder, None, tables))
    assert frame(direct.ledger).equals(frame(diag.ledger))
    views = pipeline.run(folder).tables
    fresh(folder)  # no diagnosis kept: the view computed over every rank
    assert frame(views["pipeline_stages"]).equals(
        frame(pipeline.run(folder).tables["pipeline_stages"]))


def test_a_changed_table_or_option_recomputes(folder):
    fresh(folder)
    diagnose.run(folder)
    entry = folder / job_cache.FOLDER / "diagnosis" / "entry.json"
    before = json.loads(entry.read_text())["key"]
    # another option is another key: kept apart, the default one untouched
    diagnose.run(folder, num_layers=8)
    assert json.loads(entry.read_text())["key"]["options"]["num_layers"] == 8
    diagnose.run(folder)
    assert json.loads(entry.read_text())["key"] == before
    # a table parsed again (here: touched) invalidates what was computed from it
    table = sorted(folder.glob("rank_*[0-9].parquet"))[0]
    st = table.stat()
    os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert analyses.cached_diagnosis(folder) is None
    diagnose.run(folder)
    assert json.loads(entry.read_text())["key"] != before
    assert analyses.cached_diagnosis(folder) is not None


def test_a_damaged_cache_is_recomputed(folder):
    diagnose.run(folder)
    want = frame(diagnose.run(folder).data["diagnosis"].ledger)
    entry = folder / job_cache.FOLDER / "diagnosis"
    (entry / "ledger.parquet").write_bytes(b"not parquet")
    assert analyses.cached_diagnosis(folder) is None
    assert frame(diagnose.run(folder).data["diagnosis"].ledger).equals(want)
    (entry / "entry.json").write_text("{")
    assert frame(diagnose.run(folder).data["diagnosis"].ledger).equals(want)


def test_an_unwritable_cache_is_no_error(folder, tmp_path):
    """Where the cache cannot be written (here its place is taken by a file), the job is
    analysed all the same and nothing is left behind."""
    copy = tmp_path / "blocked"
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns(job_cache.FOLDER))
    (copy / job_cache.FOLDER).write_text("a file, not a folder")
    res = diagnose.run(copy)
    assert res.data["diagnosis"].ledger.num_rows == 16
    assert (copy / job_cache.FOLDER).read_text() == "a file, not a folder"
    assert sorted(p.name for p in copy.iterdir() if not p.name.endswith(".parquet")) == [
        job_cache.FOLDER]


def test_report_is_kept_and_equal(folder):
    fresh(folder)
    first = make_report(folder)
    assert (folder / job_cache.FOLDER / "report").is_dir()
    assert make_report(folder) == first
    # another option: computed for it
    other = make_report(folder, overrides={"global_batch_size": 4, "seq_len": 4096})
    assert other["configuration"]["global_batch_size"] == 4
    assert make_report(folder) == first


def test_aggregation_with_a_kept_diagnosis(folder):
    """aggregate reuses the kept diagnosis for the ranks its figures show."""
    diagnose.run(folder)
    diag = analyses.cached_diagnosis(folder)
    files = input_files([folder])
    from traceviz.analysis.aggregation import READ_COLUMNS as AGG

    def tables():
        return {r: t for r, _, t in rank_tables(files, AGG, [])}

    a = aggregation_of(tables(), diag=diag)
    b = aggregation_of(tables())
    assert a.diagnosis is diag
    assert frame(a.microbatches).equals(frame(b.microbatches))
    assert a.diagnosis.stragglers["rank"].to_pylist() == \
        b.diagnosis.stragglers["rank"].to_pylist() == [5]
