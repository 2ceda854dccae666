"""Megatron-Core's rank layout: which global ranks form each parallel group.

A re-derivation of ``parallel_state.RankGenerator`` from its definition (see
``research/pp_collectives_megatron.md`` C.1): with parallel sizes ``s_i`` in the order of
the ``order`` string (first token varies fastest) and strides ``d_0 = 1``,
``d_{i+1} = d_i * s_i``, global rank = ``sum(c_i * d_i)``. The groups of a token set
(``"tp-pp"``, ``"dp-cp"``, ...) are: one group per combination of the coordinates *not* in
the set (earliest token fastest), whose members enumerate the coordinates in the set
(earliest token fastest); a member's position in its group is its rank in the group.

Two generators exist: the dense one (tp, cp, ep=1, dp, pp) and the expert one
(tp = expert-tp, cp=1, ep, dp = expert-dp, pp).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import product

from ..errors import UsageError
from ..limits import MAX_WORLD

DEFAULT_ORDER = "tp-cp-ep-dp-pp"

# Megatron's group_desc strings -> (generator, token set); EMBEDDING groups are derived
# from the pipeline groups.
GROUP_TOKENS = {
    "TENSOR_MODEL_PARALLEL_GROUP": ("dense", "tp"),
    "CONTEXT_PARALLEL_GROUP": ("dense", "cp"),
    "DATA_PARALLEL_GROUP": ("dense", "dp"),
    "DATA_PARALLEL_GROUP_WITH_CP": ("dense", "dp-cp"),
    "MODEL_PARALLEL_GROUP": ("dense", "tp-pp"),
    "PIPELINE_MODEL_PARALLEL_GROUP": ("dense", "pp"),
    "TENSOR_AND_DATA_PARALLEL_GROUP": ("dense", "tp-dp"),
    "TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": ("dense", "tp-dp-cp"),
    "TENSOR_AND_CONTEXT_PARALLEL_GROUP": ("dense", "tp-cp"),
    "EXPERT_MODEL_PARALLEL_GROUP": ("expert", "ep"),
    "EXPERT_TENSOR_PARALLEL_GROUP": ("expert", "tp"),
    "EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": ("expert", "tp-ep"),
    "EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": ("expert", "tp-ep-pp"),
    "EXPERT_DATA_PARALLEL_GROUP": ("expert", "dp"),
}


@functools.lru_cache(maxsize=64)
def _generated(layout: Layout, which: str, tokens: str) -> tuple[tuple[int, ...], ...]:
    """:meth:`Layout.generator`'s groups, kept (read-only)."""
    sizes = layout.dense_sizes() if which == "dense" else layout.expert_sizes()
    return tuple(tuple(g) for g in generate(sizes, layout.order, tokens))


def generate(sizes: dict[str, int], order: str, tokens: str) -> list[list[int]]:
    """Groups of ``tokens`` (e.g. ``"dp-cp"``) in generation order, members in rank order."""
    names = order.split("-")
    for name, size in sizes.items():
        if name not in names and size != 1:
            raise UsageError(f"order {order!r} lacks {name!r} whose size is {size}")
    names += [n for n in sizes if n not in names]
    dims = [sizes.get(n, 1) for n in names]
    strides = [1]
    for d in dims[:-1]:
        strides.append(strides[-1] * d)
    masked = set(tokens.split("-"))
    unknown = masked - set(names)
    if unknown:
        raise UsageError(f"unknown parallel dimension(s) {sorted(unknown)} in {tokens!r}")
    inner = [i for i, n in enumerate(names) if n in masked]
    outer = [i for i, n in enumerate(names) if n not in masked]

    def combos(axes: list[int]):
        # earliest axis fastest: product() varies its last argument fastest
        for coords in product(*[range(dims[i]) for i in reversed(axes)]):
            yield list(reversed(coords))

    groups = []
    for out_c in combos(outer):
        base = sum(c * strides[i] for c, i in zip(out_c, outer))
        groups.append([base + sum(c * strides[i] for c, i in zip(in_c, inner))
                       for in_c in combos(inner)])
    return groups


