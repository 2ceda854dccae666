"""Time and peak memory of the job-wide commands at 1,024 and 4,096 ranks.

Synthesizes (once, cached under --data) a Megatron-like job of --ranks ranks (tp2 pp4,
the rest data-parallel; 4 micro-batches, 4 layers and a 128k vocabulary: a heavy last
stage; GPUs spread by 1.5 %, kernels by 2 %; one GPU 1.3x slower; the data-parallel
group of rank 77 on a network 3x slower; no python stacks), parses it with ``traceviz
batch -j 2 --cpu``, then runs each command once as a subprocess, in the order a user
would (``diagnose`` first: the others reuse its diagnosis, kept beside the tables), and
prints its wall time, peak memory of its process tree and the lines it printed.
``--tables-only`` runs ``diagnose`` and ``report`` (the 4,096-rank case). The first
lines of the diagnosis are printed at the end (what a user reads).

    python benchmarks/scale_bench.py --data bench-data --ranks 1024
    python benchmarks/scale_bench.py --data bench-data --ranks 4096 --tables-only

``--reuse-tables`` skips the parse where the tables of an earlier run are there.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from batch_bench import measure


def lines_of(cmd: list[str]) -> list[str]:
    """What the command prints on stdout (a second run: ``measure`` discards it)."""
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()


def prepare(data: Path, ranks: int, reuse_tables: bool, rows: list) -> Path:
    """The folder of parsed tables of the ``ranks``-rank job (synthesized and parsed
    once under ``data``, see the module doc; their times appended to ``rows``), its
    ``.traceviz-cache`` cleared (the diagnosis is computed, not read)."""
    traceviz = [sys.executable, "-m", "traceviz"]
    job = data / f"job{ranks}"
    if not (job / "ground_truth").exists():
        rows.append(("synth", *measure(traceviz + [
            "synth", str(job), "--tp", "2", "--pp", "4", "--dp", str(ranks // 8),
            "--microbatches", "4", "--layers", "4", "--vocab", "128000", "--gpu-sigma",
            "0.015", "--kernel-noise", "0.02", "--no-with-stack", "--straggler-rank",
            str(ranks * 5 // 8 + 1), "--slow-link-rank", "77", "--skew-us", "300"]),
            None))
    tables = data / "tables" / job.name
    if not (reuse_tables and (tables / "iteration_10").is_dir()):
        rows.append(("batch -j 2 --cpu", *measure(traceviz + [
            "batch", str(job), "-o", str(tables), "-q", "-j", "2", "--cpu", "--force"]),
            None))
    folder = tables / "iteration_10"
    shutil.rmtree(folder / ".traceviz-cache", ignore_errors=True)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench-data")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--tables-only", action="store_true")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--reuse-tables", action="store_true",
                    help="skip the parse where the tables are there already")
    args = ap.parse_args()
    if args.ranks % 8 or args.ranks < 256:
        sys.exit("--ranks must be a multiple of 8 (tp2 x pp4), at least 256")
    traceviz = [sys.executable, "-m", "traceviz"]
    data = Path(args.data)
    rows: list = []
    folder = prepare(data, args.ranks, args.reuse_tables, rows)
    out = data / f"scale_out{args.ranks}"
    steps = {"diagnose": ["diagnose", str(folder), "-o", str(out / "diag")],
             "report": ["report", str(folder), "-o", str(out / "report" / "r.txt")]}
    if not args.tables_only:
        steps["html"] = ["html", str(folder), "-o", str(out / "page.html")]
        steps["pipeline"] = ["pipeline", str(folder), "-o", str(out / "pipe")]
        steps["breakdown"] = ["breakdown", str(folder), "-o", str(out / "brk")]
    for name, cmd in steps.items():
        wall, peak = measure(traceviz + cmd)
        printed = len(lines_of(traceviz + cmd)) if name in ("report", "diagnose") else None
        rows.append((name, wall, peak, printed))
    head = ("step", "ranks", "wall s", "peak tree RSS MB", "lines printed")
    fmt = (lambda cells: "| " + " | ".join(cells) + " |") if args.markdown else " | ".join
    print(fmt(head))
    if args.markdown:
        print("|" + "---|" * len(head))
    for name, wall, peak, printed in rows:
        print(fmt((name, str(args.ranks), f"{wall:.1f}", f"{peak / 1e6:.0f}",
                   "-" if printed is None else str(printed))))
    print()
    print("\n".join(lines_of(traceviz + steps["diagnose"])[:16]))


if __name__ == "__main__":
    main()
