"""A job's diagnosis: clocks synced, every communication kernel split into wait and
transfer (:mod:`.waits`), each rank's time ledger (:mod:`.ledger`), each rank's speed
against its peers and the stragglers (:mod:`.stragglers`), and the ranks each
iteration's path of waits runs through.

**Wait chain.** Back from the rank whose iteration window ends last: on the current rank,
the latest communication kernel before the current time that waited at least
:data:`CHAIN_WAIT_NS` for another rank sends the chain to that rank, at the time it
arrived; the time in between is the current rank's. The chain ends at the rank's window
start. The ranks it runs through (with their time on it) are the ones the iteration
waited for: where the figures and the pipeline view look first.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...intervals import intersect, union
from ...table.arrays import ints
from ...table.records import records
from ...table.schema import COMM, COMP, FWD, group
from ...topology.framework import UNKNOWN, Framework, framework_of
from ...topology.p2p import RankTraffic, pipelines
from ..activities import RankActivities, on_clock
from .ledger import PARTS, Pipelines, RankLedger, ledger_tables, rank_ledger
from .network import SCHEMA as NETWORK_SCHEMA
from .network import group_bandwidth
from .extra_work import ExtraKernel, extra_kernels
from .stages import StageBalance, stage_balance
from .stragglers import SPREAD_FLOOR, Z_MIN, PeerSpeed, Straggler, peer_speed
from .summary import TOTALS_SCHEMA, Cause, Place, Summary, WaitedFor
from .waits import SEND, CommRows, JobComm, RankComm, comm_calls, job_comm

CHAIN_WAIT_NS = 20_000  # waits shorter than this (clock noise, launch jitter) are ignored
CHAIN_SCHEMA = pa.schema([("iteration", pa.int32()), ("rank", pa.int32()),
                          ("ns", pa.int64()), ("pct", pa.float64())])


@dataclass(frozen=True)
class CallRows:
    """The rows of a diagnosis's ``comm_calls`` (one per communication kernel) by rank,
    made once (:attr:`Diagnosis.call_rows`): per row its start (ns, common clock), wait
    (ns; -1 unknown) and waited-for rank (-1 none); :meth:`of` a rank's rows in its
    kernels' order, without a scan of every rank's (a job's millions of rows)."""

    start: np.ndarray
    wait: np.ndarray
    who: np.ndarray
    order: np.ndarray   # the rows by rank, each rank's in their order
    ranks: np.ndarray   # the distinct ranks, sorted
    bounds: np.ndarray  # rank k's rows: order[bounds[k]:bounds[k + 1]]

    @classmethod
    def of_table(cls, calls: pa.Table) -> CallRows:
        rank = calls["rank"].to_numpy().astype(np.int64)
        order = np.argsort(rank, kind="stable")
        ranks, first = np.unique(rank[order], return_index=True)
        return cls(calls["start_ns"].to_numpy().astype(np.int64),
                   calls["wait_ns"].fill_null(-1).to_numpy().astype(np.int64),
                   calls["waited_for_rank"].fill_null(-1).to_numpy().astype(np.int64),
                   order, ranks, np.r_[first, rank.size])

    def of(self, rank: int) -> np.ndarray:
        """The rows of ``rank``, in its kernels' order (none: empty)."""
        k = int(np.searchsorted(self.ranks, rank))
        if k == self.ranks.size or self.ranks[k] != rank:
            return self.order[:0]
        return self.order[self.bounds[k]:self.bounds[k + 1]]


@dataclass
class Diagnosis:
    """Everything ``traceviz diagnose`` reports, as tables (each module documents its
    columns)."""

    ranks: list[int]
    synced: bool
    offsets: dict[int, int]  # ns per rank: its clock minus the common clock
    comm_calls: pa.Table
    ledger: pa.Table
    ledger_waits: pa.Table
    totals: pa.Table
    speed: PeerSpeed
    chain: pa.Table
    notes: list[str] = field(default_factory=list)
    # the job's pipeline groups (stage order where ``stages_ordered``)
    pipelines: list[list[int]] = field(default_factory=list)
    stages_ordered: bool = False
    # how the clocks were put on one: "shifted", "own clocks" (one clock, not shifted),
    # "given" (offsets from the caller) or "none" (not synced)
    clocks: str = "given"
    # every group's bus bandwidth against its peers (:mod:`.network`)
    links: pa.Table = field(default_factory=lambda: NETWORK_SCHEMA.empty_table())
    # the stages' compute per micro-batch and layers (:mod:`.stages`; None: no stages)
    balance: StageBalance | None = None
    # the framework the traces' process groups name (:mod:`traceviz.topology.framework`)
    framework: Framework = Framework(UNKNOWN, "no process group says")
    # compute kernels one rank runs that the ranks doing its work do not (:mod:`.extra_work`)
    extra: list[ExtraKernel] = field(default_factory=list)

    @functools.cached_property
    def call_rows(self) -> CallRows:
        """``comm_calls``' rows by rank (:class:`CallRows`), made once."""
        return CallRows.of_table(self.comm_calls)

    @property
    def stragglers(self) -> pa.Table:
        return self.speed.stragglers()

    def summary(self, top: int = 10) -> Summary:
        """The diagnosis in brief (:class:`.summary.Summary`): per iteration the mean
        ledger, the largest causes, the stragglers (worst first), where the ranks they
        name run, the ranks the chains of waits run through, the notes."""
        strag = records(Straggler, self.stragglers)
        found = causes(self)[:top]
        named = {s.rank for s in strag} | {w.rank for c in found for w in c.waited_for[:5]}
        places = {r["rank"]: Place(r["node"], r["local_gpu"])
                  for r in self.speed.table.to_pylist() if r["rank"] in named}
        compared = self.speed.table["slowdown"].null_count < self.speed.table.num_rows
        return Summary(len(self.ranks), self.synced, self.clocks, self.totals,
                       tuple(found), strag, bool(compared), places,
                       tuple(self.chain_ranks()), tuple(self.notes), tuple(self.extra))

    def chain_ranks(self, top: int = 8) -> list[int]:
        """The ranks the iterations' wait chains spend the most time on."""
        if not self.chain.num_rows:
            return []
        ranks = self.chain["rank"].to_numpy()
        ns = self.chain["ns"].to_numpy()
        uniq, inv = np.unique(ranks, return_inverse=True)
        total = np.bincount(inv, weights=ns)
        return uniq[np.argsort(-total, kind="stable")][:top].tolist()


def split_of(diag: Diagnosis, rank: int, comm: CommRows
             ) -> tuple[np.ndarray, np.ndarray] | None:
    """Per row of ``rank``'s table (``comm``: its communication rows), (where its wait
    ends, on the rank's own clock; the rank it waited for), -1 where it is not
    communication or its split is unknown: the diagnosis's split, without matching the
    job again (as :func:`.waits.split_rows` gives it from a match). None where the
    table's communication kernels are not the ones the diagnosis split."""
    if rank not in diag.offsets:
        return None
    ts = ints(comm.table["ts"])
    order = np.argsort(ts, kind="stable")  # the activities' order
    rows, ts = comm.rows[order], ts[order]
    calls = diag.call_rows
    mine = calls.of(rank)
    off = diag.offsets[rank]
    if rows.size != mine.size or not np.array_equal(ts - off, calls.start[mine]):
        return None
    wait, who = calls.wait[mine], calls.who[mine]
    wait_end = np.full(comm.n_rows, -1, np.int64)
    waited_for = np.full(comm.n_rows, -1, np.int64)
    wait_end[rows] = np.where(wait >= 0, ts + wait, -1)
    waited_for[rows] = who
    return wait_end, waited_for


def synced_activities(diag: Diagnosis, ranks: Iterable[RankActivities]
                      ) -> list[RankActivities] | None:
    """``ranks``' activities (some of the diagnosed job's ranks, each on its own clock)
    on the diagnosis's synced clocks with its communication split attached, without
    matching the job again, in rank order; None where a rank is not the diagnosis's or
    its communication kernels are not those the diagnosis split (another table)."""
    calls = diag.call_rows
    known = set(diag.ranks)
    out = []
    for own in ranks:
        r = own.rank
        if r not in known:
            return None
        a = on_clock(own, diag.offsets.get(r, 0))
        mine = calls.of(r)
        pos = np.flatnonzero(a.kind == COMM)
        if pos.size != mine.size or not np.array_equal(a.ts[pos], calls.start[mine]):
            return None
        wait, who = calls.wait[mine], calls.who[mine]
        a.wait_end = np.full(len(a), -1, np.int64)
        a.wait_end[pos] = np.where(wait >= 0, a.ts[pos] + wait, -1)
        a.waited_for = np.full(len(a), -1, np.int64)
        a.waited_for[pos] = who
        out.append(a)
    return sorted(out, key=lambda a: a.rank)


def pipelines_of(metas: Iterable[dict]) -> list[list[int]]:
    """The PP groups the ranks' ``pg_config`` state (their tables' metadata; Megatron's
    ``PIPELINE_MODEL_PARALLEL_GROUP``), in stage order."""
    seen: dict[tuple, None] = {}
    for meta in metas:
        for pg in meta.get("pg_config") or []:
            if (isinstance(pg, dict) and pg.get("pg_desc") == "PIPELINE_MODEL_PARALLEL_GROUP"
                    and isinstance(pg.get("ranks"), list)):
                seen[tuple(int(r) for r in pg["ranks"])] = None
    return [list(g) for g in seen]


def pipelines_from_p2p(acts: list[RankActivities], comms: list[RankComm]
                       ) -> tuple[list[list[int]], str]:
    """The pipelines the pipeline group's sends and receives link, in stage order
    (:func:`~traceviz.topology.p2p.pipelines`: a send of a forward kernel goes to the
    next stage; a block that also receives belongs to the step after it), and how their
    order was found or why there are none."""
    traffic = {}
    for a, rc in zip(acts, comms):
        pp = (a.group[rc.pos] == group("PP")) & (rc.peer >= 0)
        k = rc.op_kernel
        fwd = ((a.group[rc.pos][k] == group("PP")) & (rc.op_direction == SEND)
               & (a.phase[rc.pos][k] == FWD))
        traffic[a.rank] = RankTraffic(peers=set(rc.peer[pp].tolist()),
                                      forward_to=set(rc.op_peer[fwd].tolist()))
    return pipelines(traffic)


def diagnose(tables: dict[int, pa.Table], pipelines: list[list[int]] | None = None,
             num_layers: int | None = None, link_gbps: tuple[float, float] | None = None
             ) -> Diagnosis:
    """The diagnosis of the ranks' tables (rank -> activity table); ``pipelines``: the
    job's PP groups in stage order (None: from the tables' ``pg_config``);
    ``num_layers``: the model's transformer layers (None: as the trace shows them);
    ``link_gbps``: the nominal bus bandwidth within a node and across nodes (GB/s)."""
    return diagnosis_of(job_comm(tables), pipelines, num_layers, link_gbps)


def diagnosis_of(jc: JobComm, pipelines: list[list[int]] | None = None,
                 num_layers: int | None = None,
                 link_gbps: tuple[float, float] | None = None) -> Diagnosis:
    """The diagnosis of a job whose communication is matched (:func:`.waits.job_comm`);
    see :func:`diagnose`."""
    acts, comms, offsets, synced = jc.acts, jc.comms, jc.offsets, jc.synced
    notes = list(jc.notes)
    ranks = [a.rank for a in acts]
    if len(ranks) < 2:
        notes[:] = ["one rank: waits need the other members of each call (n/a, never 0); "
                    "only kernels that move no payload are split"]
    groups = pipelines if pipelines is not None else pipelines_of(a.meta for a in acts)
    if not groups:  # no layout and no group descriptions: the pipelines P2P links
        groups, how = pipelines_from_p2p(acts, comms)
        if groups:
            notes.append(f"pipelines found from the send / receive peers ({len(groups)} "
                         f"group(s); stages ordered by {how})")
        elif any((a.group == group("PP")).any() for a in acts):
            notes.append(f"pipeline stages unknown: {how}; pass --topology")
    framework = framework_of((d for a in acts for d in a.meta.get("pg_descs") or ()),
                             any(len(g) > 1 for g in groups))
    notes.append(framework.text())
    pipes = Pipelines.of(groups, max(ranks) + 1 if ranks else 0)
    ledgers = [rank_ledger(a, pipes) for a in acts]
    ledger, waits = ledger_tables(ledgers)
    stage = ({r: int(pipes.stage[r]) for r in ranks
              if 0 <= r < pipes.stage.size and pipes.stage[r] >= 0}) or {
        a.rank: int(st) for a in acts
        if (st := (a.meta.get("classification") or {}).get("stage")) is not None
        and int((a.meta.get("classification") or {}).get("pp") or 1) > 1}
    extra = extra_kernels(acts, stage)
    own: dict[int, set[str]] = {}
    for e in extra:
        own.setdefault(e.rank, set()).add(e.name)
    n_its = max(len(set(ledger["iteration"].to_pylist())), 1)
    waited_on = _waited_on(waits, n_its)
    chain, segments = wait_chain(acts, comms, ledgers)
    on_chain = {r: ns // n_its for r, ns in _compute_on(acts, segments).items()}
    unknown = sum(int((~c.known).sum()) for c in comms)
    total = sum(len(c) for c in comms)
    if unknown and len(ranks) > 1:
        notes.append(f"{unknown} of {total} communication kernels have no known wait / "
                     "transfer split (their call's members are not all in the job, or "
                     "they state no process group or peer): counted as comm_unsplit")
    return Diagnosis(ranks, synced, {r: offsets.get(r, 0) for r in ranks},
                     comm_calls(acts, comms, jc.pg_names), ledger, waits,
                     totals(ledger), peer_speed(acts, stage, waited_on, on_chain),
                     chain, notes, [list(g) for g in groups], bool(groups),
                     jc.sync.method if jc.sync is not None else "given",
                     group_bandwidth(acts, comms, jc.pg_names, link_gbps) if synced
                     else NETWORK_SCHEMA.empty_table(),
                     stage_balance(acts, stage, num_layers, own), framework, extra)


def _compute_on(acts: list[RankActivities], segments: list[tuple[int, int, int, int]]
                ) -> dict[int, int]:
    """Per rank, its compute time (ns, union of compute kernels) inside the chain's
    pieces on that rank."""
    by_rank: dict[int, list[tuple[int, int]]] = {}
    for _, r, lo, hi in segments:
        by_rank.setdefault(r, []).append((lo, hi))
    out = {}
    for a in acts:
        pieces = by_rank.get(a.rank)
        if not pieces:
            continue
        comp = a.kind == COMP
        inside = intersect(union(a.ts[comp], a.end[comp]),
                           union(np.array([p[0] for p in pieces]),
                                 np.array([p[1] for p in pieces])))
        out[a.rank] = int((inside[1] - inside[0]).sum())
    return out


def _waited_on(waits: pa.Table, iterations: int) -> dict[int, int]:
    """Exposed ns per iteration that other ranks waited for each rank (wait_rank)."""
    sel = waits.filter(pc.and_(pc.equal(waits["part"], "wait_rank"),
                               pc.is_valid(waits["waited_for_rank"])))
    out: dict[int, int] = {}
    for r, ns in zip(sel["waited_for_rank"].to_pylist(), sel["exposed_ns"].to_pylist()):
        out[r] = out.get(r, 0) + ns
    return {r: v // iterations for r, v in out.items()}


def totals(ledger: pa.Table) -> pa.Table:
    """Per iteration: ``job_span_ns`` from the earliest rank's window start to the latest
    rank's window end (the job's iteration, on the ledger's clocks), and the mean over
    ranks of the span and of each part (ns, and % of the mean span; the parts add up to
    it)."""
    its = (np.unique(ledger["iteration"].to_numpy()) if ledger.num_rows
           else np.zeros(0, np.int64))
    cols: dict[str, list] = {f.name: [] for f in TOTALS_SCHEMA}
    it_col = ledger["iteration"].to_numpy()
    for it in its:
        rows = it_col == it
        span = ledger["span_ns"].to_numpy()[rows]
        start = ledger["start_ns"].to_numpy()[rows]
        cols["job_span_ns"].append(int((start + span).max() - start.min()))
        cols["iteration"].append(int(it))
        cols["ranks"].append(int(rows.sum()))
        parts = {p: ledger[f"{p}_ns"].to_numpy()[rows].mean() for p in PARTS}
        mean_span = span.mean()
        # integer means that still add up: the remainder goes to the largest part
        ints = {p: int(v) for p, v in parts.items()}
        ints[max(parts, key=lambda p: parts[p])] += int(round(mean_span)) - sum(ints.values())
        cols["span_ns"].append(int(round(mean_span)))
        for p in PARTS:
            cols[f"{p}_ns"].append(ints[p])
            cols[f"{p}_pct"].append(100.0 * ints[p] / round(mean_span) if mean_span else None)
    return pa.table(cols, schema=TOTALS_SCHEMA)


def wait_chain(acts: list[RankActivities], comms: list[RankComm],
               ledgers: list[RankLedger]) -> tuple[pa.Table, list[tuple[int, int, int, int]]]:
    """Per iteration, the ranks its chain of waits runs through (see the module doc)
    and their time on it (ns, % of the chain); and the chain's pieces (iteration, rank,
    start, end; ns)."""
    by_rank = {a.rank: (a, c) for a, c in zip(acts, comms)}
    spans: dict[int, dict[int, tuple[int, int]]] = {}
    for lg in ledgers:
        for it, a, b in zip(lg.windows.iteration.tolist(), lg.windows.start.tolist(),
                            lg.windows.end.tolist()):
            spans.setdefault(it, {})[lg.rank] = (a, b)
    hops: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for r, (a, c) in by_rank.items():
        wait = c.wait(a)
        ok = c.known & (c.waited_for >= 0) & (wait >= CHAIN_WAIT_NS)
        order = np.argsort(c.wait_end[ok], kind="stable")
        hops[r] = (c.wait_end[ok][order], c.waited_for[ok][order])
    cols: dict[str, list] = {f.name: [] for f in CHAIN_SCHEMA}
    segments: list[tuple[int, int, int, int]] = []
    for it, sp in sorted(spans.items()):
        r = max(sp, key=lambda k: sp[k][1])
        t = sp[r][1]
        time: dict[int, int] = {}
        for _ in range(100_000):  # each hop goes back in time; bounded all the same
            start = sp.get(r, (t, t))[0]
            at, who = hops.get(r, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            k = int(np.searchsorted(at, t, side="left")) - 1
            if k < 0 or at[k] <= start or who[k] not in sp:
                time[r] = time.get(r, 0) + max(t - start, 0)
                segments.append((it, r, start, t))
                break
            time[r] = time.get(r, 0) + int(t - at[k])
            segments.append((it, r, int(at[k]), t))
            r, t = int(who[k]), int(at[k])
        whole = sum(time.values())
        for rank, ns in sorted(time.items(), key=lambda kv: -kv[1]):
            cols["iteration"].append(it)
            cols["rank"].append(rank)
            cols["ns"].append(ns)
            cols["pct"].append(100.0 * ns / whole if whole else None)
    return pa.table(cols, schema=CHAIN_SCHEMA), segments


CAUSE_NAMES = {"bubble": "pipeline bubble", "grad_sync": "exposed gradient sync",
               "comm_unsplit": "communication (wait unknown)", "memory": "memory copies",
               "cpu_bound": "CPU / launch bound", "idle": "idle"}


def late_reasons(diag: Diagnosis) -> dict[int, str]:
    """Why a rank arrives late at its collectives by a margin of its own, where it does:
    its GPU is slower than its peers' (a straggler), or its CPU launches late (its
    ``cpu_bound`` per iteration beyond its stage peers' by more than their spread:
    robust z >= :data:`~.stragglers.Z_MIN`, and at least 1 % of its span). Other ranks
    arrive late only within the ordinary spread, or because the schedule (or a late
    rank before them) holds them up."""
    out: dict[int, str] = {}
    for s in diag.stragglers.to_pylist():
        out[s["rank"]] = (f"slower compute: {s['slowdown']:.2f}x its {s['peers']} peers' "
                          "time on the same kernels (a straggler)")
    if not diag.ledger.num_rows:
        return out
    stage = dict(zip(diag.speed.table["rank"].to_pylist(),
                     diag.speed.table["stage"].to_pylist()))
    ranks = diag.ledger["rank"].to_numpy()
    uniq, inv = np.unique(ranks, return_inverse=True)
    n = np.bincount(inv)
    cpu = np.bincount(inv, weights=diag.ledger["cpu_bound_ns"].to_numpy()) / n
    span = np.bincount(inv, weights=diag.ledger["span_ns"].to_numpy()) / n
    classes: dict = {}
    for i, r in enumerate(uniq.tolist()):
        classes.setdefault(stage.get(r), []).append(i)
    for members in classes.values():
        if len(members) < 3:
            continue
        vals = cpu[members]
        med = float(np.median(vals))
        sigma = max(1.4826 * float(np.median(np.abs(vals - med))), SPREAD_FLOOR * span[
            members].mean())
        for i in members:
            late = cpu[i] - med
            if late >= Z_MIN * sigma and late >= 0.01 * span[i] and int(uniq[i]) not in out:
                out[int(uniq[i])] = (f"late launch: its GPU waits for its CPU "
                                     f"{late / 1e6:.2f} ms per iteration more than its "
                                     "peers'")
    return out


def causes(diag: Diagnosis) -> list[Cause]:
    """What the iterations lose besides compute, largest first: each part of the ledger
    (per rank and iteration, mean over the job's rows; :class:`.summary.Cause`). Waiting
    for other ranks lists the ranks that arrive late by a margin of their own
    (``waited_for``: most first, with why: :func:`late_reasons`) and ``spread_ns``: the
    rest, ranks doing the same work arriving a little apart (the ordinary spread between
    GPUs, or a delay handed on from earlier ranks: nobody's own)."""
    if not diag.ledger.num_rows:
        return []
    rows = diag.ledger.num_rows
    span = float(np.mean(diag.ledger["span_ns"].to_numpy()))

    def pct(ns: float) -> float | None:
        return 100.0 * ns / span if span else None

    out = []
    for p in PARTS:
        if p in ("compute", "wait_rank"):
            continue
        ns = float(diag.ledger[f"{p}_ns"].to_numpy().sum()) / rows
        if ns > 0:
            name = CAUSE_NAMES.get(p) or f"exposed {p.split('_', 1)[1].upper()} transfer"
            out.append(Cause(name, p, ns, pct(ns)))
    w = diag.ledger_waits.filter(pc.equal(diag.ledger_waits["part"], "wait_rank"))
    by: dict = {}
    for r, who, ns in zip(w["rank"].to_pylist(), w["waited_for_rank"].to_pylist(),
                          w["exposed_ns"].to_pylist()):
        tot, waiting = by.get(who, (0, set()))
        by[who] = (tot + ns, waiting | {r})
    total = sum(ns for ns, _ in by.values())
    if total:
        why = late_reasons(diag)
        own = tuple(WaitedFor(who, ns / rows, len(wt), why[who])
                    for who, (ns, wt) in sorted(by.items(), key=lambda kv: -kv[1][0])
                    if who is not None and who in why)
        handshakes = by.get(None, (0, set()))[0]
        out.append(Cause("waiting for other ranks", "wait_rank", total / rows,
                         pct(total / rows), own, handshakes / rows,
                         (total - handshakes) / rows - sum(o.ns for o in own)))
    return sorted(out, key=lambda c: -c.ns)
