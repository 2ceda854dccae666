"""COMP / COMM / MEM for GPU activities, decided once per distinct name.

Rules (traceviz's own, HTA-compatible in spirit; HTA's exact quirks live in the
``--hta-compat`` analyses): category gpu_memcpy / gpu_memset -> MEM; a kernel whose name
matches ``kind.memory`` -> MEM; ``kind.communication`` -> COMM; else COMP. Unlike HTA 0.6
a ``hip...`` name is not COMM, and unlike HTA 0.5 ``ncclDevKernel_*`` is COMM.
"""
from __future__ import annotations

import numpy as np

from ..table.schema import COMM, COMP, MEM
from .patterns import Patterns


def name_kinds(texts: list[str], patterns: Patterns) -> np.ndarray:
    """Kind code of every string treated as a kernel name (``int8``, one per string)."""
    out = np.full(len(texts), COMP, dtype=np.int8)
    for i, text in enumerate(texts):
        if any(p.search(text) for p in patterns.memory):
            out[i] = MEM
        elif any(p.search(text) for p in patterns.comm):
            out[i] = COMM
    return out


def first_match(texts: list[str], named_patterns) -> list[str | None]:
    """For each text the name of the first (name, pattern) pair whose pattern matches."""
    out: list[str | None] = []
    for text in texts:
        out.append(next((name for name, p in named_patterns if p.search(text)), None))
    return out
