"""Time and peak memory of ``traceviz hang`` from 256 to 4,096 ranks' Flight Recorder dumps.

Synthesizes (once, cached under --data) the dumps of a Megatron-like hang (tp2 pp4, the
rest data-parallel; --steps steps per rank, so ~11 entries a step in each ring buffer;
rank 5 stops before the last step: :mod:`traceviz.synth.hang_dumps`), runs ``traceviz
hang`` on each as a subprocess and prints its wall time, peak memory, time per dump, the
lines it printed, the size of ``hang.json``, and whether it named rank 5 alone.

    python benchmarks/hang_bench.py --data bench-data --ranks 256 1024 2048 4096 --markdown
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from batch_bench import measure
from parse_bench import print_table

from traceviz.synth.hang_dumps import hang_dumps, write_dumps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench-data")
    ap.add_argument("--ranks", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    for n in args.ranks:
        folder = Path(args.data) / f"hang{n}x{args.steps}"
        if not (folder / f"nccl_trace_rank_{n - 1}").exists():
            dumps, _ = hang_dumps(n, tp=2, pp=4, stopped=(5,), steps=args.steps,
                                  stop_step=args.steps - 1)
            write_dumps(folder, dumps)
            del dumps
        size = sum(p.stat().st_size for p in folder.iterdir())
        out = Path(args.data) / f"hang{n}x{args.steps}-out"
        cmd = [sys.executable, "-m", "traceviz", "hang", str(folder), "-o", str(out)]
        wall, peak = measure(cmd, tree=False)
        lines = subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()
        rows.append((n, size / 2**20, wall, peak / 2**20, 1000 * wall / n, len(lines),
                     (out / "hang.json").stat().st_size / 2**20,
                     lines[0].startswith("hang: rank 5 stopped before")))
    head = ("ranks", "dumps MB", "wall s", "peak RSS MB", "ms per dump", "lines printed",
            "hang.json MB", "names rank 5 alone")
    fmt = ("{}", "{:.1f}", "{:.1f}", "{:.0f}", "{:.2f}", "{}", "{:.1f}", "{}")
    print_table(head, [[f.format(v) for f, v in zip(fmt, row)] for row in rows],
                args.markdown)


if __name__ == "__main__":
    main()
