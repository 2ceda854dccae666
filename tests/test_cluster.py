"""The job-wide diagnosis mapped over ranks (README, On a cluster): each rank's piece
is made where its tables are read, in this process, on local worker processes or on a
Dask cluster, and every table the diagnosis and the critical path write is the same
either way. A worker that dies costs its rank, named; the job's diagnosis is then not
kept. Checked on a synthesized 64-rank job (tp2 pp4 dp8) with natural spread, one slow
GPU and one slow DP network, whose ground truth the synthesizer knows."""
from __future__ import annotations

import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from traceviz.analysis.critical_path.paths import job_path
from traceviz.cli import main
from traceviz.ingest import job_cache
from traceviz.ingest.rank_pieces import RankMap, Workers
from traceviz.ingest.tables import rank_files
from traceviz.job import products
from traceviz.synth import SynthConfig, synthesize

SLOW = 41  # its GPU 1.3x slower (stage 2 of tp2 pp4 dp8)


@pytest.fixture(scope="module")
def job64(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster")
    synthesize(SynthConfig(tp=2, pp=4, dp=8, microbatches=4, layers=4, seed=11,
                           gpu_sigma=0.015, kernel_noise=0.02, with_stack=False,
                           straggler_rank=SLOW, slow_link_rank=6, skew_us=300.0),
               root / "job")
    r = CliRunner().invoke(main, ["batch", str(root / "job"), "-o", str(root / "tables"),
                                  "-q", "--cpu", "-j", "2"])
    assert r.exit_code == 0, r.output
    return root / "tables" / "iteration_10"


def _diagnosis(folder, workers: Workers):
    shutil.rmtree(folder / ".traceviz-cache", ignore_errors=True)  # computed, not read
    return products.job_diagnosis(folder, workers=workers)


def _path_tables(folder, workers: Workers):
    found, _, _ = products.critical_path(folder, what_if=("COMM:DP=0.5",),
                                         workers=workers)
    return found.tables()


def test_every_table_is_the_same_here_on_processes_and_on_dask(job64):
    here = _diagnosis(job64, Workers(1))
    tables = here.tables()
    assert {"comm_calls", "ledger", "ledger_waits", "ledger_totals", "stragglers",
            "peer_speed", "wait_chain", "links", "advice"} <= set(tables)
    # the job's own truth: the slow GPU is the straggler and its fix is advised
    assert here.diagnosis.stragglers["rank"].to_pylist() == [SLOW]
    assert any(a.target_rank == SLOW for a in here.advice)
    for workers in (Workers(2), Workers(scheduler="local")):
        other = _diagnosis(job64, workers).tables()
        assert set(other) == set(tables)
        for name, table in tables.items():
            assert other[name].equals(table), (workers, name)
        assert other["comm_calls"].num_rows == tables["comm_calls"].num_rows > 0
    path = _path_tables(job64, Workers(1))
    assert path["critical_path"].num_rows > 0 and "critical_path_what_if" in path
    spread = _path_tables(job64, Workers(2))
    assert set(spread) == set(path)
    for name, table in path.items():
        assert spread[name].equals(table), name


def test_the_command_prints_the_same_with_a_scheduler(job64, tmp_path):
    out = {}
    for name, flags in (("here", ["-j", "1"]), ("dask", ["--scheduler", "local"])):
        shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
        r = CliRunner().invoke(main, ["diagnose", str(job64), "-o", str(tmp_path / name),
                                      *flags])
        assert r.exit_code == 0, r.output
        out[name] = (r.stdout, (tmp_path / name / "diagnosis.txt").read_text())
    assert out["here"] == out["dask"]
    assert f"rank {SLOW} " in out["here"][0]


def test_a_worker_that_dies_costs_its_rank_named(job64):
    import workers as test_workers

    mapped = RankMap(Workers(2), work=test_workers.piece_dies_on_rank_3)
    notes: list[str] = []
    jp = job_path(rank_files(job64), notes, pieces_of=mapped)
    assert [a.rank for a in jp.jc.acts] == [r for r in range(64) if r != 3]
    assert len(mapped.failed) == 1
    assert "rank 3 left out" in mapped.failed[0] and "killed by SIGKILL" in mapped.failed[0]


def test_a_diagnosis_with_a_rank_lost_to_a_worker_is_not_kept(job64, monkeypatch):
    """The ranks a dead worker cost are named with the diagnosis, and it is not kept
    beside the tables: the next run computes it whole."""
    import workers as test_workers

    made: list[RankMap] = []

    def dying(w: Workers) -> RankMap:
        made.append(RankMap(w, work=test_workers.piece_dies_on_rank_3))
        return made[-1]

    monkeypatch.setattr(products, "RankMap", dying)
    shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
    result = products.job_diagnosis(job64, workers=Workers(2))
    assert len(result.failed) == 1 and "rank 3 left out" in result.failed[0]
    assert 3 not in result.diagnosis.ranks and len(result.diagnosis.ranks) == 63
    key = job_cache.key_of(job64, None, {"num_layers": None, "link_gbps": None})
    assert job_cache.load_diagnosis(job64, key, advice=True) is None


def test_clocks_beyond_the_dense_solve_are_the_dense_solve():
    """Past :data:`DENSE_MAX` clocks the offsets are solved by conjugate gradients,
    never as an n x n matrix; on two sets of 400 clocks each linked by random calls
    they are the direct solve's to far below a ns, each set's lowest clock at 0."""
    import numpy as np

    from traceviz.analysis import clocks

    rng = np.random.default_rng(5)
    n, calls = 800, 4000
    unknown, call = [], []
    for c in range(calls):
        members = rng.choice(n // 2, size=int(rng.integers(2, 30)), replace=False)
        unknown += (members + (n // 2 if c % 2 else 0)).tolist()
        call += [c] * members.size
    unknown, call = np.array(unknown), np.array(call)
    true = rng.normal(0, 1e6, n)
    rel = rng.uniform(0, 1e9, calls)[call] + true[unknown] + rng.normal(0, 500, call.size)
    rel -= rel.min()
    m = np.bincount(call).astype(np.float64)
    ref = clocks._components(unknown, call, n, calls)
    assert sorted(set(ref.tolist())) == [0, n // 2]
    direct = clocks._dense_solve(unknown, call, m, rel, n, ref)
    iterated = clocks._iterative_solve(unknown, call, m, rel, n, ref)
    assert np.abs(direct - iterated).max() < 1e-3
    assert iterated[0] == 0 and iterated[n // 2] == 0
    # and both recover the true offsets (relative to each set's first clock) to noise
    for lo in (0, n // 2):
        part = slice(lo, lo + n // 2)
        assert np.abs(iterated[part] - (true[part] - true[lo])).max() < 2_000


def test_a_job_synced_iteratively_has_the_same_tables(job64, monkeypatch):
    """The 64-rank job's clocks solved by conjugate gradients (as beyond 1,024 ranks)
    give every table the direct solve gives."""
    from traceviz.analysis import clocks

    direct = _diagnosis(job64, Workers(1)).tables()
    monkeypatch.setattr(clocks, "DENSE_MAX", 8)
    iterated = _diagnosis(job64, Workers(1)).tables()
    for name, table in direct.items():
        assert iterated[name].equals(table), name


def test_two_runs_on_one_job_at_once_agree_and_keep_one_diagnosis(job64, tmp_path):
    """Two diagnose commands started together on one job (each its own workers) write
    the same tables, and the diagnosis they keep beside the tables is whole: the next
    run reads it and writes the same again."""
    import subprocess
    import sys

    shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
    runs = [subprocess.Popen([sys.executable, "-m", "traceviz", "diagnose", str(job64),
                              "-o", str(tmp_path / f"run{k}"), "-j", "2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for k in range(2)]
    outs = [p.communicate(timeout=600) for p in runs]
    assert all(p.returncode == 0 for p in runs), outs
    first = products.job_diagnosis(job64)  # read back from what the runs kept
    key = job_cache.key_of(job64, None, {"num_layers": None, "link_gbps": None})
    assert job_cache.load_diagnosis(job64, key, advice=True) is not None
    import pyarrow.parquet as pq

    for name, table in first.tables().items():
        for k in range(2):
            written = pq.read_table(tmp_path / f"run{k}" / f"{name}.parquet")
            assert written.equals(table.cast(written.schema)), (k, name)


def test_many_small_tasks_finish_on_local_workers():
    """Tens of thousands of tasks (a job's ranks) on two local workers all finish, each
    once: nothing the workers say per task can fill up and block them."""
    import time

    import workers as test_workers

    from traceviz.ingest import workers as runner

    start = time.monotonic()
    done = list(runner.run(test_workers.square, list(range(20_000)), jobs=2))
    assert sorted(f.task for f in done) == list(range(20_000))
    assert all(f.result == f.task ** 2 and f.died is None for f in done)
    assert time.monotonic() - start < 120


def test_a_bad_table_read_on_a_worker_is_the_one_line_error(tmp_path):
    """A loader's error raised on a worker comes back as raised here (its type and its
    line), not as a worker's death or a traceback."""
    import pickle

    import workers as test_workers

    from traceviz.errors import TraceError
    from traceviz.ingest import workers as runner

    err = TraceError("a.parquet", "not a parquet file", offset=7, hint="parse it again")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is TraceError and str(back) == str(err) and back.offset == 7
    bad = tmp_path / "rank_0001.parquet"
    bad.write_bytes(b"PAR1 not really")
    with pytest.raises(TraceError) as caught:
        list(runner.run(test_workers.read_it, [str(bad)] * 3, jobs=2))
    assert str(bad) in str(caught.value) and "\n" not in str(caught.value)


def test_workers_that_cannot_start_are_one_line_not_a_loop():
    import workers as test_workers

    from traceviz.errors import TraceVizError
    from traceviz.ingest import workers as runner

    with pytest.raises(TraceVizError, match="died before any task began"):
        list(runner.run(test_workers.square, list(range(10)), jobs=2,
                        init=test_workers.init_dies))


def test_a_traces_parse_options_do_not_walk_the_jobs_groups(monkeypatch):
    """Each trace of a job is parsed with the job's layout: what the table records of it
    (its digest) comes from its sizes and order, never from its O(world) groups (at
    16,384 ranks those cost 0.85 s per trace, ~100 min per batch on 2 cores); a layout's
    pipelines are generated once for all its traces."""
    from traceviz.classify.patterns import load_patterns
    from traceviz.ingest.build import parse_options
    from traceviz.topology import layout as L

    big = L.Layout(world=16_384, tp=2, pp=4)
    same = L.Layout(world=16_384, tp=2, pp=4)
    other = L.Layout(world=16_384, tp=4, pp=4)
    first = big.generator("dense", "pp")
    assert first == same.generator("dense", "pp") and len(first) == 4096

    def walked(*a, **k):
        raise AssertionError("the layout's groups were generated")

    monkeypatch.setattr(L, "generate", walked)
    patterns = load_patterns()
    assert parse_options(big, patterns, None) == parse_options(same, patterns, None)
    assert parse_options(big, patterns, None) != parse_options(other, patterns, None)
    assert big.generator("dense", "pp") == first  # kept, not generated again


def test_a_folder_of_tables_is_told_from_an_op_timeline_by_one_footer(job64):
    """Every command asks whether a job is an op timeline first: a folder of parsed
    tables says no from its first table's footer, not from every table's (each states
    the job's groups: at 16,384 ranks reading them all took minutes)."""
    from traceviz.ingest.op_timeline import is_op_timeline
    from traceviz.table import schema

    schema._footer.cache_clear()
    assert not is_op_timeline(job64)
    assert schema._footer.cache_info().misses == 1


def test_a_tables_footer_keeps_the_worlds_group_without_its_ranks(job64, tmp_path):
    """Every rank's trace lists the default group's ranks, all of them: kept in every
    table's footer, a job's footers would hold O(world^2) numbers (0.9 MB per table at
    16,384 ranks). A footer keeps that group once, without its ranks; the layout derived
    from the tables is the traces', and a pipeline of the whole world is read back."""
    from traceviz.analysis.diagnose.diagnosis import pipelines_of
    from traceviz.ingest.topology import from_traces
    from traceviz.table.schema import cut_groups, file_metadata

    metas = [file_metadata(p) for p in sorted(job64.glob("rank_*[0-9].parquet"))]
    assert len(metas) == 64
    for m in metas:
        assert "pg_config" not in m["distributed"]
        whole = [pg for pg in m["pg_config"] if pg.get("all_ranks")]
        assert len(whole) == 1 and "ranks" not in whole[0]
        assert all(len(pg["ranks"]) < 64 for pg in m["pg_config"] if "ranks" in pg)
    assert from_traces(job64).groups() == from_traces(job64.parent.parent / "job").groups()
    # a pipeline of every rank (pp 4 alone): its group is the world's, and read back
    synthesize(SynthConfig(tp=1, pp=4, dp=1, microbatches=4, layers=4, seed=3,
                           with_stack=False), tmp_path / "job")
    r = CliRunner().invoke(main, ["batch", str(tmp_path / "job"), "-o",
                                  str(tmp_path / "tables"), "-q"])
    assert r.exit_code == 0, r.output
    files = sorted((tmp_path / "tables" / "iteration_10").glob("rank_*[0-9].parquet"))
    assert len(files) == 4
    pipes = [pg for pg in file_metadata(files[0])["pg_config"]
             if pg.get("pg_desc") == "PIPELINE_MODEL_PARALLEL_GROUP"]
    assert len(pipes) == 1 and pipes[0].get("all_ranks") and "ranks" not in pipes[0]
    assert pipelines_of(cut_groups(file_metadata(p)) for p in files) == [[0, 1, 2, 3]]


def test_a_large_call_joined_through_its_hub_times_the_job_as_every_pair_does(
        job64, monkeypatch):
    """A call of n members joined pairwise costs n (n - 1) edges (a DP group of 2,048
    ranks: 4 M per call, 80 M at 16,384 ranks); from HUB_MIN_MEMBERS on it is joined
    through one point. Every call of the 64-rank job joined through a hub gives the
    critical path, its what-ifs (the group's link, a rank, a straggler, a kernel on a
    rank) and the diagnosis's advice of every call joined pairwise, with far fewer
    edges."""
    from traceviz.analysis.critical_path import job as J
    from traceviz.table.schema import group_ranks

    what_if = ("COMM:DP=0.5", "link:DP@6=0.333", "straggler=fix",
               "kernel@41:*gemm*=0.8", "overlap=DP")

    def run():
        found, _, _ = products.critical_path(job64, what_if=what_if, workers=Workers(1))
        return found, _diagnosis(job64, Workers(1))

    pairwise, diag = run()
    monkeypatch.setattr(J, "HUB_MIN_MEMBERS", 2)
    hubbed, hub_diag = run()
    assert pairwise.iteration_ns == hubbed.iteration_ns and pairwise.edges == hubbed.edges
    for name, table in pairwise.tables().items():
        assert hubbed.tables()[name].equals(table), name
    for name, table in diag.tables().items():
        assert hub_diag.tables()[name].equals(table), name
    changed = pairwise.what_if.column("change_pct").to_pylist()
    assert all(c is not None for c in changed) and min(changed) < -1  # they re-time
    # one rank's transfers: pairwise, the edges from its start speed every member's end
    # up; through a hub (every member's) only its own kernel's span: never more saved
    monkeypatch.setattr(J, "HUB_MIN_MEMBERS", 10**6)
    alone = products.critical_path(job64, what_if=("rank:5=0.5",), workers=Workers(1))[0]
    monkeypatch.setattr(J, "HUB_MIN_MEMBERS", 2)
    hub_alone = products.critical_path(job64, what_if=("rank:5=0.5",),
                                       workers=Workers(1))[0]
    iteration = [w.column("iteration_ns")[0].as_py() for w in (alone.what_if,
                                                                hub_alone.what_if)]
    assert iteration[0] <= iteration[1] <= pairwise.iteration_ns
    assert group_ranks({"all_ranks": True}, 2_000_000_000) is None  # never built
    # the graphs: a DP call of 8 members 2 x 8 edges through its hub, not 8 x 7
    notes: list[str] = []
    sizes = {}
    for hub_min in (10**6, 3):
        monkeypatch.setattr(J, "HUB_MIN_MEMBERS", hub_min)
        jp = job_path(rank_files(job64), notes, pieces_of=RankMap(Workers(1)))
        sizes[hub_min] = int((jp.jg.graph.kind == J.COLLECTIVE).sum())
        hubs = jp.jg.graph.n_nodes - int(jp.jg.node_base[-1])
        assert hubs == (0 if hub_min > 8 else jp.jg.hub_source.size) and (hub_min > 8 or hubs)
    assert sizes[3] < sizes[10**6] - 30 * hubs


def _aggregated(folder, alignment: str, workers: Workers):
    agg, failed, _, _ = products.aggregation(folder, folder, alignment, workers=workers)
    return agg, failed


def test_the_aggregation_is_the_same_here_on_processes_and_on_dask(job64):
    """``aggregate``'s tables (micro-batches, categories, clock offsets) and each rank's
    categorized activities, synced and on the ranks' own clocks, are the same whether
    the ranks' tables are read here, on local processes or on Dask."""
    from traceviz.analysis.activities import activities
    from traceviz.table.io import read_table

    for alignment in ("synced", "global"):
        here, failed = _aggregated(job64, alignment, Workers(1))
        assert not failed and here.alignment == alignment and len(here.ranks) == 64
        for workers in (Workers(2), Workers(scheduler="local")):
            other, failed = _aggregated(job64, alignment, workers)
            assert not failed
            for name in ("microbatches", "category_spans", "clock_offsets"):
                assert getattr(other, name).equals(getattr(here, name)), (alignment, name)
            assert other.notes == here.notes
            for a, b in zip(here.ranks, other.ranks):
                assert a.rank == b.rank
                for col in ("ts", "end", "category", "iteration"):
                    assert (getattr(a, col) == getattr(b, col)).all(), (alignment, col)
        if alignment == "global":
            # each rank on its own clock: its table's times, whatever the clocks' skew
            offsets = dict(zip(here.clock_offsets.column("rank").to_pylist(),
                               here.clock_offsets.column("offset_ns").to_pylist()))
            assert any(offsets.values())  # the job's clocks are skewed (300 us)
            for cats in here.ranks[:8]:
                own = activities(read_table(job64 / f"rank_{cats.rank:04d}.parquet"),
                                 rank=cats.rank)
                assert np.isin(own.ts, cats.ts).all() and np.isin(own.end, cats.end).all()
                assert cats.ts.min() == own.ts.min() and cats.end.max() == own.end.max()


def test_an_unreadable_table_costs_its_rank_named(job64, tmp_path):
    """On workers, a rank table that cannot be read is named (its file), and every other
    rank is aggregated, diagnosed and on the critical path's graph."""
    folder = tmp_path / "iteration_10"
    shutil.copytree(job64, folder, ignore=shutil.ignore_patterns(".traceviz-cache"))
    bad = folder / "rank_0005.parquet"
    data = bad.read_bytes()
    bad.write_bytes(data[:len(data) // 2])  # cut: no footer
    # and a cut table whose name states no rank (a trace's own name), with its CPU table
    nameless = folder / "host_4242.1700000000.pt.trace.parquet"
    nameless.write_bytes(data[:100])
    nameless.with_name("host_4242.1700000000.pt.trace.cpu.parquet").write_bytes(data[:100])
    agg, failed = _aggregated(folder, "synced", Workers(2))
    assert len(failed) == 2 and all("\n" not in f for f in failed)
    assert {str(bad), str(nameless)} == {f.split(":")[0] for f in failed}
    assert [c.rank for c in agg.ranks] == [r for r in range(64) if r != 5]
    diag = products.job_diagnosis(folder, workers=Workers(2))
    assert {str(bad), str(nameless)} == {f.split(":")[0] for f in diag.failed}
    assert diag.diagnosis.ranks == [r for r in range(64) if r != 5]
    assert diag.advice
    found, _, _ = products.critical_path(folder, workers=Workers(2))
    assert {str(bad), str(nameless)} == {f.split(":")[0] for f in found.failed}
    assert found.ranks == 63


def test_a_what_if_puts_the_graphs_own_times_back(job64):
    """A what-if scales the graph's own times in place while it re-times the job: after
    it (and after one that fails) they are the measured ones, and the same what-if
    predicts the same iteration again."""
    from traceviz.analysis.critical_path import what_if as W
    from traceviz.errors import UsageError

    jp = job_path(rank_files(job64), [], pieces_of=RankMap(Workers(1)))
    ctx = W.Context(jp.jg, jp.measured)
    own = jp.jg.own.copy()
    first = W.evaluate(ctx, ["COMP=0.5", "COMM:DP=0.5"])
    assert (jp.jg.own == own).all()
    assert first.iteration_ns < first.baseline_ns
    with pytest.raises(UsageError):
        W.evaluate(ctx, ["COMP=0.5", "nonsense=2"])
    assert (jp.jg.own == own).all()
    with pytest.raises(UsageError, match="a number >= 0"):  # inf: no time to re-time
        W.evaluate(ctx, ["COMP=1e999"])
    real = W.retime

    def fails(*args):
        raise RuntimeError("while re-timing")

    W.retime = fails  # fails with the own times scaled: they are put back
    try:
        with pytest.raises(RuntimeError):
            W.evaluate(ctx, ["COMP=0.5"])
    finally:
        W.retime = real
    assert (jp.jg.own == own).all()
    again = W.evaluate(ctx, ["COMP=0.5", "COMM:DP=0.5"])
    assert again.iteration_ns == first.iteration_ns and again.path_ranks == first.path_ranks
    assert W.evaluate(ctx, ["COMP=1"]).iteration_ns == first.baseline_ns


def test_a_diagnosis_without_advice_is_the_same_here_on_processes_and_on_dask(job64):
    """Without advice (or CPU tables) each rank's activities and communication are made
    where its table is read: every table equals the diagnosis of the tables all read
    into one process (:func:`~traceviz.analysis.diagnose.diagnosis.diagnose`), whether
    made here, on local processes or on Dask; the slow GPU is the straggler."""
    from traceviz.analysis.advice import JobDiagnosis
    from traceviz.analysis.diagnose.diagnosis import diagnose
    from traceviz.ingest.tables import rank_tables

    files = sorted(p for p in job64.glob("rank_*.parquet") if ".cpu." not in p.name)
    tables = {r: t for r, _, t in rank_tables(files, products.DIAGNOSIS_COLUMNS, [])}
    direct = JobDiagnosis(diagnose(tables, products._pipelines(job64, job64, None, tables)),
                          None, ()).tables()
    assert direct["stragglers"]["rank"].to_pylist() == [SLOW] and len(direct) > 5
    for workers in (Workers(1), Workers(2), Workers(scheduler="local")):
        shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
        found = products.job_diagnosis(job64, advice=False, workers=workers)
        assert not found.failed and found.advice_table is None
        got = found.tables()
        assert set(got) == set(direct)
        for name, table in direct.items():
            assert got[name].equals(table), (workers, name)


def test_two_tables_of_one_rank_are_named_before_any_is_read(job64, tmp_path,
                                                             monkeypatch):
    """Two tables that state one rank: one line naming both (as reading them would),
    from their footers, before any table is read."""
    from traceviz.ingest import rank_pieces

    folder = tmp_path / "iteration_10"
    folder.mkdir()
    for r in (0, 1):
        shutil.copy(job64 / "rank_0000.parquet", folder / f"rank_{r:04d}.parquet")

    def never(*args, **kwargs):
        raise AssertionError("a table read")

    monkeypatch.setattr(rank_pieces, "load_table", never)
    r = CliRunner().invoke(main, ["diagnose", str(folder), "--no-advice", "-o",
                                  str(tmp_path / "d")])
    assert r.exit_code == 1
    said = r.output.strip()
    assert "\n" not in said and "are both rank 0" in said
    assert str(folder / "rank_0000.parquet") in said and str(folder / "rank_0001.parquet") \
        in said


def test_the_report_is_the_same_here_on_processes_and_on_dask(job64, tmp_path):
    """``report``'s per-rank summaries are made where each table is read: the report is
    the same whether made here, on local processes or on Dask. With a rank lost (its
    table cut) it names the file and is not kept: the next run makes it again."""
    from traceviz.analysis.report import report_json
    from traceviz.job.report import make_report

    made = {}
    for name, workers in (("here", Workers(1)), ("processes", Workers(2)),
                          ("dask", Workers(scheduler="local"))):
        shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
        made[name] = report_json(make_report(job64, workers=workers))
    assert made["here"] == made["processes"] == made["dask"]
    assert made["here"]["failed"] == [] and made["here"]["configuration"]["world_size"] == 64
    assert (job64 / ".traceviz-cache" / "report").is_dir()  # a whole report: kept
    folder = tmp_path / "iteration_10"
    shutil.copytree(job64, folder, ignore=shutil.ignore_patterns(".traceviz-cache"))
    bad = folder / "rank_0009.parquet"
    bad.write_bytes(bad.read_bytes()[:1000])
    rep = make_report(folder, workers=Workers(2))
    assert [f.split(":")[0] for f in rep["failed"]] == [str(bad)]
    assert not (folder / ".traceviz-cache" / "report").exists()


def test_the_op_model_is_the_same_here_on_processes_and_on_dask(job64, tmp_path):
    """``ops``: each rank's op model made where its tables are read; the same here, on
    local processes and on Dask. A rank whose CPU table is cut is named (its file) and
    the others modelled; that op model is not kept."""
    made = {}
    for name, workers in (("here", Workers(1)), ("processes", Workers(2)),
                          ("dask", Workers(scheduler="local"))):
        shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
        failed: list[str] = []
        made[name] = products.ops(job64, workers=workers, failed=failed)
        assert failed == []
    here = made["here"]
    assert here.ranks == tuple(range(64)) and here.calls.num_rows > 0
    assert (job64 / ".traceviz-cache" / "op_model").is_dir()  # a whole op model: kept
    for other in (made["processes"], made["dask"]):
        assert other.ranks == here.ranks and other.total_ns == here.total_ns
        for name, table in here.tables().items():
            assert other.tables()[name].equals(table), name
    folder = tmp_path / "iteration_10"
    shutil.copytree(job64, folder, ignore=shutil.ignore_patterns(".traceviz-cache"))
    bad = folder / "rank_0007.cpu.parquet"
    bad.write_bytes(bad.read_bytes()[:500])
    r = CliRunner().invoke(main, ["ops", str(folder), "-j", "2", "-o", str(tmp_path / "o")])
    assert r.exit_code == 1 and "op model of 63 rank(s)" in r.output, r.output
    assert f"failed: {bad}" in r.output and "Traceback" not in r.output
    assert (tmp_path / "o" / "ops_by_shape.parquet").exists()  # the others, written
    failed = []
    model = products.ops(folder, workers=Workers(2), failed=failed)
    assert model.ranks == tuple(r for r in range(64) if r != 7)
    assert [f.split(":")[0] for f in failed] == [str(bad)]
    assert not (folder / ".traceviz-cache" / "op_model").exists()


def test_the_breakdown_is_the_same_here_on_processes_and_on_dask(job64):
    """``breakdown`` of a job's tables: each rank's activities and communication rows
    made where its table is read; every table equals the breakdown of the tables read
    in this process, one at a time, whether made here, on local processes or on Dask."""
    from traceviz.analysis.activities import Options
    from traceviz.analysis.breakdown import (READ_COLUMNS, READ_OPTIONAL, breakdown_of,
                                             breakdown_part)
    from traceviz.ingest.tables import rank_tables

    shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
    files = sorted(p for p in job64.glob("rank_*.parquet") if ".cpu." not in p.name)
    direct = breakdown_of(breakdown_part(t, Options(), r) for r, _, t in rank_tables(
        files, READ_COLUMNS, [], READ_OPTIONAL)).tables()
    assert direct["temporal_breakdown"].num_rows >= 64
    for workers in (Workers(1), Workers(2), Workers(scheduler="local")):
        shutil.rmtree(job64 / ".traceviz-cache", ignore_errors=True)
        failed: list[str] = []
        got = products.breakdown([job64], failed=failed, workers=workers)
        assert failed == [] and got.ranks == tuple(range(64))
        for name, table in direct.items():  # NaN where a stream has no gaps: equal
            assert got.tables()[name].to_pandas().equals(table.to_pandas()), (workers, name)
    # with the kept diagnosis's split (no matching again), and of chosen ranks only
    diag = products.job_diagnosis(job64, advice=False, workers=Workers(2)).diagnosis
    for chosen in (None, (3, 41)):
        kept = breakdown_of((breakdown_part(t, Options(), r) for r, _, t in rank_tables(
            files, READ_COLUMNS, [], READ_OPTIONAL)), ranks=chosen, diag=diag).tables()
        for workers in (Workers(1), Workers(2)):
            shutil.rmtree(job64 / ".traceviz-cache" / "breakdown", ignore_errors=True)
            got = products.breakdown([job64], ranks=chosen, workers=workers)
            assert got.ranks == (chosen or tuple(range(64)))
            for name, table in kept.items():
                assert got.tables()[name].to_pandas().equals(table.to_pandas()), name


def test_the_step_windows_are_the_same_here_on_processes_and_on_dask(job64, monkeypatch):
    """html's step windows on the kept diagnosis's clocks: each rank's activities made
    where its table is read; the same here, on local processes and on Dask, and the same
    as the aggregation's micro-batches (which match the job again)."""
    products.job_diagnosis(job64, workers=Workers(2))  # kept: its clocks are taken
    agg, failed, _, _ = products.aggregation(job64, job64)
    assert not failed

    def not_again(*args, **kwargs):
        raise AssertionError("the diagnosis's clocks are taken: no matching again")

    monkeypatch.setattr(products, "aggregation", not_again)
    for workers in (Workers(1), Workers(2), Workers(scheduler="local")):
        shutil.rmtree(job64 / ".traceviz-cache" / "step_windows", ignore_errors=True)
        steps, clocks = products.step_windows(job64, job64, workers=workers)
        assert clocks == "shifted"
        assert steps.to_pandas().equals(agg.microbatches.to_pandas()), workers
