"""Whole-job benchmark: ``traceviz batch`` + ``traceviz aggregate`` on a synthesized job.

Synthesizes (once, cached under --data) a 64-rank Megatron-like job (tp2 pp4 dp8) whose
traces are about --rank-mb each, then runs the two commands as subprocesses --repeat
times and prints wall time, throughput and the peak resident memory of the whole process
tree (sampled every 50 ms from /proc: the batch's workers together).

    python benchmarks/batch_bench.py --data bench-data --rank-mb 100 --jobs 2 --repeat 3
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (Linux /proc)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(cmd: list[str]) -> tuple[float, int]:
    """(wall seconds, peak tree RSS bytes) of one command; fails loudly on error."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = [0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    sampler.join()
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed: {err.decode()[-2000:]}")
    return time.perf_counter() - start, peak[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench-data")
    ap.add_argument("--rank-mb", type=float, default=100.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    traceviz = [sys.executable, "-m", "traceviz"]
    # about 0.7 MB per rank per unit of size_multiplier for this job shape
    mult = max(1, round(args.rank_mb / 0.7))
    job = Path(args.data) / f"job64_x{mult}"
    if not (job / "ground_truth").exists():
        subprocess.run(traceviz + ["synth", str(job), "--tp", "2", "--pp", "4", "--dp", "8",
                                   "--no-with-stack", "--size-multiplier", str(mult)],
                       check=True)
    traces = sorted(job.rglob("rank_*.json"))
    size = sum(p.stat().st_size for p in traces)
    out = Path(args.data) / "tables" / job.name
    rows = []
    for step, cmd in (("batch", ["batch", str(job), "-o", str(out), "-j", str(args.jobs), "-q",
                                 "--force"]),
                      ("aggregate", ["aggregate", str(job), "-o", str(out)])):
        runs = []
        for _ in range(args.repeat):
            if step == "batch":
                shutil.rmtree(out, ignore_errors=True)
            runs.append(measure(traceviz + cmd))
        wall = statistics.median(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        rows.append((step, wall, [round(r[0], 1) for r in runs], size / 1e6 / wall, peak))
    head = ("step", "ranks", "input MB", "wall s (median)", "runs", "MB/s", "peak tree RSS MB")
    lines = [" | ".join(head)] if not args.markdown else [
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for step, wall, runs, mbs, peak in rows:
        cells = (step, str(len(traces)), f"{size / 1e6:.0f}", f"{wall:.1f}", str(runs),
                 f"{mbs:.0f}", f"{peak / 1e6:.0f}")
        lines.append(("| " + " | ".join(cells) + " |") if args.markdown else " | ".join(cells))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
