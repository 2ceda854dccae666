"""Op timelines diagnosed on workers a block of steps at a time (README, On a cluster;
:mod:`traceviz.ingest.timeline_pieces`): every table, note and summary equal to the
whole timeline read and diagnosed in one process, however the parquet files cut the
steps (row groups across steps, no statistics, two files of alternate ranks), with
wrapper timers and with the layout inferred; bad rows named as one process names them;
a worker that dies, a footer that lies and a file changed while read each stop with one
line. The one-process diagnosis itself is checked against the synthesizer re-run
without each cause (tests/test_op_timeline.py)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import workers as test_workers
from traceviz.analysis.timeline.diagnosis import diagnose_timeline
from traceviz.cli import main
from traceviz.errors import TraceVizError
from traceviz.ingest import timeline_pieces as TP
from traceviz.ingest.op_timeline import read_op_timeline, row_groups
from traceviz.ingest.rank_pieces import Workers
from traceviz.job.products import timeline_diagnosis
from traceviz.synth.op_timeline import TimelineConfig, simulate_steps

SLOW_TP = TimelineConfig(pp=2, dp=4, tp=2, microbatches=4, steps=12, slow_rank=3,
                         slow_from=5, slow_steps=4, seq_cv=0.2, data_spike_ms=3.0, seed=3)
BARE = TimelineConfig(pp=4, dp=4, microbatches=6, steps=10, slow_rank=5, slow_from=4,
                      last_stage_extra=0.3, seed=1)


@pytest.fixture(autouse=True)
def any_size(monkeypatch):
    """Every parquet timeline goes to the workers (not only those of 2 M ops)."""
    monkeypatch.setattr(TP, "MIN_ROWS", 0)


def _wrapped(t: pa.Table) -> pa.Table:
    """``t`` with a forward-backward wrapper timer around each rank's step."""
    g = t.group_by(["rank", "step"]).aggregate([("start_ns", "min"), ("duration_ns", "max")])
    rows = pa.table({"rank": g["rank"], "step": g["step"],
                     "op": pa.array(["forward-backward"] * g.num_rows),
                     "start_ns": g["start_ns_min"],
                     "duration_ns": pc.multiply(g["duration_ns_max"], 40)})
    return pa.concat_tables([t, rows.cast(pa.schema([t.schema.field(c)
                                                     for c in rows.column_names]))],
                            promote_options="default")


def _write(t: pa.Table, folder, how: str):
    folder.mkdir()
    if how == "two files":  # alternate ranks: every file holds every step
        odd = pc.equal(pc.bit_wise_and(t["rank"], 1), 1)
        pq.write_table(t.filter(pc.invert(odd)), folder / "a.parquet", row_group_size=700)
        pq.write_table(t.filter(odd), folder / "b.parquet", row_group_size=900)
    else:
        pq.write_table(t, folder / "t.parquet", row_group_size=1000,
                       write_statistics=how != "no statistics")
    return folder


def _same(a, b) -> None:
    for name, table in a.tables().items():
        assert table.equals(b.tables()[name]), name
    assert (a.notes, a.summary, a.worker_names, a.step_numbers) == \
        (b.notes, b.summary, b.worker_names, b.step_numbers)
    assert np.array_equal(a.heat, b.heat, equal_nan=True)


@pytest.mark.parametrize("cfg, drop, how, wrapped", [
    # (row groups across steps: the tests below)
    (SLOW_TP, (), "two files", True),
    (BARE, ("tp_rank", "dp_rank", "stage"), "no statistics", False),
])
def test_workers_give_the_one_process_diagnosis(tmp_path, cfg, drop, how, wrapped):
    table, _ = simulate_steps(cfg)
    table = table.drop_columns(list(drop))
    folder = _write(_wrapped(table) if wrapped else table, tmp_path / "t", how)
    one = diagnose_timeline(read_op_timeline(folder))
    assert TP.on_workers(folder, Workers(jobs=2)) is not None  # the workers' path taken
    _same(one, timeline_diagnosis(folder, workers=Workers(jobs=2)))
    # the synthesizer's slow worker is found either way (not an empty diagnosis)
    assert any(w.startswith("worker:") for w in one.advice_table["what_if"].to_pylist())
    if wrapped:
        assert any("wrapper timers (forward-backward) left out" in n for n in one.notes)


