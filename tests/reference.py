"""An independent, slow reference for the parse core.

Plain ``json`` with ``Decimal`` numbers and Python loops over events; it imports nothing
from traceviz. It states the contract of the GPU activity table in the simplest code we
could write: which events are activities, their exact ns times, the launch they join to,
the innermost cpu_op around the launch, the ProfilerStep they belong to, and their kind
(from the shipped ``patterns.toml``, read here as plain data).
"""
from __future__ import annotations

import bisect
import gzip
import io
import json
import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib

import zstandard

# Kineto's device activity types (libkineto ActivityType.h): CUDA / ROCm / XPU kernels,
# memcpy, memset and MTIA's on-device CCP events; the host-side launch types
ACTIVITY = {"kernel": "kernel", "Kernel": "kernel", "mtia_ccp_events": "kernel",
            "gpu_memcpy": "gpu_memcpy", "Memcpy": "gpu_memcpy", "gpu_memset": "gpu_memset",
            "Memset": "gpu_memset"}
DEVICE_SIDE = set(ACTIVITY) | {"gpu_user_annotation", "cuda_sync", "xpu_sync"}
LAUNCH = {"cuda_runtime", "cuda_driver", "Runtime", "Driver", "mtia_runtime", "xpu_runtime",
          "xpu_driver", "hpu_op", "privateuse1_runtime", "privateuse1_driver"}
CPU_OP = {"cpu_op", "Operator"}
LAUNCH_FLOWS = {"ac2g", "async", "async_cpu_to_gpu", "async_npu"}
# torch_npu (Ascend): the NPU tasks are the uncategorized events of the process named
# "Ascend Hardware"; an async_npu flow starts inside the launching op (its start is the
# launch, of zero length) and ends at the task's start
TASK_PROCESS = "Ascend Hardware"
TASK_FLOWS = {"async_npu"}
INT64 = (-(1 << 63), (1 << 63) - 1)
ONE = Decimal(1)
PATTERNS = tomllib.loads((Path(__file__).parents[1] / "traceviz" / "classify"
                          / "patterns.toml").read_text())


def read_bytes(path: str | Path) -> bytes:
    raw = Path(path).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        return gzip.decompress(raw)
    if raw[:4] == b"\x28\xb5\x2f\xfd":
        return zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    return raw


def events_of(doc) -> list:
    return doc if isinstance(doc, list) else doc["traceEvents"]


def load(data: bytes):
    return json.loads(data, parse_float=Decimal)


# 200 significant digits (more are rounded to 200, then half away from zero), exponents
# as far as "1e999999999"
EXACT = Context(prec=200, Emax=MAX_EMAX, Emin=MIN_EMIN)


