"""Stage balance: the pipeline stages compared by their compute per micro-batch, the
layers each holds, and the split of layers Megatron's options allow that evens them out.

**Compute per micro-batch** of a rank: the time its compute kernels run inside the
micro-batch steps (forward, backward and recompute of every micro-batch and model
chunk; ``microbatch`` >= 0), over the iterations' micro-batches (ns). A stage's: the
median of its ranks' (a slow GPU does not make its stage heavy). **Imbalance**: the
heaviest stage against the median stage; a stage at least :data:`HEAVY` x the median
is *heavy*. Pipeline schedules run at the pace of their slowest stage, so a heavy stage
stretches every step of the others into bubble.

A rank's own extra work (:mod:`.extra_work`) is left out: a stage is heavy by what its
layers, embedding or loss compute.

**Layers per stage**, where the trace shows them: the transformer layers a stage runs
per micro-batch are counted by its attention kernels (names matching
:data:`ATTENTION_KERNEL`, one per layer in each micro-batch's forward: the most frequent
such name per micro-batch and chunk, the median over micro-batches and ranks); else
from the model's layer count the user gives (``--num-layers``, split evenly, as
Megatron does by default); else unknown (None). A **layer's time** is the median of the
per-layer compute of the stages that hold neither the embedding nor the loss (the
middle ones; with two stages, the lighter one's); a stage's **extra** is its compute
beyond its layers' (the output layer and loss on the last stage, the embedding on the
first).

**Splits** (Megatron-LM's arguments, ``megatron/training/arguments.py`` and
``get_num_layers_to_build``): ``--decoder-first-pipeline-num-layers`` /
``--decoder-last-pipeline-num-layers`` give the first / last stage that many layers and
the others the rest, which must divide evenly among them; ``--account-for-embedding-in-
pipeline-split`` / ``--account-for-loss-in-pipeline-split`` count the embedding / loss
as one layer of the split (the model's layers plus one each divisible by the stages;
the first / last stage builds one layer fewer); neither combines with the explicit
counts. Explicit counts are at least 1, the middle stages hold layers exactly when
there are middle stages, and with interleaving every stage's count divides by the
model chunks (``TransformerConfig``'s checks). Each split's stages are predicted at the layer's time times their layers plus
their extra, and the one whose heaviest stage is lightest is chosen.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from ...table.arrays import row_groups, unique_rows
from ...table.schema import COMP, FWD
from ..activities import RankActivities

HEAVY = 1.10  # a stage this much heavier than the median stage is named
ATTENTION_KERNEL = re.compile(r"(?i)flash|fmha|sdpa|fused_attn|attention|attn")
BACKWARD_KERNEL = re.compile(r"(?i)backward|bwd|dgrad|wgrad")


@dataclass
class StageBalance:
    """Per stage (index = stage) its compute per micro-batch (ns, median of its ranks),
    its layers (None unknown) and extra (ns; None unknown); where the layers came from."""

    compute_ns: list[float]
    layers: list[int | None]
    layer_ns: float | None
    extra_ns: list[float | None]
    layers_from: str   # "attention kernels", "--num-layers" or "unknown"
    ranks: dict[int, list[int]] = field(default_factory=dict)  # stage -> its ranks
    vpp: int = 1       # model chunks per stage (the trace's)

    @property
    def pp(self) -> int:
        return len(self.compute_ns)

    @property
    def heaviest(self) -> int:
        return int(np.argmax(self.compute_ns))

    @property
    def ratio(self) -> float:
        """The heaviest stage's compute / the median stage's."""
        med = float(np.median(self.compute_ns))
        return max(self.compute_ns) / med if med > 0 else 1.0

    @property
    def heavy(self) -> bool:
        return self.pp > 1 and self.ratio >= HEAVY


@dataclass
class Split:
    """A layer split Megatron can be told, and the stages' compute it predicts."""

    options: str               # the Megatron arguments
    layers: list[int]          # per stage
    compute_ns: list[float]    # predicted per stage (ns per micro-batch)


def rank_compute(acts: RankActivities, leave_out: AbstractSet[str] = frozenset()
                 ) -> tuple[float, int | None]:
    """(compute ns per micro-batch, layers per micro-batch or None) of one rank (see the
    module doc), without the kernels named in ``leave_out`` (the rank's extra work:
    :mod:`.extra_work`); (0, None) without micro-batches."""
    mb = acts.microbatch
    inside = (mb >= 0) & (acts.kind == COMP)
    if leave_out:
        inside &= ~np.isin(acts.name, [i for i, n in enumerate(acts.names) if n in leave_out])
    steps = row_groups(acts.iteration[mb >= 0], mb[mb >= 0])[0].size
    if not steps:
        return 0.0, None
    ns = float((acts.end - acts.ts)[inside].sum()) / steps
    attn = np.array([bool(ATTENTION_KERNEL.search(n)) and not BACKWARD_KERNEL.search(n)
                     for n in acts.names] + [False])
    fwd = inside & (acts.phase == FWD) & attn[acts.name]
    if not fwd.any():
        return ns, None
    keys = np.stack([acts.iteration[fwd], mb[fwd], acts.chunk[fwd], acts.name[fwd]], axis=1)
    cells, cell = unique_rows(keys)
    counts = np.bincount(cell, minlength=cells.shape[0])
    # per (iteration, micro-batch): the most frequent attention kernel's count, summed
    # over the chunks
    per_chunk: dict[tuple, int] = {}
    for (it, m, ch, _), n in zip(cells.tolist(), counts.tolist()):
        per_chunk[(it, m, ch)] = max(per_chunk.get((it, m, ch), 0), n)
    per_mb: dict[tuple, int] = {}
    for (it, m, _), n in per_chunk.items():
        per_mb[(it, m)] = per_mb.get((it, m), 0) + n
    return ns, int(np.median(list(per_mb.values())))


