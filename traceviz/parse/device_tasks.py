"""Device timelines Kineto's categories do not name.

Ascend's PyTorch profiler (torch_npu) writes its NPU tasks without a category, as
complete events of a process named ``Ascend Hardware`` (one thread per stream), and links
each to the op that launched it with an ``async_npu`` flow (``torch_to_npu``) that starts
inside the op on the launching thread and ends at the task's start. After the scan,
:func:`adopt_device_tasks` moves those tasks into the device store as kernels and makes
each flow start a zero-length launch on the launching thread, so the usual joins
(correlation, enclosing cpu_op, ProfilerStep, phase) apply to them.

Every other complete event on a device's timeline whose category traceviz does not read
(the analysis tracks torch_npu derives, "Overlap Analysis"; HCCL's task planes; devices
of unknown profilers) is counted by :func:`unread_device_events` and named in one
warning.
"""
from __future__ import annotations

import re

import numpy as np

from . import fields as L
from .reader import ScannedTrace

TASK_PROCESS = re.compile(r"^Ascend Hardware$")
# processes whose events are derived analyses of the device timelines, not device time
DERIVED_PROCESS = re.compile(r"^Overlap Analysis$")
DEVICE_LABEL = re.compile(r"^(GPU|NPU|XPU|HPU|MTIA|TPU|Device)\b|Ascend Hardware|^HCCL$",
                          re.I)
TASK_FLOW_CATEGORIES = ("async_npu",)
TASK_CATEGORY = "kernel"  # the category the adopted tasks get (a device activity)


def _thread_pids(scanned: ScannedTrace) -> list:
    """The pid of every thread index as the trace wrote it (number or text)."""
    thr, texts = scanned.threads, scanned.strings.texts
    if thr.size == 0:
        return []
    return [texts[s] if s >= 0 else n for n, s in zip(thr[0].tolist(), thr[1].tolist())]


def _threads_of(scanned: ScannedTrace, pids: set) -> np.ndarray:
    """Per thread index (and one more entry for -1): whether its process is in ``pids``."""
    return np.array([p in pids for p in _thread_pids(scanned)] + [False])


def _pids_named(scanned: ScannedTrace, pattern: re.Pattern, labels: bool = False) -> set:
    """The processes whose name (or label, with ``labels``) ``pattern`` finds."""
    h = scanned.header
    found = {pid for pid, text in h.process_names.items() if pattern.search(text)}
    if labels:
        found |= {pid for pid, text in h.process_labels.items() if pattern.search(text)}
    return found


def adopt_device_tasks(scanned: ScannedTrace) -> int:
    """Move the uncategorized tasks of ``Ascend Hardware`` processes from the CPU-side
    store to the device store (category ``kernel``), and add a zero-length launch per
    ``async_npu`` flow start (correlation = the flow id, which the task gets from the
    flow's end). Returns the number of tasks moved; their rows stay in the ops store, on
    threads :func:`device_threads` names (which the CPU table leaves out)."""
    on_task = _task_threads(scanned)
    if not on_task.any():
        return 0
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("ts", "dur", "name", "thread",
                                                            "index")}
    for _, cols in scanned.stores["ops"].blocks(*parts):
        sel = on_task[cols["thread"]]
        for k in parts:
            parts[k].append(cols[k][sel])
    tasks = {k: np.concatenate(v) for k, v in parts.items()}
    n = tasks["ts"].shape[0]
    if not n:
        return 0
    tasks["cat"] = np.full(n, scanned.strings.add(TASK_CATEGORY))
    scanned.stores["gpu"].append(tasks)
    flow_cats = [i for i, t in enumerate(scanned.strings.texts) if t in TASK_FLOW_CATEGORIES]
    starts: dict[str, list[np.ndarray]] = {k: [] for k in ("ts", "name", "cat", "thread",
                                                             "correlation")}
    for _, cols in scanned.stores["flow"].blocks("ph", "cat", "id", "thread", "ts", "name"):
        sel = (cols["ph"] == ord("s")) & np.isin(cols["cat"], flow_cats)
        for k, f in (("ts", "ts"), ("name", "name"), ("cat", "cat"), ("thread", "thread"),
                     ("correlation", "id")):
            starts[k].append(cols[f][sel])
    launches = {k: np.concatenate(v) for k, v in starts.items()}
    launches["dur"] = np.zeros(launches["ts"].shape[0], np.int64)
    scanned.stores["launch"].append(launches)  # index -1: not an event of the trace
    return n


def _task_threads(scanned: ScannedTrace) -> np.ndarray:
    """Per thread index (plus one entry for -1): whether it is a task stream of a device
    whose profiler writes no Kineto categories (Ascend Hardware)."""
    return _threads_of(scanned, _pids_named(scanned, TASK_PROCESS))


def device_threads(scanned: ScannedTrace) -> np.ndarray:
    """Per thread index (plus one entry for -1): whether it belongs to a device's timeline
    or a derived analysis of one (none of its events is a CPU-side event)."""
    return _threads_of(scanned, _pids_named(scanned, DEVICE_LABEL, labels=True)
                       | _pids_named(scanned, DERIVED_PROCESS))


def unread_device_events(scanned: ScannedTrace, cls_of: np.ndarray) -> dict[str, int]:
    """Complete events of an unknown (or no) category on a device's timeline (a process
    Kineto labels ``GPU N`` and the like) that were not adopted as device tasks and are
    not a derived analysis: category -> count."""
    device = _pids_named(scanned, DEVICE_LABEL, labels=True)
    device -= _pids_named(scanned, TASK_PROCESS) | _pids_named(scanned, DERIVED_PROCESS)
    if not device or not len(scanned.stores["ops"]):
        return {}
    on_device = _threads_of(scanned, device)
    unknown = np.isin(cls_of, (L.CLS_OTHER, L.CLS_NONE))
    counts: dict[int, int] = {}
    for _, cols in scanned.stores["ops"].blocks("cat", "thread"):
        hit = on_device[cols["thread"]] & unknown[cols["cat"]]
        for cat, n in zip(*np.unique(cols["cat"][hit], return_counts=True)):
            counts[int(cat)] = counts.get(int(cat), 0) + int(n)
    texts = scanned.strings.texts
    return {(texts[c] if c >= 0 else ""): n for c, n in sorted(counts.items())}
