"""``traceviz diagnose`` on the real Megatron-LM jobs of ../shared/traces/gpu, this
checkout against a baseline checkout measured in the same run.

Each command runs as a subprocess in a fresh folder (``cold``: the job's traces parsed
into its tables, then the analysis) and again in the same folder (``warm``: the tables
taken up to date), alternating between the two checkouts --repeat times; the table gives
each one's median wall time, peak memory of its process tree and the ratio of this
checkout's median to the baseline's (issue 46's target: diagnose within 1.5x of its time
before the real-framework changes).

    git worktree add ../base <commit>
    python benchmarks/real_jobs_bench.py --baseline ../base --repeat 5
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from batch_bench import measure

HERE = Path(__file__).resolve().parents[1]
JOBS = ("megatron_1f1b", "megatron_moe")


def run_once(src: Path, job: Path, folder: Path) -> tuple[float, int]:
    """(wall s, peak bytes) of ``traceviz diagnose job`` run from ``folder`` (where its
    tables are cached) with the package of checkout ``src``."""
    os.environ["PYTHONPATH"] = str(src)
    here = os.getcwd()
    os.chdir(folder)
    try:
        return measure([sys.executable, "-m", "traceviz", "diagnose", str(job)])
    finally:
        os.chdir(here)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", required=True, help="a checkout of the baseline commit")
    ap.add_argument("--shared", default=str(HERE.parent / "shared"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    sides = {"baseline": Path(args.baseline).resolve(), "this": HERE}
    rows = []
    for name in JOBS:
        job = Path(args.shared) / "traces" / "gpu" / name / "iteration_5"
        times: dict = {(s, m): [] for s in sides for m in ("cold", "warm")}
        peaks: dict = {(s, m): 0 for s in sides for m in ("cold", "warm")}
        for _ in range(args.repeat):
            for side, src in sides.items():
                with tempfile.TemporaryDirectory() as tmp:
                    for mode in ("cold", "warm"):
                        wall, peak = run_once(src, job, Path(tmp))
                        times[(side, mode)].append(wall)
                        peaks[(side, mode)] = max(peaks[(side, mode)], peak)
        for mode in ("cold", "warm"):
            base = statistics.median(times[("baseline", mode)])
            this = statistics.median(times[("this", mode)])
            rows.append((name, mode, base, this, this / base,
                         peaks[("baseline", mode)] >> 20, peaks[("this", mode)] >> 20))
    print("| job | run | baseline s | this s | ratio | baseline MB | this MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.2f} | {r[4]:.2f} | {r[5]} | {r[6]} |")


if __name__ == "__main__":
    main()