def stage_balance(acts: list[RankActivities], stage: dict[int, int],
                  num_layers: int | None = None,
                  own_work: Mapping[int, AbstractSet[str]] | None = None
                  ) -> StageBalance | None:
    """The balance of the job's stages (``stage``: rank -> its stage, ordered; ``own_work``:
    per rank the kernels of its own extra work, left out); None without two stages with
    micro-batch compute."""
    per: dict[int, list[tuple[float, int | None]]] = {}
    ranks: dict[int, list[int]] = {}
    for a in acts:
        if a.rank in stage:
            ns, found = rank_compute(a, (own_work or {}).get(a.rank, frozenset()))
            if ns > 0:
                per.setdefault(stage[a.rank], []).append((ns, found))
                ranks.setdefault(stage[a.rank], []).append(a.rank)
    pp = max(stage.values()) + 1 if stage else 0
    if pp < 2 or len(per) < pp:
        return None
    compute = [float(np.median([ns for ns, _ in per[s]])) for s in range(pp)]
    counted = [[n for _, n in per[s] if n is not None] for s in range(pp)]
    if all(counted):
        layers: list[int | None] = [int(np.median(c)) for c in counted]
        source = "attention kernels"
    elif num_layers:
        layers = [num_layers // pp] * pp
        source = "--num-layers"
    else:
        layers, source = [None] * pp, "unknown"
    layer_ns = _layer_ns(compute, layers)
    extra = [c - n * layer_ns if n is not None and layer_ns is not None else None
             for c, n in zip(compute, layers)]
    chunks = [int(a.chunk[a.microbatch >= 0].max()) + 1 for a in acts
              if (a.microbatch >= 0).any()]
    return StageBalance(compute, layers, layer_ns, extra, source, ranks,
                        max(max(chunks, default=1), 1))


def _layer_ns(compute: list[float], layers: list[int | None]) -> float | None:
    """A layer's compute per micro-batch (ns): the median of the middle stages' per-layer
    compute; with two stages, the lighter's (None: layers unknown)."""
    if any(n is None for n in layers):
        return None
    per = [c / n for c, n in zip(compute, layers) if n]
    middle = [c / n for c, n in zip(compute[1:-1], layers[1:-1]) if n]
    if middle:
        return float(np.median(middle))
    return float(min(per)) if per else None


def best_split(b: StageBalance) -> Split | None:
    """The Megatron split whose heaviest stage is lightest (see the module doc), when it
    beats the current one; None when none does or the layers are unknown."""
    if b.layer_ns is None or any(n is None for n in b.layers) or any(
            e is None for e in b.extra_ns):
        return None
    pp, t = b.pp, b.layer_ns
    total = sum(n for n in b.layers if n is not None)
    extra = [float(e) for e in b.extra_ns if e is not None]
    # each stage's fixed work beyond its layers (embedding, output layer, loss), at least 0
    fixed = [max(e, 0.0) for e in extra]

    def predicted(layers: list[int]) -> list[float]:
        return [n * t + f for n, f in zip(layers, fixed)]

    v = max(b.vpp, 1)
    candidates: list[tuple[str, list[int]]] = []
    for emb, loss in ((False, True), (True, False), (True, True)):
        n = total + int(emb) + int(loss)
        if n % pp == 0 and (n // pp) % v == 0:
            layers = [n // pp] * pp
            layers[0] -= int(emb)
            layers[-1] -= int(loss)
            if min(layers) >= 0:
                opts = " ".join(o for o, on in (
                    ("--account-for-embedding-in-pipeline-split", emb),
                    ("--account-for-loss-in-pipeline-split", loss)) if on)
                candidates.append((opts, layers))
    # explicit counts: each at least 1 (and a multiple of vpp); the middle stages share
    # the rest evenly, and have layers exactly when there are middle stages
    counts = [None] + [k for k in range(1, total + 1) if k % v == 0]
    for first in counts:
        for last in counts:
            if first is None and last is None:
                continue
            rest = total - (first or 0) - (last or 0)
            left = pp - (first is not None) - (last is not None)
            if rest < 0 or bool(rest) != bool(left) or (left and (rest % left or (
                    rest // left) % v)):
                continue
            each = rest // left if left else 0
            layers = [each] * pp
            if first is not None:
                layers[0] = first
            if last is not None:
                layers[-1] = last
            opts = " ".join(o for o in (
                f"--decoder-first-pipeline-num-layers {first}" if first is not None else "",
                f"--decoder-last-pipeline-num-layers {last}" if last is not None else "")
                if o)
            candidates.append((opts, layers))
    now = max(predicted([int(n) for n in b.layers if n is not None]))
    best = min(candidates, key=lambda c: (max(predicted(c[1])), len(c[0])), default=None)
    if best is None or max(predicted(best[1])) >= now * 0.99:
        return None
    return Split(best[0], best[1], predicted(best[1]))
