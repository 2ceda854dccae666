"""How ``traceviz diagnose`` grows with the ranks, and the same run on local worker
processes and on a Dask LocalCluster (README, On a cluster).

For each --ranks, the job of ``scale_bench.py`` (tp2 pp4, the rest data-parallel; one
slow GPU, one slow DP network, natural spread; synthesized and parsed once under --data)
is diagnosed from scratch (``.traceviz-cache`` cleared) once per mode, each a subprocess:
``-j 1`` (this process; only up to --serial-max ranks), ``-j 2`` (two local worker
processes) and ``--scheduler local`` (a LocalCluster of two workers). Printed per run:
wall time, the peak of the process tree's summed memory (workers included), the largest
single process's peak (the client's: the workers hold one rank at a time), and whether
every table it wrote equals the ``-j 2`` run's.

    python benchmarks/cluster_bench.py --data bench-data --ranks 1024 2048 4096 --markdown
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
from batch_bench import measure_parts
from scale_bench import prepare

MODES = {"-j 1": ["-j", "1"], "-j 2": ["-j", "2"], "--scheduler local": ["--scheduler", "local"]}


def same_tables(a: Path, b: Path) -> bool:
    """Whether every parquet table in ``a`` equals its namesake in ``b``."""
    names = sorted(p.name for p in a.glob("*.parquet"))
    return bool(names) and all(
        (b / n).exists() and pq.read_table(a / n).equals(pq.read_table(b / n)) for n in names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="bench-data")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--serial-max", type=int, default=1024,
                    help="run -j 1 only up to this many ranks")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    traceviz = [sys.executable, "-m", "traceviz"]
    data = Path(args.data)
    head = ("ranks", "mode", "wall s", "tree peak MB", "largest process MB",
            "tables = -j 2's")
    fmt = (lambda cells: "| " + " | ".join(cells) + " |") if args.markdown else " | ".join
    rows = []
    for n in args.ranks:
        prep: list = []
        folder = prepare(data, n, True, prep)
        for name, wall, peak, _ in prep:
            print(f"{name} ({n} ranks): {wall:.1f} s, {peak / 1e6:.0f} MB", file=sys.stderr)
        outs = {}
        for mode in sorted(args.modes, key=lambda m: m != "-j 2"):  # -j 2 first
            if mode == "-j 1" and n > args.serial_max:
                continue
            out = data / f"cluster_out{n}" / mode.replace(" ", "").replace("-", "")
            shutil.rmtree(folder / ".traceviz-cache", ignore_errors=True)
            wall, tree, own = measure_parts(traceviz + ["diagnose", str(folder), "-o",
                                                        str(out), *MODES[mode]])
            outs[mode] = out
            same = "-" if mode == "-j 2" or "-j 2" not in outs else str(
                same_tables(outs["-j 2"], out))
            rows.append((str(n), mode, f"{wall:.1f}", f"{tree / 1e6:.0f}",
                         f"{own / 1e6:.0f}", same))
            print(fmt(rows[-1]), file=sys.stderr)
    print(fmt(head))
    if args.markdown:
        print("|" + "---|" * len(head))
    for row in rows:
        print(fmt(row))


if __name__ == "__main__":
    main()
