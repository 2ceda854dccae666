"""Chrome-trace events (Perfetto UI, chrome://tracing) of what the analyses computed:
per rank, one extra process ``traceviz rank R`` with

* ``<PHASE> steps`` tracks: one slice per micro-batch step and per optimizer span, on as
  many lanes per phase as it takes for no two slices of a track to overlap (a step's
  window holds kernels still running when the next step starts: overlapping slices on
  one track would be drawn as if nested);
* ``comm <GROUP>`` tracks: one slice per COMM kernel, named by parallel group and
  collective, with its size (nccl-tests' S), group, Seq and bus bandwidth, laid out on
  lanes likewise;
* a counter ``collectives in flight``;
* with ``kernels``: thread ``stream S`` per GPU stream with every kernel / memcpy /
  memset, named and labelled (kind, phase, micro-batch, group);

and, in a job's export, flow arrows through the members of every collective matched
across ranks, in arrival order (the last arrow ends at the straggler). The critical path
(:func:`path_events`) is a process ``traceviz critical path`` with a thread per rank it
visits, a slice per path edge and flow arrows where it jumps between ranks. Also the counter
tracks of :mod:`traceviz.analysis.counters`. ``ts`` is int ns in the events here;
:func:`.trace_copy.event_json` prints exact µs.
"""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..analysis.counters import CounterTracks
from ..analysis.matching import Matched
from ..analysis.coverage import track_lanes
from ..analysis.tracks import RankTracks
from ..table.io import atomic_path
from ..table.schema import COLLECTIVES, GROUPS, PHASES
from .trace_copy import event_json, gzip_output

PID_BASE = 900_000_000  # far from Kineto's pids (process ids, device ids)


STEP_TID, COMM_TID, STREAM_TID = 1_000_000, 2_000_000, 100  # + phase / group * 1000 + lane


def _tid(base: int, track: np.ndarray, lane: np.ndarray) -> np.ndarray:
    """The thread ids of (track, lane) pairs under ``base``."""
    return base + track * 1000 + lane


def comm_tids(tr: RankTracks) -> np.ndarray:
    """The thread of every COMM kernel slice of ``tr`` (per ``tr.comm_rows``): its
    group's track, on the lane where it overlaps no other slice."""
    rows = tr.comm_rows
    track = np.array([GROUPS.index(g) if g in GROUPS else len(GROUPS)
                      for g in (tr.group[i] for i in rows.tolist())], dtype=np.int64)
    return _tid(COMM_TID, track, track_lanes(track, tr.ts[rows], tr.end[rows]))


def _thread(pid: int, tid: int, name: str, order: int) -> Iterator[dict]:
    yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0,
           "args": {"name": name}}
    yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "ts": 0,
           "args": {"sort_index": order}}


