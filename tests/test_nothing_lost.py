"""Nothing lost, nothing half-done: every rank file of a job is parsed or named as failed,
a dead worker costs one rank at most, crash-shaped tails are truncation, JSON escapes
mean what JSON says, bad input is one line with the file and byte offset, SIGTERM leaves
nothing behind and what SIGKILL left is removed by the next run."""
from __future__ import annotations

import contextlib
import gzip
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import needs_shared, out_dir, shared
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import activities, read_bytes
from test_parse_truncated import complete_prefix

import traceviz
from traceviz.cli import main
from traceviz.errors import TraceError
from traceviz.ingest import batch

DLRM = "param/dlrm_kineto"


def _job(tmp_path: Path, n: int = 6) -> Path:
    job = tmp_path / "job"
    job.mkdir()
    for f in sorted(shared(DLRM).glob("*.json"))[:n]:
        shutil.copyfile(f, job / f.name)
    return job


# ---- 1. batch discovery: no rank file is skipped in silence ---------------------------

@needs_shared
def test_empty_and_garbage_rank_files_are_failed_ranks(tmp_path):
    job = _job(tmp_path, 4)
    (job / "worker4_step_12.1.pt.trace.json").write_bytes(b"")
    # garbage whose first byte starts no JSON value (a random first "{" or "[" made it a
    # corrupt trace, not "not JSON": one run in ~100 failed)
    (job / "worker5_step_12.1.pt.trace.json").write_bytes(b"\x89" + os.urandom(2999))
    (job / "notes.json").write_text('{"not": "a trace"}')  # no rank name: not a rank
    out = CliRunner().invoke(main, ["batch", str(job), "-q"])
    assert out.exit_code == 1
    summary = json.loads((out_dir(job) / "batch_summary.json").read_text())
    status = {Path(o["trace"]).name: o["status"] for o in summary["outcomes"]}
    assert status["worker4_step_12.1.pt.trace.json"] == "failed"
    assert status["worker5_step_12.1.pt.trace.json"] == "failed"
    assert sum(s == "parsed" for s in status.values()) == 4 and len(status) == 6
    assert "byte 0: is empty" in out.output and "is not JSON" in out.output
    # every command that reads the tables names the two missing ranks and exits 1
    for args in (["aggregate", str(job), "--no-figures"], ["report", str(job)],
                 ["breakdown", str(out_dir(job)), "-o", str(tmp_path / "bd")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1, (args, res.output)
        assert res.output.count("failed: ") == 2 and "2 rank(s) left out" in res.output
    rep = json.loads(CliRunner().invoke(main, ["report", str(job), "--json"]).stdout)
    assert len(rep["failed"]) == 2 and rep["configuration"]["gpus"] == 4


@needs_shared
def test_rerun_keeps_what_the_parse_said(tmp_path):
    job = _job(tmp_path, 2)
    CliRunner().invoke(main, ["batch", str(job), "-q"])
    first = json.loads((out_dir(job) / "batch_summary.json").read_text())["outcomes"]
    CliRunner().invoke(main, ["batch", str(job), "-q"])
    again = json.loads((out_dir(job) / "batch_summary.json").read_text())["outcomes"]
    assert [o["status"] for o in again] == ["skipped", "skipped"]
    assert [o["events"] for o in again] == [o["events"] for o in first] and first[0]["events"]


# ---- 2. a dead worker ------------------------------------------------------------------

@needs_shared
def test_a_killed_worker_costs_its_rank_only(tmp_path):
    """The worker parsing rank 3 is SIGKILLed every time (as the OOM killer would): the
    pool breaks, the ranks it took down are parsed again (those that had started each
    in a process of its own), rank 3 is named with its signal, every other rank is
    parsed."""
    import workers

    job = _job(tmp_path)
    todo, _, _ = batch.plan(job, None, None, False, None)
    outcomes = batch._run_local(todo, 2, (64 << 20, None, False, None),
                                lambda t, o: None, work=workers.dies_on_rank_3)
    by_rank = {o.rank: o for o in outcomes}
    assert sorted(by_rank) == list(range(6))
    assert by_rank[3].status == "failed" and "killed by SIGKILL" in by_rank[3].error
    assert all(by_rank[r].status == "parsed" for r in (0, 1, 2, 4, 5))
    assert all(Path(by_rank[r].output).exists() for r in (0, 1, 2, 4, 5))


@needs_shared
def test_one_small_trace_is_parsed_here_a_large_one_in_a_worker(tmp_path, monkeypatch):
    """A batch of one trace up to HERE_MAX_BYTES is parsed in the command's process (a
    worker's start takes longer than its parse); a larger one in a worker process of
    its own (its memory apart; killed, it is a failed rank, as above); two traces on
    workers."""
    import workers

    job = _job(tmp_path, 2)
    todo, _, _ = batch.plan(job, None, None, False, None)
    args = (64 << 20, None, False, None)
    assert len(todo) == 2 and todo[0].size <= batch.HERE_MAX_BYTES

    def where(tasks, jobs):
        outcomes = batch._run_local(tasks, jobs, args, lambda t, o: None,
                                    work=workers.parse_saying_where)
        assert all(o.status == "parsed" for o in outcomes), outcomes
        return {int(o.warnings[-1].split()[1]) for o in outcomes}

    assert where(todo[:1], 2) == {os.getpid()}
    assert os.getpid() not in where(todo, 8)
    monkeypatch.setattr(batch, "HERE_MAX_BYTES", 0)
    assert os.getpid() not in where(todo[:1], 2)
    assert where(todo[:1], 1) == {os.getpid()}  # -j 1: here, whatever the size


# ---- 3, 7. crash-shaped tails, BOM, cut compressed streams -----------------------------

@needs_shared
@pytest.mark.parametrize("tail", [b"\0" * 4096, b"\0", b"\x8f\xff garbage \x00 tail" * 50])
@pytest.mark.parametrize("where", ["cut", "complete"])
def test_crash_tail_is_truncation(tmp_path, tail, where):
    data = read_bytes(shared(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json"))
    body = data[:len(data) // 2] if where == "cut" else data
    path = tmp_path / "rank0.json"
    path.write_bytes(body + tail)
    n = complete_prefix(body)
    result = traceviz.parse_trace(path)
    assert result.meta["stats"]["events"] == n
    assert result.meta["stats"]["truncated_at"] == len(body) - (
        len(body) - len(body.rstrip()) if where == "complete" else 0) or \
        result.meta["stats"]["truncated_at"] >= len(body.rstrip())
    assert any("truncated" in w for w in result.warnings)
    expected = {i for i in activities(json.loads(data)) if i < n}
    assert set(result.activities["index"].to_pylist()) == expected
    strict = CliRunner().invoke(main, ["parse", str(path), "--strict", "-o",
                                       str(tmp_path / "s.parquet")])
    assert strict.exit_code == 1 and not (tmp_path / "s.parquet").exists()


@needs_shared
def test_corruption_followed_by_events_is_an_error(tmp_path):
    data = read_bytes(shared(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json"))
    mid = len(data) // 2
    path = tmp_path / "rank0.json"
    path.write_bytes(data[:mid] + b"\0\0\0" + data[mid + 3:])
    with pytest.raises(TraceError) as err:
        traceviz.parse_trace(path)
    assert err.value.offset is not None and str(path) in str(err.value)


@needs_shared
def test_byte_order_mark_and_cut_compressed_streams(tmp_path):
    data = read_bytes(shared(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json"))
    (tmp_path / "bom.json").write_bytes(b"\xef\xbb\xbf" + data)
    assert traceviz.parse_table(tmp_path / "bom.json").num_rows == \
        traceviz.parse_table(shared(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json")).num_rows
    packed = gzip.compress(data)
    (tmp_path / "cut.json.gz").write_bytes(packed[:12])
    with pytest.raises(TraceError, match="gzip stream is cut before its first byte"):
        traceviz.parse_trace(tmp_path / "cut.json.gz")


def test_numbers_beyond_int64_have_their_own_skip_reason(tmp_path):
    doc = {"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": 1e30, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": 5, "dur": 1e25},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": "x", "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 1, "ts": 5, "dur": 1}]}
    (tmp_path / "t.json").write_text(json.dumps(doc))
    result = traceviz.parse_trace(tmp_path / "t.json")
    assert result.meta["stats"]["skipped"] == {
        "ts beyond the int64 ns range": 1, "dur beyond the int64 ns range": 1,
        "ts is not a number": 1}
    assert result.activities.num_rows == 1


# ---- 4. escapes mean what JSON says ----------------------------------------------------

def _kernels(n: int) -> dict:
    events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0,
               "dur": 100}]
    for k in range(n):
        events += [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                    "tid": 1, "ts": 5 * k + 1, "dur": 2, "args": {"correlation": k + 1}},
                   {"ph": "X", "cat": "kernel", "name": f"k{k}", "pid": 0, "tid": 7,
                    "ts": 5 * k + 3, "dur": 1, "args": {"correlation": k + 1, "stream": 7}}]
    return {"traceEvents": events}


def test_escaped_keys_and_values(tmp_path):
    text = json.dumps(_kernels(10))
    for old, new in (('"cat": "kernel", "name": "k1"', '"cat": "kern\\u0065l", "name": "k1"'),
                     ('"ph": "X", "cat": "kernel", "name": "k2"',
                      '"ph": "X", "c\\u0061t": "kernel", "name": "k2"'),
                     ('"ph": "X", "cat": "kernel", "name": "k3"',
                      '"ph": "\\u0058", "cat": "kernel", "name": "k3"'),
                     ('"name": "k4"', '"n\\u0061me": "k\\u0034"'),
                     ('"name": "k5"', '"name": "k\\ud83d\\ude00"'),
                     ('"correlation": 7, "stream"', '"c\\u006frrelation": 7, "stream"')):
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "escaped.json"
    path.write_text(text)
    table = traceviz.parse_table(path)
    doc = json.loads(text)
    assert table.num_rows == sum(e.get("cat") == "kernel" for e in doc["traceEvents"]) == 10
    assert table["name"].to_pylist() == [f"k{k}" if k != 5 else "k\U0001F600"
                                         for k in range(10)]
    assert table["cpu_op"].to_pylist() == ["aten::mm"] * 10  # every launch joined


@pytest.mark.parametrize("bad", [b"\\q", b"\\x41", b"\\u12", b"a\\u12G4"])
def test_invalid_escape_is_one_line_at_its_offset(tmp_path, bad):
    text = json.dumps(_kernels(3)).encode()
    at = text.index(b'"k1"') + 2
    path = tmp_path / "bad.json"
    path.write_bytes(text[:at] + bad + text[at:])
    res = CliRunner().invoke(main, ["parse", str(path), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 1
    line = res.output.strip()
    assert "\n" not in line and "internal error" not in line
    assert line.startswith(f"traceviz: error: {path}: byte ")
    assert not (tmp_path / "o.parquet").exists()


def test_raw_control_characters_and_invalid_utf8_are_kept(tmp_path):
    text = json.dumps(_kernels(3)).encode()
    text = text.replace(b'"k1"', b'"k\t1\n"').replace(b'"k2"', b'"k\xff2"')
    path = tmp_path / "raw.json"
    path.write_bytes(text)
    names = traceviz.parse_table(path)["name"].to_pylist()
    assert names == ["k0", "k\t1\n", "k\ufffd2"]


# ---- 5. internal errors that are not --------------------------------------------------

@needs_shared
def test_output_that_is_a_folder_and_cpu_tables_both_or_neither(tmp_path):
    trace = str(shared(f"{DLRM}/worker0_step_12.1694128201545.pt.trace.json"))
    (tmp_path / "out.parquet").mkdir()
    res = CliRunner().invoke(main, ["parse", trace, "-o", str(tmp_path / "out.parquet")])
    assert res.exit_code == 1 and "is a folder" in res.output
    # the CPU table cannot be written (a folder has its name): neither table is
    (tmp_path / "t.cpu.parquet").mkdir()
    res = CliRunner().invoke(main, ["parse", trace, "--cpu", "-o", str(tmp_path / "t.parquet")])
    assert res.exit_code == 1 and "internal error" not in res.output
    assert not (tmp_path / "t.parquet").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@needs_shared
def test_full_temporary_folder_is_one_line(monkeypatch):
    """The disk of the spill folder fills up mid-parse: one line naming the folder and
    what to do, no spill folder left."""
    import tempfile

    from traceviz.errors import TraceVizError
    from traceviz.parse import columns
    from traceviz.parse.budget import MemoryPlan

    def full(self, arr):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(columns.SpillFile, "append", full)

    def ours() -> set:  # this process's spill folders (test workers run side by side)
        return {p for p in Path(tempfile.gettempdir()).glob("traceviz-spill-*")
                if f"-{os.getpid()}-" in p.name}

    before = ours()
    with pytest.raises(TraceVizError) as err:
        traceviz.parse_trace(shared("tracelens/mi300/resnet_act_checkpoint.json.gz"),
                             plan=MemoryPlan.fixed(2 << 20))
    message = str(err.value)
    assert "cannot write the spill files" in message and "TMPDIR" in message
    assert "No space left on device" in message and "\n" not in message
    assert ours() <= before


@needs_shared
def test_damaged_tables_are_named_and_skipped(tmp_path):
    job = _job(tmp_path, 4)
    assert CliRunner().invoke(main, ["batch", str(job), "-q"]).exit_code == 0
    table = out_dir(job) / "rank_0002.parquet"
    table.write_bytes(table.read_bytes()[:2000])
    later = time.time() + 3600
    os.utime(table, (later, later))  # newer than its trace: not parsed again
    tables = str(out_dir(job))  # (the job folder itself would parse it again)
    for args in (["aggregate", tables, "--no-figures"], ["report", tables],
                 ["html", tables, "-o", str(tmp_path / "p.html")],
                 ["export", tables, "-o", str(tmp_path / "e.json.gz")],
                 ["breakdown", tables, "-o", str(tmp_path / "bd")]):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1, (args, res.output)
        assert "internal error" not in res.output and "Traceback" not in res.output
        assert f"failed: {table}: is not a readable table" in res.output, (args, res.output)


def test_file_name_with_a_newline_stays_one_line(tmp_path):
    path = tmp_path / "bad\nname.json"
    path.write_text("not json")
    res = CliRunner().invoke(main, ["parse", str(path), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 1
    assert res.output.count("\n") == 1 and "bad\\nname.json" in res.output


# ---- the fuzz test: real traces, mutated ----------------------------------------------

SMALL = ["hta/call_stack/backward_thread.json", "kineto/docs/before_fix_trace.json",
         "hta/trace_compare/base/base.json.gz", "hta/triton_example/triton_example.json.gz",
         "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"]


def _strings(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the bodies of the JSON strings in ``data`` (no escapes in them)."""
    out, i = [], 0
    while True:
        i = data.find(b'"', i)
        if i < 0:
            return out
        j = data.find(b'"', i + 1)
        if j < 0:
            return out
        if b"\\" not in data[i + 1:j] and j > i + 1:
            out.append((i + 1, j))
        i = j + 1


def mutate(data: bytes, kind: str, r: random.Random) -> bytes:
    n = len(data)
    if kind == "flip":
        i = r.randrange(n)
        return data[:i] + bytes([data[i] ^ r.randrange(1, 256)]) + data[i + 1:]
    if kind == "cut":
        return data[:r.randrange(1, n)]
    if kind == "nul_tail":
        return data[:r.randrange(1, n + 1)] + b"\0" * r.randrange(1, 5000)
    spans = _strings(data)
    a, b = spans[r.randrange(len(spans))]
    at = r.randrange(a, b)
    if kind == "escape":  # one character of a key or value as \\u00XX: the same JSON
        return data[:at] + b"\\u%04x" % data[at] + data[at + 1:] if data[at] < 0x80 else data
    if kind == "bad_escape":
        return data[:at] + r.choice([b"\\q", b"\\x41", b"\\u12", b"\\"]) + data[at:]
    if kind == "control":
        return data[:at] + r.choice([b"\t", b"\n", b"\x01", b"\xff"]) + data[at:]
    # nested junk after an object's opening brace
    opens = [m.end() for m in re.finditer(rb'\{\s*"', data)]
    i = r.choice(opens) - 1
    return data[:i] + b'"junk": [[{"a": [1, {"b": null}], "c": "\\u00e9"}], -0.5e3], ' + data[i:]


def _complete_events(data: bytes) -> int | None:
    """Events readable from the start of ``traceEvents`` up to the first that is not
    (invalid UTF-8 read as U+FFFD, as the parser reads it)."""
    return complete_prefix(data.decode("utf-8", errors="replace").lstrip("\ufeff")
                           .encode("utf-8"))


def _reference(data: bytes):
    """The reference's reading of ``data`` (None: it cannot read it)."""
    try:
        text = data.decode("utf-8")
        if text.startswith("\ufeff"):
            text = text[1:]
        return json.loads(text, parse_float=Decimal, strict=False)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


@needs_shared
@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(which=st.sampled_from(SMALL), seed=st.integers(0, 2**32 - 1),
       kind=st.sampled_from(["flip", "cut", "nul_tail", "escape", "bad_escape", "control",
                             "junk"]),
       chunk=st.sampled_from([64, 4096, 1 << 20]))
def test_mutated_real_traces(tmp_path_factory, which, seed, kind, chunk):
    """Either a table equal to the independent reference on what it can read, a
    truncation that keeps exactly the complete events before it, or a TraceError naming
    the file and a byte offset; never another exception."""
    data = mutate(read_bytes(shared(which)), kind, random.Random(seed))
    path = tmp_path_factory.mktemp("fuzz") / "trace.json"
    path.write_bytes(data)
    try:
        result = traceviz.parse_trace(path, chunk_size=chunk)
    except TraceError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)
        assert exc.offset is not None or "not a Kineto trace" in str(exc)
        return
    stats = result.meta["stats"]
    got = result.activities.to_pydict()
    assert got["ts"] == sorted(got["ts"])
    doc = _reference(data)
    if stats["truncated_at"] is not None:
        assert stats["events"] == _complete_events(data)
        return
    if doc is None:  # invalid UTF-8 the reference refuses, read here with U+FFFD
        return
    expected = activities(doc)
    assert sorted(got["index"]) == sorted(expected)
    for i, idx in enumerate(got["index"]):
        for f in ("cat", "name", "ts", "dur", "correlation", "launch_ts", "cpu_op",
                  "iteration", "kind"):
            assert got[f][i] == expected[idx][f], (f, idx)


# ---- 6. signals: SIGTERM cleans up, SIGKILL's leftovers go with the next run ----------

def _spills(tmpdir: Path) -> list[Path]:
    return sorted(tmpdir.glob("traceviz-spill-*"))


def _start(args: list[str], tmpdir: Path) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    return subprocess.Popen([sys.executable, "-m", "traceviz", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait_for_spill(proc: subprocess.Popen, tmpdir: Path, timeout: float = 60) -> list[Path]:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        found = _spills(tmpdir)
        if found:
            return found
        time.sleep(0.005)
    raise AssertionError("no spill folder appeared: the trace is too small to catch")


@pytest.fixture(scope="module")
def big_job(tmp_path_factory) -> Path:
    """4 ranks of ~31 MB each, which spill at a 16 MB budget."""
    job = tmp_path_factory.mktemp("signals") / "job"
    res = CliRunner().invoke(main, ["synth", str(job), "--tp", "1", "--pp", "2", "--dp", "2",
                                    "--microbatches", "16", "--layers", "16",
                                    "--size-multiplier", "6"])
    assert res.exit_code == 0, res.output
    return job


def _leftover_tmp(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*.tmp")] if folder.exists() else []


def _spilling_batch(job: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path, Path]:
    """A two-worker batch of ``job`` at a 16 MB budget, once it has spilled: (process,
    its TMPDIR, its output folder)."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "tables"
    proc = _start(["batch", str(job), "-o", str(out), "-j", "2", "--memory-budget", "16",
                   "-q"], tmpdir)
    _wait_for_spill(proc, tmpdir)
    return proc, tmpdir, out


def test_sigterm_during_batch_leaves_nothing(big_job, tmp_path):
    proc, tmpdir, out = _spilling_batch(big_job, tmp_path)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 143, output
    assert "terminated" in output and "Traceback" not in output
    assert not _spills(tmpdir) and not _leftover_tmp(out)


def test_sigterm_during_parse_leaves_nothing(big_job, tmp_path):
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    trace = sorted(big_job.rglob("rank_0000*.json"))[0]
    proc = _start(["parse", str(trace), "--memory-budget", "16", "-o",
                   str(tmp_path / "r.parquet")], tmpdir)
    _wait_for_spill(proc, tmpdir)
    proc.send_signal(signal.SIGTERM)
    output = proc.communicate(timeout=60)[0].decode()
    assert proc.returncode == 143, output
    assert not _spills(tmpdir) and not _leftover_tmp(tmp_path)
    assert not (tmp_path / "r.parquet").exists()


def test_sigkill_leftovers_are_removed_by_the_next_run(big_job, tmp_path):
    proc, tmpdir, out = _spilling_batch(big_job, tmp_path)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole batch, workers included
    proc.communicate(timeout=60)
    assert _spills(tmpdir)  # what a killed run leaves
    again = _start(["batch", str(big_job), "-o", str(out), "-j", "2", "-q"], tmpdir)
    output = again.communicate(timeout=300)[0].decode()
    assert again.returncode == 0, output
    assert not _spills(tmpdir) and not _leftover_tmp(out)
    assert len(list(out.rglob("rank_*.parquet"))) == 4


def _children(pid: int) -> set[int]:
    """The pids whose parent is ``pid`` (Linux /proc)."""
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.add(int(stat.parent.name))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_the_workers_die_with_a_killed_batch(big_job, tmp_path):
    """``kill -9`` of the batch alone (not its process group): its workers notice their
    parent is gone, SIGTERM themselves, remove their spill folders and exit within
    seconds instead of parsing on (~270 MB each) until killed by hand."""
    proc, tmpdir, _ = _spilling_batch(big_job, tmp_path)
    workers = _children(proc.pid)
    assert workers  # the two parse workers (and the pool's helpers)

    def running(pid: int) -> bool:  # a zombie has ended (its new parent reaps it)
        with contextlib.suppress(OSError):
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        return False

    proc.kill()
    proc.communicate(timeout=60)
    end = time.monotonic() + 20
    while time.monotonic() < end and any(running(w) for w in workers):
        time.sleep(0.1)
    alive = [w for w in workers if running(w)]
    assert not alive
    assert not _spills(tmpdir)


def test_sigkill_of_one_worker_mid_batch(big_job, tmp_path):
    """A worker SIGKILLed mid-parse (not by its own doing): the batch goes on, the rank it
    held is parsed again in a process of its own and named in a warning."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    out = tmp_path / "tables"
    proc = _start(["batch", str(big_job), "-o", str(out), "-j", "2", "--memory-budget", "16"],
                  tmpdir)
    spill = _wait_for_spill(proc, tmpdir)[0]
    worker = int(spill.name.split("-")[-2])  # traceviz-spill-<host>-<pid>-XXXX
    os.kill(worker, signal.SIGKILL)
    output = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == 0, output
    assert "killed by SIGKILL" in output and "parsed again" in output
    assert len(list(out.rglob("rank_*.parquet"))) == 4
    assert not _spills(tmpdir)


def test_a_full_disk_is_one_line_and_leaves_the_set_whole_or_absent(tmp_path):
    """Outputs past a file-size limit fail as a full disk does: one line naming the file,
    exit 1, and none of the command's outputs (nor a temporary file, nor a folder it
    made) appears; an earlier complete set stays as it was."""
    import resource

    trace = shared("hta/trace_filter/sampled_rank-1.json.gz")
    out = tmp_path / "b"
    ok = subprocess.run([sys.executable, "-m", "traceviz", "breakdown", str(trace), "-o",
                         str(out)], cwd=tmp_path, capture_output=True)
    assert ok.returncode == 0, ok.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def limit():  # files above 20 kB cannot be written: the figures
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))

    for dest in (out, tmp_path / "new" / "deeper"):
        proc = subprocess.run([sys.executable, "-m", "traceviz", "breakdown", str(trace),
                               "-o", str(dest)], cwd=tmp_path, capture_output=True,
                              preexec_fn=limit)
        err = proc.stderr.decode().strip()
        assert proc.returncode == 1 and "\n" not in err, err
        assert err.startswith(f"traceviz: error: {dest}/") and "cannot write: File too" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not (tmp_path / "new").exists()
    assert not list(tmp_path.rglob("*.tmp"))


def test_all_or_nothing_puts_every_file_or_none(tmp_path):
    from traceviz.table.io import all_or_nothing, write_text

    (tmp_path / "a.txt").write_text("old")
    with pytest.raises(RuntimeError), all_or_nothing():
        write_text("new a", tmp_path / "a.txt")
        write_text("b", tmp_path / "sub" / "b.txt")
        raise RuntimeError("a later output fails")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
    assert (tmp_path / "a.txt").read_text() == "old"
    with all_or_nothing():
        write_text("new a", tmp_path / "a.txt")
        write_text("b", tmp_path / "sub" / "b.txt")
        assert (tmp_path / "a.txt").read_text() == "old"  # not yet in place
    assert (tmp_path / "a.txt").read_text() == "new a"
    assert (tmp_path / "sub" / "b.txt").read_text() == "b"


def test_a_file_replaced_during_a_command_is_no_longer_its_input(tmp_path):
    """An input is known by its inode and the time it was written: a table parsed again
    mid-command frees its inode, and a new output that gets it (the batch summary) is
    not refused as an input (before: html's pipeline and op model sections were)."""
    from traceviz.table.inputs import guarding_inputs, is_input, note_input

    path = tmp_path / "rank_0000.parquet"
    path.write_bytes(b"x")
    with guarding_inputs():
        note_input(path)
        assert is_input(path)
        os.utime(path, ns=(1, 1))  # what a new file on the reused inode looks like
        assert not is_input(path)


def test_an_input_refused_as_an_output_stays_an_input(tmp_path):
    """-o naming an existing file makes its reading as an input an error at once; a
    caller that reads on past that error (a rank left out, a dump unread) still cannot
    write over it: it stays an input. A file the -o named, replaced meanwhile (another
    file on its inode), is not refused."""
    from traceviz.errors import TraceVizError
    from traceviz.table.inputs import guarding_inputs, is_input, note_input, note_output

    table, other = tmp_path / "rank_0001.parquet", tmp_path / "rank_0002.parquet"
    table.write_bytes(b"x")
    other.write_bytes(b"y")
    with guarding_inputs():
        note_output(table)
        with pytest.raises(TraceVizError, match="is an input of this command"):
            note_input(table)
        assert is_input(table)  # the write-time guard still holds
        note_output(other)
        os.utime(other, ns=(1, 1))  # what a new file on the reused inode looks like
        note_input(other)  # not refused
    with guarding_inputs():  # the next command starts with none
        note_input(table)


def test_an_output_over_a_rank_table_is_refused_and_the_table_kept(tmp_path):
    """`report TABLES -o TABLES/rank_0001.parquet`: the rank's table is an input, refused
    as an output, and left as it was (the reading that refuses it is one a rank can be
    left out of)."""
    from traceviz.cli import main
    from traceviz.synth import SynthConfig, synthesize

    synthesize(SynthConfig(tp=1, pp=1, dp=2, layers=1, microbatches=1, with_stack=False),
               tmp_path / "job")
    assert CliRunner().invoke(main, ["batch", str(tmp_path / "job"), "-o",
                                     str(tmp_path / "tables"), "-q", "-j", "1"]).exit_code == 0
    folder = tmp_path / "tables" / "iteration_10"
    table = next(folder.glob("rank_0001*.parquet"))
    before = table.read_bytes()
    r = CliRunner().invoke(main, ["report", str(folder), "-o", str(table)])
    assert r.exit_code == 1 and "is an input of this command" in r.output, r.output
    assert table.read_bytes() == before


@pytest.mark.parametrize("kind", ["spill folder", "temporary file"])
def test_a_temporary_path_is_held_before_it_exists(kind, tmp_path, monkeypatch):
    """A SIGTERM that lands between naming a temporary file or folder and making it
    finds it held (the handler removes it, or the process ends before it is made): none
    is made unheld. Removing what is held then leaves nothing."""
    from traceviz.table import scratch

    monkeypatch.setattr(scratch.tempfile, "tempdir", str(tmp_path))
    seen: list[bool] = []
    real_mkdir, real_open = os.mkdir, os.open

    def mkdir(path, *args):
        seen.append(os.fspath(path) in scratch._held)  # where a SIGTERM may land
        return real_mkdir(path, *args)

    def open_(path, *args):
        seen.append(os.fspath(path) in scratch._held)
        return real_open(path, *args)

    monkeypatch.setattr(scratch.os, "mkdir", mkdir)
    monkeypatch.setattr(scratch.os, "open", open_)
    made = (scratch.spill_folder() if kind == "spill folder"
            else scratch.temp_file_for(str(tmp_path / "out.parquet")))
    assert seen == [True] and os.path.exists(made) and made in scratch._held
    assert Path(made).name.startswith((scratch.SPILL_PREFIX, ".out.parquet."))
    scratch.remove_held()
    assert not os.path.exists(made) and made not in scratch._held
