"""Start-up of the ``traceviz`` command against the import floor, side by side in one run.

    python benchmarks/startup_bench.py [--repeat 11] [--markdown]

Each command runs in a fresh process, the commands in turn within each round (so a busy
moment of a shared machine hits them alike); medians over the rounds. The floor is
importing numpy + pyarrow + numba (what any numba-based parser pays); the target
(issue 38) is a parse of a tiny trace at most 0.15 s above it. Rows:

- the tiny trace as the command runs it (small traces run numba's functions as Python,
  ``traceviz.startup``), and the same parse with the compiled functions loaded from
  numba's cache (the command's group called directly, as a library user would);
- traces around :data:`traceviz.startup.SMALL_TRACE` (just under it: the slowest
  interpreted parse; just over: compiled) and a 1.7 MB one.

traceviz's modules are byte-compiled first (``compileall``), as ``pip install`` does: a
source checkout with ``PYTHONDONTWRITEBYTECODE`` set would otherwise compile ~60 modules
from source in every run (~60 ms).
"""
from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from parse_bench import print_table  # noqa: E402

SHARED = HERE.parents[1] / "shared" / "traces"
TRACES = {
    "tiny (15 KB)": SHARED / "kineto" / "docs" / "before_fix_trace.json",
    "just under the limit (63 KB of text)": SHARED / "tracelens" / "torch_compile_triton"
    / "trace.json.gz",
    "over it (340 KB .gz, 4.8 MB of text)": SHARED / "hta" / "mtia_inference_trace"
    / "mtia_inference_rank_0.json.gz",
    "1.7 MB of text": SHARED / "hta" / "trace_filter" / "sampled_rank-1.json.gz",
}
COMPILED = ("import sys\nfrom traceviz.cli import main\nsys.argv[0] = 'traceviz'\n"
            "main()\n")


def wall(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=11)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp"))
                    / "traceviz_startup.parquet")
    opts = ap.parse_args()
    import traceviz

    compileall.compile_dir(os.path.dirname(traceviz.__file__), quiet=1)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    parse = ["parse", None, "-o", str(opts.out), "-q"]
    commands = {"python -c pass": [sys.executable, "-c", "pass"],
                "floor: import numpy, pyarrow, numba":
                    [sys.executable, "-c", "import numpy, pyarrow, numba"]}
    for what, path in TRACES.items():
        argv = [str(path) if a is None else a for a in parse]
        commands[f"traceviz parse, {what}"] = [sys.executable, "-m", "traceviz", *argv]
        if what.startswith("tiny"):
            commands[f"the same, compiled functions (numba's cache), {what}"] = \
                [sys.executable, "-c", COMPILED, *argv]
    for cmd in commands.values():  # numba's cache written, files in the page cache
        wall(cmd, env)
    times: dict[str, list[float]] = {k: [] for k in commands}
    for _ in range(opts.repeat):
        for what, cmd in commands.items():
            times[what].append(wall(cmd, env))
    floor = statistics.median(times["floor: import numpy, pyarrow, numba"])
    rows = []
    for what, runs in times.items():
        med = statistics.median(runs)
        verdict = ""
        if what.startswith("traceviz parse, tiny"):
            verdict = "met" if med - floor <= 0.15 else "NOT met"
        rows.append((what, f"{med:.3f}", f"{med - floor:+.3f}",
                     f"{min(runs):.3f}-{max(runs):.3f}", verdict))
    print_table(("command", "median s", "vs floor", "range", "target: floor + 0.15 s"),
                rows, opts.markdown)


if __name__ == "__main__":
    main()
