"""The command line's start-up: numba's BLAS probe does not import SciPy (traceviz.startup).

A stand-in ``scipy`` package on the path records whether it was imported, so the test
runs the same with or without a real SciPy installed."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import sys
{install}
from numba.core.registry import cpu_target
cpu_target.target_context.refresh()  # what numba's first compile or cache load runs
from numba.np import arraymath
print("during probe:", "scipy.linalg" in sys.modules, "blas:", arraymath._HAVE_BLAS)
import scipy.linalg.cython_blas  # later imports of SciPy are untouched
print("later:", scipy.linalg.cython_blas.MARK)
"""


@pytest.fixture
def fake_scipy(tmp_path):
    pkg = tmp_path / "scipy" / "linalg"
    pkg.mkdir(parents=True)
    (tmp_path / "scipy" / "__init__.py").write_text("__version__ = \"1.17.0\"\n")
    (pkg / "__init__.py").write_text("")
    (pkg / "cython_blas.py").write_text("MARK = 'stand-in'\n")
    return tmp_path


def _run(path, install: str) -> str:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(path), *sys.path]))
    out = subprocess.run([sys.executable, "-c", PROBE.format(install=install)], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout


def test_cli_skips_numba_blas_probe(fake_scipy):
    skipped = _run(fake_scipy, "from traceviz.startup import skip_numba_blas_probe\n"
                               "skip_numba_blas_probe()")
    assert "during probe: False blas: False" in skipped
    assert "later: stand-in" in skipped


def test_without_it_numba_imports_scipy(fake_scipy):
    # the stand-in is what numba's probe imports when nothing stops it
    assert "during probe: True" in _run(fake_scipy, "")


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
