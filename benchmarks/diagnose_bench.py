"""``traceviz diagnose`` against ``traceviz aggregate`` on the same synthesized job.

Synthesizes (once, cached under --data) a Megatron-like job of --ranks ranks (tp2 pp4,
the rest data-parallel; 4 micro-batches, 4 layers, no python stacks, one GPU 1.3x
slower), parses it once with ``traceviz batch``, then runs ``aggregate --no-figures``,
``aggregate`` (figures) and ``diagnose`` as subprocesses --repeat times, in turn, and
prints each command's median wall time, runs, peak memory of its process tree and its
ratio to ``aggregate``'s time measured in the same run (the issue's target: diagnose
within 2x of aggregate).

    python benchmarks/diagnose_bench.py --data bench-data --ranks 128 --repeat 3
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from batch_bench import measure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench-data")
    ap.add_argument("--ranks", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.ranks % 8:
        sys.exit("--ranks must be a multiple of 8 (tp2 x pp4)")
    traceviz = [sys.executable, "-m", "traceviz"]
    job = Path(args.data) / f"diag{args.ranks}"
    slow = args.ranks * 5 // 8 + 1
    if not (job / "ground_truth").exists():
        subprocess.run(traceviz + ["synth", str(job), "--tp", "2", "--pp", "4", "--dp",
                                   str(args.ranks // 8), "--microbatches", "4", "--layers",
                                   "4", "--no-with-stack", "--straggler-rank", str(slow),
                                   "--skew-us", "300"], check=True)
    out = Path(args.data) / "tables" / job.name
    subprocess.run(traceviz + ["batch", str(job), "-o", str(out), "-q"], check=True,
                   stdout=subprocess.DEVNULL)
    folder = out / "iteration_10"
    steps = {"aggregate --no-figures": ["aggregate", str(out), "--no-figures"],
             "aggregate": ["aggregate", str(out)],
             "diagnose": ["diagnose", str(folder), "-o", str(Path(args.data) / "diag_out")]}
    runs: dict[str, list[tuple[float, int]]] = {k: [] for k in steps}
    for _ in range(args.repeat):  # in turn, so a busy moment hits every command alike
        for name, cmd in steps.items():
            runs[name].append(measure(traceviz + cmd))
    base = statistics.median(r[0] for r in runs["aggregate"])
    head = ("command", "ranks", "wall s (median)", "runs", "peak tree RSS MB",
            "ratio to aggregate")
    lines = [" | ".join(head)] if not args.markdown else [
        "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rs in runs.items():
        wall = statistics.median(r[0] for r in rs)
        cells = (name, str(args.ranks), f"{wall:.2f}", str([round(r[0], 2) for r in rs]),
                 f"{max(r[1] for r in rs) / 1e6:.0f}", f"{wall / base:.2f}")
        lines.append(("| " + " | ".join(cells) + " |") if args.markdown else " | ".join(cells))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
