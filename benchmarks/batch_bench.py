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
    """Resident bytes of ``pid`` and all its descendants (Linux /proc), as the sum of
    their proportional set sizes: pages a forked worker shares with its parent count
    once (a sum of RSS counts them in every process that maps them). RSS where there is
    no smaps_rollup (kernels before 4.14)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            total += _resident(p)
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo += [int(c) for c in fh.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def _high_water(pid: int) -> int:
    """The peak resident set size of ``pid`` so far (bytes; 0: gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def _resident(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (resident set size without
    smaps_rollup)."""
    for path, key in ((f"/proc/{pid}/smaps_rollup", "Pss:"), (f"/proc/{pid}/status", "VmRSS:")):
        try:
            with open(path) as fh:
                for line in fh:
                    if line.startswith(key):
                        return int(line.split()[1]) * 1024
        except FileNotFoundError:
            if path.endswith("status"):
                raise
    return 0


def measure(cmd: list[str], tree: bool = True) -> tuple[float, int]:
    """(wall seconds, peak memory bytes) of one command; fails loudly on error. The peak
    is the larger of the command's own peak RSS (the kernel's, from wait4) and, with
    ``tree``, the peak of its process tree's summed PSS (sampled every 50 ms: workers
    included). Without ``tree`` (a command that starts no process) nothing samples it:
    reading a process's smaps_rollup walks its page tables under its memory map's lock,
    which slowed a two-thread parse of 0.5 GB by ~8 % (1.48 -> 1.60 s, medians of 7)."""
    wall, tree_peak, own = measure_parts(cmd, tree)
    return wall, max(tree_peak, own)


def measure_parts(cmd: list[str], tree: bool = True, client: list[int] | None = None
                  ) -> tuple[float, int, int]:
    """(wall seconds, peak of the process tree's summed PSS (bytes; 0 without ``tree``),
    the largest peak RSS of the command or any process it waited for (bytes: wait4's);
    see :func:`measure`. ``client``: where the command's own peak RSS goes (bytes, its
    VmHWM read with each sample: the command alone, not its workers)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, done, err = [0], threading.Event(), []

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss(proc.pid))
            if client is not None:
                client[0] = max(client[0], _high_water(proc.pid))
            done.wait(0.05)

    threads = [threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]
    if tree:
        threads.append(threading.Thread(target=sample, daemon=True))
    for t in threads:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    done.set()
    for t in threads:
        t.join()
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{' '.join(cmd)} failed: {err[0].decode()[-2000:]}")
    return time.perf_counter() - start, peak[0], usage.ru_maxrss * 1024


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
