"""How one parse divides its memory budget.

The budget bounds the whole process (what a user sizes a machine or a batch of workers
by). The runtime itself (interpreter, numba/LLVM with the compiled scanner, Arrow) takes
a fixed part, measured when the parse starts; the rest, the data share, is split:

* while scanning, an eighth holds sealed column blocks (more spill to disk); a
  compressed trace is scanned in segments on every core only where the budget has room
  for their read ahead (``reader.segment_work``), else in one pass;
* when building the tables, the joins' working set gets a sixth, and the output columns
  held in memory an eighth less what the per-activity link arrays take while the
  columns are made (so on large traces every output column spills). A trace that
  spilled while scanning spills its remaining blocks first.

The rest is for the per-activity arrays (the compact columns: ~64 bytes per GPU activity
while linking and classifying) and for the allocator's slack. A trace whose activities
need more than the budget leaves parks them (:mod:`traceviz.table.parked`): each array is
a memory-mapped file in the trace's temporary folder, made and worked on a slice of
activities (or an iteration) at a time, its pages released after every step; the sort by
time runs on time buckets, the joins write their results a slice at a time. What stays
resident per activity is a byte or two (the join's part numbers, a null mask being
packed) and the positions of the collectives: ~2-5 bytes, measured on 2 and 10 GB
kernel-dense traces. A trace for which even that passes the budget gets a warning with
the expected peak (:meth:`MemoryPlan.beyond`). The shares are small on purpose: spilling
costs ~12 % of the parse time on a 0.5 GB trace (the files stay in the page cache),
parking ~25 % on 2-10 GB ones, and holding more only raises the peak (measured in
benchmarks/RESULTS.md).
"""
from __future__ import annotations

import resource
import sys
from dataclasses import dataclass

MIN_DATA = 32 << 20  # floor of the data share its fractions are taken of
# a parse's fixed working memory (read buffers, the chunk, the column blocks being
# filled, the parquet writer's row group) whatever the budget: with the runtime, the
# least peak (measured: a 0.5 GB trace peaks ~59 MB above the runtime at budgets of
# 16-240 MB)
FIXED_WORK = 64 << 20
JIT_RESERVE = 64 << 20  # loading the compiled scanner the first time in a process
# bytes per GPU activity alive at once while activities are linked, classified and their
# output columns made, on top of BUILD_WORK (measured: kernel-dense traces of 0.5, 2 and
# 10 GB from benchmarks/dense_trace.py, 1.6, 6.3 and 31.4 M kernels, peak 337, 614 and
# 2233 MB, and a 0.5 GB trace with 0.2 M activities, 253 MB: runtime + ~45 MB + 55-63
# bytes per activity)
LINK_BYTES_PER_ACTIVITY = 64
# bytes per distinct string of the build's per-string lookups (canonical ids, classes,
# pattern matches: measured on 2 M distinct kernel names, ~75 MB)
BUILD_BYTES_PER_STRING = 40
# what stays in memory per activity when the arrays are parked (measured on the kernel-
# dense traces at the default budget, ~200 MB of runtime: 2 GB, 6.3 M kernels, peak
# 277-285 MiB, i.e. BUILD_WORK + ~5 bytes per activity; 10 GB, 31.4 M kernels, 312 MiB:
# ~2 bytes): the larger of the two
PARKED_BYTES_PER_ACTIVITY = 5
BUILD_WORK = 48 << 20
# what making the GPU fields beside the phases adds per activity (a field, its null mask
# and a mapped copy at once: int64 + bool + int64); the build does it only where the
# budget, less its slack, has room for this too
BESIDE_BYTES_PER_ACTIVITY = 24
# what scanning a compressed trace in segments on every core holds above one pass besides
# the inflated bytes read ahead (a scan buffer per scanner, the scanner threads' heaps;
# measured: +36-45 MB on a 0.5 GB .json.gz with 8 MB read ahead and two scanners); see
# reader.segment_work: a budget without room for both scans in one pass
SEGMENT_OVERHEAD = 40 << 20


# what one distinct string costs at most in a parse (its texts' index and hash tables
# while scanning, one per part being merged, and the build's per-string lookups; its
# UTF-8 text spills): measured on 2 M distinct kernel names, ~90 bytes (peak 425 MB with
# the per-activity arrays parked, runtime 193 MB); the budget bounds how many are kept
STRING_BYTES = 100
MIN_STRINGS = 1 << 16
MAX_STRINGS = (1 << 31) - 2  # string ids are int32 (the fold marker takes one more)
# the budget's part left as slack when deciding to park: the measures above are medians
# and the allocator keeps some freed memory (measured, modeled need vs peak: 2 M distinct
# kernel names 485 vs 490-496 MB, a 1 GB trace of 3.2 M kernels without steps 437 vs 437)
SLACK_PART = 8
MMAP_THRESHOLD = 4 << 20  # allocations from this size on are their own mappings (glibc)


