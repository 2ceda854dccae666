"""Time and peak memory of ``traceviz diagnose`` on op timelines (per-op timers of every
rank and step) from 1,000 to 10,000 ranks x 50 steps.

Synthesizes (once, cached under --data) a Megatron 1F1B job's timeline as parquet
(:mod:`traceviz.synth.op_timeline`: pp 8, the rest data-parallel, --microbatches
micro-batches, uneven sequence lengths, 1 % spread between GPUs and ops, one rank 1.3x
slow from step 30), runs ``traceviz diagnose`` on it as a subprocess in each of
``--modes`` (``-j 1``: in the command's process; ``-j 2``: a block of steps at a time on
2 local processes; ``--scheduler local``: on a LocalCluster of 2 workers) and prints its
wall time, the command's own peak memory (the client's: its high-water mark, read every
50 ms), the peak of the whole process tree (workers included: summed PSS, sampled), ops
per second, whether it named the slow rank with its onset, and whether its tables equal
the first mode's. The targets: 10,000 ranks x 50 steps (~50 M ops) in <= 5 min and <=
4 GB (issue 56); on workers, the client holding little (issue 57).

    python benchmarks/op_timeline_bench.py --data bench-data --ranks 1000 10000 --markdown
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from batch_bench import measure_parts
from parse_bench import print_table

from traceviz.synth.op_timeline import TimelineConfig, write_timeline

PP = 8
MODES = {"-j 1": ["-j", "1"], "-j 2": ["-j", "2"], "--scheduler local": ["--scheduler", "local"]}


def same_tables(a: Path, b: Path) -> bool:
    """Whether every parquet table and diagnosis.txt of two outputs are equal."""
    names = sorted(p.name for p in a.glob("*.parquet"))
    return names == sorted(p.name for p in b.glob("*.parquet")) and all(
        pq.read_table(a / n).equals(pq.read_table(b / n)) for n in names) and \
        (a / "diagnosis.txt").read_text() == (b / "diagnosis.txt").read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench-data")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--microbatches", type=int, default=22)
    ap.add_argument("--modes", nargs="+", default=["-j 1", "-j 2"], choices=list(MODES))
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    for n in args.ranks:
        dp = n // PP
        slow = 6 * dp + dp // 2  # a rank of stage 6
        cfg = TimelineConfig(pp=PP, dp=dp, microbatches=args.microbatches,
                             steps=args.steps, seq_cv=0.1, gpu_sigma=0.01, op_noise=0.01,
                             slow_rank=slow, slow_from=30)
        path = Path(args.data) / f"timeline_{n}x{args.steps}_mb{args.microbatches}.parquet"
        if not path.exists():
            write_timeline(cfg, path)
        ops = pq.ParquetFile(path).metadata.num_rows
        outs: dict[str, Path] = {}
        for mode in args.modes:
            out = Path(args.data) / f"timeline_{n}x{args.steps}-out{len(outs)}"
            cmd = [sys.executable, "-m", "traceviz", "diagnose", str(path), "-o", str(out),
                   *MODES[mode]]
            client = [0]
            wall, tree, _ = measure_parts(cmd, True, client)
            text = (out / "diagnosis.txt").read_text()
            named = f"rank {slow} (stage" in text and "since step 30" in text
            same = "-" if not outs else str(same_tables(next(iter(outs.values())), out))
            outs[mode] = out
            rows.append((PP * dp, args.steps, mode, ops / 1e6,
                         path.stat().st_size / 2**20, wall, client[0] / 2**30, tree / 2**30,
                         ops / wall / 1e6, named, same))
            print(rows[-1], file=sys.stderr)
        for out in outs.values():
            subprocess.run(["rm", "-rf", str(out)], check=False)
    head = ("ranks", "steps", "mode", "M ops", "parquet MB", "wall s", "client peak GB",
            "tree peak GB", "M ops/s", "slow rank and onset named", "tables = first mode's")
    fmt = ("{}", "{}", "{}", "{:.1f}", "{:.0f}", "{:.1f}", "{:.2f}", "{:.2f}", "{:.2f}", "{}",
           "{}")
    print_table(head, [[f.format(v) for f, v in zip(fmt, row)] for row in rows],
                args.markdown)


if __name__ == "__main__":
    main()
