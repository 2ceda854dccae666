"""The parse of one trace by this checkout against another commit's, alternating, in fresh
processes (numba's caches warmed first for both): wall and CPU seconds (user + sys) per
run, medians and minima.

    git worktree add /tmp/base 66bd610
    python benchmarks/parse_against.py TRACE /tmp/base [ROUNDS]
"""
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = str(Path(__file__).resolve().parents[1])


def run(tree: str, trace: str, out: str) -> tuple[float, float]:
    """(wall s, CPU s) of ``traceviz parse`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "traceviz", "parse", trace, "-o", out, "-q"],
                   env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    trace, base = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    trees = {"this checkout": HERE, base: base}
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "t.parquet")
        for tree in trees.values():
            run(tree, trace, out)  # numba's caches warm for both
        runs: dict[str, list] = {k: [] for k in trees}
        for i in range(rounds):  # alternating, each first in turn
            for name, tree in (list(trees.items()) if i % 2 == 0
                               else list(trees.items())[::-1]):
                runs[name].append(run(tree, trace, out))
    print(f"{'tree':20s} {'wall median':>11s} {'wall min':>9s} {'CPU median':>11s} "
          f"{'CPU min':>8s}")
    for name, rs in runs.items():
        wall, cpu = [w for w, _ in rs], [c for _, c in rs]
        print(f"{name:20s} {statistics.median(wall):11.3f} {min(wall):9.3f} "
              f"{statistics.median(cpu):11.3f} {min(cpu):8.3f}")


if __name__ == "__main__":
    main()