def test_a_local_cluster_gives_the_one_process_diagnosis(tmp_path):
    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    one = diagnose_timeline(read_op_timeline(folder))
    _same(one, timeline_diagnosis(folder, workers=Workers(scheduler="local")))


def test_the_command_on_workers_writes_the_same_tables(tmp_path):
    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    for jobs in ("1", "2"):
        r = CliRunner().invoke(main, ["diagnose", str(folder), "-j", jobs, "-o",
                                      str(tmp_path / f"out{jobs}")])
        assert r.exit_code == 0, r.output
    for f in sorted((tmp_path / "out1").glob("*.parquet")):
        assert pq.read_table(f).equals(pq.read_table(tmp_path / "out2" / f.name)), f.name
    assert (tmp_path / "out1/diagnosis.txt").read_text() == \
        (tmp_path / "out2/diagnosis.txt").read_text()


def test_small_and_other_formats_stay_in_this_process(tmp_path, monkeypatch):
    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    assert TP.on_workers(folder, Workers(jobs=1)) is None  # -j 1: here
    monkeypatch.setattr(TP, "MIN_ROWS", table.num_rows + 1)
    assert TP.on_workers(folder, Workers(jobs=2)) is None  # small: here
    from pyarrow import csv
    csv.write_csv(table, tmp_path / "t.csv")
    assert TP.on_workers(tmp_path / "t.csv", Workers(scheduler="local")) is None


def test_a_bad_row_is_named_as_one_process_names_it(tmp_path):
    table, _ = simulate_steps(SLOW_TP)
    dur = table["duration_ns"].to_numpy().copy()
    dur[3210] = -5
    bad = table.set_column(table.column_names.index("duration_ns"), "duration_ns",
                           pa.array(dur))
    folder = _write(bad, tmp_path / "t", "row groups")
    with pytest.raises(TraceVizError) as one:
        read_op_timeline(folder)
    with pytest.raises(TraceVizError) as mapped:
        timeline_diagnosis(folder, workers=Workers(jobs=2))
    assert str(mapped.value) == str(one.value) and "row 3211" in str(one.value)


def test_a_footer_whose_statistics_lie_is_named(tmp_path):
    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    _, groups = row_groups(folder)
    lying = [dataclasses.replace(g, steps=(g.steps[0], g.steps[0])) if k == 3 else g
             for k, g in enumerate(groups)]
    assert groups[3].steps[0] != groups[3].steps[1]  # the group holds two steps
    with pytest.raises(TraceVizError, match=r"t\.parquet: row group 3 holds steps .* its "
                                            "statistics say"):
        TP.facts_of_block((0, None, None), lying)


def test_a_file_changed_while_read_is_named(tmp_path):
    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    _, groups = row_groups(folder)
    pq.write_table(table.slice(0, 3000), folder / "t.parquet")
    with pytest.raises(TraceVizError, match="changed while it was being read"):
        TP.facts_of_block((0, None, None), groups)


def test_names_are_coded_in_the_order_rows_first_use_them(tmp_path, monkeypatch):
    """A parquet row group's dictionary, read a batch at a time, holds names no row of
    the batch uses (a step's optimizer ops come last): codes are given in the order rows
    first use the names, however the file is cut into batches, row groups and blocks
    (at 10,000 ranks a batch of a step's row group that used no optimizer op lost
    its name: an internal error)."""
    from traceviz.ingest import op_timeline as ingest

    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    ops = table["op"].to_pylist()
    expected = tuple(dict.fromkeys(ops))  # in the order of first use
    whole = read_op_timeline(folder).names
    monkeypatch.setattr(ingest, "BATCH_ROWS", 97)  # many batches of each row group
    assert read_op_timeline(folder).names == whole == expected
    found = [TP.facts_of_block((k, a, a + 2), row_groups(folder)[1])
             for k, a in enumerate(range(0, SLOW_TP.steps, 3))]
    first = {}
    for f in found:
        for name, pos in f.first_seen.items():
            first[name] = min(first.get(name, pos), pos)
    assert first == {n: (0, ops.index(n)) for n in expected}
    shape = TP.shape_of(found, folder, 1)
    assert shape.names == expected


