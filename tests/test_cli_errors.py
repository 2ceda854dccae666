"""Bad input: one line on stderr naming the file and position, no traceback, no output."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner
from helpers import shared
from reference import read_bytes

from traceviz.cli import main

GOOD = '{"traceEvents":[{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":2}]}'


def run(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "traceviz", *args], input=stdin,
                          capture_output=True)


@pytest.mark.parametrize("content, message", [
    (b"", "is empty"),
    (b"   \n", "ends before any trace event"),
    (b"hello world", "byte 0: is not JSON"),
    (b'{"a": 1, "b": [1, 2]}', "is JSON but not a Kineto trace"),
    (b"SQLite format 3\x00\x10", "Nsight Systems SQLite"),
    (b"\x00\x01\x02nsys-rep\x00", "binary"),
    (b'{"traceEvents":[{"ph":"X","ts":1,} x]}', "byte 33: malformed trace event"),
    (b'{"traceEvents": 5}', "byte 16: 'traceEvents' is not an array"),
    # text after the end that holds more events: not a crash tail (that is truncation)
    (GOOD.encode() + b' {"ph": "X"}', "unexpected data after the end"),
    (b"\x1f\x8b\x08\x00garbagegarbage", "gzip data is corrupt"),
    # JSON readers keep the last of two equal keys; traceviz does not guess
    (GOOD.encode()[:-1] + b', "traceEvents": []}',
     "byte 86: a second 'traceEvents' array (JSON readers"),
])
def test_bad_input_one_line(tmp_path, content, message):
    trace = tmp_path / "bad.json"
    trace.write_bytes(content)
    out = tmp_path / "out.parquet"
    proc = run("parse", str(trace), "-o", str(out))
    err = proc.stderr.decode()
    assert proc.returncode == 1, err
    assert message in err and str(trace) in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["bad.json"]  # no temp file left


def test_unreadable_paths(tmp_path):
    proc = run("parse", str(tmp_path / "missing.json"), "-o", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1 and b"cannot open" in proc.stderr
    proc = run("parse", str(tmp_path), "-o", str(tmp_path / "o.parquet"))
    assert proc.returncode == 1 and b"is a folder" in proc.stderr
    assert b"Traceback" not in proc.stderr


def test_truncated_warns_and_strict_fails(tmp_path):
    data = read_bytes(shared("param/dlrm_kineto/worker0_step_12.1694128201545.pt.trace.json"))
    trace = tmp_path / "cut.json.gz"
    trace.write_bytes(gzip.compress(data[: len(data) // 2]))
    out = tmp_path / "o.parquet"
    proc = run("parse", str(trace), "-o", str(out))
    assert proc.returncode == 0
    assert b"warning" in proc.stderr and b"truncated at byte" in proc.stderr
    assert out.exists()
    out.unlink()
    proc = run("parse", str(trace), "-o", str(out), "--strict")
    assert proc.returncode == 1 and b"--strict" in proc.stderr and not out.exists()


def test_usage_errors(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(GOOD)
    proc = run("parse", str(trace), "--cpu", "-o", "-")
    assert proc.returncode == 2 and b"--cpu" in proc.stderr
    proc = run("parse", str(trace), "--memory-budget", "1")
    assert proc.returncode == 2
    proc = run("parse", str(trace), "--patterns", str(tmp_path / "none.toml"))
    assert proc.returncode == 1 and b"cannot read patterns file" in proc.stderr


def test_default_output_name(tmp_path):
    trace = tmp_path / "rank3.pt.trace.json"
    trace.write_text(GOOD)
    proc = subprocess.run([sys.executable, "-m", "traceviz", "parse", str(trace)],
                          cwd=tmp_path, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "traceviz-out" / "rank3.pt.trace" / "rank3.pt.trace.parquet"
    assert written.exists()
    assert b"rank 3: 1 GPU activities" in proc.stderr  # rank from the file name
    assert oct(os.stat(written).st_mode & 0o077) != "0o0"


@pytest.mark.parametrize("command", ["batch", "aggregate", "report", "breakdown", "export",
                                     "pipeline"])
def test_new_user_folders_say_what_to_do(tmp_path, command):
    """A wrong folder, an empty one, a folder of Nsight reports or of other JSON: one line
    that says what is there and what to pass."""
    empty = tmp_path / "empty"
    empty.mkdir()
    nsight = tmp_path / "nsight"
    nsight.mkdir()
    (nsight / "profile_rank0.nsys-rep").write_bytes(b"\x00NSYS binary")
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text('{"lr": 0.1}')
    for folder, words in ((empty, "traceviz demo"), (nsight, "--use-pytorch-profiler"),
                          (other, "none is a Kineto trace")):
        result = run(command, str(folder))
        err = result.stderr.decode()
        assert result.returncode == 1, err
        assert words in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err


def test_nsight_report_file(tmp_path):
    path = tmp_path / "run.nsys-rep"
    path.write_bytes(b"NSYS-REP\x01\x02")
    result = run("parse", str(path), "-o", str(tmp_path / "x.parquet"))
    assert result.returncode == 1
    assert b"Nsight report" in result.stderr and b"torch.profiler" in result.stderr
    assert not (tmp_path / "x.parquet").exists()


def test_budget_below_the_runtime_floor_is_a_warning(tmp_path):
    """A budget the runtime alone exceeds cannot be honoured: one warning saying the
    floor (measured in the process), and the parse goes on; the default budget says
    nothing."""
    trace = tmp_path / "t.json"
    trace.write_text(GOOD)
    low = run("parse", str(trace), "-o", str(tmp_path / "a.parquet"), "--memory-budget", "16")
    assert low.returncode == 0, low.stderr
    line = next(x for x in low.stderr.decode().splitlines() if "--memory-budget 16 MB" in x)
    floor = int(re.search(r"~(\d+) MB of runtime", line).group(1))
    assert 50 < floor < 1000 and line.startswith("traceviz: warning: ")
    default = run("parse", str(trace), "-o", str(tmp_path / "b.parquet"))
    assert default.returncode == 0 and b"below what a parse needs" not in default.stderr


def test_parse_and_job_commands_share_one_table(tmp_path):
    """`parse TRACE` and a command given the same trace (which parses it through batch)
    write and reuse one table in ./traceviz-out/<name>/, whichever runs first."""
    trace = tmp_path / "rank3.pt.trace.json"
    trace.write_text(GOOD)
    assert run("parse", str(trace)).returncode == 0
    folder = tmp_path / "traceviz-out" / "rank3.pt.trace"
    table = folder / "rank3.pt.trace.parquet"
    before = table.stat().st_mtime_ns
    report = run("report", str(trace), "--json", "-o", str(tmp_path / "r.json"))
    assert report.returncode == 0, report.stderr
    assert sorted(p.name for p in folder.glob("*.parquet")) == ["rank3.pt.trace.parquet"]
    assert table.stat().st_mtime_ns == before  # up to date: reused, not parsed again
    assert json.loads((tmp_path / "r.json").read_text())["configuration"]["ranks"] == [3]


@pytest.mark.parametrize("args", [
    ["parse", "{job}/rank0.json.gz", "-o", "{job}/rank0.json.gz"],
    ["parse", "{job}/rank0.json.gz", "-o", "{job}/rank1.json.gz"],
    ["html", "{job}", "-o", "{job}/rank0.json.gz"],
    ["export", "{job}/rank0.json.gz", "-o", "{job}/rank0.json.gz"],
    ["counters", "{job}/rank0.json.gz", "-o", "{job}/rank0.json.gz"],
    ["report", "{job}", "-o", "{job}/rank1.json.gz"],
    ["report", "{job}", "--topology", "{job}/groups.txt", "-o", "{job}/groups.txt"],
], ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_an_output_that_is_an_input_is_refused(tmp_path, args):
    """-o naming a file the command reads (a trace, the topology file) is one line and
    exit 1 / 2, said before any work (no trace parsed: nothing in ./traceviz-out); the
    input is left as it was and nothing else is written there."""
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        shutil.copy(shared(f"hta/trace_filter/sampled_rank-{r}.json.gz"), job / f"rank{r}.json.gz")
    assert CliRunner().invoke(main, ["topology", "--world", "2", "--tp", "2", "-o",
                                     str(job / "groups.txt")]).exit_code == 0
    before = {p.name: p.read_bytes() for p in job.iterdir()}
    r = CliRunner().invoke(main, [a.format(job=job) for a in args])
    assert r.exit_code in (1, 2), r.output
    line = r.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "is an input of this command" in line or "names a trace file" in line
    assert {p.name: p.read_bytes() for p in job.iterdir()} == before  # nothing left over
    assert not (tmp_path / "traceviz-out").exists()  # refused before the work


def test_an_impossible_world_size_neither_exhausts_memory_nor_changes_a_number(tmp_path):
    """A trace or a groups file claiming 2,000,000,000 ranks: the layout is refused in one
    line naming the file; a rank stating it is outvoted by the others (or, alone, makes
    the world size unknown), said in a note, and TFLOP/s per GPU divides by the ranks'
    agreed world size."""
    from traceviz.analysis.report import job_world
    from traceviz.topology.layout import MAX_WORLD, agreed_world

    assert agreed_world([4, 4, 2_000_000_000, 4], "traces")[0] == 4
    world, note = agreed_world([2_000_000_000], "traces")
    assert world == 0 and "beyond 1,048,576 ranks" in note
    assert agreed_world([8, 16, 16], "t")[0] == 16 and agreed_world([8, 16], "t")[0] == 16
    assert agreed_world([None, 0, True], "t") == (0, None)
    runner = CliRunner()
    r = runner.invoke(main, ["topology", "--world", "2000000000", "--tp", "8", "-o",
                             str(tmp_path / "g.txt")])
    assert r.exit_code == 2 and "beyond 1,048,576 ranks" in r.output
    assert runner.invoke(main, ["topology", "--world", "2", "--tp", "2", "-o",
                                str(tmp_path / "g.txt")]).exit_code == 0
    big = tmp_path / "big.txt"
    big.write_text((tmp_path / "g.txt").read_text().replace("World Size: 2\n",
                                                            "World Size: 2000000000\n"))
    trace = shared("hta/trace_filter/sampled_rank-0.json.gz")
    r = runner.invoke(main, ["report", str(trace), "--topology", str(big), "-o",
                             str(tmp_path / "r.txt")])
    assert r.exit_code == 1 and r.output.strip() == (
        f"traceviz: error: {big}: world 2,000,000,000 is beyond {MAX_WORLD:,} ranks: "
        "not a real job's size")
    doc = json.loads(gzip.open(trace).read())
    doc["distributedInfo"]["world_size"] = 2_000_000_000
    one = tmp_path / "alone" / "rank0.json"
    one.parent.mkdir()
    one.write_text(json.dumps(doc))
    from traceviz.job.report import make_report

    rep = make_report(one, overrides={"global_batch_size": 8, "seq_len": 1024,
                                      "flops_per_token": 1e6})
    assert rep["configuration"]["world_size"] == 1
    assert any("beyond 1,048,576 ranks" in n for n in rep["notes"])
    assert job_world([], None) == 0


def test_an_event_whose_end_overflows_is_skipped_with_its_reason(tmp_path):
    """A start that fits int64 ns with an end that does not (9223372036850000 µs + 5 ms)
    would wrap around to a negative end: the event is skipped and named; the rest stays."""
    import traceviz

    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 9223372036850000,
         "dur": 5000, "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k2", "pid": 0, "tid": 7, "ts": 100, "dur": 50,
         "args": {"stream": 7}}]}))
    table = traceviz.parse_table(trace)
    assert table["name"].to_pylist() == ["k2"] and table["dur"].to_pylist() == [50_000]
    skipped = traceviz.metadata(table)["stats"]["skipped"]
    assert skipped == {"end (ts + dur) beyond the int64 ns range": 1}


def test_a_rank_no_rank_can_be_is_no_rank(tmp_path):
    """A file name or distributedInfo stating rank 99999999999 (beyond int32, the rank
    column's type): not a rank (numbered by position), one line where two then clash,
    never an internal error."""
    import traceviz

    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20, "dur": 50,
          "args": {"stream": 7}}
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank_99999999999.json").write_text(json.dumps({"traceEvents": [ev]}))
    (job / "rank_1.json").write_text(json.dumps(
        {"distributedInfo": {"rank": 99999999999}, "traceEvents": [ev]}))
    for name in ("rank_99999999999.json", "rank_1.json"):
        meta = traceviz.metadata(traceviz.parse_table(job / name))
        assert (meta["rank"], meta["rank_source"]) == (
            (-1, "unknown") if name.startswith("rank_9") else (1, "file name"))
    r = CliRunner().invoke(main, ["breakdown", str(job), "-o", str(tmp_path / "b")])
    assert r.exit_code == 1 and "internal error" not in r.output
    assert "are both rank 1" in r.output and "\n" not in r.output.strip()


@pytest.mark.parametrize("value", ["0", '"two"', '"\\u0000"', "-5", "1e400", "[1]",
                                   "2000000000000", "true"])
def test_bad_config_values_are_one_line(tmp_path, value):
    """A TorchTitan config whose batch / sequence / degree is no whole number in range:
    one line naming the file, the key and the value (was ZeroDivisionError, ValueError,
    OverflowError, TypeError)."""
    cfg = tmp_path / "train.toml"
    cfg.write_text(f'[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                   f"local_batch_size = {value}\nseq_len = 4096\n")
    r = CliRunner().invoke(main, ["report", str(shared("hta/trace_filter/sampled_rank-0.json"
                                                       ".gz")), "--config", str(cfg), "-o",
                                  str(tmp_path / "r.txt")])
    assert r.exit_code == 1 and "internal error" not in r.output
    assert r.output.startswith(f"traceviz: error: {cfg}: [training] local_batch_size = ")
    assert "is not a whole number from 1 to" in r.output and not (tmp_path / "r.txt").exists()


def test_a_gz_cut_before_its_first_event_is_an_error(tmp_path):
    """A .json.gz cut inside its first event (its header and the start of traceEvents
    decompress, no event completes): exit 1, one line with the byte offset, no table (it
    was exit 0 with an empty table)."""
    import zlib

    data = read_bytes(shared("hta/trace_filter/sampled_rank-0.json.gz"))
    packed = gzip.compress(data)
    events = data.find(b'"traceEvents"')
    first_end = data.find(b"}", data.find(b'"dur"', events))  # no event completes before

    def inflated(k: int) -> int:
        return len(zlib.decompressobj(wbits=31).decompress(packed[:k]))

    cut = next(k for k in range(20, len(packed)) if events + 20 < inflated(k) < first_end)
    trace = tmp_path / "cut.json.gz"
    trace.write_bytes(packed[:cut])
    out = tmp_path / "cut.parquet"
    proc = run("parse", str(trace), "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.decode().strip()
    assert line.startswith(f"traceviz: error: {trace}: byte ") and "\n" not in line
    assert "is cut before its first complete event" in line and not out.exists()


def test_negative_durations_are_kept_with_a_warning(tmp_path):
    trace = tmp_path / "neg.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "a", "pid": 0, "tid": 7, "ts": 1, "dur": -2,
         "args": {"stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "b", "pid": 0, "tid": 7, "ts": 5, "dur": 2,
         "args": {"stream": 7}}]}))
    proc = run("parse", str(trace), "-o", str(tmp_path / "neg.parquet"))
    assert proc.returncode == 0
    assert "1 complete event(s) with a negative dur: kept, each lasting 0" in \
        proc.stderr.decode()


def test_parse_warnings_reach_every_command(tmp_path):
    """A command that parses a trace itself (breakdown on one trace, report on a folder)
    says what the parse found (a cut trace), as parse and batch do."""
    data = read_bytes(shared("hta/trace_filter/sampled_rank-1.json.gz"))
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank1.json").write_bytes(data[:246_000])
    for args in (["breakdown", str(job / "rank1.json")], ["report", str(job)]):
        proc = subprocess.run([sys.executable, "-m", "traceviz", *args], cwd=tmp_path,
                              capture_output=True)
        assert proc.returncode == 0, proc.stderr
        assert f"traceviz: warning: {job / 'rank1.json'}: trace is truncated at byte" in \
            proc.stderr.decode()


def test_control_characters_in_names_never_reach_the_terminal(tmp_path):
    """A kernel named with ESC [31m, BEL, NUL, a right-to-left override and a backspace:
    the commands' stdout and stderr hold no control character but line breaks (the
    figures draw it; matplotlib's missing-glyph warnings would print it)."""
    name = "evil\x1b[31mRED\x07\x00k\u202etxt\x08"
    trace = tmp_path / "ctrl.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 0, "dur": 500},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 5, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 20, "dur": 50,
         "args": {"stream": 7, "correlation": 1}}]}))
    for command in ("parse", "breakdown", "report", "diagnose", "ops", "critical-path"):
        proc = subprocess.run([sys.executable, "-m", "traceviz", command, str(trace)],
                              cwd=tmp_path, capture_output=True)
        assert proc.returncode == 0, (command, proc.stderr)
        for stream in (proc.stdout, proc.stderr):
            text = stream.decode()
            assert not [c for c in text if (not c.isprintable() and c != "\n")], command


