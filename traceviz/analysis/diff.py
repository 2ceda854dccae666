"""Trace diff (HTA's ``TraceDiff.compare_traces`` and ``ops_diff``): which GPU kernels and
CPU ops were added, deleted, or ran more or fewer times between a control and a test
trace, and how their total time changed.

Each side is one rank (default: its lowest) and a set of ProfilerSteps (default: its
first; a trace without ProfilerSteps is compared whole). GPU rows are the kernels /
memcpy / memset launched in those steps (a row with no launch belongs to no step, as in
HTA); CPU rows are every CPU-side complete event (cpu_op, user_annotation, runtime /
driver calls, python_function) starting in them, but the ``ProfilerStep#N`` annotations
themselves. Rows are counted and their durations summed per name, or per short name
(template and call arguments and the return type stripped; memory kernels, Python's
``<built-in ...>`` names and ``(anonymous namespace)`` are kept; ``hta_compat``: HTA's
``shorten_name`` exactly, which empties the former and mangles the latter). Durations
are int64 ns; a name's time changed when its total moved by more than 5 % (and 1 µs).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import TraceVizError
from ..intervals import step_of
from ..table.arrays import codes_of
from ..table.schema import MEM, metadata
from .hta_compat import hta_kind

DEVICES = ("GPU", "CPU")


ANONYMOUS = "(anonymous namespace)"
PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
CHANGED = 0.05  # a total that moved by more than this share (and 1 µs) changed


def short_name(name: str, hta_compat: bool = False) -> str:
    """A name without its template and call arguments and return type: drop ``->``,
    every ``<...>`` and ``(...)`` group (nested), keep the last space-separated word.
    Memory kernels and names without ``<`` or ``(`` are unchanged; so are Python's
    ``<built-in ...>`` names, ``(anonymous namespace)`` is kept, and a name that would
    become empty stays whole (``hta_compat``: HTA's ``shorten_name``, without those)."""
    if hta_kind(name) == MEM or ("<" not in name and "(" not in name):
        return name
    if not hta_compat and name.startswith("<"):
        return name
    text = name if hta_compat else name.replace(ANONYMOUS, "\0")
    stack: list[str] = []
    for c in text.replace("->", ""):
        if c in ">)":
            opening = "<" if c == ">" else "("
            while stack and stack[-1] != opening:
                stack.pop()
            if stack:
                stack.pop()
        else:
            stack.append(c)
    short = "".join(stack).split(" ")[-1]
    if hta_compat:
        return short
    return short.replace("\0", ANONYMOUS) or name


@dataclass
class Side:
    """One side of a comparison: per device, the names and durations (ns) of its rows,
    and the iterations they were taken from."""

    label: str
    rank: int
    iterations: list[int]   # empty: the whole trace (it has no ProfilerStep)
    names: dict[str, tuple[np.ndarray, list[str]]]  # per row a code into the list
    durations: dict[str, np.ndarray]


def side(gpu: pa.Table, cpu: pa.Table | None, where: str, label: str,
         iterations: tuple[int, ...] | None = None) -> Side:
    """One side (see the module doc) from one rank's GPU table and CPU table (None: no
    CPU side); ``where`` names it in errors."""
    meta = metadata(gpu)
    steps = meta.get("steps", [])
    numbers = sorted(s["iteration"] for s in steps)
    if iterations and not numbers:
        raise TraceVizError(f"{where}: the trace has no ProfilerStep; leave out the "
                            "iterations to compare it whole")
    chosen = list(iterations) if iterations else numbers[:1]
    missing = sorted(set(chosen) - set(numbers))
    if missing:
        raise TraceVizError(f"{where}: no ProfilerStep {missing} (the trace has {numbers})")
    names, durations = {}, {}
    launched = np.asarray(gpu["launch_ts"].is_valid())
    it = np.where(launched, gpu["iteration"].fill_null(-1).to_numpy(), -1)
    keep = np.isin(it, chosen) if chosen else np.ones(gpu.num_rows, dtype=bool)
    codes, dictionary = codes_of(gpu["name"])
    names["GPU"] = (codes[keep], dictionary)
    durations["GPU"] = gpu["dur"].fill_null(0).to_numpy()[keep]
    if cpu is not None:
        ts = cpu["ts"].to_numpy()
        st = np.array([[s["ts"], s["dur"], s["iteration"]] for s in steps],
                      dtype=np.int64).reshape(-1, 3)
        keep = (np.isin(step_of(ts, st[:, 0], st[:, 1], st[:, 2]), chosen) if chosen
                else np.ones(cpu.num_rows, dtype=bool))
        codes, dictionary = codes_of(cpu["name"])
        names["CPU"] = (codes[keep], dictionary)
        durations["CPU"] = cpu["dur"].fill_null(0).to_numpy()[keep]
    return Side(label, int(meta.get("rank", -1)), chosen, names, durations)


def _summary(names: tuple[np.ndarray, list[str]], dur: np.ndarray, shorten: bool,
             hta_compat: bool) -> dict[str, tuple[int, int]]:
    """(count, total duration) per name or short name; names are shortened once each."""
    codes, dictionary = names
    label = [short_name(n or "", hta_compat) if shorten else n for n in dictionary]
    if not hta_compat:  # the ProfilerStep annotation spans the whole step: no op of it
        codes = np.where(np.array([bool(PROFILER_STEP.match(n or "")) for n in dictionary]
                                  + [False])[codes], -1, codes)
    keys = sorted(set(label))
    index = {k: i for i, k in enumerate(keys)}
    key_of = np.array([index[n] for n in label] + [-1], dtype=np.int64)[codes]
    count = np.bincount(key_of[key_of >= 0], minlength=len(keys))
    total = np.zeros(len(keys), dtype=np.int64)
    np.add.at(total, key_of[key_of >= 0], dur[key_of >= 0])
    return {k: (int(c), int(d)) for k, c, d in zip(keys, count, total) if c}


def _time_change(control: int, test: int) -> str:
    """slower / faster when the total moved by more than :data:`CHANGED` and 1 µs."""
    if abs(test - control) <= max(1000, CHANGED * control):
        return "unchanged"
    return "slower" if test > control else "faster"


def _change(control: int, test: int) -> str:
    if control == 0:
        return "added"
    if test == 0:
        return "deleted"
    return "increased" if test > control else "decreased" if test < control else "unchanged"


def compare(control: Side, test: Side, short_names: bool = True,
            hta_compat: bool = False) -> pa.Table:
    """One row per (device, name) present on either side: counts and total durations of
    both, their differences, HTA's ``counts_change_categories`` (+ / - / =),
    ``ops_diff``'s change by counts (added, deleted, increased, decreased, unchanged) and
    the change in time (``time_change``: slower, faster, unchanged)."""
    rows = []
    for device in DEVICES:
        if device not in control.names or device not in test.names:
            continue
        a = _summary(control.names[device], control.durations[device], short_names,
                     hta_compat)
        b = _summary(test.names[device], test.durations[device], short_names, hta_compat)
        for name in sorted(a.keys() | b.keys()):
            (ca, da), (cb, db) = a.get(name, (0, 0)), b.get(name, (0, 0))
            rows.append({"device": device, "name": name, "control_counts": ca,
                         "control_total_duration_ns": da, "test_counts": cb,
                         "test_total_duration_ns": db, "diff_counts": cb - ca,
                         "diff_duration_ns": db - da,
                         "counts_change_categories": "+" if cb > ca else "-" if cb < ca else "=",
                         "change": _change(ca, cb), "time_change": _time_change(da, db)})
    cols = ("device", "name", "control_counts", "control_total_duration_ns", "test_counts",
            "test_total_duration_ns", "diff_counts", "diff_duration_ns",
            "counts_change_categories", "change", "time_change")
    return pa.table({c: pa.array([r[c] for r in rows],
                                 pa.string() if c in ("device", "name", "change", "time_change",
                                                      "counts_change_categories")
                                 else pa.int64()) for c in cols})
