"""Slow links: every process group's bus bandwidth against the same kind of group
elsewhere in the job, and against the link it runs on.

**Bus bandwidth of a group** (GB/s): over its collective kernels of one kind whose
split is known (:mod:`.waits`), with a payload of at least :data:`MIN_BYTES`, the bus
bytes (nccl-tests' operation size S x the collective's factor, :mod:`..calls`) over the
*transfer* times (the kernels' time after the last member arrived: waiting for a late
member is not the network's), summed over its members' kernels and calls. Point-to-point
transfers count per pair of ranks (a send / receive kernel of one transfer; a coalesced
block's is left out: its bytes are several transfers').

**Peers.** Groups of one kind: the same parallel group (``TP``, ``DP``, ... or ``PP``
pairs), collective, number of ranks, link (all members on one node, or across nodes:
node = rank // GPUs per node), and payload class (S rounded to a power of two: small
messages never reach a link's bandwidth). A group's **ratio** is its bus bandwidth over
the median of the *other* groups of its kind (bytes-weighted over its kinds). A group
is **slow** when its ratio is at most :data:`SLOW_RATIO`.

**Other kinds on the same link.** Inside a node TP, CP, EP, DP and the pipeline's
sends share one NVLink (across nodes, one network): where every group of a kind is slow
alike, its peers say nothing. A kind whose median bus bandwidth is at most
:data:`SLOW_RATIO` of another parallel group's on the same link, at payloads no larger
(bus bandwidth grows with the payload: smaller messages reaching more is a finding), is
slow against it (``against``: that group).

**Nominal.** Where neither tells, a group reaching at most :data:`NOMINAL_RATIO` of the
link's nominal rate is slow: ``--link-gbps`` (within, across nodes), else within a node
the NVLink / Infinity Fabric rate of the GPU the trace names (:data:`NVLINK_GBPS`, per
direction; payloads of at least 64 MiB, which reach it); across nodes none unless given.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ...table.arrays import unique_rows
from ...table.schema import COLLECTIVES, GROUPS, collective
from ..activities import RankActivities
from ..calls import factors
from .stragglers import leave_one_out_median
from .waits import CALL_KINDS, RankComm

MIN_BYTES = 1 << 20     # smaller payloads are latency, not bandwidth
SLOW_RATIO = 0.5        # at most half its peers' bus bandwidth: slow
NOMINAL_RATIO = 0.25    # alone of its kind: at most a quarter of the nominal rate
NOMINAL_MIN_LOG2 = 26   # the GPU's nominal rate: payloads of 64 MiB or more (smaller
#                         ones stay below it by latency alone)
LINKS = ("intra-node", "inter-node")
# per direction, GB/s: the GPU's own links inside a node, by the device name's model
NVLINK_GBPS = (("B200", 900.0), ("B100", 900.0), ("GB200", 900.0), ("H200", 450.0),
               ("H100", 450.0), ("H800", 200.0), ("A100", 300.0), ("A800", 200.0),
               ("V100", 150.0), ("MI300", 448.0), ("MI325", 448.0), ("MI250", 400.0))
SCHEMA = pa.schema([
    ("group", pa.string()), ("process_group", pa.string()), ("ranks", pa.list_(pa.int32())),
    ("link", pa.string()), ("collective", pa.string()), ("kernels", pa.int64()),
    ("bus_bytes", pa.float64()), ("transfer_ns", pa.int64()), ("busbw_gbps", pa.float64()),
    ("peers", pa.int32()), ("peers_busbw_gbps", pa.float64()), ("ratio", pa.float64()),
    ("nominal_gbps", pa.float64()), ("slow", pa.bool_()), ("against", pa.string())])


def _gpus_per_node(acts: list[RankActivities]) -> int:
    """GPUs per node: the devices the traces list (most ranks'), else 8."""
    counts = [len(a.meta.get("device_properties") or []) for a in acts]
    counts = [c for c in counts if c > 0]
    return int(np.bincount(counts).argmax()) if counts else 8


def nominal_rates(acts: list[RankActivities], link_gbps: tuple[float, float] | None
                  ) -> tuple[float | None, float | None]:
    """(within a node, across nodes) nominal rates, GB/s: ``link_gbps``, else the GPU's
    own links within a node (:data:`NVLINK_GBPS`, by the name the traces give most
    ranks' devices) and none across nodes."""
    if link_gbps:
        return link_gbps
    names = [str(d.get("name") or "") for a in acts
             for d in (a.meta.get("device_properties") or [])[:1] if isinstance(d, dict)]
    if not names:
        return None, None
    name = max(set(names), key=names.count).upper()
    if "PCIE" in name:  # no NVLink between the GPUs: the PCIe switch's rate is unknown
        return None, None
    return next((gbps for model, gbps in NVLINK_GBPS if model in name), None), None


def group_bandwidth(acts: list[RankActivities], comms: list[RankComm], pg_names: list[str],
                    link_gbps: tuple[float, float] | None = None) -> pa.Table:
    """One row per group and kind of call (:data:`SCHEMA`, see the module doc), the
    slowest against its peers first."""
    gpn = _gpus_per_node(acts)
    nominal_of = nominal_rates(acts, link_gbps)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in
                                          ("key_pg", "label", "coll", "size", "bucket",
                                           "bus", "ns", "rank", "peer")}
    sendrecv = collective("SendRecv")
    for a, rc in zip(acts, comms):
        transfer = rc.transfer(a)
        coll = a.collective[rc.pos]
        single = np.isin(rc.kind, (CALL_KINDS.index("Send"), CALL_KINDS.index("Recv")))
        p2p = (coll == sendrecv) & single & (rc.peer >= 0)
        fac = np.where(p2p, 1.0, factors(coll, rc.size))
        ok = (rc.known & (transfer > 0) & (rc.nbytes >= MIN_BYTES) & np.isfinite(fac)
              & ~rc.no_payload & ((coll != sendrecv) | p2p) & ((rc.pg >= 0) | p2p))
        if not ok.any():
            continue
        k = np.flatnonzero(ok)
        parts["key_pg"].append(np.where(p2p[k], -1, rc.pg[k]))
        parts["label"].append(np.where(a.group[rc.pos][k] >= 0, a.group[rc.pos][k],
                                       GROUPS.index("OTHER")))
        parts["coll"].append(coll[k])
        parts["size"].append(np.where(p2p[k], 2, rc.size[k]))
        parts["bucket"].append(np.round(np.log2(rc.nbytes[k])).astype(np.int64))
        parts["bus"].append(rc.nbytes[k] * fac[k])
        parts["ns"].append(transfer[k])
        parts["rank"].append(np.full(k.size, a.rank, np.int64))
        parts["peer"].append(np.where(p2p[k], rc.peer[k], -1))
    if not parts["bus"]:
        return SCHEMA.empty_table()
    col = {k: np.concatenate(v) for k, v in parts.items()}
    # a group: its process group, or for a transfer the pair of ranks
    lo, hi = np.minimum(col["rank"], col["peer"]), np.maximum(col["rank"], col["peer"])
    gkey = np.stack([col["key_pg"], np.where(col["peer"] >= 0, lo, -1),
                     np.where(col["peer"] >= 0, hi, -1)], axis=1)
    groups, ginv = unique_rows(gkey)
    # each group's members: the ranks of its kernels (a pair's both ranks), sorted
    pairs = unique_rows(np.concatenate([
        np.stack([ginv, col["rank"]], axis=1),
        np.stack([np.arange(groups.shape[0]), groups[:, 1]], axis=1),
        np.stack([np.arange(groups.shape[0]), groups[:, 2]], axis=1)]))[0]
    pairs = pairs[pairs[:, 1] >= 0]
    members = np.split(pairs[:, 1], np.flatnonzero(np.diff(pairs[:, 0])) + 1)
    link = np.array([int(np.unique(m // gpn).size > 1) for m in members], np.int64)
    # rows: (group, label, collective, size, link, bucket)
    row_key = np.stack([ginv, col["label"], col["coll"], col["size"], link[ginv],
                        col["bucket"]], axis=1)
    rows, rinv = unique_rows(row_key)
    bus = np.bincount(rinv, weights=col["bus"], minlength=rows.shape[0])
    ns = np.bincount(rinv, weights=col["ns"], minlength=rows.shape[0])
    kernels = np.bincount(rinv, minlength=rows.shape[0])
    bw = bus / np.maximum(ns, 1)
    # peers: the other groups of the same kind (label, collective, size, link, bucket)
    kind_key = rows[:, 1:]
    kinds, kinv = unique_rows(kind_key)
    peer_bw = np.full(rows.shape[0], np.nan)
    peers: np.ndarray = np.zeros(rows.shape[0], np.int64)
    for j in range(kinds.shape[0]):
        idx = np.flatnonzero(kinv == j)
        if idx.size >= 2:
            peer_bw[idx] = leave_one_out_median(bw[idx][:, None])[:, 0]
            peers[idx] = idx.size - 1
    other_bw, other_label = _other_kinds(rows, bw)
    # per group: bytes-weighted over its kinds
    out: dict[str, list] = {f.name: [] for f in SCHEMA}
    for g in range(groups.shape[0]):
        for r in np.flatnonzero(rows[:, 0] == g).tolist():
            label, coll, size, lk = (int(x) for x in rows[r, 1:5])
            # the GPU's own rate only where payloads are large enough to reach it
            nominal = (nominal_of[lk] if link_gbps or rows[r, 5] >= NOMINAL_MIN_LOG2
                       else None)
            ratio = bw[r] / peer_bw[r] if np.isfinite(peer_bw[r]) and peer_bw[r] > 0 else None
            against, n_peers, ref = "its kind", int(peers[r]), peer_bw[r]
            if (ratio is None or ratio > SLOW_RATIO) and other_label[r] >= 0:
                # its whole kind is slow against another group on the same link
                ratio, ref = bw[r] / other_bw[r], other_bw[r]
                against, n_peers = f"{GROUPS[other_label[r]]} on the same link", 0
            slow = (ratio is not None and ratio <= SLOW_RATIO) or (
                ratio is None and nominal is not None and bw[r] <= NOMINAL_RATIO * nominal)
            if ratio is None and nominal is not None:
                against = "the link's nominal rate"
            pg = int(groups[g, 0])
            out["group"].append(GROUPS[label])
            out["process_group"].append(pg_names[pg] if 0 <= pg < len(pg_names) else None)
            out["ranks"].append(members[g].tolist())
            out["link"].append(LINKS[lk])
            out["collective"].append(COLLECTIVES[coll] if coll >= 0 else None)
            out["kernels"].append(int(kernels[r]))
            out["bus_bytes"].append(float(bus[r]))
            out["transfer_ns"].append(int(ns[r]))
            out["busbw_gbps"].append(float(bw[r]))
            out["peers"].append(n_peers)
            out["peers_busbw_gbps"].append(float(ref) if np.isfinite(ref) else None)
            out["ratio"].append(ratio)
            out["nominal_gbps"].append(nominal)
            out["slow"].append(bool(slow))
            out["against"].append(against if ratio is not None or nominal is not None
                                  else None)
    table = pa.table(out, schema=SCHEMA)
    ratio = table["ratio"].to_numpy(zero_copy_only=False).astype(np.float64)
    return table.take(np.argsort(np.where(np.isnan(ratio), np.inf, ratio), kind="stable"))


def _other_kinds(rows: np.ndarray, bw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row (group, label, collective, size, link, bucket), the fastest other parallel
    group's median bus bandwidth on the same link at payloads no larger, where this
    row's own kind (label) is at most :data:`SLOW_RATIO` of it at this payload (NaN /
    -1 otherwise): the kind is slow as a whole (see the module doc)."""
    label, link, bucket = rows[:, 1], rows[:, 4], rows[:, 5]
    cells, inv = unique_rows(np.stack([label, link, bucket], axis=1))
    med = np.array([float(np.median(bw[inv == c])) for c in range(cells.shape[0])])
    other_bw = np.full(rows.shape[0], np.nan)
    other_label = np.full(rows.shape[0], -1, np.int64)
    for c in range(cells.shape[0]):
        lab, lk, b = (int(x) for x in cells[c])
        ref = np.flatnonzero((cells[:, 0] != lab) & (cells[:, 1] == lk) & (cells[:, 2] <= b)
                             & (cells[:, 0] != GROUPS.index("OTHER")))
        if not ref.size or lab == GROUPS.index("OTHER"):
            continue
        best = ref[np.argmax(med[ref])]
        if med[c] <= SLOW_RATIO * med[best]:
            at = inv == c
            other_bw[at] = med[best]
            other_label[at] = int(cells[best, 0])
    return other_bw, other_label


def slow_groups(table: pa.Table) -> list[dict]:
    """The slow groups (one entry per group: its slowest kind of call), slowest first:
    group, process_group, ranks, link, collective, busbw_gbps, peers_busbw_gbps, ratio,
    peers, nominal_gbps, bus_bytes, transfer_ns."""
    seen: dict[tuple, dict] = {}
    for r in table.filter(table["slow"]).to_pylist():
        key = (r["group"], r["process_group"], tuple(r["ranks"]))
        if key not in seen:
            seen[key] = r
    return list(seen.values())
