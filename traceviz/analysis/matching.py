"""The same collective call across the ranks of its group.

Calls (see :mod:`.calls`) are matched by process group name and call number (``Seq``,
else order within the group); point-to-point calls are not matched. Times are first put
on one clock (``ts - offset``, offsets from :mod:`.clocks`).

Per matched call:

* arrival skew = latest member start - earliest member start;
* transfer time = the kernel time of the last member to arrive: members finish together,
  and the last one waits for nobody, so this is the time the data took to move, and it
  does not depend on clock offsets;
* each member's wait = latest start - its own start (time its kernel spent waiting);
* the last arriver's delay = latest start - second-latest start (how long the whole call
  waited for that one rank).

busbw = S x factor / time (nccl-tests), from the transfer time (true link speed) and,
per member, from its own kernel time (what single-rank tools show). GB/s = bytes/ns.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..table.arrays import row_groups
from .calls import RankCalls, factors


@dataclass
class Matched:
    """Per matched call (arrays of one length) and per member (``member_*`` arrays)."""

    groups: list[str]       # process group names ("" unknown)
    group: np.ndarray
    number: np.ndarray
    collective: np.ndarray  # index into COLLECTIVES
    comm_group: np.ndarray  # index into GROUPS
    size: np.ndarray        # group size (stated, else members seen)
    members: np.ndarray     # members seen
    nbytes: np.ndarray      # S, -1 unknown
    first_start: np.ndarray  # ns, common clock
    last_start: np.ndarray
    last_rank: np.ndarray
    delay: np.ndarray       # straggler's delay (0 with one member)
    transfer: np.ndarray    # ns
    span: np.ndarray        # latest end - earliest start, ns
    busbw_transfer: np.ndarray  # GB/s, NaN unknown
    iteration: np.ndarray
    member_call: np.ndarray
    member_rank: np.ndarray
    member_wait: np.ndarray  # ns
    member_busbw: np.ndarray  # GB/s from the member's own kernel time

    def __len__(self) -> int:
        return self.first_start.shape[0]


def _gbps(nbytes: np.ndarray, factor: np.ndarray, ns: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((nbytes >= 0) & (ns > 0), nbytes * factor / ns, np.nan)


def match(calls: list[RankCalls], offsets: dict[int, int]) -> Matched:
    """Match the non-P2P calls of every rank (``offsets``: ns per rank, absent = 0)."""
    names: dict[str, int] = {}
    cols: dict[str, list] = {k: [] for k in ("rank", "group", "number", "collective",
                                             "comm_group", "size", "nbytes", "start",
                                             "end", "busy", "iteration")}
    for c in calls:
        keep = ~c.p2p
        glob = np.array([names.setdefault(g, len(names)) for g in c.groups], dtype=np.int64)
        off = offsets.get(c.rank, 0)
        for key, value in (("rank", np.full(c.start.size, c.rank)), ("group", glob[c.group]),
                           ("number", c.number), ("collective", c.collective),
                           ("comm_group", c.comm_group), ("size", c.size),
                           ("nbytes", c.nbytes), ("start", c.start - off),
                           ("end", c.end - off), ("busy", c.busy),
                           ("iteration", c.iteration)):
            cols[key].append(np.asarray(value, dtype=np.int64)[keep])
    a = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    _, call = row_groups(a["group"], a["number"])
    order = np.lexsort((a["rank"], a["start"], call))  # by call, then arrival
    sc = call[order]
    n = int(sc[-1]) + 1 if sc.size else 0
    lo = np.searchsorted(sc, np.arange(n), side="left")
    hi = np.searchsorted(sc, np.arange(n), side="right")
    first, last = order[lo], order[hi - 1]
    second = order[np.maximum(hi - 2, lo)]
    members = hi - lo
    end_max = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(end_max, call, a["end"])
    nbytes = np.full(n, -1, dtype=np.int64)
    np.maximum.at(nbytes, call, a["nbytes"])
    size = np.full(n, -1, dtype=np.int64)
    np.maximum.at(size, call, a["size"])
    size = np.where(size > 0, size, members)
    transfer = a["busy"][last]
    factor = factors(a["collective"][first], size)
    inverse_names = sorted(names, key=lambda g: names[g])
    return Matched(
        groups=inverse_names, group=a["group"][first], number=a["number"][first],
        collective=a["collective"][first], comm_group=a["comm_group"][first], size=size,
        members=members, nbytes=nbytes, first_start=a["start"][first],
        last_start=a["start"][last], last_rank=a["rank"][last],
        delay=a["start"][last] - a["start"][second], transfer=transfer,
        span=end_max - a["start"][first], busbw_transfer=_gbps(nbytes, factor, transfer),
        iteration=a["iteration"][first], member_call=call, member_rank=a["rank"],
        member_wait=a["start"][last][call] - a["start"],
        member_busbw=_gbps(nbytes[call], factor[call], a["busy"]))


def last_to_arrive(m: Matched, comm_group: int, top: int = 3) -> list[dict]:
    """The ranks that most often held up calls of one group type (arrived last), by
    total delay. Arriving last is the schedule's doing as often as a slow rank's (see
    :mod:`.diagnose.stragglers` for ranks slower on the same work)."""
    sel = (m.comm_group == comm_group) & (m.members >= 2)
    if not sel.any():
        return []
    ranks, inv = np.unique(m.last_rank[sel], return_inverse=True)
    delay = np.bincount(inv, weights=m.delay[sel]).astype(np.int64)
    times = np.bincount(inv)
    seen = m.member_rank[sel[m.member_call]]
    order = np.argsort(-delay, kind="stable")[:top]
    return [{"rank": int(ranks[i]), "times_last": int(times[i]),
             "calls": int((seen == ranks[i]).sum()), "delay_ns": int(delay[i]),
             "mean_delay_ns": float(delay[i] / times[i])} for i in order if delay[i] > 0]
