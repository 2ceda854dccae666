"""Where a measured pipeline schedule stands and where it loses time.

Phases of one stage's steps (in time order), as Megatron's schedules run them:
warm-up forwards, steady (forward, backward) pairs, cool-down backwards. With ``L`` the
forwards before the first backward and ``T`` the backwards after the last forward, a
schedule with a steady phase has ``L - 1`` warm-up and ``T - 1`` cool-down steps (the
steady phase opens with a forward and closes with a backward); without one (every
forward before every backward) all forwards are warm-up and all backwards cool-down.

Gaps: each measured step is compared with what the ideal schedule's rules allow. Its
dependency is the same micro-batch's forward on the previous virtual stage (forward) or
its backward on the next one (backward; the last virtual stage's backward follows its
own forward). Per step:

* ``late`` = start - max(previous step's end on the stage, dependency's end + expected
  lag): time the step waited beyond the schedule (a late P2P, a host delay); the expected
  lag is the P2P latency after a dependency on another stage, and after a previous step
  that sends (blocking P2P, as in :func:`..schedule.simulate`), 0 otherwise;
* ``slow`` = duration - the stage's median duration of that phase, named by what
  explains at least half of it: the data-parallel communication its window exposes (a
  forward's parameter all-gathers, a backward's gradient reduce-scatter its hooks
  launched: kind ``dp_sync``), its
  collectives' waiting for other ranks (``wait``), else a slow micro-batch (``slow``).

Stage imbalance is the critical stage's median forward + backward above the mean of the
other stages, per micro-batch; where a straggler (:mod:`.diagnose.stragglers`) sits on
that stage, its slowdown's share of the stage's time (time x (1 - 1 / slowdown)) is the
straggler's (kind ``straggler``), the rest the stage's own work (kind ``imbalance``).
Times are int64 ns.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .schedule import Step


def phases(steps: list[Step]) -> dict:
    """Warm-up / steady / cool-down of one stage's steps (any order)."""
    order = sorted(steps, key=lambda s: s.start)
    kinds = [s.phase for s in order]
    if "B" not in kinds or "F" not in kinds:
        return {"warmup_steps": kinds.count("F"), "steady_pairs": 0,
                "cooldown_steps": kinds.count("B"), "steady_start_ns": None,
                "cooldown_start_ns": None}
    lead = kinds.index("B")
    trail = len(kinds) - 1 - max(i for i, k in enumerate(kinds) if k == "F")
    if lead == kinds.count("F"):  # no steady phase
        warm, cool = lead, trail
    else:
        warm, cool = lead - 1, trail - 1
    steady = (len(kinds) - warm - cool) // 2
    return {"warmup_steps": warm, "steady_pairs": steady, "cooldown_steps": cool,
            "steady_start_ns": order[warm].start if steady else None,
            "cooldown_start_ns": order[len(order) - cool].start if cool else None}


def _dependency(s: Step, pp: int, vpp: int) -> tuple[str, int, int] | None:
    vs = s.chunk * pp + s.stage
    if s.phase == "F":
        return ("F", s.microbatch, vs - 1) if vs > 0 else None
    return ("B", s.microbatch, vs + 1) if vs < pp * vpp - 1 else ("F", s.microbatch, vs)


