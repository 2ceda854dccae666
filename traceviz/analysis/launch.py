"""CUDA kernel launch statistics (HTA's ``get_cuda_kernel_launch_stats``).

One row per activity launched by a kernel / memcpy / memset launch call
(:data:`LAUNCH_CALLS`: CUDA, HIP, MTIA ``runFunction...``, XPU; ``--hta-compat`` keeps
HTA's CUDA / MTIA list, which misses every HIP launch): cpu duration (the call), gpu duration, and
launch delay ``max(0, start - call end)``. Outliers as HTA draws them: short GPU kernels
(cpu <= runtime cutoff and gpu < cpu), runtime outliers (cpu > runtime cutoff), launch
delay outliers (delay > launch-delay cutoff). Times in ns.
"""
from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from ..table.arrays import declared
from .activities import RankActivities

LAUNCH_SCHEMA = pa.schema([
    ("rank", pa.int32()), ("launch_kernel_pairs", pa.int64()),
    ("short_gpu_kernels", pa.int64()), ("runtime_outliers", pa.int64()),
    ("launch_delay_outliers", pa.int64()), ("mean_cpu_ns", pa.float64()),
    ("mean_gpu_ns", pa.float64()), ("mean_launch_delay_ns", pa.float64()),
    ("median_launch_delay_ns", pa.float64()), ("max_launch_delay_ns", pa.float64())])

# every call that launches a kernel / memcpy / memset: CUDA runtime and driver, HIP
# (ROCm), MTIA, XPU (Level Zero, Unified Runtime); a cudaGraphLaunch replays many kernels
# and is no launch of one
LAUNCH_CALLS = re.compile(
    r"^(cuda|hip)(Ext)?(Module)?LaunchKernel(ExC|Ex)?$|^cu(da)?LaunchKernel(Ex)?$|"
    r"^(cuda|hip)LaunchCooperativeKernel|^hipExtLaunchKernel|"
    r"^(cuda|hip)Memcpy(2D)?(Async|WithStream)$|^(cuda|hip)MemsetAsync$|^runFunction|"
    r"^zeCommandListAppend(LaunchKernel|MemoryCopy|MemoryFill)|^urEnqueue(KernelLaunch|"
    r"USMMemcpy|USMFill)")
# HTA's list (``--hta-compat``): CUDA and MTIA only, so HIP launches are not counted
HTA_LAUNCH_CALLS = re.compile(r"^(cudaLaunchKernel|cudaLaunchKernelExC|cudaMemcpyAsync|"
                              r"cudaMemsetAsync)$|^runFunction")


def launch_pairs(acts: RankActivities, hta_compat: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, cpu_ns, gpu_ns, delay_ns) of the activities launched by a launch call."""
    calls = HTA_LAUNCH_CALLS if hta_compat else LAUNCH_CALLS
    is_call = np.array([bool(calls.search(n)) for n in acts.launch_names] + [False])
    rows = np.flatnonzero(is_call[acts.launch_name] & (acts.launch_ts >= 0))
    cpu = acts.launch_end[rows] - acts.launch_ts[rows]
    gpu = acts.end[rows] - acts.ts[rows]
    delay = np.maximum(0, acts.ts[rows] - acts.launch_end[rows])
    return rows, cpu, gpu, delay


def launch_stats_summary(ranks: list[RankActivities], runtime_cutoff_ns: int = 50_000,
                         launch_delay_cutoff_ns: int = 100_000,
                         hta_compat: bool = False) -> pa.Table:
    """Per rank: pairs, short kernels, runtime and launch-delay outliers, mean cpu / gpu
    duration and launch delay, median and max delay (ns; NaN without pairs)."""
    out: dict[str, list] = {k: [] for k in (
        "rank", "launch_kernel_pairs", "short_gpu_kernels", "runtime_outliers",
        "launch_delay_outliers", "mean_cpu_ns", "mean_gpu_ns", "mean_launch_delay_ns",
        "median_launch_delay_ns", "max_launch_delay_ns")}
    for acts in ranks:
        _, cpu, gpu, delay = launch_pairs(acts, hta_compat)
        n = cpu.shape[0]
        out["rank"].append(acts.rank)
        out["launch_kernel_pairs"].append(n)
        out["short_gpu_kernels"].append(int(((cpu <= runtime_cutoff_ns) & (gpu < cpu)).sum()))
        out["runtime_outliers"].append(int((cpu > runtime_cutoff_ns).sum()))
        out["launch_delay_outliers"].append(int((delay > launch_delay_cutoff_ns).sum()))
        nan = float("nan")
        out["mean_cpu_ns"].append(float(cpu.mean()) if n else nan)
        out["mean_gpu_ns"].append(float(gpu.mean()) if n else nan)
        out["mean_launch_delay_ns"].append(float(delay.mean()) if n else nan)
        out["median_launch_delay_ns"].append(float(np.median(delay)) if n else nan)
        out["max_launch_delay_ns"].append(float(delay.max()) if n else nan)
    return declared(pa.table({k: pa.array(v, pa.int32() if k == "rank" else None)
                              for k, v in out.items()}), LAUNCH_SCHEMA)
