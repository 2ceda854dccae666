"""The command line's start-up: numba's probes for SciPy (its version, a BLAS), PyYAML (its
config file, where there is none) and CFFI import none of them (traceviz.startup).

Stand-in ``scipy``, ``yaml`` and ``cffi`` packages on the path record whether they were
imported, so the test runs the same with or without the real ones installed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import sys
{install}
import numba
from numba.core import config
print("numba import:", "scipy" in sys.modules, "yaml" in sys.modules, config._HAVE_YAML)
from numba.core.registry import cpu_target
cpu_target.target_context.refresh()  # what numba's first compile or cache load runs
from numba.np import arraymath
from numba.core.typing import cffi_utils
print("during probe:", "scipy.linalg" in sys.modules, "blas:", arraymath._HAVE_BLAS)
print("cffi during probe:", "cffi" in sys.modules, "supported:", cffi_utils.SUPPORTED)
import scipy.linalg.cython_blas  # later imports of SciPy are untouched
print("later:", scipy.linalg.cython_blas.MARK)
import cffi  # and of cffi
print("cffi later:", cffi.MARK)
"""


@pytest.fixture
def fake_scipy(tmp_path):
    """Stand-ins for SciPy's BLAS and for cffi (an FFI numba can build)."""
    pkg = tmp_path / "scipy" / "linalg"
    pkg.mkdir(parents=True)
    (tmp_path / "scipy" / "__init__.py").write_text("__version__ = \"1.17.0\"\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "cython_blas.py").write_text("MARK = 'stand-in'\n")
    (tmp_path / "cffi").mkdir()
    (tmp_path / "cffi" / "__init__.py").write_text("MARK = 'stand-in'\n\n\n"
                                                   "class FFI:\n    pass\n")
    (tmp_path / "yaml").mkdir()
    (tmp_path / "yaml" / "__init__.py").write_text("def safe_load(stream):\n"
                                                   "    return None\n")
    (tmp_path / "work").mkdir()  # the working directory: no numba config file
    return tmp_path


SKIP = "from traceviz.startup import skip_numba_optional_probes\nskip_numba_optional_probes()"


def _run(path, install: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), *sys.path]))
    out = subprocess.run([sys.executable, "-c", PROBE.format(install=install)], env=env,
                         capture_output=True, text=True, check=True, cwd=path / "work")
    return out.stdout


def test_cli_skips_numba_optional_probes(fake_scipy):
    skipped = _run(fake_scipy, SKIP)
    assert "numba import: False False False" in skipped
    assert "during probe: False blas: False" in skipped
    assert "cffi during probe: False supported: False" in skipped
    assert "later: stand-in" in skipped
    assert "cffi later: stand-in" in skipped


def test_a_numba_config_file_is_still_read(fake_scipy):
    # with a .numba_config.yaml where the command runs, numba imports PyYAML to read it
    (fake_scipy / "work" / ".numba_config.yaml").write_text("")
    assert "numba import: False True True" in _run(fake_scipy, SKIP)


def test_without_it_numba_imports_scipy_yaml_and_cffi(fake_scipy):
    # the stand-ins are what numba's probes import when nothing stops them
    plain = _run(fake_scipy, "")
    assert "numba import: True True True" in plain
    assert "during probe: True" in plain
    assert "cffi during probe: True supported: True" in plain


def test_parse_imports_no_synthesizer_analysis_or_drawing(tmp_path):
    # the parse path's modules, as Python reports them (-X importtime), in the command's
    # own process: nothing from the synthesizer, the analyses, the figures or matplotlib
    from helpers import shared

    trace = shared("kineto/docs/before_fix_trace.json")
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "traceviz", "parse",
                          str(trace), "-o", str(tmp_path / "t.parquet")],
                         capture_output=True, text=True, check=True)
    modules = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
               if line.startswith("import time:") and "|" in line}
    assert {"traceviz.ingest.build", "numba", "pyarrow"} <= modules  # the parse ran
    loaded = sorted(m for m in modules if m.split(".")[0] == "matplotlib"
                    or m.startswith(("traceviz.synth", "traceviz.analysis",
                                     "traceviz.render")))
    assert loaded == []
    assert (tmp_path / "t.parquet").stat().st_size > 0


# ---- small traces run numba's functions as Python (traceviz.startup) -----------------

PURE_PARSE = """
import json, sys
import pyarrow.parquet as pq
from traceviz import startup
startup.from_command_line()
out, paths = sys.argv[1], sys.argv[2:]
assert startup.interpret_small_traces(paths[:1])
from numba.core import config
assert config.DISABLE_JIT
from traceviz.ingest.build import parse_trace
for i, path in enumerate(paths):
    parsed = parse_trace(path, cpu=True)
    parsed.write(f"{out}/{i}.parquet")
"""

