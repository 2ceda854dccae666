"""A kernel-dense trace for the memory benchmarks: >= 3 M GPU kernels per GB of JSON.

LLM training traces are kernel-dense (Megatron launches thousands of short kernels per
layer), and the per-activity arrays are the memory that grows with a trace. This writes
one rank of the synthesizer's job (``traceviz synth``: dp 2, so the data-parallel
collectives with their metadata are in it) reduced to what a kernel-dense profile holds
per kernel (the kernel, its launch, ProfilerStep annotations and the
collective metadata Kineto writes on NCCL kernels; kernel names cut to 32 characters,
compact JSON), then repeats that iteration, shifted in time and ids, up to the size asked.

    python benchmarks/dense_trace.py OUT.json --mb 500
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

KEEP_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver"}
KERNEL_ARGS = ("correlation", "stream", "device")
ID_ARGS = ("correlation",)


def _pattern(workdir: Path) -> tuple[dict, list[dict]]:
    """The header and the reduced events of one synthesized rank (one iteration)."""
    subprocess.run([sys.executable, "-m", "traceviz", "synth", str(workdir), "--tp", "1",
                    "--pp", "1", "--dp", "2", "--layers", "16", "--microbatches", "8",
                    "--no-with-stack"], check=True, stdout=subprocess.DEVNULL)
    trace = next(workdir.glob("iteration_*/rank_0000_*.json"))
    doc = orjson.loads(trace.read_bytes())
    events = []
    for e in doc["traceEvents"]:
        cat, name = e.get("cat"), e.get("name", "")
        args = e.get("args") or {}
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            keep = {k: args[k] for k in KERNEL_ARGS if k in args}
            keep.update({k: v for k, v in args.items() if k.startswith(("Collective",
                         "Process Group", "Group size", "In msg", "Out msg", "dtype", "Seq"))})
            events.append({**e, "name": name[:32], "args": keep})
        elif cat in KEEP_CATS:
            events.append({**e, "args": {"correlation": args["correlation"]}})
        elif name.startswith("ProfilerStep#"):
            events.append(e)
    header = {k: v for k, v in doc.items() if k != "traceEvents"}
    return header, events


def write_dense(out: Path, mb: int) -> dict:
    """Write ``out`` (~``mb`` MB) and return its counts."""
    with tempfile.TemporaryDirectory() as tmp:
        header, events = _pattern(Path(tmp) / "job")
    timed = [e for e in events if "ts" in e and e.get("ph") != "M"]
    t0 = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - t0 + 1000.0
    max_id = max(int(e["args"][k]) for e in events for k in ID_ARGS
                 if isinstance((e.get("args") or {}).get(k), int)) + 1
    per_copy = len(orjson.dumps(events))
    copies = max(1, round(mb * 1e6 / per_copy))
    kernels = sum(e.get("cat") == "kernel" for e in events) * copies
    tmp_out = out.with_suffix(".tmp")
    with open(tmp_out, "wb") as fh:
        fh.write(orjson.dumps(header)[:-1] + b',"traceEvents":[\n')
        for c in range(copies):
            chunk = []
            for e in events:
                e2 = dict(e)
                if e2.get("ph") != "M" and "ts" in e2:
                    e2["ts"] = round(e2["ts"] + c * span, 3)
                args = e2.get("args")
                if args:
                    e2["args"] = {k: (v + c * max_id if k in ID_ARGS and isinstance(v, int)
                                      and v >= 0 else v) for k, v in args.items()}
                name = e2.get("name", "")
                if name.startswith("ProfilerStep#"):
                    e2["name"] = f"ProfilerStep#{10 + c}"
                chunk.append(orjson.dumps(e2))
            fh.write((b"" if c == 0 else b",\n") + b",\n".join(chunk))
        fh.write(b"\n]}\n")
    os.replace(tmp_out, out)
    size = out.stat().st_size
    return {"copies": copies, "kernels": kernels, "bytes": size,
            "kernels_per_gb": kernels / size * 1e9}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=int, default=500)
    a = ap.parse_args()
    facts = write_dense(a.out, a.mb)
    print(f"{a.out}: {facts['bytes'] / 1e6:.0f} MB, {facts['kernels'] / 1e6:.2f} M kernels "
          f"({facts['kernels_per_gb'] / 1e6:.2f} M per GB), {facts['copies']} iterations")


if __name__ == "__main__":
    main()
