"""traceviz batch + aggregate on synthesized jobs: micro-batch metrics equal plain-Python
unions of the ground-truth kernels, clock offsets equal the applied skew, failures are
isolated, every expected figure is a real PNG, Dask gives the same tables."""
from __future__ import annotations

import csv
import json
import os

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from helpers import STEP_PHASES, out_dir, union_length

from traceviz.cli import main
from traceviz.synth import SynthConfig, synthesize
from traceviz.synth.emit import TS_OFFSET_NS  # truth ts = trace ts - this
from traceviz.table.schema import GROUPS


def _truth_rows(root) -> tuple[list[dict], list[int]]:
    truth = json.loads((root / "ground_truth" / "ground_truth.json").read_text())
    return pq.read_table(root / "ground_truth" / "kernels.parquet").to_pylist(), truth["skew_ns"]


def _spans(ks) -> list[tuple[int, int]]:
    return [(k["ts"], k["ts"] + k["dur"]) for k in ks]


def _hidden(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """|U(a) ∩ U(b)| by inclusion-exclusion of plain unions."""
    return union_length(a) + union_length(b) - union_length(a + b)


def _expected_microbatches(root, ranks) -> dict[tuple, dict]:
    """Per step (README "Definitions"): the window holds every kernel of the step but its
    pipeline P2P hand-offs; per-group comm and overlap; recompute split by kind."""
    kernels, skew = _truth_rows(root)
    groups: dict[tuple, list[dict]] = {}
    for k in kernels:
        if k["rank"] in ranks and k["phase"] in STEP_PHASES and k["microbatch"] >= 0:
            key = (k["rank"], k["iteration"], "Forward" if k["phase"] == "FWD" else "Backward",
                   k["microbatch"], k["chunk"])
            groups.setdefault(key, []).append(k)
    out = {}
    for key, ks in groups.items():
        own = [k for k in ks if not k["p2p"]]
        comp = _spans(k for k in own if k["kind"] == "COMP")
        comm = _spans(k for k in own if k["kind"] == "COMM")
        rc = [k for k in own if k["phase"] == "RECOMPUTE"]
        start = min(s for s, _ in _spans(own))
        end = max(e for _, e in _spans(own))
        want = {"comp_ns": union_length(comp), "comm_ns": union_length(comm),
                "mem_ns": union_length(_spans(k for k in own if k["kind"] == "MEM")),
                "overlap_ns": _hidden(comp, comm), "start_ns": start + TS_OFFSET_NS
                - skew[key[0]], "wall_clock_ns": end - start,
                "idle_ns": end - start - union_length(_spans(own)),
                "recompute_ns": union_length(_spans(rc)),
                "recompute_comp_ns": union_length(_spans(k for k in rc if k["kind"] == "COMP")),
                "recompute_comm_ns": union_length(_spans(k for k in rc if k["kind"] == "COMM")),
                "p2p_ns": union_length(_spans(k for k in ks if k["p2p"]))}
        for g in GROUPS:
            mine = _spans(k for k in own if k["kind"] == "COMM" and k["comm_group"] == g)
            want[f"comm_{g.lower()}_ns"] = union_length(mine)
            want[f"overlap_{g.lower()}_ns"] = _hidden(comp, mine)
        out[key] = want
    return out


def _check_microbatches(root, out, ranks) -> None:
    want = _expected_microbatches(root, ranks)
    got = {(r["rank"], r["iteration"], r["phase"], r["microbatch"], r["chunk"]): r
           for r in pq.read_table(out / "microbatches.parquet").to_pylist()
           if r["rank"] in ranks}
    assert got.keys() == want.keys()
    for key, w in want.items():
        for col, v in w.items():
            assert got[key][col] == v, (key, col)
    # the synthesizer's own truth (synth/truth.py) says the same
    truth = json.loads((root / "ground_truth" / "ground_truth.json").read_text())
    for r in ranks:
        for m in truth["ranks"][str(r)]["microbatches"]:
            g = got[(r, m["iteration"], "Forward" if m["op"] == "F" else "Backward",
                     m["microbatch"], m["chunk"])]
            assert (g["wall_clock_ns"], g["comp_ns"], g["comm_ns"], g["mem_ns"],
                    g["overlap_ns"], g["idle_ns"], g["recompute_ns"], g["recompute_comp_ns"],
                    g["recompute_comm_ns"], g["p2p_ns"]) == (
                m["wall"], m["comp"], m["comm"], m["mem"], m["overlap"], m["idle"],
                m["recompute"], m["recompute_comp"], m["recompute_comm"], m["p2p"])
            for grp, (comm, hidden) in m["groups"].items():
                assert (g[f"comm_{grp.lower()}_ns"], g[f"overlap_{grp.lower()}_ns"]) == (
                    comm, hidden), grp


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    synthesize(SynthConfig(tp=2, pp=4, dp=2, microbatches=4, layers=4, with_stack=False,
                           skew_us=400.0, gpus_per_node=4, truncate_rank=6), root)
    return root


def test_batch_then_aggregate(job):
    runner = CliRunner()
    result = runner.invoke(main, ["batch", str(job), "-j", "2", "-q"])
    assert result.exit_code == 0, result.output
    assert "16 parsed" in result.output and "warning rank 6" in result.output
    out = out_dir(job) / "iteration_10"
    assert len(list(out.glob("rank_*.parquet"))) == 16
    again = runner.invoke(main, ["batch", str(job), "-q"])
    assert "0 parsed, 16 up to date" in again.output

    result = runner.invoke(main, ["aggregate", str(job)])
    assert result.exit_code == 0, result.output
    complete = [r for r in range(16) if r != 6]  # rank 6 is cut mid-trace
    _check_microbatches(job, out, complete)

    # clock offsets: the synthesizer's per-node skew, relative to rank 0
    _, skew = _truth_rows(job)
    offsets = {int(r["rank"]): int(r["offset_ns"]) for r in
               csv.DictReader(open(out / "clock_offsets.csv"))}
    for r in range(16):
        assert abs(offsets[r] - (skew[r] - skew[0])) <= 1000, r

    pngs = [out / f"rank_{r:04d}" / n for r in range(16)
            for n in ("overlapping_timeline.png", f"comm_comp_overlap_combined_rank{r}.png")]
    pngs += [out / f"PP_group_{i}" / f"pp_group_{i}_ranks_{i}_{i + 4}_{i + 8}_{i + 12}_synced.png"
             for i in range(4)]
    pngs += [out / f"Model_Group_{g}" / f"Model_Group_{g}_all_{kind}.png" for g in range(2)
             for kind in ("pp_groups_concatenated", "ranks_combined")]
    import matplotlib.image as mpimg

    for p in pngs:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", p
        h, w = mpimg.imread(p).shape[:2]
        assert 300 <= w <= 4000 and 200 <= h <= 6000, (p, w, h)


@pytest.mark.parametrize("cfg", [
    SynthConfig(tp=4, pp=2, dp=2, microbatches=4, layers=4, recompute=True,
                with_stack=False),
    SynthConfig(tp=2, pp=2, dp=1, vpp=2, schedule="interleaved", microbatches=4, layers=8,
                with_stack=False),
], ids=["tp4pp2dp2-recompute", "interleaved-vpp2"])
def test_microbatches_other_schedules(tmp_path, cfg):
    synthesize(cfg, tmp_path)
    extra = ["--vpp", str(cfg.vpp)] if cfg.vpp > 1 else []
    assert CliRunner().invoke(main, ["batch", str(tmp_path), "-q", "-j", "1"]
                              + extra).exit_code == 0
    result = CliRunner().invoke(main, ["aggregate", str(tmp_path), "--no-figures"])
    assert result.exit_code == 0, result.output
    world = cfg.tp * cfg.pp * cfg.dp
    _check_microbatches(tmp_path, out_dir(tmp_path) / "iteration_10", range(world))


def test_failed_rank_is_isolated(tmp_path):
    synthesize(SynthConfig(tp=1, pp=2, dp=2, microbatches=2, layers=2), tmp_path)
    bad = next(tmp_path.rglob("rank_0002*.json"))
    text = bad.read_bytes()
    cut = text.index(b'"ph"', len(text) // 2)  # a key without its value: bad JSON
    bad.write_bytes(text[:cut] + b'"ph" @@, ' + text[cut:])
    result = CliRunner().invoke(main, ["batch", str(tmp_path), "-q", "-j", "2"])
    assert result.exit_code == 1
    assert "failed rank 2:" in result.output and "Traceback" not in result.output
    out = out_dir(tmp_path) / "iteration_10"
    assert sorted(p.name for p in out.glob("rank_*.parquet")) == [
        "rank_0000.parquet", "rank_0001.parquet", "rank_0003.parquet"]
    summary = json.loads((out_dir(tmp_path) / "batch_summary.json").read_text())
    assert [o["status"] for o in summary["outcomes"]].count("failed") == 1
    # aggregation goes on with the ranks that parsed, names the one that did not, exits 1
    agg = CliRunner().invoke(main, ["aggregate", str(tmp_path), "--no-figures"])
    assert agg.exit_code == 1 and "3 ranks" in agg.output
    assert agg.output.count("failed: ") == 1 and str(bad) in agg.output
    assert (out / "microbatches.csv").exists()


def test_no_traces_is_one_line(tmp_path):
    (tmp_path / "notes.json").write_text('{"hello": 1}')
    result = CliRunner().invoke(main, ["batch", str(tmp_path)])
    assert result.exit_code == 1 and "1 JSON file(s) but none is a Kineto trace" in result.output


def test_dask_local_cluster_gives_identical_tables(tmp_path):
    pytest.importorskip("distributed", reason="Dask distributed is in the test extra")
    synthesize(SynthConfig(tp=2, pp=2, dp=1, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    runner = CliRunner()
    assert runner.invoke(main, ["batch", str(tmp_path / "job"), "-q", "-j", "1", "-o",
                                str(tmp_path / "local")]).exit_code == 0
    result = runner.invoke(main, ["batch", str(tmp_path / "job"), "-q", "--dask", "-o",
                                  str(tmp_path / "dask")])
    assert result.exit_code == 0, result.output
    for p in sorted((tmp_path / "local").rglob("rank_*.parquet")):
        q = tmp_path / "dask" / p.relative_to(tmp_path / "local")
        assert pq.read_table(p).equals(pq.read_table(q)), p.name


def test_cached_tables_belong_to_their_job(tmp_path):
    """Tables in ./traceviz-out/<folder name> are keyed by the job's full path and each
    trace's size and time: another job of the same folder name is parsed for itself and
    its analyses see its own ranks only; a trace replaced by another copied with an
    older time kept is parsed again."""
    import shutil

    from traceviz.commands import diagnose

    a = synthesize(SynthConfig(tp=2, pp=4, dp=2, microbatches=2, layers=4, seed=1),
                   tmp_path / "a" / "job")
    b = synthesize(SynthConfig(tp=2, pp=2, dp=2, microbatches=2, layers=4, seed=2),
                   tmp_path / "b" / "job")
    assert CliRunner().invoke(main, ["batch", str(a), "-q"]).exit_code == 0
    assert len(diagnose.run(a).value.diagnosis.ranks) == 16
    # the same folder name, another job: its 8 ranks, not 16
    assert diagnose.run(b).value.diagnosis.ranks == list(range(8))
    # a trace replaced by another with an older modification time kept (cp -p, rsync -a)
    trace = next((b / "iteration_10").glob("rank_0001_*"))
    other = next((a / "iteration_10").glob("rank_0001_*"))
    old = trace.stat().st_mtime - 3600
    shutil.copyfile(other, trace)
    os.utime(trace, (old, old))
    again = CliRunner().invoke(main, ["batch", str(b), "-q"])
    assert "1 parsed, 7 up to date" in again.output, again.output


def test_a_trace_changed_in_place_with_its_time_kept_is_parsed_again(tmp_path):
    """Same size, same modification time, other content (an edit with ``touch -r``, a
    copy of a same-sized trace with ``cp -p``): the content stamp makes the table stale,
    and the new table has the new numbers."""
    import gzip

    import pyarrow.parquet as pq

    job = synthesize(SynthConfig(tp=1, pp=2, dp=2, microbatches=2, layers=2, seed=4),
                     tmp_path / "src")
    plain = tmp_path / "job" / "iteration_10"
    plain.mkdir(parents=True)
    for trace in (job / "iteration_10").glob("rank_*"):
        data = gzip.decompress(trace.read_bytes()) if trace.suffix == ".gz" else \
            trace.read_bytes()
        (plain / trace.name.removesuffix(".gz")).write_bytes(data)
    assert CliRunner().invoke(main, ["batch", str(tmp_path / "job"), "-q"]).exit_code == 0
    trace = sorted(plain.glob("rank_0001*"))[0]
    data = trace.read_bytes()
    at = data.index(b'"cat": "kernel"')
    at = data.index(b'"dur": ', at) + len(b'"dur": ')
    assert data[at:at + 1].isdigit() and data[at:at + 1] != b"9"
    before = trace.stat()
    changed = data[:at] + bytes([data[at] + 1]) + data[at + 1:]  # one kernel longer
    trace.write_bytes(changed)
    os.utime(trace, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert trace.stat().st_size == before.st_size
    table = out_dir(tmp_path / "job") / "iteration_10" / "rank_0001.parquet"
    old = pq.read_table(table, columns=["dur"]).column("dur").to_numpy().sum()
    again = CliRunner().invoke(main, ["batch", str(tmp_path / "job"), "-q"])
    assert "1 parsed, 3 up to date" in again.output, again.output
    new = pq.read_table(table, columns=["dur"]).column("dur").to_numpy().sum()
    digits = len(data[at:data.index(b",", at)].split(b".")[0]) - 1
    assert new - old == 10 ** digits * 1000  # µs in the trace, ns in the table