ENTRY = """
import atexit, sys
sys.argv = ["traceviz", *sys.argv[1:]]
atexit.register(lambda: print("interpreted:", bool(__import__("numba").config.DISABLE_JIT)))
from traceviz.cli import run
run()
"""


def _small_real_traces() -> list:
    from helpers import shared_traces

    from traceviz.parse.source import text_size
    from traceviz.startup import SMALL_TRACE

    return [p for p in shared_traces() if text_size(p, SMALL_TRACE) is not None]


def _tricky_trace(path) -> None:
    """Escapes, UTF-8 of every length, strings of 1-40 bytes, numbers in every form."""
    from helpers import launch_events, trace_text

    events = launch_events(30, tricky='é\\ "q" \U0001F600 \u4e2d\u6587 \x01 tab\t' * 2)
    for k, ev in enumerate(events):
        ev["name"] = ev["name"] + "x" * (k % 17)
    text = trace_text(events).replace(b'"dur": 5', b'"dur": 5.0e0').replace(
        b'"ts": 3,', b'"ts": 3.000,')
    path.write_bytes(text)


def test_small_traces_parse_the_same_as_python(tmp_path):
    import pyarrow.parquet as pq

    from traceviz.ingest.build import parse_trace

    paths = _small_real_traces()
    assert len(paths) >= 10  # the eleven of ../shared/traces at 64 KB
    _tricky_trace(tmp_path / "tricky.json")
    paths.append(tmp_path / "tricky.json")
    out = tmp_path / "python"
    out.mkdir()
    subprocess.run([sys.executable, "-c", PURE_PARSE, str(out), *map(str, paths)],
                   check=True)
    for i, path in enumerate(paths):
        compiled = parse_trace(path, cpu=True)
        compiled.write(str(tmp_path / "compiled.parquet"))
        for suffix in (".parquet", ".cpu.parquet"):
            want = pq.read_table(tmp_path / f"compiled{suffix}")
            got = pq.read_table(out / f"{i}{suffix}")
            assert got.equals(want), (path, suffix)
            assert got.schema.metadata == want.schema.metadata, (path, suffix)


def _outputs(folder) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.suffix in (".csv", ".json", ".txt") and p.is_file()}


SYNC = "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz"
COMPILED = "tracelens/torch_compile_triton/trace.json.gz"  # 64,557 bytes of text


@pytest.mark.parametrize("command", [
    ["breakdown", SYNC], ["critical-path", SYNC], ["ops", COMPILED],
    ["sequences", COMPILED, "--op", "Torch-Compiled", "--min-len", "1"],
    ["diff", "hta/trace_compare/base/base.json.gz", "hta/trace_compare/test/test.json.gz"]])
def test_commands_on_a_small_trace_the_same_as_python(tmp_path, command):
    from click.testing import CliRunner
    from helpers import shared

    from traceviz.cli import main

    argv = [str(shared(a)) if a.endswith(".gz") else a for a in command]
    compiled = CliRunner().invoke(main, [*argv, "-o", str(tmp_path / "c")])
    assert compiled.exit_code == 0, compiled.output
    python = subprocess.run([sys.executable, "-c", ENTRY, *argv, "-o", str(tmp_path / "p")],
                            capture_output=True, text=True)
    assert python.returncode == 0, python.stderr
    assert "interpreted: True" in python.stdout
    want, got = _outputs(tmp_path / "c"), _outputs(tmp_path / "p")
    assert want and got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name


def test_only_small_trace_files_are_interpreted(tmp_path):
    from helpers import shared

    big = shared("hta/trace_filter/sampled_rank-1.json.gz")  # 1.7 MB of text
    small = shared("kineto/docs/before_fix_trace.json")
    cases = {(str(small),): True, (str(small), str(big)): False, (str(tmp_path),): False}
    for paths, interpreted in cases.items():
        out = subprocess.run([sys.executable, "-c", ENTRY, "counters", *paths, "-o",
                              str(tmp_path / f"c{len(paths)}{interpreted}")],
                             capture_output=True, text=True)
        assert f"interpreted: {interpreted}" in out.stdout, (paths, out.stderr)
    # not in a process that only imports the command line (a test, a notebook)
    from traceviz.startup import interpret_small_traces

    assert interpret_small_traces([small]) is False