def rank_events(tr: RankTracks, kernels: bool = False,
                comm_tid: np.ndarray | None = None) -> Iterator[dict]:
    """The events of one rank's tracks (see the module doc); ``comm_tid``: the COMM
    slices' threads when the caller needs them too (:func:`comm_tids`)."""
    pid = PID_BASE + tr.rank
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0,
           "args": {"name": f"traceviz rank {tr.rank}"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
           "args": {"sort_index": tr.rank}}
    st = tr.steps
    phase = np.array([PHASES.index(p) for p in st.phase], dtype=np.int64)
    step_tid = _tid(STEP_TID, phase, track_lanes(phase, st.start, st.end))
    for tid in np.unique(step_tid).tolist():
        p, lane = divmod(tid - STEP_TID, 1000)
        yield from _thread(pid, tid, f"{PHASES[p]} steps" + (f" {lane + 1}" if lane else ""),
                           tid - STEP_TID)
    for k in range(st.start.shape[0]):
        ph, m, c = st.phase[k], int(st.microbatch[k]), int(st.chunk[k])
        name = ph if m < 0 else f"{ph} mb{m}" + (f" chunk{c}" if c > 0 else "")
        yield {"ph": "X", "name": name, "pid": pid, "tid": int(step_tid[k]),
               "ts": int(st.start[k]), "dur": int(st.end[k] - st.start[k]),
               "args": {"iteration": int(st.iteration[k]), "phase": ph, "microbatch": m,
                        "chunk": c, "kernels": int(st.kernels[k])}}
    tids = comm_tids(tr) if comm_tid is None else comm_tid
    for tid in np.unique(tids).tolist():
        g, lane = divmod(tid - COMM_TID, 1000)
        name = f"comm {GROUPS[g] if g < len(GROUPS) else '?'}"
        yield from _thread(pid, tid, name + (f" {lane + 1}" if lane else ""),
                           tid - COMM_TID + 100_000)
    for i, tid in zip(tr.comm_rows.tolist(), tids.tolist()):
        args = {"group": tr.group[i], "collective": tr.collective[i],
                "process_group": tr.process_group[i], "seq": int(tr.seq[i]),
                "group_size": int(tr.group_size[i])}
        if tr.nbytes[i] >= 0:
            args["bytes"] = int(tr.nbytes[i])
            if np.isfinite(tr.busbw[i]):
                args["busbw_gbps"] = round(float(tr.busbw[i]), 3)
        yield {"ph": "X", "name": f"{tr.group[i] or '?'} {tr.collective[i] or 'comm'}",
               "pid": pid, "tid": tid, "ts": int(tr.ts[i]), "dur": int(tr.end[i] - tr.ts[i]),
               "args": args}
    for when, n in zip(*(a.tolist() for a in tr.in_flight)):
        yield {"ph": "C", "name": "collectives in flight", "pid": pid, "ts": when,
               "args": {"collectives": n}}
    if kernels:
        yield from _kernel_events(tr, pid)


def flow_events(m: Matched, slices: dict[int, tuple[np.ndarray, np.ndarray]]
                ) -> Iterator[dict]:
    """Flow arrows through the members of every call matched on two ranks or more, in
    arrival order (``s`` at the first, ``t`` between, ``f`` at the last: the straggler).
    ``slices``: per rank, the start times (sorted) and threads of its COMM slices; a
    member binds to its slice starting at its arrival."""
    start = m.last_start[m.member_call] - m.member_wait
    order = np.lexsort((m.member_rank, start, m.member_call))
    call, rank, at = m.member_call[order], m.member_rank[order], start[order]
    bounds = np.flatnonzero(np.r_[True, call[1:] != call[:-1], True])
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if hi - lo < 2:
            continue
        c = int(call[lo])
        name = (f"{GROUPS[m.comm_group[c]] if m.comm_group[c] >= 0 else '?'} "
                f"{COLLECTIVES[m.collective[c]] if m.collective[c] >= 0 else 'comm'} "
                f"#{int(m.number[c])}")
        for k in range(lo, hi):
            r, t = int(rank[k]), int(at[k])
            ts, tid = slices.get(r, (np.empty(0, np.int64), np.empty(0, np.int64)))
            pos = int(np.searchsorted(ts, t))
            if pos >= ts.shape[0] or ts[pos] != t:
                continue  # no slice there (a P2P or a call of a rank left out)
            ph = "s" if k == lo else "f" if k == hi - 1 else "t"
            event = {"ph": ph, "id": c, "name": name, "cat": "collective",
                     "pid": PID_BASE + r, "tid": int(tid[pos]), "ts": t}
            if ph == "f":
                event["bp"] = "e"
            yield event


def _kernel_events(tr: RankTracks, pid: int) -> Iterator[dict]:
    for s in np.unique(tr.stream).tolist():
        yield from _thread(pid, STREAM_TID + s, f"stream {s}", 200_000 + s)
    for i in range(tr.ts.shape[0]):
        args = {"kind": tr.kind[i], "phase": tr.phase[i], "microbatch": int(tr.microbatch[i])}
        if tr.group[i]:
            args["group"] = tr.group[i]
        yield {"ph": "X", "name": tr.name[i], "pid": pid, "tid": STREAM_TID + int(tr.stream[i]),
               "ts": int(tr.ts[i]), "dur": int(tr.end[i] - tr.ts[i]), "args": args}


