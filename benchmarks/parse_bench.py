"""Parse throughput and peak memory: traceviz vs orjson, ijson and HTA, in one run.

Builds large inputs by tiling a real trace (each copy shifted in time and in every id, so
correlations stay unique), then runs each tool in its own process and reads its peak RSS
from the kernel (``wait4``). Prints a table; ``--markdown`` prints it for RESULTS.md.

    python benchmarks/parse_bench.py \
        --source ../shared/traces/hta/nccl_parser_config/nccl_data.json.gz \
        --sizes 500 4000 --repeat 3 [--hta-python PATH/TO/venv/bin/python]

Tools that would not fit in memory (orjson and HTA on the large input) are skipped with a
note instead of being run.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ID_ARGS = ("correlation", "External id", "external id", "Python id", "Python parent id",
           "Ev Idx", "Record function id")


def tile(source: Path, target_mb: int, out: Path) -> dict:
    """Write ``out``: the events of ``source`` repeated until ~``target_mb`` MB."""
    raw = source.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0
    max_id = max([int(e["args"][k]) for e in events for k in ID_ARGS
                  if isinstance(e.get("args"), dict) and isinstance(e["args"].get(k), int)]
                 + [int(e["id"]) for e in events if isinstance(e.get("id"), int)] + [0])
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    per_copy = len(json.dumps(events))
    copies = max(1, round(target_mb * 1e6 / per_copy))
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write("{\n" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}"
                                   for k, v in header.items() if k != "traceName"))
        fh.write(',\n  "traceEvents": [\n')
        first = True
        for c in range(copies):
            shift_t = c * (span + 1000.0)
            shift_id = c * (max_id + 1)
            for e in events:
                e2 = dict(e)
                if isinstance(e2.get("ts"), (int, float)) and e2.get("ph") != "M":
                    e2["ts"] = round(e2["ts"] + shift_t, 3)
                if isinstance(e2.get("id"), int):
                    e2["id"] = e2["id"] + shift_id
                if isinstance(e2.get("args"), dict):
                    a = dict(e2["args"])
                    for k in ID_ARGS:
                        if isinstance(a.get(k), int) and a[k] >= 0:
                            a[k] += shift_id
                    name = e2.get("name", "")
                    if isinstance(name, str) and name.startswith("ProfilerStep#"):
                        e2["name"] = f"ProfilerStep#{c * 1000 + int(name[13:] or 0)}"
                    e2["args"] = a
                elif isinstance(e2.get("name"), str) and e2["name"].startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{c * 1000 + int(e2['name'][13:] or 0)}"
                fh.write(("" if first else ",\n  ") + json.dumps(e2))
                first = False
        fh.write('\n  ],\n  "traceName": "tiled"\n}\n')
    os.replace(tmp, out)
    return {"copies": copies, "events": copies * len(events)}


# ---- the measured programs (each runs in a fresh interpreter) -----------------------
def command(tool: str, python: str, trace: str, out: str) -> list[str]:
    if tool == "traceviz parse":
        return [python, "-m", "traceviz", "parse", trace, "-o", out, "-q"]
    code = {
        "orjson.loads": "import sys,orjson; d=orjson.loads(open(sys.argv[1],'rb').read()); "
                        "print(len(d['traceEvents']))",
        "ijson items": "import sys,ijson; f=open(sys.argv[1],'rb'); "
                       "print(sum(1 for _ in ijson.items(f,'traceEvents.item')))",
        "HTA TraceAnalysis": "import sys,os,logging; logging.disable(logging.CRITICAL)\n"
                             "from hta.trace_analysis import TraceAnalysis\n"
                             "a=TraceAnalysis(trace_files={0:sys.argv[1]},"
                             "trace_dir=os.path.dirname(sys.argv[1]))\n"
                             "print(len(a.t.get_trace(0)))",
    }[tool]
    return [python, "-c", code, trace]


def measure(argv: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MB, exit code) of one process, from wait4's rusage."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def print_table(head, rows, markdown: bool = False) -> None:
    """Print ``rows`` (lists of strings) under ``head``: aligned columns, or markdown."""
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, type=Path)
    ap.add_argument("--sizes", nargs="+", type=int, default=[500, 4000], help="MB")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--data", type=Path, default=HERE.parent / "bench-data")
    ap.add_argument("--hta-python", help="python of a venv with `pip install traceinsight`")
    ap.add_argument("--full-baselines-up-to", type=int, default=1000,
                    help="MB: orjson / HTA run only on inputs up to this size")
    ap.add_argument("--markdown", action="store_true")
    opts = ap.parse_args()
    opts.data.mkdir(parents=True, exist_ok=True)
    rows = []
    for size in opts.sizes:
        path = opts.data / f"tiled_{opts.source.name.split('.')[0]}_{size}MB.json"
        info_path = path.with_suffix(".info.json")
        if not path.exists() or not info_path.exists():
            print(f"building {path} ...", file=sys.stderr)
            info_path.write_text(json.dumps(tile(opts.source, size, path)))
        info = json.loads(info_path.read_text())
        mb = path.stat().st_size / 1e6
        tools = ["traceviz parse", "ijson items"]
        if size <= opts.full_baselines_up_to:
            tools.insert(1, "orjson.loads")
            if opts.hta_python:
                tools.append("HTA TraceAnalysis")
        results = {}
        for tool in tools:
            python = opts.hta_python if tool.startswith("HTA") else sys.executable
            runs = []
            for _ in range(opts.repeat):
                out = opts.data / "bench_out.parquet"
                wall, peak, code = measure(command(tool, python, str(path), str(out)))
                if code != 0:
                    raise SystemExit(f"{tool} failed on {path} (exit {code})")
                runs.append((wall, peak))
            wall = statistics.median(w for w, _ in runs)
            peak = max(p for _, p in runs)
            results[tool] = (wall, peak, [round(w, 2) for w, _ in runs])
            print(f"{size} MB {tool}: {[round(w, 2) for w, _ in runs]} s, {peak:.0f} MB",
                  file=sys.stderr)
        tv_wall, tv_peak, _ = results["traceviz parse"]
        for tool, (wall, peak, walls) in results.items():
            rows.append([f"{mb:.0f}", f"{info['events'] / 1e6:.2f}", tool, f"{wall:.2f}",
                         str(walls), f"{mb / wall:.0f}", f"{info['events'] / wall / 1e6:.2f}",
                         f"{peak:.0f}", f"{wall / tv_wall:.1f}x", f"{peak / tv_peak:.1f}x"])
        for tool in ("orjson.loads", "HTA TraceAnalysis"):
            if tool not in results and (tool != "HTA TraceAnalysis" or opts.hta_python):
                rows.append([f"{mb:.0f}", f"{info['events'] / 1e6:.2f}", tool, "not run",
                             "-", "-", "-", "-", "-",
                             "-"])
    head = ["input MB", "events M", "tool", "wall s (median)", "runs", "MB/s", "Mevents/s",
            "peak RSS MB", "time vs traceviz", "memory vs traceviz"]
    print_table(head, rows, opts.markdown)


if __name__ == "__main__":
    main()
