"""HTA 0.6's own rules, for ``--hta-compat``: its kernel types by name (OTHER included)
and its load-time µs rounding (start ``ceil``, end ``floor`` to whole µs)."""
from __future__ import annotations

import re

import numpy as np

from ..table.schema import COMM, COMP, MEM

HTA_OTHER = 3  # HTA's OTHER kernel type (after the schema's COMP, COMM, MEM)
US = 1000  # ns per µs

# HTA 0.6 get_kernel_type (re.match: anchored at the start), tested in this order
_HTA_COMM = re.compile(r"(^nccl.*)|(^hip)|(^hccl)|(.*ncclKernel.*)")
_HTA_MEM = re.compile(r"(^(hip)?Memcpy)|(^(hip)?Memset)|(^dma)")
_HTA_NOT_COMP = re.compile(
    r"(^nccl)|(.*Memcpy)|(.*Memset)|(.*dma)|(^.*Sync)|(^Stream Wait Event)|"
    r"(cuda.*LaunchKernel)|(^runFunction)|(^hip)|(^job_exe)|(^packet)|(^pe_exe)|"
    r"(^cpum_exe_subgraph)|(^hccl)|(^collective_subgraph_execution)")


def hta_kind(name: str) -> int:
    """HTA 0.6's kernel type of a name (COMM, MEM, COMP or HTA_OTHER)."""
    if _HTA_COMM.match(name):
        return COMM
    if _HTA_MEM.match(name):
        return MEM
    return HTA_OTHER if _HTA_NOT_COMP.match(name) else COMP


def hta_round(ts: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's load-time rounding, in its float64 µs arithmetic: ts := ceil(ts),
    end := floor(ts + dur) (the float sum can land just below an integer). Returns ns."""
    # the double nearest the trace's decimal µs text, as json.loads reads it (whole µs
    # exact, then one rounding; ts / 1000 would round twice above 2**53 ns)
    t = (ts // US).astype(np.float64) + (ts % US) / US
    return (np.ceil(t).astype(np.int64) * US,
            np.floor(t + dur / US).astype(np.int64) * US)