def counter_events(tracks: CounterTracks) -> Iterator[dict]:
    """Counter events (``ph: C``) of one rank's counter tracks: "Queue Length" per stream
    (``id`` the stream, args ``{"Queue Length": n}``) and one per memcpy / memset
    subtype (args ``{"Memcpy BW": GB/s}``), on the GPU's process."""
    for stream, (pid, t, length) in tracks.queue.items():
        for ts, n in zip(t.tolist(), length.tolist()):
            yield {"ph": "C", "name": "Queue Length", "pid": pid, "id": stream, "ts": ts,
                   "args": {"Queue Length": n}}
    for sub, (pid, t, bw) in tracks.bandwidth.items():
        for ts, v in zip(t.tolist(), bw.tolist()):
            yield {"ph": "C", "name": sub, "pid": pid, "ts": ts, "args": {"Memcpy BW": v}}


def write_job(ranks: Iterable[RankTracks], output: str | os.PathLike,
              kernels: bool = True, matched: Matched | None = None,
              extra: Iterable[dict] = ()) -> int:
    """One Chrome trace (gzip when ``output`` ends in .gz) of every rank's tracks, times
    as given (one clock), with the flows of ``matched`` (its calls on the same clock)
    and the ``extra`` events; the number of events written."""
    count = 0
    slices: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    with atomic_path(Path(output)) as tmp:
        with gzip_output(tmp) if str(output).endswith(".gz") else open(tmp, "wb") as out:
            out.write(b'{"displayTimeUnit": "ms", "traceEvents": [')

            def emit(events: Iterable[dict]) -> None:
                nonlocal count
                for event in events:
                    out.write((b",\n" if count else b"\n") + event_json(event))
                    count += 1

            for tracks in ranks:
                tids = comm_tids(tracks)
                ts = tracks.ts[tracks.comm_rows]
                first = np.sort(np.unique(ts, return_index=True)[1])  # a kernel per start
                by_ts = np.argsort(ts[first], kind="stable")
                slices[tracks.rank] = (ts[first][by_ts], tids[first][by_ts])
                emit(rank_events(tracks, kernels, tids))
            if matched is not None:
                emit(flow_events(matched, slices))
            emit(extra)
            out.write(b"\n]}\n")
    return count


PATH_PID = PID_BASE - 1


def path_events(path: dict) -> Iterator[dict]:
    """The critical path as tracks: ``path`` has per edge ``rank``, ``from_rank``,
    ``start`` / ``end`` (int ns on the export's clock) and ``label`` (slice name), and
    ``args`` (a dict of per-edge lists for the slices' args). One thread per rank the
    path visits; a jump to another rank is a flow arrow."""
    yield {"ph": "M", "name": "process_name", "pid": PATH_PID, "tid": 0, "ts": 0,
           "args": {"name": "traceviz critical path"}}
    yield {"ph": "M", "name": "process_sort_index", "pid": PATH_PID, "tid": 0, "ts": 0,
           "args": {"sort_index": -1}}
    ranks = [int(r) for r in path["rank"]]
    from_ranks = [int(r) for r in path["from_rank"]]
    for r in sorted(set(ranks) | set(from_ranks)):
        yield from _thread(PATH_PID, r + 1, f"path on rank {r}", r)
    keys = list(path["args"])
    for i, (r, f) in enumerate(zip(ranks, from_ranks)):
        start, end = int(path["start"][i]), int(path["end"][i])
        args = {k: path["args"][k][i] for k in keys}
        yield {"ph": "X", "name": path["label"][i], "pid": PATH_PID, "tid": r + 1,
               "ts": start, "dur": max(end - start, 0), "args": args}
        if f != r:
            yield {"ph": "s", "name": "critical path", "cat": "critical_path", "id": i,
                   "pid": PATH_PID, "tid": f + 1, "ts": start}
            yield {"ph": "f", "bp": "e", "name": "critical path", "cat": "critical_path",
                   "id": i, "pid": PATH_PID, "tid": r + 1, "ts": start}