def scaled(value, scale: int) -> int | None:
    """``value`` (number or numeric string) times 10**scale, rounded half away from 0."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        try:
            value = Decimal(value.strip())
        except InvalidOperation:
            return None
    if isinstance(value, int):
        out = value * 10 ** scale if abs(value) <= 10 ** 40 else None
    elif not isinstance(value, Decimal) or not value.is_finite() \
            or (value and value.adjusted() >= 40):
        return None  # not a number, or 10**40 and beyond (far outside int64)
    else:
        out = int(value.scaleb(scale, EXACT).quantize(ONE, ROUND_HALF_UP, EXACT))
    return out if out is not None and INT64[0] <= out <= INT64[1] else None


def arg_int(args: dict, *keys: str) -> int:
    """The arg under any of ``keys`` (spellings of one arg; the last one written wins)."""
    present = [k for k in args if k in keys]
    if not present:
        return -1
    v = scaled(args[present[-1]], 0)
    return -1 if v is None or v < 0 else v  # ids are >= 0; anything else is absent


def thread_key(ev: dict):
    def one(v):
        n = scaled(v, 0) if isinstance(v, (str, int)) else None
        return n if n is not None else (("str", v) if isinstance(v, str) else -1)
    return one(ev.get("pid")), one(ev.get("tid"))


COLLECTIVE_ARGS = ("Collective name", "Process Group Name", "In msg nelems", "Group size",
                   "Process Group Ranks")


def kind_of(cat: str, name: str, collective: bool = False) -> str:
    """MEM for memory activities, COMM for a kernel the trace states is a collective
    (``collective``) or whose name matches a communication pattern, else COMP."""
    if cat in ("gpu_memcpy", "gpu_memset"):
        return "MEM"
    if collective:
        return "COMM"
    k = PATTERNS["kind"]
    if any(re.search(p, name) for p in k["memory"]):
        return "MEM"
    if any(re.search(p, name) for p in k["communication"]):
        return "COMM"
    return "COMP"


def complete(ev) -> bool:
    """A complete event with a ts and a dur in int64 ns whose end fits int64 too."""
    if not (isinstance(ev, dict) and ev.get("ph") == "X"):
        return False
    ts, dur = scaled(ev.get("ts"), 3), scaled(ev.get("dur"), 3)
    return ts is not None and dur is not None and ts + max(dur, 0) <= INT64[1]


def activities(doc) -> dict[int, dict]:
    """Expected activity rows keyed by the event's position in traceEvents."""
    events = events_of(doc)
    launches, ops, steps, flows, rpc = [], [], [], [], []
    step_re = re.compile(PATTERNS["steps"]["iteration"])
    task_pids = {ev.get("pid") for ev in events if isinstance(ev, dict) and ev.get("ph") == "M"
                 and ev.get("name") == "process_name"
                 and (ev.get("args") or {}).get("name") == TASK_PROCESS}

    def activity_cat(ev) -> str | None:
        cat = ev.get("cat")
        if cat in ACTIVITY:
            return ACTIVITY[cat]
        if (ev.get("pid") in task_pids and cat not in DEVICE_SIDE and cat not in LAUNCH
                and cat != "python_function"):
            return "kernel"
        return None

    for idx, ev in enumerate(events):
        if isinstance(ev, dict) and ev.get("ph") in ("s", "f") and ev.get("cat") in LAUNCH_FLOWS:
            flows.append(ev)
            if ev["ph"] == "s" and ev.get("cat") in TASK_FLOWS and scaled(ev.get("id"), 0) \
                    is not None and scaled(ev.get("ts"), 3) is not None:
                launches.append({"index": -1, "ts": scaled(ev["ts"], 3), "dur": 0,
                                 "name": ev.get("name"), "thread": thread_key(ev),
                                 "args": {"correlation": ev["id"]}})
        if not complete(ev):
            continue
        cat = ev.get("cat")
        name = ev.get("name") if isinstance(ev.get("name"), str) else None
        ts, dur = scaled(ev["ts"], 3), scaled(ev["dur"], 3)
        row = {"index": idx, "ts": ts, "dur": dur, "name": name, "thread": thread_key(ev),
               "args": ev.get("args") if isinstance(ev.get("args"), dict) else {}}
        if cat in LAUNCH:
            launches.append(row)
        elif cat in CPU_OP and activity_cat(ev) is None:
            ops.append(row)
        if name == "record_param_comms":
            rpc.append(row)
        if (cat not in DEVICE_SIDE and cat not in LAUNCH and cat != "python_function"
                and name and step_re.match(name)):
            steps.append((ts, dur, int(step_re.match(name).group(1)), idx))

    def flow_id(ph, thread, ts):
        for f in flows:
            if f.get("ph") == ph and thread_key(f) == thread and scaled(f.get("ts"), 3) == ts:
                v = scaled(f.get("id"), 0)
                if v is not None:
                    return v
        return -1

    ops_by_thread: dict = {}
    for o in sorted(ops, key=lambda o: (o["ts"], o["index"])):
        ops_by_thread.setdefault(o["thread"], []).append(o)
    starts = {th: [o["ts"] for o in lst] for th, lst in ops_by_thread.items()}

    def innermost_op(thread, t):
        """Latest-starting op containing t (ties: shortest, then later in the file)."""
        lst = ops_by_thread.get(thread, [])
        best = None
        for o in reversed(lst[:bisect.bisect_right(starts.get(thread, []), t)]):
            if best is not None and o["ts"] < best["ts"]:
                break
            if t < o["ts"] + max(o["dur"], 0):
                key = (o["ts"], -(o["ts"] + o["dur"]), o["index"])
                if best is None or key > (best["ts"], -(best["ts"] + best["dur"]), best["index"]):
                    best = o
        return best

    by_corr: dict[int, list] = {}
    for lr in launches:
        corr = arg_int(lr["args"], "correlation")
        if corr < 0 and flows:
            corr = flow_id("s", lr["thread"], lr["ts"])
        if corr >= 0:
            by_corr.setdefault(corr, []).append(lr)
    out = {}
    for idx, ev in enumerate(events):
        if not complete(ev) or activity_cat(ev) is None:
            continue
        args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
        cat = activity_cat(ev)
        name = ev.get("name") if isinstance(ev.get("name"), str) else None
        ts, dur = scaled(ev["ts"], 3), scaled(ev["dur"], 3)
        corr = arg_int(args, "correlation")
        if corr < 0 and flows:
            corr = flow_id("f", thread_key(ev), ts)
        cands = by_corr.get(corr, []) if corr >= 0 else []
        launch = None
        if len(cands) == 1:
            launch = cands[0]
        elif cands:
            before = [c for c in cands if c["ts"] <= ts]
            launch = (max(before, key=lambda c: (c["ts"], -c["index"])) if before
                      else min(cands, key=lambda c: (c["ts"], c["index"])))
        op = innermost_op(launch["thread"], launch["ts"]) if launch is not None else None
        at = launch["ts"] if launch is not None else ts
        inside = [s for s in steps if s[0] <= at < s[0] + max(s[1], 0)]
        step = max(inside, key=lambda s: (s[0], -s[1], s[3])) if inside else None
        iteration = step[2] if step else -1
        out[idx] = {
            "cat": cat, "name": name, "ts": ts, "dur": dur, "correlation": corr,
            "external_id": arg_int(args, "External id", "external id"),
            "launch_ts": launch["ts"] if launch else None,
            "launch_dur": launch["dur"] if launch else None,
            "launch_name": launch["name"] if launch else None,
            "cpu_op": op["name"] if op else None,
            "cpu_op_external_id": (arg_int(op["args"], "External id", "external id")
                                   if op else None),
            "iteration": iteration,
            "kind": kind_of(cat, name or "", cat == "kernel" and (
                any(k in args for k in COLLECTIVE_ARGS) or (launch is not None and any(
                    r["thread"] == launch["thread"]
                    and r["ts"] <= launch["ts"] < r["ts"] + max(r["dur"], 0) for r in rpc)))),
        }
    # in a trace with launches, a kernel without one is no step's (launched before the
    # trace began); memory copies / sets and a trace without launches keep their start's
    if any(r["launch_ts"] is not None for r in out.values()):
        for r in out.values():
            if r["launch_ts"] is None and r["cat"] == "kernel":
                r["iteration"] = -1
    return out


def event_count(doc) -> int:
    return len(events_of(doc))