def test_more_steps_than_sampled_in_many_blocks(tmp_path, monkeypatch):
    """20 steps (the typical values from 16 of them: their task reads only their row
    groups) cut into blocks of a few steps each."""
    cfg = dataclasses.replace(SLOW_TP, steps=20, slow_steps=None)
    table, _ = simulate_steps(cfg)
    folder = _write(table, tmp_path / "t", "row groups")
    monkeypatch.setattr(TP, "ROWS_PER_BLOCK", 700)
    run = TP.on_workers(folder, Workers(jobs=2))
    assert len(run.blocks) >= 8
    _same(diagnose_timeline(read_op_timeline(folder)),
          timeline_diagnosis(folder, workers=Workers(jobs=2)))


def test_a_nested_column_and_a_step_of_wrappers_alone(tmp_path):
    """A struct column before ``step`` (its statistics are found by the leaf's name, not
    the field's place), and a step that holds only wrapper timers (no step once they
    are left out, in one process as on the workers)."""
    table, _ = simulate_steps(SLOW_TP)
    extra = pa.table({"rank": pa.array(range(16), pa.int32()),
                      "step": pa.array([99] * 16, pa.int32()),
                      "op": pa.array(["forward-backward"] * 16),
                      "start_ns": pa.array([10**12] * 16, pa.int64()),
                      "duration_ns": pa.array([1000] * 16, pa.int64())})
    table = pa.concat_tables([table, extra.cast(pa.schema(
        [table.schema.field(c) for c in extra.column_names]))], promote_options="default")
    meta = pa.StructArray.from_arrays([pa.array(np.arange(table.num_rows)),
                                       pa.array(np.zeros(table.num_rows))], ["a", "b"])
    table = table.add_column(0, "meta", meta)
    folder = _write(table, tmp_path / "t", "row groups")
    _, groups = row_groups(folder)
    low, high = pc.min_max(table["step"].slice(0, 1000)).values()
    assert groups[0].steps == (low.as_py(), high.as_py())  # the step column's statistics
    one = diagnose_timeline(read_op_timeline(folder))
    assert 99 not in one.step_numbers
    _same(one, timeline_diagnosis(folder, workers=Workers(jobs=2)))


def test_a_timeline_of_many_files_keeps_one_open_at_a_time(tmp_path):
    """A file per rank and step (192 files) read with 100 descriptors allowed: each task
    has one file open at a time (every file open at once ran out of them)."""
    import resource

    table, _ = simulate_steps(SLOW_TP)
    folder = tmp_path / "t"
    folder.mkdir()
    for (rank, step), part in _groups(table):
        pq.write_table(part, folder / f"rank{rank:02d}_step{step:02d}.parquet")
    one = diagnose_timeline(read_op_timeline(folder))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))  # the workers inherit it
    try:
        mapped = timeline_diagnosis(folder, workers=Workers(jobs=2))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    _same(one, mapped)


def _groups(table: pa.Table):
    keys = pc.add(pc.multiply(pc.cast(table["rank"], pa.int64()), 1000),
                  pc.cast(table["step"], pa.int64())).to_numpy()
    for k in np.unique(keys):
        yield (int(k) // 1000, int(k) % 1000), table.filter(pa.array(keys == k))


def test_a_dead_worker_stops_the_diagnosis_naming_its_steps(tmp_path, monkeypatch):
    table, _ = simulate_steps(SLOW_TP)
    folder = _write(table, tmp_path / "t", "row groups")
    monkeypatch.setattr(TP, "measured_of_block", test_workers.block_dies_at_step_place_4)
    with pytest.raises(TraceVizError, match=r"the process modelling steps \d+ to \d+ of "
                                            "the op timeline killed by SIGKILL"):
        timeline_diagnosis(folder, workers=Workers(jobs=2))
