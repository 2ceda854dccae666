"""A job's pipelines found from its own point-to-point traffic, where no process group
states them (``torch.distributed.pipelining`` / TorchTitan on the default group,
interleaved jobs whose sends run on the world group).

Rules (README, "Pipelines from the sends / receives"):

* Two ranks are **neighbours** when either sends to or receives from the other (a
  send / receive kernel's peers, global ranks). A pipeline is a connected set of
  neighbours; each rank has at most two (the stage before and after it), so a pipeline
  is a path, or a ring where the last stage sends to the first (looped interleaving:
  ordered only where the forward steps' sends / receives show the direction).
* The **forward direction** is that of the activations: a send in a forward step goes
  to the next stage, a receive in a forward step comes from the previous one. Where no
  send / receive has a phase, the first stage is the one whose first transfer of the
  step is a send (every other stage waits for its input first); where that does not
  tell either, the lower rank comes first (Megatron's and TorchTitan's layouts).
* Every pipeline holds the same number of stages; a rank in two pipelines, a rank with
  three or more neighbours or forward edges that are not one chain are not a pipeline
  (None, with the reason).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field



@dataclass
class RankTraffic:
    """One rank's sends / receives in a profiled step: its neighbours (global ranks),
    the ranks it sends to / receives from in forward steps, and whether its first
    transfer of the step is a send (None: no transfer)."""

    peers: set[int] = field(default_factory=set)
    forward_to: set[int] = field(default_factory=set)
    forward_from: set[int] = field(default_factory=set)
    first_is_send: bool | None = None


def pipelines(traffic: Mapping[int, RankTraffic]) -> tuple[list[list[int]], str]:
    """The pipelines (each in stage order) and how their direction was found; ``([],
    why)`` where the traffic is not a set of equal pipelines."""
    near: dict[int, set[int]] = {r: set() for r in traffic}
    for r, t in traffic.items():
        for p in t.peers:
            if p != r:
                near.setdefault(r, set()).add(p)
                near.setdefault(p, set()).add(r)
    crowded = sorted(r for r, n in near.items() if len(n) > 2)
    if crowded:
        return [], (f"rank {crowded[0]} sends to / receives from {len(near[crowded[0]])} "
                    "ranks: not one pipeline stage")
    forward: set[tuple[int, int]] = set()
    for r, t in traffic.items():
        forward |= {(r, p) for p in t.forward_to if p != r}
        forward |= {(p, r) for p in t.forward_from if p != r}
    how = "the direction of the forward steps' sends / receives"
    if not forward:
        how = "the stage whose first transfer is a send"
    seen: set[int] = set()
    out: list[list[int]] = []
    for start in sorted(near):
        if start in seen or not near[start]:
            continue
        members = _component(start, near)
        seen |= members
        order = _order(members, near, forward, traffic)
        if order is None:
            return [], (f"the forward sends / receives among ranks {sorted(members)[:8]} "
                        "are not one chain")
        out.append(order)
    if not out:
        return [], "no sends / receives between ranks"
    if len({len(p) for p in out}) != 1:
        return [], ("pipelines of different lengths: "
                    + ", ".join(str(len(p)) for p in out[:6]))
    if not forward and not any(traffic.get(p[0], RankTraffic()).first_is_send for p in out):
        how = "the lower rank first (no transfer tells the direction)"
    return out, how


def _component(start: int, near: Mapping[int, set[int]]) -> set[int]:
    members, todo = {start}, [start]
    while todo:
        for p in near[todo.pop()]:
            if p not in members:
                members.add(p)
                todo.append(p)
    return members


def _order(members: set[int], near: Mapping[int, set[int]], forward: set[tuple[int, int]],
           traffic: Mapping[int, RankTraffic]) -> list[int] | None:
    """The members in stage order (None: the forward edges contradict a chain)."""
    ends = sorted(r for r in members if len(near[r]) == 1)
    ring = not ends
    if forward:
        fwd = {(a, b) for a, b in forward if a in members}
        into = {b for _, b in fwd}
        heads = sorted(r for r in members if r not in into)
        if ring:  # looped: every stage has a forward input; the lowest starts
            heads = [min(members)]
        if len(heads) != 1:
            return None
        head = heads[0]
    else:
        senders = [r for r in (ends or sorted(members))
                   if traffic.get(r, RankTraffic()).first_is_send]
        head = min(senders) if len(senders) == 1 or (ring and senders) else (
            ends[0] if ends else min(members))
    order, prev = [head], None
    while len(order) < len(members):
        here = order[-1]
        nxt = sorted(p for p in near[here] if p != prev and p not in order)
        if forward:
            nxt = [p for p in nxt if (here, p) in forward] or (nxt if len(nxt) == 1 else [])
        if len(nxt) != 1:
            return None
        prev = here
        order.append(nxt[0])
    return order
