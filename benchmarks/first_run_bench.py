"""The README's first command on a fresh install: how long ``pip install .`` and the first
``traceviz demo`` take, and how much of the demo is numba compiling (the first demo
against the second, whose kernels numba loads from its cache).

    python benchmarks/first_run_bench.py            # a new venv, the checkout installed
    python benchmarks/first_run_bench.py --here     # this environment, numba's cache empty

A new venv installs from the package index (or its local mirror); matplotlib's font cache
and numba's cache start empty (a fresh HOME and MPLCONFIGDIR), as on a new machine.
Prints one table: seconds per step and the compile share of the first demo.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path, env: dict) -> float:
    """Seconds ``cmd`` took (it must succeed)."""
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--here", action="store_true",
                        help="this environment's install, numba's cache in an empty folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="first-run-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "HOME": str(work / "home"), "MPLCONFIGDIR": str(work / "mpl")}
        env.pop("NUMBA_CACHE_DIR", None)
        rows = []
        if args.here:
            env["NUMBA_CACHE_DIR"] = str(work / "numba")
            traceviz = [sys.executable, "-m", "traceviz"]
        else:
            venv = work / "venv"
            rows.append(("python -m venv", timed([sys.executable, "-m", "venv", str(venv)],
                                                 work, env)))
            rows.append(("pip install .", timed([str(venv / "bin" / "pip"), "install", "-q",
                                                 str(ROOT)], work, env)))
            traceviz = [str(venv / "bin" / "traceviz")]
        first = timed([*traceviz, "demo", "demo1"], work, env)
        second = timed([*traceviz, "demo", "demo2"], work, env)
        rows += [("first traceviz demo (compiles)", first),
                 ("second traceviz demo (cached kernels)", second)]
        print(f"{'step':40s} {'seconds':>8s}")
        for name, seconds in rows:
            print(f"{name:40s} {seconds:8.1f}")
        print(f"{'compile share of the first demo':40s} {100 * (first - second) / first:7.1f} %")
        if not args.here:
            print(f"{'the first command: pip install . + demo':40s} {rows[1][1] + first:8.1f}")


if __name__ == "__main__":
    main()