def hand_back_freed_memory() -> None:
    """Make freed memory leave the process: Arrow allocates with malloc (its default pools,
    mimalloc / jemalloc, keep freed memory, which shows as RSS long after the tables it
    held are gone), and glibc's malloc maps every allocation of :data:`MMAP_THRESHOLD`
    or more on its own. By default glibc raises that threshold to the size of each large
    block freed (up to 32 MB), so later arrays of up to that size come from its heap,
    where their memory stays once they are freed: on 2 M distinct names (string tables
    grown by doubling, arrays of a few MB per part) 220 MB of the heap was free and still
    resident after the scan (peak 715 MB; 636 MB with the threshold fixed at 4 MB; at 1 MB
    the 0.5 GB plain trace parsed ~12 % slower, at 4 MB within the noise of +-0.2 s).
    The command line and its batch workers call this; a library user's process keeps its
    own settings."""
    import ctypes

    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:  # glibc (M_MMAP_THRESHOLD is -3); elsewhere nothing to do
        mallopt(-3, MMAP_THRESHOLD)


def current_rss() -> int:
    """Resident set size of this process in bytes (peak RSS where /proc is absent)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


@dataclass(frozen=True)
class MemoryPlan:
    """Byte shares of a parse's memory budget."""

    budget: int
    runtime: int
    floor: int = MIN_DATA
    work: int = FIXED_WORK  # what a parse holds above the runtime at the least
    strings: int | None = None  # distinct strings kept (None: what the budget holds)

    @classmethod
    def measure(cls, budget: int, jit_loaded: bool) -> MemoryPlan:
        return cls(budget=budget,
                   runtime=current_rss() + (0 if jit_loaded else JIT_RESERVE))

    @classmethod
    def fixed(cls, data: int, strings: int = MAX_STRINGS) -> MemoryPlan:
        """A plan with exactly ``data`` bytes of data share and room for ``strings``
        distinct strings (tests, tuning)."""
        return cls(budget=data, runtime=0, floor=0, work=0, strings=strings)

    @property
    def data(self) -> int:
        return max(self.budget - self.runtime, self.floor)

    def below_floor(self) -> str | None:
        """A warning when the budget cannot be honoured: it does not cover the runtime
        (measured now) plus the fixed working memory; None when it does."""
        least = self.runtime + self.work
        if self.budget >= least:
            return None
        return (f"--memory-budget {self.budget >> 20} MB is below what a parse needs here "
                f"(~{self.runtime >> 20} MB of runtime: Python, numba, Arrow, plus "
                f"{self.work >> 20} MB of working memory): expect a peak of about "
                f"{least >> 20} MB or more; raise the budget to bound it")

    def room_for(self, extra: int) -> bool:
        """Whether the budget covers the runtime, the fixed working memory and ``extra``
        bytes more."""
        return self.budget >= self.runtime + self.work + extra

    def beyond(self, activities: int) -> str | None:
        """A warning when ``activities`` GPU activities take the parse past the budget even
        with their arrays parked (what a step holds whole per activity); None when the
        budget covers them, or when it does not cover the runtime (see
        :meth:`below_floor`)."""
        least = self.runtime + self.work
        need = self.runtime + max(self.work,
                                  BUILD_WORK + activities * PARKED_BYTES_PER_ACTIVITY)
        if need <= self.budget or self.budget < least:
            return None
        return (f"{activities / 1e6:.1f} M GPU activities: their per-activity arrays are "
                f"parked in files, but what the build still holds per activity (~"
                f"{PARKED_BYTES_PER_ACTIVITY} bytes) goes beyond --memory-budget "
                f"{self.budget >> 20} MB, which bounds everything else; expect a peak of "
                f"up to ~{need >> 20} MB")

    def parks(self, activities: int, held: int = 0, strings: int = 0) -> bool:
        """Whether the per-activity arrays of up to ``activities`` GPU activities are
        parked in files (:mod:`traceviz.table.parked`): held in memory, they would take
        the parse past the budget less its slack (:data:`SLACK_PART`), given ``held``
        bytes the scan's results keep through the build (the texts) and the build's
        lookups of ``strings`` distinct strings."""
        need = (self.runtime + held + BUILD_WORK + strings * BUILD_BYTES_PER_STRING
                + activities * LINK_BYTES_PER_ACTIVITY)
        return need > self.budget - self.budget // SLACK_PART

    @property
    def max_strings(self) -> int:
        """Distinct strings a parse keeps: what the budget holds past the runtime and the
        fixed working memory at :data:`STRING_BYTES` each, at least :data:`MIN_STRINGS`
        (past it new strings fold into one marker, with a warning), unless the plan
        says."""
        if self.strings is not None:
            return self.strings
        return max(MIN_STRINGS, (self.budget - self.runtime - self.work) // STRING_BYTES)

    @property
    def scan_blocks(self) -> int:
        return self.data // 8

    @property
    def join_work(self) -> int:
        return self.data // 6

    def output_held(self, activities: int) -> int:
        """Bytes of output columns held in memory (the rest spill) for a table of
        ``activities`` rows."""
        return max(self.data // 8 - activities * LINK_BYTES_PER_ACTIVITY, 0)