def agreed_world(stated: list, where: str) -> tuple[int, str | None]:
    """The world size the ranks of a job agree on, from what each states (None / 0:
    nothing): the most common plausible value (the larger at a tie); 0 when none is.
    Returns it and a note naming the other values and what became of them, or None."""
    values = [v for v in stated if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    plausible = [v for v in values if v <= MAX_WORLD]
    world = max(set(plausible), key=lambda v: (plausible.count(v), v)) if plausible else 0
    others = sorted(set(values) - {world})
    if not others:
        return world, None
    told = ", ".join(f"{v:,} ({values.count(v)} rank(s))" for v in others[:4])
    if not world:
        return 0, (f"{where}: world size {told} is beyond {MAX_WORLD:,} ranks, not a real "
                   "job's: world size unknown")
    return world, (f"{where}: world size stated differently by some ranks: {told}; "
                   f"{world:,} used, as most ranks state it")


@dataclass(frozen=True)
class Layout:
    """The parallel sizes of a Megatron job (order ``tp-cp-ep-dp-pp`` by default)."""

    world: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    expert_tp: int | None = None
    order: str = DEFAULT_ORDER

    def __post_init__(self) -> None:
        if self.expert_tp is None:  # Megatron's default: expert TP = TP
            object.__setattr__(self, "expert_tp", self.tp)
        for name in ("world", "tp", "pp", "cp", "ep", "expert_tp"):
            if getattr(self, name) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
            if getattr(self, name) > MAX_WORLD:
                raise UsageError(f"{name} {getattr(self, name):,} is beyond {MAX_WORLD:,} "
                                 "ranks: not a real job's size")
        if self.world % (self.tp * self.pp * self.cp):
            raise UsageError(f"world size {self.world} is not divisible by "
                             f"tp*pp*cp = {self.tp}*{self.pp}*{self.cp}")
        if self.world % (self.etp * self.ep * self.pp):
            raise UsageError(f"world size {self.world} is not divisible by "
                             f"expert_tp*ep*pp = {self.etp}*{self.ep}*{self.pp}")

    @property
    def etp(self) -> int:
        return self.expert_tp if self.expert_tp is not None else self.tp

    @property
    def dp(self) -> int:
        return self.world // (self.tp * self.pp * self.cp)

    @property
    def edp(self) -> int:
        return self.world // (self.etp * self.ep * self.pp)

    def dense_sizes(self) -> dict[str, int]:
        return {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}

    def expert_sizes(self) -> dict[str, int]:
        return {"tp": self.etp, "cp": 1, "ep": self.ep, "dp": self.edp, "pp": self.pp}

    def generator(self, which: str, tokens: str) -> list[list[int]]:
        """``RankGenerator(...).get_ranks(tokens)`` of the dense or expert generator
        (made once per layout: each trace of a job asks for its pipelines)."""
        return [list(g) for g in _generated(self, which, tokens)]

    def groups(self) -> dict[str, list[list[int]]]:
        """Every Megatron group by its ``group_desc``, sorted (members in rank order)."""
        out = {desc: sorted(self.generator(which, tokens))
               for desc, (which, tokens) in GROUP_TOKENS.items()}
        pipes = self.generator("dense", "pp")
        out["EMBEDDING_GROUP"] = sorted([p[0], p[-1]] if len(p) > 1 else list(p) for p in pipes)
        out["POSITION_EMBEDDING_GROUP"] = sorted([p[0]] for p in pipes)
        return dict(sorted(out.items()))

    def coordinates(self, rank: int) -> dict[str, int]:
        """Megatron's per-rank coordinates (tp_rank, pp_rank, dp_rank, ...)."""
        tp, cp, dp = self.tp, self.cp, self.dp
        etp, ep = self.etp, self.ep
        return {
            "tp_rank": rank % tp,
            "cp_rank": (rank // tp) % cp,
            "dp_rank": (rank // (tp * cp)) % dp,
            "dp_cp_rank": (rank // tp) % (cp * dp),
            "pp_rank": rank // (tp * cp * dp),
            "expert_tp_rank": rank % etp,
            "ep_rank": (rank // etp) % ep,
            "expert_dp_rank": (rank // (etp * ep)) % self.edp,
        } if self.order == DEFAULT_ORDER else self._coordinates_by_search(rank)

    def pp_stages(self) -> dict[int, int]:
        """Every rank's pipeline stage (its index in its pipeline group)."""
        return {r: i for pipe in self.generator("dense", "pp") for i, r in enumerate(pipe)}

    def _coordinates_by_search(self, rank: int) -> dict[str, int]:
        out = {}
        for key, (which, tokens) in (("tp_rank", ("dense", "tp")), ("cp_rank", ("dense", "cp")),
                                     ("dp_rank", ("dense", "dp")),
                                     ("dp_cp_rank", ("dense", "dp-cp")),
                                     ("pp_rank", ("dense", "pp")),
                                     ("expert_tp_rank", ("expert", "tp")),
                                     ("ep_rank", ("expert", "ep")),
                                     ("expert_dp_rank", ("expert", "dp"))):
            group = next(g for g in self.generator(which, tokens) if rank in g)
            out[key] = group.index(rank)
        return out

    def model_replicas(self) -> dict[int, list[int]]:
        """Full model replicas as the Megatron-TraceViz patch writes them.

        A rank is decomposed in order tp-cp-ep-dp-pp (least significant first) with sizes
        (tp, cp, 1, dp, pp), or (expert_tp, 1, ep, expert_dp, pp) when ep > 1, and ranks
        are grouped by that data-parallel coordinate (key: the coordinate).
        """
        if self.ep > 1:
            sizes = [self.etp, 1, self.ep, self.edp, self.pp]
        else:
            sizes = [self.tp, self.cp, 1, self.dp, self.pp]
        groups: dict[int, list[int]] = {}
        for rank in range(self.world):
            r = rank
            coords = []
            for size in sizes:
                coords.append(r % size)
                r //= size
            groups.setdefault(coords[3], []).append(rank)
        return dict(sorted(groups.items()))


def config_of(layout: Layout) -> dict:
    """The sizes and order that determine every group of ``layout`` (JSON)."""
    return {"world_size": layout.world, "tp": layout.tp, "pp": layout.pp, "cp": layout.cp,
            "ep": layout.ep, "expert_tp": layout.etp, "order": layout.order,
            "dp": layout.dp, "expert_dp": layout.edp}


def to_json(layout: Layout) -> dict:
    """The layout as JSON: sizes, every group by group_desc, per-rank coordinates."""
    return {
        "config": config_of(layout),
        "groups_by_group_desc": layout.groups(),
        "model_replicas": {str(k): v for k, v in layout.model_replicas().items()},
        "per_rank": [{"rank": r, **layout.coordinates(r)} for r in range(layout.world)],
    }