def test_text_size(tmp_path):
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    from traceviz.parse.source import text_size

    plain = tmp_path / "t.json"
    plain.write_bytes(b'  {"traceEvents": []}')
    assert text_size(plain, 100) == 21
    assert text_size(plain, 20) is None
    bomb = tmp_path / "bomb.json.gz"  # ~10 KB on disk, 100 MB of text
    with gzip.open(bomb, "wb") as fh:
        fh.write(b'{"traceEvents": [' + b" " * 100_000_000 + b"]}")
    assert bomb.stat().st_size < 200_000
    assert text_size(bomb, 1 << 16) is None
    two = tmp_path / "two.json.gz"  # two gzip members: both count
    two.write_bytes(gzip.compress(b'{"traceEvents": ') + gzip.compress(b"[]}"))
    assert text_size(two, 100) == 19
    table = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1]}), table)
    damaged = tmp_path / "d.json.gz"
    damaged.write_bytes(b"\x1f\x8b" + b"\xff" * 50)
    for other in (table, damaged, tmp_path, "-", tmp_path / "missing.json"):
        assert text_size(other, 1 << 16) is None, other


def test_text_size_of_a_large_plain_file_reads_nothing(tmp_path, monkeypatch):
    # a plain file's text is its bytes: a large one is answered from its size, without
    # starting a reader (closing one cost ~60 ms of every command on a large trace)
    from traceviz.parse import source

    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.write(b'{"traceEvents": [')
        fh.truncate(1 << 30)  # sparse: 1 GiB
    monkeypatch.setattr(source, "ByteSource", None)  # any read would fail
    assert source.text_size(big, 1 << 16) is None


def test_parser_properties_hold_as_python():
    # the random traces of test_parse_fuzz (every number form, escapes, UTF-8, tiny read
    # buffers) and the interval properties, with every numba function run as Python:
    # where Python's arithmetic differs from numba's (uint8 bytes wrap, numba widens
    # them), the references catch it
    here = os.path.dirname(__file__)
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "-n", "0", "-W",
                          "ignore:overflow encountered:RuntimeWarning",
                          os.path.join(here, "test_parse_fuzz.py"),
                          os.path.join(here, "test_intervals.py")],
                         env=env, capture_output=True, text=True, cwd=here)
    assert out.returncode == 0, out.stdout[-3000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout


# ---- the cyclic collector while the command starts (traceviz.startup) ---------------

COLLECTOR = """
import gc, sys, time
from traceviz import startup
default = gc.get_threshold()
startup.resume_collector()  # not paused (a library user): nothing changes
assert gc.get_threshold() == default and gc.get_freeze_count() == 0
startup.START_SECONDS = float(sys.argv[1])
startup.pause_collector()
startup.pause_collector()  # once
assert gc.get_threshold() == (startup.START_THRESHOLD, *default[1:])
if sys.argv[2] == "resume":
    startup.resume_collector()
else:
    time.sleep(startup.START_SECONDS + 1)  # the timer resumes it
assert gc.get_threshold() == default and gc.get_freeze_count() > 0
print("ok")
"""


@pytest.mark.parametrize("how", ["resume", "timer"])
def test_collector_paused_then_resumed(how):
    out = subprocess.run([sys.executable, "-c", COLLECTOR, "0.2" if how == "timer" else "60",
                          how], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


CLI_COLLECTOR = """
import atexit, gc, sys
from traceviz import cli, startup
startup.START_SECONDS = 600  # only the scan resumes it
default = gc.get_threshold()
atexit.register(lambda: print("at exit:", gc.get_threshold() == default,
                              gc.get_freeze_count() > 0))
sys.argv = ["traceviz", *sys.argv[1:]]
cli.run()
"""


def test_the_command_resumes_the_collector_after_its_first_scan(tmp_path):
    from helpers import shared

    trace = shared("hta/trace_filter/sampled_rank-1.json.gz")  # compiled: over 64 KiB
    out = subprocess.run([sys.executable, "-c", CLI_COLLECTOR, "parse", str(trace), "-o",
                          str(tmp_path / "t.parquet"), "-q"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "at exit: True True" in out.stdout


def test_the_first_compile_is_said_on_a_terminal_only(tmp_path, monkeypatch):
    """Where numba's cache has no parser kernel, a terminal is told that the kernels are
    compiled now (once); with the kernel cached, or off a terminal, nothing is said."""
    from traceviz import startup

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    said: list[str] = []
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert not startup.parser_compiled()
    startup.say_first_compile(said.append)
    assert len(said) == 1 and "compiles traceviz's kernels" in said[0]
    (tmp_path / "parse_0123abcd").mkdir()
    (tmp_path / "parse_0123abcd" / "scanner.scan-585.py311.nbi").write_bytes(b"")
    assert startup.parser_compiled()
    startup.say_first_compile(said.append)
    assert len(said) == 1
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    (tmp_path / "parse_0123abcd" / "scanner.scan-585.py311.nbi").unlink()
    startup.say_first_compile(said.append)
    assert len(said) == 1