def largest_gaps(steps: list[Step], pp: int, vpp: int, p2p_ns: int, fwd_med: np.ndarray,
                 bwd_med: np.ndarray, ranks: list[int], top: int = 3,
                 stragglers: Sequence[dict] = ()) -> list[dict]:
    """The largest losses against the ideal rules (see the module doc), biggest first;
    ``stragglers``: the job's straggler rows (rank, stage, slowdown, ...)."""
    done = {(s.phase, s.microbatch, s.chunk * pp + s.stage): s for s in steps}
    found: list[dict] = []
    for p in range(pp):
        prev_end = None
        for s in sorted((s for s in steps if s.stage == p), key=lambda s: s.start):
            what = (f"{'forward' if s.phase == 'F' else 'backward'} of micro-batch "
                    f"{s.microbatch}" + (f" chunk {s.chunk}" if vpp > 1 else "")
                    + f" on stage {p} (rank {ranks[p]})")
            dep_key = _dependency(s, pp, vpp)
            dep = done.get(dep_key) if dep_key else None
            ready = [prev_end] if prev_end is not None else []
            if dep is not None:
                ready.append(dep.end + (p2p_ns if dep.stage != p else 0))
            if ready and s.start - max(ready) > 0:
                cause = ("waited for its input from stage "
                         f"{dep.stage} (late P2P or host delay)"
                         if dep is not None and dep.end + p2p_ns >= (prev_end or 0)
                         else "started late after the stage's previous step (host delay)")
                found.append({"kind": "late", "ns": int(s.start - max(ready)),
                              "stage": p, "what": f"{what} {cause}"})
            median = (fwd_med if s.phase == "F" else bwd_med)[p]
            if s.end - s.start > median:
                excess = s.end - s.start - median
                ran = (f"{what} ran {(s.end - s.start) / 1e6:.3f} ms vs the stage's "
                       f"median {median / 1e6:.3f} ms")
                if s.exposed_dp >= excess / 2:
                    kind, why = "dp_sync", (
                        f"it carries {s.exposed_dp / 1e6:.3f} ms of exposed data-parallel "
                        "communication (" + (
                            "the parameter all-gathers its forward pre-hooks launch; "
                            "Megatron: overlap_param_gather)" if s.phase == "F" else
                            "the gradient reduce-scatter / all-reduce its backward hooks "
                            "launch; Megatron: overlap_grad_reduce)"))
                elif s.waited >= excess / 2:
                    kind, why = "wait", (f"its collectives waited {s.waited / 1e6:.3f} ms "
                                         "for other ranks")
                else:
                    kind, why = "slow", "slow micro-batch"
                found.append({"kind": kind, "ns": int(excess), "stage": p,
                              "what": f"{ran}: {why}"})
            sends = (s.chunk * pp + p < pp * vpp - 1) if s.phase == "F" else \
                (s.chunk * pp + p > 0)
            prev_end = s.end + (p2p_ns if sends else 0)
    per_mb = fwd_med + bwd_med
    if pp > 1:
        crit = int(np.argmax(per_mb))
        others = float(np.mean(np.delete(per_mb, crit)))
        excess = per_mb[crit] - others
        mbs = len({s.microbatch for s in steps}) * vpp
        slow = [s for s in stragglers if s.get("stage") == crit]
        if others > 0 and excess > 0:
            head = (f"stage {crit} (rank {ranks[crit]}) takes {per_mb[crit] / 1e6:.3f} ms "
                    f"per micro-batch, {100 * excess / others:.1f} % above the other "
                    "stages' mean")
            # a straggler on the stage explains its slowdown's share of the stage's time;
            # the rest is the stage's own work (imbalance)
            slowed = (float(per_mb[crit] * (1 - 1 / slow[0]["slowdown"]))
                      if slow and slow[0]["slowdown"] > 1 else 0.0)
            own = min(slowed, excess)
            if own > 0:
                row = slow[0]
                found.append({"kind": "straggler", "ns": int(own * mbs), "stage": crit,
                              "what": f"{head}: {own / 1e6:.3f} ms of it is straggler "
                              f"rank {row['rank']} ({row['slowdown']:.2f}x its peers' compute "
                              "on the same kernels; its partners wait for it)"})
            if excess - own > 0.05 * excess:
                part = f"{(excess - own) / 1e6:.3f} ms of it " if own > 0 else ""
                found.append({"kind": "imbalance", "ns": int((excess - own) * mbs),
                              "stage": crit, "what": f"{head} ({part}stage imbalance: the "
                              "stage does more work per micro-batch than the others, e.g. "
                              "the output layer and loss on the last stage, the embedding "
                              "on the first)"})
    found.sort(key=lambda g: -g["ns"])
    return found[:top]
