"""Peak memory of ``traceviz parse`` on inputs built to break a memory budget.

Each case is written here (streamed: none is held in memory whole), then parsed with the
default 512 MB budget (unless the case says) in its own process; its peak RSS is read
from the kernel (``wait4``). Prints a table; ``--markdown`` prints it for RESULTS.md.

    python benchmarks/hostile_memory.py --data DIR [--repeat 3] [--markdown]

Cases:

* ``long-name``: one kernel whose name is 1 GiB of text (a ~1 MB .json.gz);
* ``long-arg``: the same 1 GiB string in an argument traceviz does not read;
* ``distinct-names``: 2 M kernels, each with its own ~210-byte name (~19 MB .json.gz);
  ``distinct-names-320``: the same with a 320 MB budget, which holds fewer distinct
  strings (the rest fold into one marker, with a warning);
* ``no-steps``: a ~1 GB kernel-dense trace without ProfilerStep annotations or CPU ops
  (kernels and their runtime launches only, as a trace cut to the GPU looks).
"""
from __future__ import annotations

import argparse
import gzip
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
GIB = 1 << 30
HEADER = b'{"schemaVersion":1,"distributedInfo":{"rank":0,"world_size":1},"traceEvents":[\n'


def _kernel(i: int, name: bytes, extra: bytes = b"") -> bytes:
    ts = 1000 + 3 * i
    return (b'{"ph":"X","cat":"kernel","name":"' + name + b'","pid":0,"tid":7,"ts":%d,'
            b'"dur":2,"args":{"correlation":%d,"stream":7,"device":0%s}}'
            % (ts, i + 1, extra))


def _launch(i: int) -> bytes:
    ts = 999 + 3 * i
    return (b'{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":100,'
            b'"tid":100,"ts":%d,"dur":1,"args":{"correlation":%d}}' % (ts, i + 1))


def _long_string(out, size: int) -> None:
    block = b"A" * (8 << 20)
    left = size
    while left:
        out.write(block[:min(left, len(block))])
        left -= min(left, len(block))


def write_long(path: Path, in_arg: bool) -> None:
    """One kernel (and its launch) whose name, or an unread argument, is 1 GiB long."""
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(HEADER + _launch(0) + b",\n")
        if in_arg:
            out.write(_kernel(0, b"gemm", b',"note":"')[:-2])
            _long_string(out, GIB)
            out.write(b'"}}')
        else:
            out.write(b'{"ph":"X","cat":"kernel","name":"')
            _long_string(out, GIB)
            out.write(b'","pid":0,"tid":7,"ts":1000,"dur":2,'
                      b'"args":{"correlation":1,"stream":7,"device":0}}')
        out.write(b"\n]}\n")


def write_distinct(path: Path, kernels: int = 2_000_000) -> None:
    """``kernels`` kernels, each with its own ~210-byte name, and their launches."""
    stem = b"void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<" \
           b"at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::" \
           b"MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int, T_"
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(HEADER)
        for i in range(kernels):
            sep = b"" if i == 0 else b",\n"
            out.write(sep + _launch(i) + b",\n" + _kernel(i, stem + b"%08d)" % i))
        out.write(b"\n]}\n")


def write_no_steps(path: Path, mb: int) -> None:
    """A kernel-dense trace of ~``mb`` MB: kernels and launches, no annotations."""
    names = [b"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64",
             b"void at::native::vectorized_elementwise_kernel<4>",
             b"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)",
             b"flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>"]
    target = mb * 1_000_000
    with open(path, "wb") as out:
        out.write(HEADER)
        i = 0
        while out.tell() < target:
            parts = []
            for _ in range(10_000):
                parts.append(_launch(i) + b",\n" + _kernel(i, names[i % 4]))
                i += 1
            out.write((b"" if i == 10_000 else b",\n") + b",\n".join(parts))
        out.write(b"\n]}\n")


CASES = {  # case: (file, how it is written, options of the parse)
    "long-name": ("long_name.json.gz", lambda p: write_long(p, in_arg=False), []),
    "long-arg": ("long_arg.json.gz", lambda p: write_long(p, in_arg=True), []),
    "distinct-names": ("distinct_names.json.gz", write_distinct, []),
    "distinct-names-320": ("distinct_names.json.gz", write_distinct,
                           ["--memory-budget", "320"]),
    "no-steps": ("no_steps.json", lambda p: write_no_steps(p, 1000), []),
}


def _peak_run(cmd: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS in MB, exit code and the first warning of ``cmd`` (its
    start, or "-")."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
    proc.stderr.close() if proc.stderr else None
    warned = [line for line in err if "warning" in line]
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), \
        (warned[0].split(": ", 3)[-1][:90] if warned else "-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True, help="where the cases are written")
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    a.data.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in a.cases:
        name, write, options = CASES[case]
        path = a.data / name
        if not path.exists():
            write(path)
        out = a.data / f"{case}.parquet"
        runs = []
        for _ in range(a.repeat):
            out.unlink(missing_ok=True)
            runs.append(_peak_run([sys.executable, "-m", "traceviz", "parse", str(path),
                                   "-o", str(out), *options]))
        out.unlink(missing_ok=True)
        rows.append((case, path.stat().st_size / 1e6, statistics.median(r[0] for r in runs),
                     statistics.median(r[1] for r in runs), runs[-1][2], runs[-1][3]))
    head = ("case", "file MB", "wall s", "peak MB", "exit", "warning")
    if a.markdown:
        print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for r in rows:
            print(f"| {r[0]} | {r[1]:,.1f} | {r[2]:.1f} | {r[3]:,.0f} | {r[4]} | {r[5]} |")
    else:
        for r in rows:
            print(f"{r[0]:15} {r[1]:10,.1f} MB {r[2]:7.1f} s {r[3]:8,.0f} MB exit {r[4]}  "
                  f"{r[5][:100]}")


if __name__ == "__main__":
    main()