@pytest.mark.parametrize("command", [["breakdown"], ["ops"], ["critical-path"], ["diagnose"],
                                     ["report"], ["export"], ["counters"],
                                     ["sequences", "--op", "aten::mm"]])
def test_every_command_that_takes_a_trace_reads_stdin(command, tmp_path):
    """``-`` is the trace on stdin: the same lines as from its file, and the copy the
    command read is gone when it ends."""
    import tempfile
    from pathlib import Path

    from traceviz.synth import SynthConfig, synthesize

    synthesize(SynthConfig(tp=1, pp=1, dp=1, microbatches=2, layers=2, with_stack=False),
               tmp_path / "job")
    trace = next((tmp_path / "job").rglob("*.pt.trace.json"))
    name, *options = command

    def output(stem: str) -> list[str]:
        return ([] if name in ("counters", "sequences") else
                ["-o", str(tmp_path / (stem + ".json.gz" if name == "export" else stem))])

    by_path = CliRunner().invoke(main, [name, str(trace), *options, *output("a")])
    piped = CliRunner().invoke(main, [name, "-", *options, *output("b")],
                               input=trace.read_bytes())
    assert by_path.exit_code == piped.exit_code == 0, piped.output
    named = [line.replace("stdin.pt.trace", trace.name.removesuffix(".json"))
             for line in piped.stdout.splitlines()[:3]]  # outputs named after the input
    assert by_path.stdout.splitlines()[:3] == named
    spills = Path(tempfile.gettempdir()).glob("traceviz-spill-*/stdin.pt.trace.json")
    assert not [p for p in spills if f"-{os.getpid()}-" in str(p)]
